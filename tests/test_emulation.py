"""The emulated DirectML device: a real PrivateUse1 backend with DirectML's failures.

Parity tests run on any DirectML device (real or emulated); tests of the
emulator's own machinery (rules, records, configure) are ``emulated_only``.
Data the device only moves (round trips, gathers, cat, the CPU generator's numbers,
ops that fall back to the CPU) compares bit for bit in every mode (``assert_same``);
values the device computes go through ``assert_parity`` (exact on the emulator's CPU
numerics, the "device" profile on a GPU or under DMLSHIM_TEST_NUMERICS=gpu).
"""
import io
import os
import subprocess
import sys
import warnings

import pytest
import torch
from hypothesis import HealthCheck, given, settings, strategies as st

import dmlshim
from dmlshim import emulation, errors

# E_INVALIDARG as the device renders it: Windows' text, or WSL's and the real binary's
# here, "Unknown error -2147024809" (dmlshim/errors.py, failure_modes.md #28)
INVALIDARG = "The parameter is incorrect|Unknown error -2147024809"
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture
def fresh(dml_device):
    """Default configuration and empty records for the test, restored afterwards."""
    with emulation.configured():
        emulation.reset_records()
        yield dml_device


def _fallback_warnings(record):
    return [str(w.message) for w in record if "not currently supported on the DML" in str(w.message)]


# ---------------------------------------------------------------- a real backend

@pytest.mark.emulated_only(
    reason="emulation.install() refuses a process where torch_directml registered PrivateUse1 (test "
           "below)")
def test_install_is_idempotent(dml_device):
    assert emulation.install() == dml_device == torch.device("privateuseone:0")
    assert emulation.is_installed()


_CLAIM_THEN_INSTALL = """
import torch
from dmlshim import emulation
lib = torch.library.Library("aten", "IMPL")
lib.impl("empty.memory_format", lambda *a, **k: None, "PrivateUse1")
try:
    emulation.install()
except RuntimeError as e:
    print(e)
print("installed:", emulation.is_installed())
"""


def test_install_refuses_a_privateuse1_another_backend_registered(tmp_path):
    # With torch_directml imported, a second PrivateUse1 backend aborted the process.
    child = subprocess.run([sys.executable, "-c", _CLAIM_THEN_INSTALL], capture_output=True,
                           text=True, timeout=300, cwd=tmp_path,
                           env={**os.environ, "PYTHONPATH": _ROOT})
    assert child.returncode == 0, child.stderr[-2000:]
    assert "another backend already registered PrivateUse1 kernels" in child.stdout
    assert "installed: False" in child.stdout


@pytest.mark.emulated_only(reason="the emulator's own binding (compiled extension or Python API)")
def test_binding_is_compiled_unless_forced(dml_device):
    from dmlshim.emulation import _backend, _compiled, _python_api

    forced = os.environ.get("DMLSHIM_EMULATION_BINDING")
    assert emulation.binding() == (forced or "compiled")
    assert _backend.binding is _backend.select_binding()
    if not _python_api.available():
        assert torch.__version__.startswith("2.4"), "torch >= 2.5 has the Python API"
    # g++ and ninja: this suite's machine; make wheel-check runs it with no compiler on PATH,
    # on the build the 2.4.1 lane left in the cache
    from dmlshim import cpp_build
    assert _compiled.missing_tools() == [] or cpp_build.exists(
        cpp_build.module_name("dmlshim_emulation", _compiled.SOURCE))


def test_binding_choice_and_bad_values(monkeypatch):
    from dmlshim.emulation import _backend, _compiled, _python_api

    monkeypatch.setenv("DMLSHIM_EMULATION_BINDING", "dlpack")
    with pytest.raises(ValueError, match=r"DMLSHIM_EMULATION_BINDING='dlpack': allowed "
                                         r"values are compiled, python"):
        _backend.select_binding()
    monkeypatch.setenv("DMLSHIM_EMULATION_BINDING", "Compiled")
    assert _backend.select_binding() is _compiled
    monkeypatch.delenv("DMLSHIM_EMULATION_BINDING")
    # Without a toolchain: the compiled binding where a build of it exists, else the Python
    # API where torch has it, else the compiled binding, whose build then names what is missing.
    monkeypatch.setattr(_compiled, "missing_tools", lambda: ["ninja (pip install ninja)"])
    monkeypatch.setattr("dmlshim.cpp_build.exists", lambda name: True)
    assert _backend.select_binding() is _compiled
    monkeypatch.setattr("dmlshim.cpp_build.exists", lambda name: False)
    expected = _python_api if _python_api.available() else _compiled
    assert _backend.select_binding() is expected
    if not _python_api.available():
        monkeypatch.setenv("DMLSHIM_EMULATION_BINDING", "python")
        with pytest.raises(ValueError, match="has no Python PrivateUse1 backend API"):
            _backend.select_binding()


def test_missing_toolchain_is_named(monkeypatch):
    from dmlshim.emulation import _compiled

    monkeypatch.setenv("PATH", "")
    monkeypatch.setenv("CXX", "no-such-compiler")
    monkeypatch.setattr("sysconfig.get_path", lambda name: "")
    monkeypatch.setattr("dmlshim.cpp_build.exists", lambda name: False)     # nothing built before
    compiler = "cl" if sys.platform == "win32" else "no-such-compiler"   # MSVC: always cl
    missing = _compiled.missing_tools()
    assert missing == [f"a C++ compiler ('{compiler}' on PATH; MSVC Build Tools on Windows)",
                       "ninja (pip install ninja)"]
    with pytest.raises(RuntimeError, match=r"builds a small C\+\+ extension .* lacks a C\+\+ "
                                           r"compiler .* and ninja"):
        _compiled.extension.__wrapped__()


def test_round_trip_views_inplace(dml_device, assert_same, assert_parity):
    x = torch.arange(12.0).reshape(3, 4)
    d = x.to(dml_device)
    assert d.device.type == "privateuseone" and type(d) is torch.Tensor
    assert_same(d, x)
    view = d.t()[1]               # a view aliases its base
    view.mul_(10)
    x.t()[1].mul_(10)
    assert_parity(d, x)
    assert_parity(d.sum(), x.sum())
    assert repr(torch.arange(3, device=dml_device)) == \
        "tensor([0, 1, 2], device='privateuseone:0')"


@pytest.mark.parametrize("out_shape", [(0,), (2, 3), (6,), (40,)])
def test_out_arguments_take_cpu_sizes_and_strides(dml_device, out_shape, shim, assert_parity):
    """With dmlshim: DirectML resizes no out= (failure_modes.md #65, tests/test_observed_defects.py)."""
    x = torch.randn(3, 4, 2).permute(2, 0, 1)          # channels-last-like strides
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")                 # "An output ... was resized"
        ref = torch.empty(out_shape)
        torch.mul(x, 2, out=ref)
        out = torch.empty(out_shape, device=dml_device)
        returned = torch.mul(x.to(dml_device), 2, out=out)
    assert returned is out
    assert (out.shape, out.stride()) == (ref.shape, ref.stride())
    assert_parity(out, ref)


def test_factories_device_context_and_load(dml_device, assert_same):
    torch.manual_seed(0)
    ref = torch.randn(3)
    torch.manual_seed(0)
    with torch.device(dml_device):
        made = torch.randn(3)      # random ops use the CPU generator, like torch_directml
    assert made.device.type == "privateuseone"
    assert_same(made, ref)
    assert torch.zeros(2, 2, device=dml_device).device.type == "privateuseone"
    buffer = io.BytesIO()
    torch.save({"w": ref}, buffer)
    buffer.seek(0)
    with pytest.raises(TypeError, match="'torch.device' and 'int'"):    # failure_modes.md #46
        torch.load(buffer, map_location=dml_device)
    buffer.seek(0)
    loaded = torch.load(buffer, map_location="cpu")["w"].to(dml_device)   # its workaround
    assert loaded.device.type == "privateuseone"
    assert_same(loaded, ref)


def test_module_to_keeps_parameters(dml_device):
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4))
    model.to(dml_device)
    for p in model.parameters():
        assert type(p) is torch.nn.Parameter and p.device.type == "privateuseone"
    assert model[1].running_mean.device.type == "privateuseone"


def _cnn():
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
        torch.nn.MaxPool2d(2), torch.nn.Conv2d(8, 4, 3, stride=2), torch.nn.GELU(), torch.nn.Flatten(),
        torch.nn.Linear(4, 16), torch.nn.LayerNorm(16), torch.nn.Tanh(), torch.nn.Linear(16, 5),
        torch.nn.LogSoftmax(dim=-1))


@pytest.mark.parametrize("train", [False, True])
def test_small_cnn_equals_cpu_forward_and_backward(dml_device, train, assert_parity):
    torch.manual_seed(0)
    model = _cnn().train(train)
    x = torch.randn(2, 3, 8, 8)
    target = torch.tensor([1, 3])
    twin = _cnn().train(train)
    twin.load_state_dict(model.state_dict())
    twin.to(dml_device)

    loss = torch.nn.functional.nll_loss(model(x), target)
    loss.backward()
    dloss = torch.nn.functional.nll_loss(twin(x.to(dml_device)), target.to(dml_device))
    dloss.backward()

    assert_parity(dloss, loss)
    for (name, p), q in zip(model.named_parameters(), twin.parameters()):
        assert_parity(q.grad, p.grad, f"{name}: ")
    for b, c in zip(model.buffers(), twin.buffers()):
        assert_parity(c, b)


def test_mlp_training_step_equals_cpu(dml_device, assert_parity):
    torch.manual_seed(1)
    model = torch.nn.Sequential(torch.nn.Linear(6, 12), torch.nn.SiLU(), torch.nn.Linear(12, 1))
    twin = torch.nn.Sequential(torch.nn.Linear(6, 12), torch.nn.SiLU(), torch.nn.Linear(12, 1))
    twin.load_state_dict(model.state_dict())
    twin.to(dml_device)
    x, y = torch.randn(8, 6), torch.randn(8, 1)
    for m, xs, ys in ((model, x, y), (twin, x.to(dml_device), y.to(dml_device))):
        opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
        for _ in range(3):
            opt.zero_grad()
            torch.nn.functional.mse_loss(m(xs), ys).backward()
            opt.step()
    for p, q in zip(model.parameters(), twin.parameters()):
        assert_parity(q, p)


@settings(max_examples=25, deadline=None)
@given(shape=st.lists(st.integers(1, 5), min_size=1, max_size=3),
       op=st.sampled_from(["add", "mul", "div", "maximum", "atan2", "pow"]),
       transpose=st.booleans(), seed=st.integers(0, 2**16))
def test_binary_ops_bit_identical(dml_device, shape, op, transpose, seed, assert_parity):
    gen = torch.Generator().manual_seed(seed)
    a = torch.rand(shape, generator=gen) + 0.5
    b = torch.rand(shape, generator=gen) + 0.5
    if transpose and a.dim() > 1:   # non-contiguous operands
        a, b = a.transpose(0, -1), b.transpose(0, -1)
    fn = getattr(torch, op)
    assert_parity(fn(a.to(dml_device), b.to(dml_device)).cpu(), fn(a, b))


@settings(max_examples=20, deadline=None)
@given(shape=st.lists(st.integers(1, 6), min_size=1, max_size=3),
       dim=st.integers(0, 2), seed=st.integers(0, 2**16))
def test_reductions_and_autograd_equal_cpu(dml_device, assert_parity, shape, dim, seed):
    dim = dim % len(shape)
    x = torch.randn(shape, generator=torch.Generator().manual_seed(seed), requires_grad=True)
    xd = x.detach().to(dml_device).requires_grad_()
    y = torch.softmax(x, dim).cumsum(dim).mean()
    yd = torch.softmax(xd, dim).cumsum(dim).mean()
    y.backward()
    yd.backward()
    assert_parity(yd, y)
    assert_parity(xd.grad, x.grad)


_VIEWS = {
    "t": lambda x: x.t() if x.dim() == 2 else x,
    "slice": lambda x: x[1:] if x.shape[0] > 1 else x,
    "step": lambda x: x[::2],
    "select": lambda x: x[0] if x.dim() > 1 else x,
    "unsqueeze": lambda x: x.unsqueeze(0)[0],
    "flatten": lambda x: x.view(-1) if x.is_contiguous() else x,
}


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(views=st.lists(st.sampled_from(sorted(_VIEWS)), max_size=4),
       mutation=st.sampled_from(["add_", "mul_", "copy_", "zero_", "clamp_"]))
def test_views_alias_their_base_like_cpu(dml_device, shim_off, views, mutation, assert_parity):
    """With dmlshim: a view of a view with an offset is a copy without it (#62,
    test_observed_defects.py)."""
    dmlshim.activate(fallback="known")                  # the first example's; then a no-op
    base = torch.arange(30.0).reshape(5, 6)
    dbase = base.to(dml_device)
    view, dview = base, dbase
    for name in views:
        view, dview = _VIEWS[name](view), _VIEWS[name](dview)
    assert dview.shape == view.shape and dview.stride() == view.stride()
    apply = {"add_": lambda v: v.add_(1.5), "mul_": lambda v: v.mul_(-2),
             "copy_": lambda v: v.copy_(torch.ones(v.shape)),  # broadcasting: test_patch_copy
             "zero_": lambda v: v.zero_(), "clamp_": lambda v: v.clamp_(3, 9)}[mutation]
    apply(view)
    apply(dview)
    assert_parity(dbase, base)


# ---------------------------------------------------------------- routing

@pytest.mark.emulated_only(reason="reads the emulator's routing table and emulation.records()")
def test_native_op_runs_silently(fresh):
    d = torch.ones(4, device=fresh)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        torch.mm(d.view(2, 2), d.view(2, 2))
    assert emulation.route("mm.out") == "DML_KERNEL"
    assert not _fallback_warnings(record)
    assert emulation.records()["mm"]["native"] == 1


@pytest.mark.emulated_only(
    reason="emulation.configured(warn_always=True) and the emulator's routing table")
def test_cpu_fallback_op_warns_with_directml_text(fresh, assert_same):
    x = torch.arange(6.0)
    with emulation.configured(warn_always=True), warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        rolled = torch.roll(x.to(fresh), 2)
    assert emulation.route("roll") == "CPU_FALLBACK"
    assert _fallback_warnings(record) == [
        "The operator 'aten::roll' is not currently supported on the DML backend and will "
        "fall back to run on the CPU. This may have performance implications."]
    assert_same(rolled, torch.roll(x, 2))                 # rolled on the CPU
    assert emulation.records()["roll"] == dict(reached=1, native=0, cpu_fallback=1, failed=0,
                                               quirk=0)


@pytest.mark.emulated_only(
    reason="re-arms the emulator's once-per-process fallback warning (_state)")
def test_cpu_fallback_warns_once_per_process_by_default(fresh):
    from dmlshim.emulation import _state

    _state.rearm_fallback_warning()
    d = torch.arange(6.0, device=fresh)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        torch.roll(d, 1)
        torch.roll(d, 1)
        torch.nn.functional.elu(d)                        # a second fallen-back op
    assert len(_fallback_warnings(record)) == 1           # TORCH_WARN_ONCE (note B)
    assert emulation.records()["elu"]["cpu_fallback"] == 1


@pytest.mark.emulated_only(
    reason="emulation.configured(warn_always=True): the real binary warns once per process")
def test_structured_op_warning_names_the_out_delegate(fresh):
    a, b = torch.zeros(3, device=fresh), torch.ones(3, device=fresh)
    with emulation.configured(warn_always=True), warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        torch.lerp(a, b, 0.5)
    assert "'aten::lerp.Scalar_out'" in _fallback_warnings(record)[0]      # row #13


def test_lstm_and_gru_fail_like_directml(dml_device):
    for cls, cell in ((torch.nn.LSTM, "_thnn_fused_lstm_cell"), (torch.nn.GRU, "_thnn_fused_gru_cell")):
        rnn = cls(3, 4).to(dml_device)
        with pytest.raises(NotImplementedError, match=f"Could not run 'aten::{cell}' with "
                                                      "arguments from the 'CPU' backend"):
            rnn(torch.randn(5, 1, 3, device=dml_device))
        with torch.inference_mode():     # weights made inside: a normal one's views fail first (#41)
            rnn = cls(3, 4).to(dml_device)
            with pytest.raises(NotImplementedError, match=cell):
                rnn(torch.randn(5, 1, 3, device=dml_device))


def test_rnn_tanh_runs_and_equals_cpu(dml_device, assert_parity):
    # nn.RNN has no fused cell in torch 2.4.1: rnn_tanh decomposes to linear + tanh
    # (all DML_KERNEL), so it runs on DirectML (see dmlshim.emulation.rules).
    # Never exact: the CPU's RNN kernel and the decomposed device path sum in other
    # orders, which depend on the CPU (3e-8 apart on an AVX-512 Xeon).
    torch.manual_seed(0)
    rnn, x = torch.nn.RNN(3, 4), torch.randn(5, 1, 3)
    out, h = rnn(x)
    dout, dh = rnn.to(dml_device)(x.to(dml_device))
    assert_parity((dout, dh), (out, h), profile="device")


@pytest.mark.emulated_only(reason="checks the emulator's routing table against torch's op list")
def test_routing_table_is_exact_on_torch_241(fresh):
    """On torch-directml's own torch every aten overload has a row: no guesses."""
    from dmlshim.emulation import routing

    ops = {routing.op_name(n) for n in torch._C._dispatch_get_all_op_names()
           if n.startswith("aten::")}
    unknown = sorted(n for n in ops if routing.route(n) == routing.UNKNOWN)
    if torch.__version__.startswith("2.4.1"):
        assert unknown == [] and len(ops) == len(routing.table()) == 3127
    else:
        assert "_upsample_lanczos2d_aa" in unknown   # added after torch 2.4.1


@pytest.mark.skipif(not hasattr(torch.ops.aten, "_upsample_lanczos2d_aa"),
                    reason="torch 2.4.1 has no op outside the routing table "
                           "(test_routing_table_is_exact_on_torch_241)")
def test_unknown_ops_are_configurable(fresh, assert_parity):
    from dmlshim.emulation import routing

    new_op = torch.ops.aten._upsample_lanczos2d_aa.default   # added after torch 2.4.1
    assert routing.route(new_op) == routing.UNKNOWN
    x = torch.rand(1, 1, 4, 4)
    ref = new_op(x, [8, 8], False)
    assert_parity(new_op(x.to(fresh), [8, 8], False).cpu(), ref)     # native
    with emulation.configured(unknown_ops="cpu_fallback", warn_always=True), \
            warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        new_op(x.to(fresh), [8, 8], False)
    assert "'aten::_upsample_lanczos2d_aa" in _fallback_warnings(record)[0]
    with emulation.configured(unknown_ops="error"), pytest.raises(NotImplementedError):
        new_op(x.to(fresh), [8, 8], False)
    with pytest.raises(ValueError, match="unknown_ops='sometimes'; allowed: native"):
        emulation.configure(unknown_ops="sometimes")


def test_no_cpu_kernel_rows_fail_for_want_of_a_cpu_kernel(fresh):
    """Row #34: torch-directml's CPU fallback fails where torch 2.4.1 has no CPU kernel;
    on a torch that has one (_scaled_mm on 2.13) the fallback runs it."""
    from dmlshim.emulation import _state, fused_rnn, routing

    rows = [n for n, (r, _) in routing.table().items()
            if r == routing.NO_CPU_KERNEL and n not in fused_rnn.OPS]
    routes = {n: _state._effective_route(n)[0] for n in rows}
    with_kernel = sorted(n for n in rows if routing.has_cpu_kernel(n))
    assert sorted(n for n, r in routes.items() if r == routing.CPU_FALLBACK) == with_kernel
    assert all(r == routing.NO_CPU_KERNEL for n, r in routes.items() if n not in with_kernel)
    if torch.__version__.startswith("2.4.1"):
        assert with_kernel == []            # the table was made on this torch
    else:
        assert "_scaled_mm" in with_kernel
    x = torch.ones(3, device=fresh)
    with pytest.raises(NotImplementedError, match="'aten::_fused_dropout' with arguments from "
                                                  "the 'CPU' backend"):
        torch.ops.aten._fused_dropout(x, 0.5)


# ---------------------------------------------------------------- default rules

def test_float_times_bool_is_bool(dml_device, assert_parity):      # row #17
    x = torch.tensor([0.5, 2.0, 3.0])
    mask = torch.tensor([True, False, True])
    got = x.to(dml_device) * mask.to(dml_device)
    assert got.dtype == torch.bool
    # as the real 0.2.5 binary gives: the float is truncated first, so 0.5 * True is False
    assert_parity(got.cpu(), torch.tensor([False, False, True]))
    assert (mask.to(dml_device) * x.to(dml_device)).dtype == torch.bool
    assert (x * mask).dtype == torch.float32                        # CPU is right


def test_conv_with_bool_input_fails(dml_device):
    x = torch.ones(1, 1, 4, dtype=torch.bool, device=dml_device)
    with pytest.raises(RuntimeError, match=INVALIDARG):
        torch.nn.functional.conv1d(x, torch.ones(1, 1, 2, device=dml_device))


def test_cat_with_empty_input_beside_data_fails(dml_device):     # rows #19, #20
    """As on the real 0.2.5 binary (measured): an empty input beside data fails; all-empty
    inputs (stack of empties) and a legacy (0,) input do not."""
    full = torch.ones(3, 2, device=dml_device)
    empty = torch.ones(0, 2, device=dml_device)
    with pytest.raises(RuntimeError) as info:     # Windows' text, or Linux's "Unknown error"
        torch.cat([full, empty])
    assert errors.recognise(str(info.value)) is errors.E_INVALIDARG
    assert torch.stack([empty, empty]).shape == (2, 0, 2)
    assert torch.cat([full, torch.ones(0, device=dml_device)]).shape == (3, 2)
    assert torch.stack([full, full]).shape == (2, 3, 2)


@pytest.mark.emulated_only(
    reason="the emulator's device has no float64; the realdml stack reports float64 unless run with "
           "--no-fp64")
def test_float64_math_fails_but_moves(dml_device, assert_same, assert_parity):                  # rows #7, #25
    d = torch.arange(3.0, dtype=torch.float64).to(dml_device)      # data movement is fine
    assert d.dtype == torch.float64
    with pytest.raises(RuntimeError, match=r"does not support Double \(Float64\) operations!"):
        d * 2
    with pytest.raises(RuntimeError, match="Float64"):
        torch.ones(3, device=dml_device).cumsum(0, dtype=torch.float64)
    with pytest.raises(RuntimeError, match="Float64"):
        repr(torch.ones(2, device=dml_device))                      # printing needs float64
    ones = torch.ones(2, device=dml_device)
    with pytest.raises(RuntimeError, match="Float64"):
        1.0 - ones                                                  # rsub wraps a Double
    assert_parity(-ones + 1.0, torch.zeros(2))                   # the known workaround
    assert_same(d, torch.arange(3.0, dtype=torch.float64))


@pytest.mark.emulated_only(reason="emulation.configured(has_float64_support=True)")
def test_float64_supported_when_configured(fresh, assert_parity):
    with emulation.configured(has_float64_support=True):
        assert emulation.has_float64_support()
        d = torch.arange(3.0, dtype=torch.float64).to(fresh)
        assert_parity(d * 2, torch.arange(3.0, dtype=torch.float64) * 2)
        assert "device='privateuseone:0'" in repr(torch.ones(2, device=fresh))
    assert not emulation.has_float64_support()


@pytest.mark.emulated_only(
    reason="expects emulation.FatalDirectMLError where the real binary aborts the whole process "
           "(tests/test_bf16.py reproduces an abort in a child)")
@pytest.mark.parametrize("dtype,name", [(torch.bfloat16, "BFloat16"),
                                        (torch.complex64, "ComplexFloat")])
def test_bf16_and_complex_are_fatal(dml_device, dtype, name):      # rows #8, #9
    with pytest.raises(emulation.FatalDirectMLError, match=f"unsupported data type {name}"):
        torch.ones(2, dtype=dtype).to(dml_device)
    with pytest.raises(emulation.FatalDirectMLError):
        torch.ones(2, device=dml_device).to(dtype)
    assert not issubclass(emulation.FatalDirectMLError, RuntimeError)


@pytest.mark.emulated_only(
    reason="expects emulation.FatalDirectMLError where the real binary aborts the whole process "
           "(tests/test_bf16.py reproduces an abort in a child)")
def test_stft_result_cannot_live_on_device(dml_device):            # row #9
    with pytest.raises(emulation.FatalDirectMLError, match="ComplexFloat"):
        torch.fft.rfft(torch.ones(8, device=dml_device))


def test_cpu_operands_as_the_real_binary_takes_them(dml_device, assert_same, assert_parity):  # row #10
    # measured on the real 0.2.5 binary (benchmarks/results/fidelity-defects.json)
    d = torch.arange(4.0, device=dml_device)
    assert_parity(d + torch.tensor(1.0), torch.arange(4.0) + 1)          # a 0-dim CPU scalar
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        d + torch.ones(4)
    with pytest.raises(RuntimeError, match="unbox expects Dml at::Tensor as inputs"):
        torch.index_select(d, 0, torch.tensor([0, 2]))
    assert_same(d[torch.tensor([0, 2])], torch.tensor([0.0, 2.0]))       # indexing takes them
    m = torch.arange(6.0).view(2, 3)
    assert_parity(torch.mm(m.to(dml_device), m.t()), m @ m.t())


@settings(max_examples=25, deadline=None)
@given(rows=st.lists(st.integers(0, 3), min_size=1, max_size=4))
def test_cat_fails_exactly_when_an_input_is_empty_beside_data(dml_device, rows, assert_same):   # #19, #20
    parts = [torch.randn(n, 2) for n in rows]
    on_device = [p.to(dml_device) for p in parts]
    if 0 in rows and any(rows):
        with pytest.raises(RuntimeError) as info:
            torch.cat(on_device)
        assert errors.recognise(str(info.value)) is errors.E_INVALIDARG
    else:
        assert_same(torch.cat(on_device), torch.cat(parts))


def test_autocast_makes_every_op_fail(dml_device):                  # row #36, as measured
    x = torch.ones(2, 2, device=dml_device)
    with torch.autocast("privateuseone", dtype=torch.float16):
        for op in (lambda: x @ x, lambda: x + x, lambda: x.relu()):
            with pytest.raises(NotImplementedError, match="AutocastPrivateUse1"):
                op()
    assert (x @ x).dtype == torch.float32


@pytest.mark.emulated_only(
    reason="the emulator refuses a device torch.Generator (failure_modes.md #35); the real 0.2.5 "
           "binary returns a CPU generator instead (measured), which the emulator does not model yet")
def test_generator_on_device_is_unsupported(dml_device):           # row #35
    with pytest.raises((RuntimeError, NotImplementedError)):
        torch.Generator(device=dml_device)


# ---------------------------------------------------------------- user rules, errors, records

@pytest.mark.emulated_only(reason="a user emulation.Rule injected into the emulator")
def test_user_rule_fires_only_when_its_predicate_holds(fresh):
    rule = emulation.Rule("aten::tanh", when=lambda self: self.shape[-1] > 4,
                          error=ValueError, message="tanh too wide", source="test")
    d = torch.ones(2, 8, device=fresh)
    with emulation.configured(rules=[rule], extend=True):
        with pytest.raises(ValueError, match="tanh too wide"):
            torch.tanh(d)
        assert torch.tanh(d[:, :4]).shape == (2, 4)
        with pytest.raises(RuntimeError, match="The parameter is incorrect"):
            torch.cat([d, d[:0]])                                   # defaults still there
    with emulation.configured(rules=[rule]):
        assert torch.cat([d, d[:0]]).shape == (2, 8)                # defaults replaced
    assert torch.tanh(d).shape == (2, 8)                            # and gone afterwards
    assert emulation.records()["tanh"]["failed"] == 1


@pytest.mark.emulated_only(
    reason="a user emulation.Rule injected into the emulator, counted in emulation.records()")
def test_user_rule_can_replace_results(fresh):
    rule = emulation.Rule(("relu",), replace=lambda self: torch.zeros_like(self))
    with emulation.configured(rules=[rule]):
        assert torch.relu(torch.ones(3, device=fresh)).cpu().tolist() == [0.0, 0.0, 0.0]
    assert emulation.records()["relu"]["quirk"] == 1


def test_rule_validates_its_fields():
    with pytest.raises(TypeError, match="Rule.error must be an exception class"):
        emulation.Rule("cat", error="boom")
    with pytest.raises(TypeError, match="configure\\(rules=...\\) takes Rule objects"):
        emulation.configure(rules=["cat"])


@pytest.mark.emulated_only(
    reason="emulation.configured(localized_errors=...): the real binary's messages are English here")
@pytest.mark.parametrize("page,byte,reason", [
    ("cp936", 0xB2, "invalid start byte"), ("cp950", 0xB0, "invalid start byte"),
    ("cp932", 0x83, "invalid start byte"), ("cp949", 0xB8, "invalid start byte"),
    ("cp1251", 0xCF, "invalid continuation byte")])
def test_localized_hresult_errors_are_unicode_decode_errors(fresh, page, byte, reason):
    d = torch.ones(2, 2, device=fresh)
    with emulation.configured(localized_errors=page):
        with pytest.raises(UnicodeDecodeError) as info:
            torch.cat([d, d[:0]])
    err = info.value
    assert (err.encoding, err.start, err.reason) == ("utf-8", 0, reason)
    assert err.object[0] == byte
    assert str(err) == f"'utf-8' codec can't decode byte {byte:#x} in position 0: {reason}"
    assert err.object.decode(page) in {"参数错误。", "參數錯誤。", "パラメーターが間違っています。",
                                       "매개 변수가 틀립니다.", "Параметр задан неверно."}


@pytest.mark.emulated_only(reason="an injected out-of-memory emulation.Rule with localized text")
def test_localized_out_of_memory_and_plain_messages(fresh):
    from dmlshim.emulation import localized

    oom = emulation.Rule("relu", message=localized.ENGLISH[localized.E_OUTOFMEMORY])
    with emulation.configured(rules=[oom], extend=True, localized_errors=936):
        with pytest.raises(UnicodeDecodeError, match="byte 0xb4 in position 0") as info:
            torch.relu(torch.ones(1, device=fresh))
        assert info.value.object.decode("gbk").startswith("存储空间不足")
        with pytest.raises(RuntimeError, match="Float64"):       # not an HRESULT text
            torch.ones(1, device=fresh).double() + 1
    with pytest.raises(ValueError, match="not a known code page"):
        emulation.configure(localized_errors="klingon")


@pytest.mark.emulated_only(reason="emulation.records()")
def test_records_count_outcomes(fresh):
    d = torch.ones(3, 2, device=fresh)
    torch.cat([d, d])
    with pytest.raises(RuntimeError):
        torch.cat([d, d[:0]])
    assert emulation.records()["cat"] == dict(reached=2, native=1, cpu_fallback=0, failed=1,
                                              quirk=0)
    emulation.reset_records()
    assert emulation.records() == {}


def test_fork_rng_saves_and_restores_the_device_stream(dml_device, assert_same):
    # torch.random.fork_rng() saves the accelerator's RNG state too (torch >= 2.6).
    torch.manual_seed(7)
    with torch.random.fork_rng():
        torch.randn(3, device=dml_device)
    after = torch.randn(3, device=dml_device).cpu()
    torch.manual_seed(7)
    assert_same(after, torch.randn(3))


def test_a_stale_build_lock_is_removed_and_a_fresh_one_kept(tmp_path):
    """A build killed mid-way leaves torch's lock file, which cpp_extension.load would
    wait on forever: one older than STALE_LOCK_S goes (with a warning), a fresh one stays."""
    import os
    import time
    from dmlshim.emulation import _compiled

    lock = tmp_path / "lock"
    lock.touch()
    _compiled._remove_stale_lock(str(lock))
    assert lock.exists()
    old = time.time() - _compiled.STALE_LOCK_S - 1
    os.utime(lock, (old, old))
    with pytest.warns(RuntimeWarning, match="build lock"):
        _compiled._remove_stale_lock(str(lock))
    assert not lock.exists()
    _compiled._remove_stale_lock(str(lock))          # none: nothing to do
