"""dtypes patch: float64 (#7), bf16/complex (#8, #9) on DirectML."""
import warnings

import pytest
import torch
import torch.nn.functional as F

import dmlshim
from dmlshim import devices, islands
from dmlshim.emulation.rules import FP64_SOURCE
from dmlshim.patches import dtypes as dtypes_patch



@pytest.fixture
def shim(shim, monkeypatch):
    """conftest's ``shim``, with the once-per-process float64 warning not yet given."""
    monkeypatch.setattr(dtypes_patch, "_warned_float64", False)


@pytest.fixture
def no_float64(dml_device):
    if devices.has_float64_support(dml_device):
        pytest.skip("this device has float64")


@pytest.fixture
def reported_float64(dml_device):
    """A device whose driver reports float64, as the real binary's with FP64 on (the realdml
    stack's default): the emulator configured so; a real device without it skips."""
    from dmlshim import emulation
    if emulation.is_installed():
        with emulation.configured(has_float64_support=True):
            yield
    elif devices.reported_float64_support(dml_device):
        yield
    else:
        pytest.skip("this device's driver does not report float64")


def test_without_shim_float64_math_fails(dml_device):
    if devices.reported_float64_support(dml_device):
        pytest.skip("this device's driver reports float64")
    dmlshim.deactivate()
    alphas = torch.rand(2, 9).to(dml_device)
    with pytest.raises(RuntimeError, match="Float64"):
        torch.cumsum(alphas, dim=1, dtype=torch.float64)


@pytest.mark.emulated_only(
    reason="expects emulation.FatalDirectMLError where the real binary aborts the whole process "
           "(tests/test_bf16.py reproduces an abort in a child)")
def test_without_shim_bf16_transfer_aborts(dml_device):
    from dmlshim import emulation
    dmlshim.deactivate()
    with pytest.raises(emulation.FatalDirectMLError):
        torch.ones(2, dtype=torch.bfloat16).to(dml_device)


CALLS = {
    "funasr cif cumsum": lambda x: torch.cumsum(x, dim=1, dtype=torch.float64).to(torch.float32),
    "Tensor.cumsum": lambda x: x.cumsum(1, dtype=torch.float64),
    "torch.sum": lambda x: torch.sum(x, 1, dtype=torch.float64),
    "Tensor.mean": lambda x: x.mean(dtype=torch.float64),
    "F.softmax": lambda x: F.softmax(x, dim=-1, dtype=torch.float64),
    "torch.log_softmax positional": lambda x: torch.log_softmax(x, 1, torch.float64),
    "Tensor.prod": lambda x: (x + 1).prod(1, dtype=torch.float64),
}


@pytest.mark.parametrize("name", list(CALLS))
def test_float64_ops_compute_on_cpu_as_islands(shim, dml_device, no_float64, name, assert_parity):
    x = torch.rand(2, 9, generator=torch.Generator().manual_seed(0))
    expected = CALLS[name](x)                              # float64 math on the CPU
    got = CALLS[name](x.to(dml_device))
    assert got.dtype == expected.dtype
    if expected.dtype == torch.float64:                    # computed float64: a CPU island
        assert islands.is_island(got) and islands.home(got) == dml_device and got.is_cpu
    else:                                                  # FunASR's .to(float32): back on the device
        assert got.device == dml_device and not islands.is_island(got)
    assert_parity(got.cpu(), expected)


def test_float64_to_device_becomes_float32_with_one_warning(shim, dml_device, no_float64, assert_parity):
    x = torch.randn(4, dtype=torch.float64)
    with pytest.warns(RuntimeWarning, match="float64 tensors moved there become float32"):
        y = x.to(dml_device)
    assert y.dtype == torch.float32 and y.device == dml_device
    assert_parity(y.cpu(), x.float())
    with warnings.catch_warnings():
        warnings.simplefilter("error")                     # only one warning per process
        z = x.to(dml_device, non_blocking=False)
        w = torch.randn(2, 2).to(device=dml_device, dtype=torch.float64)
    assert z.dtype == w.dtype == torch.float32


def test_double_model_to_device(shim, dml_device, no_float64, assert_parity):
    model = torch.nn.Linear(3, 2).double()
    x = torch.randn(4, 3, dtype=torch.float64)
    expected = model.float()(x.float())
    model = model.double()
    with pytest.warns(RuntimeWarning):
        model.to(dml_device)
    assert isinstance(model.weight, torch.nn.Parameter) and model.weight.dtype == torch.float32
    assert_parity(model(x.to(dml_device)).cpu(), expected)


# bfloat16 follows DMLSHIM_BF16 (float32 by default; "cpu" keeps these two rules):
# tests/test_bf16.py
@pytest.mark.parametrize("dtype", [torch.complex64])
def test_bf16_and_complex_transfers_become_islands(shim, dml_device, dtype, assert_same):
    for y in (torch.ones(2, dtype=dtype).to(dml_device), torch.ones(2).to(dml_device, dtype)):
        assert islands.is_island(y) and islands.home(y) == dml_device and y.dtype == dtype
        assert_same(y, torch.ones(2, dtype=dtype))
    assert torch.ones(2, dtype=dtype).to("cpu").dtype == dtype       # CPU moves are untouched
    assert not islands.is_island(torch.ones(2, dtype=dtype).to("cpu"))


@pytest.mark.parametrize("dtype", [torch.complex64])
def test_bf16_and_complex_parameters_are_refused(shim, dml_device, dtype):
    # an island parameter would leave the module's weights on the CPU: say so now
    with pytest.raises(TypeError, match="model.float"):
        torch.nn.Linear(2, 2).to(dtype).to(dml_device)


@pytest.fixture
def healthy_float64(dml_device):
    """A device whose float64 works (not torch-directml's: tests below), then dmlshim."""
    from dmlshim import emulation
    rules = [r for r in emulation.default_rules() if not r.source.startswith(FP64_SOURCE)]
    dmlshim.deactivate()
    with emulation.configured(has_float64_support=True, rules=rules):
        dmlshim.activate(fallback="known", trace=0)
        dmlshim.trace.reset()
        yield
        dmlshim.deactivate()


@pytest.mark.emulated_only(
    reason="a device whose float64 works: emulation.configured(has_float64_support=True) without the"
           " float64 rules")
def test_device_with_float64_is_left_alone(healthy_float64, dml_device):
    assert devices.has_float64_support(dml_device)
    x = torch.randn(3, dtype=torch.float64)
    assert x.to(dml_device).dtype == torch.float64
    assert torch.cumsum(torch.rand(2, 3).to(dml_device), 1, dtype=torch.float64).dtype == torch.float64
    assert dmlshim.report().rows == [] or all(
        set(r["actions"]) <= {"pass"} for r in dmlshim.report().rows)


def test_autograd_through_float64_fallback(shim, dml_device, no_float64, assert_parity):
    x = torch.rand(2, 5)
    xd = x.to(dml_device).requires_grad_()
    xc = x.clone().requires_grad_()
    (torch.cumsum(xd, 1, dtype=torch.float64) * torch.arange(5).to(dml_device)).sum().backward()
    (torch.cumsum(xc, 1, dtype=torch.float64) * torch.arange(5)).sum().backward()
    assert_parity(xd.grad.cpu(), xc.grad)


@pytest.mark.parametrize("call", [
    lambda x, d: x.to(d),
    lambda x, d: x.to(d, torch.float64, False, True),
    lambda x, d: x.to(device=d, copy=True, memory_format=torch.preserve_format),
    lambda x, d: x.to(d, non_blocking=True),
    lambda x, d: x.to(str(d)),
])
def test_every_to_overload_is_understood(shim, dml_device, no_float64, call, assert_parity):
    x = torch.randn(3, dtype=torch.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        y = call(x, dml_device)
    assert y.device == dml_device and y.dtype == torch.float32
    assert_parity(y.cpu(), x.float())


# --- torch-directml with FP64 reported: float64 computed through float32 -------------

def _float64_math(x):
    """FunASR CIF-like float64 math: a cumsum, a sum, max, sqrt, a matmul."""
    c = torch.cumsum(x, 1, dtype=torch.float64) * (1 / 3)
    return c, c.sum(1), c.max(), (c + 1).sqrt(), c @ c.T


def test_without_shim_reported_float64_is_wrong(dml_device, reported_float64):
    """As the real binary with FP64 on: float64 at float32 precision, max() as float32,
    sqrt refused (DirectML's element-wise operators take no FLOAT64)."""
    dmlshim.deactivate()
    x = torch.tensor([[0.1, 1 / 3]], dtype=torch.float64)
    d = x.to(dml_device)
    assert d.dtype == torch.float64 and (d * 3).dtype == torch.float64
    assert (d * 3).cpu().sub(x * 3).abs().max() > 1e-9
    assert d.max().dtype == torch.float32
    with pytest.raises(RuntimeError, match="The parameter is incorrect|Unknown error -2147024809"):
        d.sqrt()                                # E_INVALIDARG: Windows' text | WSL's (#28)


def test_reported_float64_that_is_wrong_counts_as_none(dml_device, assert_same):
    """The float64 probe finds it wrong (on any DirectML device: without FP64 it fails,
    with FP64 torch-directml computes it through float32): float64 math runs as CPU
    islands and equals the CPU's float64."""
    from dmlshim import emulation, probing
    dmlshim.deactivate()
    with (emulation.configured(has_float64_support=True) if emulation.is_installed()
          else _nothing()):
        dmlshim.activate(fallback="known", trace=0)
        try:
            assert probing.last().status["float64"] == probing.DETECTED
            assert not devices.has_float64_support(dml_device)
            x = torch.rand(3, 4, generator=torch.Generator().manual_seed(0))
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", islands.CPUIslandWarning)
                got = _float64_math(x.to(dml_device))
            for g, want in zip(got, _float64_math(x)):
                assert g.dtype == torch.float64
                assert_same(g.cpu(), want)          # CPU islands: the CPU's own float64 kernels
            if devices.reported_float64_support(dml_device):
                dmlshim.deactivate()
                assert not devices.has_float64_support(dml_device)     # until the next probe
        finally:
            dmlshim.deactivate()
            devices.set_float64_broken(dml_device, False)          # the next test's device


def _nothing():
    import contextlib
    return contextlib.nullcontext()
