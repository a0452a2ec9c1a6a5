"""emulation.configure(numerics="gpu"): GPU-like rounding, deterministic, within bounds.

The bounds are the ones documented in dmlshim/emulation/gpu_numerics.py: a split-K
dot product of length K differs from the CPU's by at most 2*K*eps*sum|a_k*b_k| (each
side is within K*eps of the exact value); the rest within a few ULP of the output's
scale, measured here.
"""
import pytest
import torch

from dmlshim import emulation, parity

# the tests' marker: each sets the emulator's numerics
_NUMERICS = pytest.mark.emulated_only(reason="emulation.configured(numerics=...): the emulator's "
                                             "GPU-like numerics against their documented bounds")
EPS32 = torch.finfo(torch.float32).eps


@pytest.fixture
def gpu(dml_device):
    with emulation.configured(numerics="gpu"):
        emulation.reset_records()
        yield dml_device


def _dot_bound(k, magnitude):
    return 2 * k * EPS32 * magnitude


@_NUMERICS
def test_float32_matmul_differs_but_stays_in_the_device_profile(gpu):
    torch.manual_seed(0)
    a, b = torch.randn(64, 300), torch.randn(300, 50)
    got = (a.to(gpu) @ b.to(gpu)).cpu()
    ref = a @ b
    assert not torch.equal(got, ref)                        # rounds like a GPU
    assert parity.compare(got, ref, "device").ok
    assert ((got - ref).abs() <= _dot_bound(300, a.abs() @ b.abs())).all()
    assert torch.equal((a.to(gpu) @ b.to(gpu)).cpu(), got)  # deterministic
    assert emulation.records()["mm"]["native"] == 2         # same route as the default


@_NUMERICS
@pytest.mark.parametrize("shape", [(3, 5, 7, 4), (2, 16, 9, 33)])
def test_bmm_addmm_baddbmm_within_the_dot_bound(gpu, shape):
    n, m, k, p = shape
    torch.manual_seed(1)
    a, b, bias = torch.randn(n, m, k), torch.randn(n, k, p), torch.randn(m, p)
    cases = [
        (lambda x, y, c: torch.bmm(x, y), a.abs() @ b.abs()),
        (lambda x, y, c: torch.addmm(c, x[0], y[0], beta=0.5, alpha=2),
         2 * (a[0].abs() @ b[0].abs()) + 0.5 * bias.abs()),
        (lambda x, y, c: torch.baddbmm(c, x, y), a.abs() @ b.abs() + bias.abs()),
    ]
    for fn, magnitude in cases:
        got, ref = fn(a.to(gpu), b.to(gpu), bias.to(gpu)).cpu(), fn(a, b, bias)
        assert got.dtype == ref.dtype and got.shape == ref.shape
        assert ((got - ref).abs() <= _dot_bound(k + 1, magnitude)).all()


@_NUMERICS
@pytest.mark.parametrize("transposed", [False, True])
def test_convolution_within_the_dot_bound(gpu, transposed):
    torch.manual_seed(2)
    conv = (torch.nn.ConvTranspose2d if transposed else torch.nn.Conv2d)(6, 4, 3)
    x = torch.randn(2, 6, 10, 10)
    got, ref = conv.to(gpu)(x.to(gpu)).cpu(), conv.cpu()(x)
    assert not torch.equal(got, ref)
    weight_abs = conv.weight.detach().abs()
    magnitude = (torch.nn.functional.conv_transpose2d if transposed
                 else torch.nn.functional.conv2d)(x.abs(), weight_abs) + conv.bias.detach().abs().view(1, -1, 1, 1)
    assert ((got - ref).abs() <= _dot_bound(6 * 9 + 1, magnitude)).all()
    assert parity.compare(got, ref, "device").ok


@_NUMERICS
def test_reductions_softmax_and_norms_within_a_few_ulp(gpu):
    torch.manual_seed(3)
    x = torch.randn(4, 8, 16, 16)
    ops = {
        "sum": (lambda t: t.sum(-1), lambda t: 16 * EPS32 * t.abs().sum(-1)),
        "sum all": (lambda t: t.sum(), lambda t: t.numel() * EPS32 * t.abs().sum()),
        "mean": (lambda t: t.mean((1, 2)), lambda t: 128 * EPS32 * t.abs().mean((1, 2))),
        "softmax": (lambda t: t.softmax(-1), lambda t: 8 * EPS32 * torch.ones(())),
        "log_softmax": (lambda t: t.log_softmax(-1), lambda t: 8 * EPS32 * t.abs().amax()),
        "layer_norm": (torch.nn.LayerNorm(16), lambda t: 64 * EPS32 * torch.ones(())),
        "group_norm": (torch.nn.GroupNorm(2, 8), lambda t: 64 * EPS32 * torch.ones(())),
    }
    for name, (fn, bound) in ops.items():
        module = fn.to(gpu) if isinstance(fn, torch.nn.Module) else fn
        got = module(x.to(gpu)).cpu()
        ref = (fn.cpu() if isinstance(fn, torch.nn.Module) else fn)(x)
        assert got.dtype == ref.dtype and got.shape == ref.shape, name
        # scale: the output's own magnitude for normalized outputs
        scale = ref.abs().clamp_min(1.0) if name in ("layer_norm", "group_norm", "softmax") else 1.0
        assert ((got - ref).abs() <= bound(x) * scale).all(), name
        assert parity.compare(got, ref, "device").ok, name


@_NUMERICS
def test_integer_and_non_floating_results_stay_exact(gpu):
    a, b = torch.randint(-5, 5, (6, 7)), torch.randint(-5, 5, (7, 3))
    assert torch.equal((a.to(gpu) @ b.to(gpu)).cpu(), a @ b)
    assert torch.equal(a.to(gpu).sum(0).cpu(), a.sum(0))


@_NUMERICS
def test_autograd_through_gpu_numerics(gpu):
    torch.manual_seed(4)
    model = torch.nn.Sequential(torch.nn.Linear(12, 16), torch.nn.LayerNorm(16),
                                torch.nn.Softmax(-1))
    x = torch.randn(5, 12, requires_grad=True)
    model.to(gpu)(x.to(gpu)).pow(2).sum().backward()
    grads = [x.grad.clone()] + [p.grad.cpu() for p in model.parameters()]
    x.grad = None
    model.zero_grad()
    model.cpu()(x).pow(2).sum().backward()
    for got, ref in zip(grads, [x.grad] + [p.grad for p in model.parameters()]):
        assert parity.compare(got, ref, "device").ok


@_NUMERICS
def test_default_numerics_is_the_cpu_and_bad_values_are_named(dml_device, monkeypatch):
    with emulation.configured(numerics="cpu"):
        a, b = torch.randn(8, 9), torch.randn(9, 4)
        assert torch.equal((a.to(dml_device) @ b.to(dml_device)).cpu(), a @ b)
        assert parity.default_profile(dml_device).name == "exact"
    with emulation.configured(numerics="gpu"):
        assert emulation.numerics() == "gpu"
        assert parity.default_profile(dml_device).name == "device"
    with pytest.raises(ValueError, match="numerics='fast': allowed values are cpu, gpu"):
        emulation.configure(numerics="fast")
    monkeypatch.setenv("DMLSHIM_EMULATION_NUMERICS", "tpu")
    with pytest.raises(ValueError, match="DMLSHIM_EMULATION_NUMERICS='tpu': allowed"):
        emulation.configure()
