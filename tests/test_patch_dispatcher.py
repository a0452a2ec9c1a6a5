"""BackendSelect fixes hold however the aten op is reached: the float x bool fix (the ``mul``
patch; DirectML#686, #737; failure_modes.md #17) through C++ composites, torch.ops.aten,
backward(), inference_mode, other threads; the dispatcher net's CPU indices and CPU islands.
Each form is checked both ways: without the fix the bug reproduces, with it the result
(dtype and values) equals the CPU's."""
import functools
import re
import threading
import warnings

import pytest
import torch
from hypothesis import given, settings, strategies as st

import dmlshim
from dmlshim import emulation, islands, patches
from dmlshim.patches import dispatcher, mul

aten = torch.ops.aten


@pytest.fixture
def data(dml_device):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, 5, generator=g)
    m = torch.rand(3, 5, generator=g) > 0.5
    i = torch.randint(-3, 4, (3, 5), generator=g)
    return (x, m, i), tuple(t.to(dml_device) for t in (x, m, i))


@pytest.fixture
def net(dml_device):
    """Only the mul patch's BackendSelect fix (no other patch): what it covers on its own."""
    dmlshim.deactivate()
    ctx = patches.Context(target=dml_device.type)
    mul.install(ctx)
    dmlshim.trace.reset()
    yield
    mul.uninstall()


@pytest.fixture
def the_net(dml_device):
    """Only the dispatcher net (no wrapt patches): what it covers on its own."""
    dmlshim.deactivate()
    dispatcher.install(patches.Context(target=dml_device.type))
    dmlshim.trace.reset()
    yield
    dispatcher.uninstall()


def _in_thread(fn):
    out = []
    t = threading.Thread(target=lambda: out.append(fn()))
    t.start()
    t.join()
    return out[0]


def _scripted_mul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return a * b


@functools.lru_cache(maxsize=None)
def _scripted():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)      # torch.jit.script on torch 2.13
        return torch.jit.script(_scripted_mul)


def _inference(fn):
    def run(x, m, i):
        with torch.inference_mode():     # inference tensors: no ADInplaceOrView/Autograd keys
            return fn(x.clone(), m.clone(), i.clone())
    return run


# Forms the wrapt mul patch cannot see (and two it can, for the net alone).
FORMS = {
    "torch.ldexp(m, i)": lambda x, m, i: torch.ldexp(m, i),           # C++: at::mul(m, pow(2., i))
    "aten.mul.Tensor(x, m)": lambda x, m, i: aten.mul.Tensor(x, m),
    "aten.mul.Tensor(m, x)": lambda x, m, i: aten.mul.Tensor(m, x),
    "aten.multiply.Tensor(x, m)": lambda x, m, i: aten.multiply.Tensor(x, m),
    "TorchScript x * m": lambda x, m, i: _scripted()(x, m),
    "inference_mode: torch.ldexp": _inference(lambda x, m, i: torch.ldexp(m, i)),
    "inference_mode: aten.mul.Tensor": _inference(lambda x, m, i: aten.mul.Tensor(x, m)),
    "no_grad: torch.ldexp": lambda x, m, i: torch.no_grad()(torch.ldexp)(m, i),
    "worker thread: torch.ldexp": lambda x, m, i: _in_thread(lambda: torch.ldexp(m, i)),
    "x * m": lambda x, m, i: x * m,
    "m * x.half()": lambda x, m, i: m * x.half(),
}


@pytest.mark.parametrize("form", list(FORMS))
def test_without_net_the_bug_reproduces(data, form):
    dmlshim.deactivate()
    cpu, dev = data
    assert FORMS[form](*cpu).dtype != torch.bool
    assert FORMS[form](*dev).dtype == torch.bool            # silently bool: values lost


@pytest.mark.parametrize("form", list(FORMS))
def test_net_alone_equals_cpu(net, data, form, assert_parity):
    cpu, dev = data
    got = FORMS[form](*dev)
    assert got.device == dev[0].device
    assert_parity(got.cpu(), FORMS[form](*cpu))         # checks dtype too


@pytest.mark.parametrize("form", ["torch.ldexp(m, i)", "aten.mul.Tensor(x, m)",
                                  "inference_mode: torch.ldexp", "worker thread: torch.ldexp"])
def test_activate_equals_cpu(shim, data, form, assert_parity):
    cpu, dev = data
    assert_parity(FORMS[form](*dev).cpu(), FORMS[form](*cpu))


# ------------------------------------------------------------------- in-place, out=

def test_inplace_keeps_self_dtype_identity_and_version(net, data, assert_parity):
    (x, m, _), (xd, md, _) = data
    y = xd.clone()
    version = y._version
    assert aten.mul_.Tensor(y, md) is y
    assert y._version == version + 1                        # torch's ADInplaceOrView still runs
    assert_parity(y.cpu(), x.clone().mul_(m))
    h = xd.half()
    h.mul_(md)
    assert_parity(h.cpu(), x.half().mul_(m))


def test_inplace_on_bool_self_behaves_as_on_cpu(net, data, assert_parity):
    (x, m, _), (xd, md, _) = data
    with pytest.raises(RuntimeError, match="can't be cast"):
        m.clone().mul_(x)
    with pytest.raises(RuntimeError, match="can't be cast"):
        md.clone().mul_(xd)
    b = md.clone()
    b.mul_(md)                                              # bool x bool stays bool
    assert_parity(b, m & m)


@pytest.mark.parametrize("out_dtype", [torch.float32, torch.float16])
def test_out_variant(net, data, out_dtype, assert_parity):
    (x, m, _), (xd, md, _) = data
    expected = torch.mul(m, x, out=torch.empty(3, 5, dtype=out_dtype))
    out = torch.empty(3, 5, dtype=out_dtype, device=xd.device)
    assert aten.mul.out(md, xd, out=out) is out
    assert_parity(out.cpu(), expected)
    out = torch.empty(3, 5, dtype=out_dtype, device=xd.device)
    assert torch.mul(md, xd, out=out) is out
    assert_parity(out.cpu(), expected)


def test_out_variant_refuses_what_the_cpu_refuses(net, data):
    (x, m, _), (xd, md, _) = data
    with pytest.raises(RuntimeError, match="can't be cast"):
        torch.mul(x, m, out=torch.empty(3, 5, dtype=torch.bool))
    with pytest.raises(RuntimeError, match="can't be cast"):
        torch.mul(xd, md, out=torch.empty(3, 5, dtype=torch.bool, device=xd.device))


# ------------------------------------------------------------------- autograd

def _grad_amax(x, m, i, w):
    """amax's backward is ``scale_grad_by_count``: ``(grad / mask.sum(dim)) * mask`` with a
    bool ``mask``: float x bool inside backward(), where no Python wrapper sees it."""
    x = x.clone().requires_grad_()
    (torch.amax(x, dim=1) * w[:, 0]).sum().backward()
    return x.grad


def _grad_inplace_mask(x, m, i, w):
    """``y.mul_(m)``: autograd saves the bool ``m``; backward() computes ``grad * m``."""
    x = x.clone().requires_grad_()
    y = x.clone()
    y.mul_(m)
    (y * w).sum().backward()
    return x.grad


def _grad_composite(x, m, i, w):
    """The mask multiply inside a C++ composite (``ldexp(m, i)`` = ``m * 2**i``)."""
    x = x.clone().requires_grad_()
    (x * torch.ldexp(m, i) * w).sum().backward()
    return x.grad


GRADS = {"backward: amax": _grad_amax, "backward: y.mul_(m)": _grad_inplace_mask,
         "composite: ldexp(m, i)": _grad_composite}


def _grad_inputs(dml_device, data):
    (x, m, i), dev = data
    w = torch.randn(3, 5, generator=torch.Generator().manual_seed(1))
    return (x, m, i, w), (*dev, w.to(dml_device))


@pytest.mark.parametrize("how", list(GRADS))
def test_without_net_gradients_are_wrong(dml_device, data, how, assert_differs):
    dmlshim.deactivate()
    cpu, dev = _grad_inputs(dml_device, data)
    try:
        got = GRADS[how](*dev)
    except RuntimeError as exc:                 # ldexp: the bool product cannot require grad
        assert re.search("dtype: Bool|isDifferentiableType", str(exc))    # torch 2.13 | 2.4.1
        return
    assert got.dtype == torch.float32
    assert_differs(got, GRADS[how](*cpu))                                   # silently wrong


@pytest.mark.parametrize("how", list(GRADS))
def test_net_alone_gradients_equal_cpu(net, dml_device, data, assert_parity, how):
    cpu, dev = _grad_inputs(dml_device, data)
    assert_parity(GRADS[how](*dev).cpu(), GRADS[how](*cpu))


def test_activate_amax_gradient_equals_cpu(shim, dml_device, data, assert_parity):
    cpu, dev = _grad_inputs(dml_device, data)
    assert_parity(_grad_amax(*dev).cpu(), _grad_amax(*cpu))


# ------------------------------------------------------------------- scope

def test_cpu_tensors_and_wrapped_numbers_unaffected(dml_device, data, assert_same, assert_parity):
    """CPU calls pass through bit for bit; a wrapped number (the 2.5 of ``x * 2.5``, which
    a Python kernel receives as a Python float) keeps torch's promotion: on the device the
    CPU's dtype and values (raw, the real 0.2.5 binary gives bool for ``md * 3`` and
    ``xd * True``, measured; the emulator gets them right)."""
    dmlshim.deactivate()
    (x, m, i), (xd, md, id_) = data
    h = torch.randn(100).half()
    cases = {"ldexp cpu": lambda: torch.ldexp(m, i), "x * m cpu": lambda: aten.mul.Tensor(x, m),
             "i * 2.5": lambda: i * 2.5, "2.5 * i": lambda: 2.5 * i, "h * 0.1": lambda: h * 0.1,
             "m * 3": lambda: m * 3, "x * True": lambda: x * True}
    on_device = {"dev i * 2.5": lambda: (id_ * 2.5).cpu(), "dev m * 3": lambda: (md * 3).cpu(),
                 "dev x * True": lambda: (xd * True).cpu()}
    expected = {name: fn() for name, fn in cases.items()}
    mul.install(patches.Context(target=dml_device.type))
    dmlshim.trace.reset()
    try:
        for name, fn in cases.items():
            assert_same(fn(), expected[name], f"{name}: ")
        for name, fn in on_device.items():
            assert_parity(fn(), cases[name[len("dev "):]](), f"{name}: ")
    finally:
        mul.uninstall()
    rows = {r["op"]: r["actions"] for r in dmlshim.report().rows}
    # md * 3 (as the mul patch does 2.5 * m) and xd * True (a wrapped bool is a bool
    # operand too); no CPU call recorded
    assert rows == {"aten::mul.Tensor": {"coerce": 2}}


def test_a_number_beside_a_0_dim_device_tensor_without_wrapped_numbers(dml_device, monkeypatch,
                                                                      assert_parity):
    """Where Python cannot flag a wrapped number (no compiled emulator: the real binary),
    the number becomes a 0-dim tensor of the result's dtype on the operand's device: a 0-dim
    CPU float16 one beside a device tensor aborted the real 0.2.5 binary under dmlshim
    (``b * 1e-05``; ``torch.isclose`` of 0-dim float16 tensors, which multiplies so)."""
    from dmlshim import fallback

    monkeypatch.setattr(fallback, "wrap_number", None)
    b = torch.tensor(1.25, dtype=torch.float16)
    converted = fallback.numbers_as_tensors(aten.mul.Tensor, (b.to(dml_device), 1e-05))
    assert converted[1].device == dml_device and converted[1].dtype is torch.float16
    mul.install(patches.Context(target=dml_device.type))
    try:
        got = b.to(dml_device) * 1e-05
        assert got.dtype is torch.float16
        assert_parity(got.cpu(), b * 1e-05)
        assert_parity(torch.addcmul(b.to(dml_device), b.to(dml_device), b.to(dml_device),
                                    value=0.5).cpu(), torch.addcmul(b, b, b, value=0.5))
    finally:
        mul.uninstall()


def test_acts_only_on_the_target_device_type(dml_device, data, assert_differs):
    dmlshim.deactivate()
    (x, m, _), (xd, md, _) = data
    mul.install(patches.Context(target="cuda"))       # benchmarks/gpu.py's target
    try:
        # privateuseone: not ours to fix, float x bool stays wrong (the emulator: bool; the
        # real 0.2.5 binary, called from a Python kernel: float32 of the truncated floats)
        assert_differs(aten.mul.Tensor(xd, md).cpu(), aten.mul.Tensor(x, m))
    finally:
        mul.uninstall()
    assert dispatcher.backend_key("privateuseone") == torch._C.DispatchKey.PrivateUse1
    assert dispatcher.backend_key("cuda") == torch._C.DispatchKey.CUDA


def test_report_records_coercions(net, data):
    _, (xd, md, id_) = data
    torch.ldexp(md, id_)
    aten.mul.Tensor(xd, xd)                                   # nothing to fix: not recorded
    rows = {r["op"]: r for r in dmlshim.report().rows}
    assert rows["aten::mul.Tensor"]["actions"] == {"coerce": 1}
    assert rows["aten::mul.Tensor"]["h2d"] == rows["aten::mul.Tensor"]["d2h"] == 0


def test_python_level_call_is_fixed_once_at_backend_select(shim, data):
    _, (xd, md, _) = data
    xd * md
    rows = {r["op"]: r["actions"] for r in dmlshim.report().rows}
    assert rows == {"aten::mul.Tensor": {"coerce": 1}}        # one layer: no Python-level row


def _backend_select_lines(op="aten::mul.Tensor"):
    return [line for line in torch._C._dispatch_dump(op).splitlines() if line.startswith("BackendSelect")]


def test_deactivate_removes_every_registration(dml_device, older_index_rule, data):
    _, (xd, md, id_) = data
    dmlshim.deactivate()
    assert not any(dispatcher.registered().values()) and _backend_select_lines() == []
    first = None
    for _ in range(3):                                        # activate -> deactivate -> activate
        dmlshim.activate(fallback="known", trace=0)
        # the kernels of the defects the probes found, the same each time: every one with the
        # older index rule on (the emulator); the real 0.2.5 binary takes CPU indices (#10),
        # so no index kernels there
        now = dispatcher.registered()
        assert _backend_select_lines() and now == (first or now)
        first = now
        assert all(now.values()) or not emulation.is_installed()
        assert "dispatcher" in patches.installed()
        assert torch.ldexp(md, id_).dtype == torch.float32
        dmlshim.deactivate()
        assert not any(dispatcher.registered().values()) and _backend_select_lines() == []
        assert torch.ldexp(md, id_).dtype == torch.bool
    table = torch._C._dispatch_dump_table("aten::mul.Tensor").splitlines()
    assert [line for line in table if line.startswith("BackendSelect")][0].startswith(
        "BackendSelect: fallthrough")                         # torch's own entry again


def test_not_installed_with_fallback_off(dml_device):
    dmlshim.deactivate()
    dmlshim.activate(fallback="off", trace=0)
    try:
        assert "dispatcher" not in patches.installed()
        assert not any(dispatcher.registered().values())
    finally:
        dmlshim.deactivate()


# ------------------------------------------------------------------- property

DTYPES = st.sampled_from([torch.float32, torch.float16, torch.int64, torch.bool])


@settings(max_examples=30, deadline=None)
@given(shape=st.lists(st.integers(0, 4), max_size=3), ones=st.lists(st.booleans(), min_size=3, max_size=3),
       dtype=DTYPES, bool_first=st.booleans(), seed=st.integers(0, 2**16))
def test_property_aten_mul_with_bool_equals_cpu(dml_device, shape, ones, dtype, bool_first, seed, assert_parity):
    """Broadcast shapes, empty tensors, several dtypes, either order, through the aten op."""
    dmlshim.deactivate()
    mul.install(patches.Context(target=dml_device.type))
    try:
        g = torch.Generator().manual_seed(seed)
        x = (torch.randn(shape, generator=g) * 10).to(dtype)
        m = torch.rand([1 if one else n for n, one in zip(shape, ones)], generator=g) > 0.5
        a, b = (m, x) if bool_first else (x, m)
        assert_parity(aten.mul.Tensor(a.to(dml_device), b.to(dml_device)).cpu(), a * b)
    finally:
        mul.uninstall()


# ------------------------------------------- CPU index tensors, empty cat, CPU islands
# Reached from C++ composites or references bound before activate(), which no Python-level
# wrapper sees (OpInfo's op_db holds such references: python -m dmlshim conformance).

_index_put, _rfft, _softmax, _cfloat, _float_power = (
    torch.index_put, torch.fft.rfft, torch.softmax, torch.Tensor.cfloat,
    torch.float_power)

NET_CASES = {
    # failure_modes.md #10: CPU index tensors in a DirectML kernel ("unbox expects Dml")
    "index_put, CPU indices": (lambda x: _index_put(x, (torch.tensor([0, 2]),), torch.ones(2, 5)
                                                     .to(x.device)), RuntimeError),
    "index, CPU indices": (lambda x: aten.index.Tensor(x, [torch.tensor([2, 0])]), RuntimeError),
    # (combinations with r > n or n = 1 stacks only empty tensors, which the real 0.2.5
    # binary does; it fails there for another reason, "The size of tensor a (3) must match
    # the size of tensor b (0)", which dmlshim does not fix yet: docs/realdml.md)
}


def _inference_mode(fn):
    def run(x):
        with torch.inference_mode():     # no Autograd keys: the backend-key kernel runs
            return fn(x.clone())
    return run


ISLAND_CASES = {   # failure_modes.md #8, #9 (complex: process abort), #7 (float64)
    "fft.rfft (bound)": lambda x: _rfft(x),
    "Tensor.cfloat (bound)": lambda x: _cfloat(x),
    "softmax(dtype=float64) (bound)": lambda x: _softmax(x, -1, dtype=torch.float64),
    "stft (C++ composite)": lambda x: aten.stft.default(x, 4, 2, return_complex=True),
    "inference_mode: float_power (bound)": _inference_mode(lambda x: _float_power(x, 2)),
}


@pytest.fixture
def older_index_rule(dml_device):
    """Older builds' refusal of CPU indices (#10; the real 0.2.5 binary takes them): on
    for the net's index cases on the emulated device."""
    if dml_device.type == "privateuseone" and emulation.is_installed():
        emulation.configure(rules=[r for r in emulation.rules.unconfirmed_rules()
                                   if r.op == emulation.rules.CPU_INDEX_OPS], extend=True)
        yield
        emulation.configure()
    else:
        yield


@pytest.mark.emulated_only(
    reason="older builds' refusal of CPU indices (#10), an unconfirmed emulator rule "
           "(older_index_rule); the real 0.2.5 binary takes them")
@pytest.mark.parametrize("case", list(NET_CASES))
def test_without_net_index_and_empty_cat_fail(older_index_rule, data, case):
    dmlshim.deactivate()
    fn, error = NET_CASES[case]
    with pytest.raises(error):
        fn(data[1][0])


@pytest.mark.parametrize("case", list(NET_CASES))
def test_net_moves_indices_and_drops_empties(older_index_rule, the_net, data, case, assert_parity):
    fn, _ = NET_CASES[case]
    got = fn(data[1][0])
    assert got.device == data[1][0].device
    assert_parity(got.cpu(), fn(data[0][0]))


@pytest.mark.parametrize("case", list(ISLAND_CASES))
def test_net_runs_them_as_cpu_islands(the_net, data, case, assert_parity):
    expected = ISLAND_CASES[case](data[0][0])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = ISLAND_CASES[case](data[1][0])
    assert islands.is_island(got) and got.dtype == expected.dtype   # it stays on the CPU
    assert_parity(got, expected)
    assert any(r["actions"].get("island") for r in dmlshim.report().rows)


def test_net_keeps_transfers_and_casts_working(the_net, data, assert_parity):
    (x, _, _), (xd, _, _) = data
    assert x.to(xd.device).device == xd.device and xd.to("cpu").is_cpu
    assert xd.half().device == xd.device and xd.half().dtype == torch.float16
    assert_parity(xd.to(torch.float16).cpu(), x.half())


_irfft, _hfft, _pinv, _matrix_rank, _to_sparse = (
    torch.fft.irfft, torch.fft.hfft, torch.linalg.pinv, torch.linalg.matrix_rank, torch.Tensor.to_sparse)

# CompositeImplicitAutograd ops that make complex/float64 values inside: run whole on the
# CPU by the Autograd-key kernel (the backend-key one under inference_mode); their real
# results come back to the device
HOME_CASES = {
    "fft.irfft, padded (bound)": lambda x: _irfft(x, n=12),
    "fft.hfft (bound)": lambda x: _hfft(x),
    "linalg.pinv (bound)": lambda x: _pinv(x),
    "linalg.matrix_rank (bound)": lambda x: _matrix_rank(x),
    "inference_mode: fft.irfft (bound)": _inference_mode(lambda x: _irfft(x, n=12)),
    "inference_mode: linalg.matrix_rank (bound)": _inference_mode(lambda x: _matrix_rank(x)),
}


@pytest.mark.emulated_only(
    reason="expects emulation.FatalDirectMLError where the real binary aborts the whole process "
           "(tests/test_bf16.py reproduces an abort in a child)")
@pytest.mark.parametrize("case", [*ISLAND_CASES, *HOME_CASES])
def test_without_net_complex_and_float64_fail(data, case):
    from dmlshim import emulation
    dmlshim.deactivate()
    with pytest.raises((emulation.FatalDirectMLError, RuntimeError), match="unsupported data type|Double"):
        {**ISLAND_CASES, **HOME_CASES}[case](data[1][0])


@pytest.mark.parametrize("case", list(HOME_CASES))
def test_net_runs_composites_on_the_cpu_with_results_on_the_device(the_net, data, case, assert_parity):
    expected = HOME_CASES[case](data[0][0])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = HOME_CASES[case](data[1][0])
    assert got.device == data[1][0].device
    assert_parity(got.cpu(), expected)


_complex, _polar, _view_as_complex = torch.complex, torch.polar, torch.view_as_complex

# losses through a composite (irfft) and through island creators reached below the Python
# wrappers: each is run as an island call above autograd, so gradients come back to the device
GRAD_CASES = {
    "fft.irfft (bound)": lambda x: _irfft(x, n=12).pow(2).sum(),
    "fft.rfft (bound)": lambda x: _rfft(x).abs().sum(),
    "complex (bound)": lambda x: _complex(x, 2 * x).abs().sum(),
    "polar (bound)": lambda x: _polar(x.abs(), x).real.sum(),
    "view_as_complex (bound)": lambda x: _view_as_complex(x[:, :4].contiguous().reshape(3, 2, 2)).abs().sum(),
}


@pytest.mark.emulated_only(
    reason="expects emulation.FatalDirectMLError where the real binary aborts the whole process "
           "(tests/test_bf16.py reproduces an abort in a child)")
@pytest.mark.parametrize("case", list(GRAD_CASES))
def test_without_net_gradient_cases_abort(data, case):
    from dmlshim import emulation
    dmlshim.deactivate()
    with pytest.raises(emulation.FatalDirectMLError, match="unsupported data type"):
        GRAD_CASES[case](data[1][0].clone().requires_grad_())


@pytest.mark.parametrize("case", list(GRAD_CASES))
def test_net_keeps_autograd_through_composites_and_island_creators(the_net, data, case, assert_parity):
    x, xd = data[0][0].clone().requires_grad_(), data[1][0].clone().requires_grad_()
    GRAD_CASES[case](x).backward()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        GRAD_CASES[case](xd).backward()
    assert xd.grad.device == data[1][0].device
    assert_parity(xd.grad.cpu(), x.grad)


def test_sparse_results_fail_raw_and_are_cpu_islands_with_the_net(data, dml_device, assert_same):
    dmlshim.deactivate()
    try:                    # the emulator raises (#30); the real 0.2.5 binary, measured,
        raw = _to_sparse(data[1][0])            # returns a strided tensor on the device
    except NotImplementedError as exc:
        assert "Sparse" in str(exc)
    else:
        assert raw.layout == torch.strided
    dispatcher.install(patches.Context(target=dml_device.type))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            got = _to_sparse(data[1][0])
    finally:
        dispatcher.uninstall()
    assert got.is_cpu and got.layout == torch.sparse_coo
    assert_same(got.to_dense(), data[0][0])
