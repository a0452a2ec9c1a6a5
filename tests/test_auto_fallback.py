"""fallback="auto": ops the shim has never heard of, failing on the emulated
device through rules invented here, are retried on the CPU with CPU-identical
results; localized HRESULTs become DirectMLError; OOM / device removed are not
retried."""
from concurrent.futures import ThreadPoolExecutor
import warnings

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dmlshim
from dmlshim import emulation
from dmlshim.errors import DirectMLError
from dmlshim.patches import auto

OOM = "Could not allocate tensor with 12 bytes. There is not enough GPU video memory available!"
REMOVED = ("The GPU device instance has been suspended. Use GetDeviceRemovedReason to "
           "determine the appropriate action.")


@pytest.fixture
def shim(dml_device):
    """activate(fallback=...) for one test, fresh stats (an earlier file's rows kept in the
    report would count here); everything undone afterwards."""
    def start(fallback="auto"):
        dmlshim.activate(fallback=fallback)
        dmlshim.trace.reset()
        return dml_device

    auto.forget()
    yield start
    dmlshim.deactivate()
    auto.forget()
    emulation.configure()


def reached(op):
    """How often ``op`` (any overload) reached the emulated device."""
    return sum(r["reached"] for name, r in emulation.records().items()
               if name.split(".")[0] == op)


@pytest.mark.emulated_only(
    reason="injects a failing emulation.Rule for aten::hypot, which the real binary computes")
def test_unknown_op_failure_reproduces_without_the_shim(dml_device):
    x = torch.rand(3, 4, device=dml_device)
    with emulation.configured(rules=[emulation.Rule("hypot")]):
        with pytest.raises(RuntimeError, match="The parameter is incorrect"):
            torch.hypot(x, x)


@pytest.mark.emulated_only(
    reason="injects a failing emulation.Rule for aten::hypot, which the real binary computes, and "
           "counts its calls in emulation.records()")
def test_invented_rule_is_retried_on_cpu_and_remembered(shim, assert_parity):
    dev = shim("auto")
    a, b = torch.rand(3, 4), torch.rand(3, 4)
    with emulation.configured(rules=[emulation.Rule("hypot", source="invented")]):
        emulation.reset_records()
        with pytest.warns(auto.DirectMLFallbackWarning, match=r"torch\.hypot.*E_INVALIDARG"):
            out = torch.hypot(a.to(dev), b.to(dev))
        assert out.device == dev
        assert_parity(out.cpu(), torch.hypot(a, b))
        assert reached("hypot") == 1
        with warnings.catch_warnings():
            warnings.simplefilter("error")                    # one warning per op
            again = torch.hypot(a.to(dev), b.to(dev))
        assert reached("hypot") == 1                          # straight to the CPU
        assert_parity(again.cpu(), torch.hypot(a, b))
        # Another signature tries the device first again.
        with warnings.catch_warnings():                     # warned once already
            warnings.simplefilter("ignore", auto.DirectMLFallbackWarning)
            torch.hypot(torch.rand(5, device=dev), torch.rand(5, device=dev))
        assert reached("hypot") == 2
    failure = auto.failures()["torch.hypot"]
    assert failure.hresult == "E_INVALIDARG" and failure.signatures == 2
    row = next(r for r in dmlshim.report().rows if r["op"] == "torch.hypot")
    assert row["actions"] == {"cpu": 3} and row["d2h"] > 0 and row["h2d"] > 0


@pytest.mark.emulated_only(
    reason="injects failing emulation.Rules for aten::atan2, remainder and cumprod, which the real "
           "binary computes")
def test_tensor_methods_and_operators(shim, assert_parity):
    dev = shim("auto")
    x = torch.rand(4, 5)
    rules = [emulation.Rule("atan2"), emulation.Rule("remainder"), emulation.Rule("cumprod")]
    with emulation.configured(rules=rules), warnings.catch_warnings():
        warnings.simplefilter("ignore", auto.DirectMLFallbackWarning)
        d = x.to(dev)
        assert_parity(d.atan2(d + 1).cpu(), x.atan2(x + 1))
        assert_parity((d % 0.3).cpu(), x % 0.3)
        assert_parity(torch.cumprod(d, 1).cpu(), torch.cumprod(x, 1))
    assert {"Tensor.atan2", "Tensor.__mod__", "torch.cumprod"} <= set(auto.failures())


@pytest.mark.emulated_only(
    reason="injects failing emulation.Rules for aten::cat and mul, which the real binary computes")
def test_entry_points_shared_with_core_patches(shim, assert_parity):
    """Tensor.__mul__ is intercepted by a core patch (dtypes' complex numbers); auto's retry
    runs inside that wrapper (no layer of its own), torch.cat gets auto's own; both still
    retry and remember failures, on the fast path (float x float) and after mul's
    BackendSelect fix (float x bool)."""
    dev = shim("auto")
    for attr, owner in (("__mul__", torch.Tensor),):
        layers, layer = [], vars(owner)[attr]
        while layer is not dmlshim.patches.original(owner, attr):
            layers.append(layer)
            layer = layer.__wrapped__
        assert vars(owner)[attr].__dmlshim_guarded__         # an intercept runs auto's guard
        assert not [w for w in layers if getattr(getattr(w, "__code__", None), "co_filename", "")
                    .endswith("auto.py")]                    # and auto has no layer of its own
    a, b, m = torch.rand(3, 4), torch.rand(2, 4), torch.rand(3, 4) > 0.5
    rules = [emulation.Rule("cat", source="invented"), emulation.Rule("mul", source="invented")]
    with emulation.configured(rules=rules), warnings.catch_warnings():
        warnings.simplefilter("ignore", auto.DirectMLFallbackWarning)
        emulation.reset_records()
        for _ in range(2):                                     # the second goes straight to the CPU
            out = torch.cat([a.to(dev), b.to(dev)])
            assert out.device == dev
            assert_parity(out.cpu(), torch.cat([a, b]))
            assert_parity((a.to(dev) * a.to(dev)).cpu(), a * a)
        assert reached("cat") == 1 and reached("mul") == 1
        masked = a.to(dev) * m.to(dev)                         # mul's fix, then auto
        assert masked.device == dev
        assert_parity(masked.cpu(), a * m)
    assert {"torch.cat", "Tensor.__mul__"} <= set(auto.failures())
    assert auto.failures()["Tensor.__mul__"].signatures == 2


@pytest.mark.emulated_only(
    reason="injects a NotImplementedError emulation.Rule for aten::erfinv, which the real binary "
           "computes")
def test_not_implemented_sends_every_signature_to_cpu(shim, assert_parity):
    dev = shim("auto")
    rule = emulation.Rule("erfinv", error=NotImplementedError,
                          message="Could not run 'aten::erfinv.out' with arguments from the "
                                  "'CPU' backend.")
    with emulation.configured(rules=[rule]), warnings.catch_warnings():
        warnings.simplefilter("ignore", auto.DirectMLFallbackWarning)
        for n in (3, 7, 11):
            x = torch.rand(n) * 0.5
            assert_parity(torch.erfinv(x.to(dev)).cpu(), torch.erfinv(x))
        assert reached("erfinv") == 1
    assert auto.failures()["torch.erfinv"].all_signatures


@pytest.mark.emulated_only(
    reason="injects a failing emulation.Rule for aten::lerp, which the real binary computes")
def test_in_place_and_out_are_written_back(shim, assert_parity):
    dev = shim("auto")
    x, y = torch.rand(6), torch.rand(6)
    with emulation.configured(rules=[emulation.Rule("lerp")]), warnings.catch_warnings():
        warnings.simplefilter("ignore", auto.DirectMLFallbackWarning)
        d = x.to(dev)
        same = d.lerp_(y.to(dev), 0.25)
        assert same is d
        assert_parity(d.cpu(), x.clone().lerp_(y, 0.25))
        out = torch.empty(6, device=dev)
        res = torch.lerp(x.to(dev), y.to(dev), 0.5, out=out)
        assert res is out
        assert_parity(out.cpu(), torch.lerp(x, y, 0.5))


@pytest.mark.emulated_only(
    reason="injects a failing emulation.Rule for aten::_index_put_impl_, which the real binary "
           "computes")
def test_masked_assignment_is_written_back(shim, assert_parity):
    """``x[mask] = v`` (index_put_, failure_modes.md row #16 class) through Tensor.__setitem__."""
    dev = shim("auto")
    x = torch.arange(6.0).reshape(2, 3)
    want = x.clone()
    want[x > 2] = -1.0
    with emulation.configured(rules=[emulation.Rule("_index_put_impl_")], extend=True), \
            pytest.warns(auto.DirectMLFallbackWarning, match="Tensor.__setitem__"):
        d = x.to(dev)
        d[d > 2] = -1.0
    assert_parity(d.cpu(), want)


@pytest.mark.emulated_only(
    reason="injects a failing emulation.Rule for aten::logaddexp, which the real binary computes")
def test_autograd_through_the_fallback(shim, assert_parity):
    dev = shim("auto")
    w_cpu = torch.rand(3, 4, requires_grad=True)
    w_dev = w_cpu.detach().to(dev).requires_grad_()
    with emulation.configured(rules=[emulation.Rule("logaddexp")]), warnings.catch_warnings():
        warnings.simplefilter("ignore", auto.DirectMLFallbackWarning)
        torch.logaddexp(w_dev, w_dev * 2).sum().backward()
    torch.logaddexp(w_cpu, w_cpu * 2).sum().backward()
    assert w_dev.grad.device == dev
    assert_parity(w_dev.grad.cpu(), w_cpu.grad)


@pytest.mark.parametrize("code_page", ["cp936", "cp932", "cp1251"])
@pytest.mark.emulated_only(
    reason="configure(localized_errors=...): the emulator's localized HRESULT text for an injected "
           "failure; the real binary cannot be made to fail on demand")
def test_localized_error_without_shim_is_a_unicode_decode_error(dml_device, code_page):
    x = torch.rand(3, device=dml_device)
    with emulation.configured(rules=[emulation.Rule("sinh")], localized_errors=code_page):
        with pytest.raises(UnicodeDecodeError):
            torch.sinh(x)


@pytest.mark.parametrize("code_page,text", [("cp936", "参数错误。"), ("cp932", "パラメーターが間違っています。"),
                                            ("cp1251", "Параметр задан неверно.")])
@pytest.mark.emulated_only(
    reason="configure(localized_errors=...): the emulator's localized HRESULT text for an injected "
           "failure; the real binary cannot be made to fail on demand")
def test_known_mode_translates_localized_errors(shim, monkeypatch, code_page, text):
    monkeypatch.delenv("DMLSHIM_CODEPAGE", raising=False)
    dev = shim("known")
    x = torch.rand(2, 3, device=dev)
    with emulation.configured(rules=[emulation.Rule("sinh")], localized_errors=code_page):
        with pytest.raises(DirectMLError) as info:
            torch.sinh(x)
    err = info.value
    assert isinstance(err, RuntimeError)
    assert err.hresult.name == "E_INVALIDARG" and err.message == text
    assert err.op == "torch.sinh" and err.inputs == ("f32[2, 3]@privateuseone:0",)
    assert isinstance(err.__cause__, UnicodeDecodeError)
    assert "E_INVALIDARG (0x80070057)" in str(err) and text in str(err)
    assert "torch.sinh" not in auto.failures()                 # known mode never retries


@pytest.mark.emulated_only(
    reason="configure(localized_errors=...): the emulator's localized HRESULT text for an injected "
           "failure; the real binary cannot be made to fail on demand")
def test_auto_retries_localized_invalidarg(shim, assert_parity):
    dev = shim("auto")
    x = torch.rand(2, 3)
    with emulation.configured(rules=[emulation.Rule("sinh")], localized_errors="cp936"):
        with pytest.warns(auto.DirectMLFallbackWarning, match="参数错误"):
            out = torch.sinh(x.to(dev))
    assert_parity(out.cpu(), torch.sinh(x))
    assert auto.failures()["torch.sinh"].hresult == "E_INVALIDARG"


@pytest.mark.parametrize("message,localized,hresult", [
    (OOM, None, "E_OUTOFMEMORY"),
    ("Not enough memory resources are available to complete this operation.", "cp936",
     "E_OUTOFMEMORY"),
    (REMOVED, None, "DXGI_ERROR_DEVICE_REMOVED"),
    ("Unknown error -2005270523", None, "DXGI_ERROR_DEVICE_REMOVED"),      # WSL rendering
])
@pytest.mark.emulated_only(
    reason="injects out-of-memory and device-removed errors (emulation.Rule messages), which the "
           "real device cannot be made to raise")
def test_oom_and_device_removed_are_not_retried(shim, message, localized, hresult):
    dev = shim("auto")
    x = torch.rand(3, device=dev)
    with emulation.configured(rules=[emulation.Rule("cosh", message=message)],
                              localized_errors=localized):
        emulation.reset_records()
        with pytest.raises(DirectMLError) as info:
            torch.cosh(x)
        with pytest.raises(DirectMLError):
            torch.cosh(x)
        assert reached("cosh") == 2                             # tried on the device each time
    assert info.value.hresult.name == hresult and not info.value.retryable
    assert "torch.cosh" not in auto.failures()
    assert not any(r["op"] == "torch.cosh" and "cpu" in r["actions"] for r in dmlshim.report().rows)


@pytest.mark.emulated_only(
    reason="injects a failing emulation.Rule for aten::expm1, which the real binary computes (WSL's "
           "'Unknown error' text)")
def test_wsl_unknown_error_is_retried(shim, assert_parity):
    dev = shim("auto")
    x = torch.rand(4)
    with emulation.configured(rules=[emulation.Rule("expm1", message="Unknown error -2147024809")]):
        with pytest.warns(auto.DirectMLFallbackWarning, match="E_INVALIDARG"):
            assert_parity(torch.expm1(x.to(dev)).cpu(), torch.expm1(x))


@pytest.mark.emulated_only(
    reason="injects a failing emulation.Rule for aten::fmod, which the real binary computes")
def test_cpu_failure_is_reported_as_the_cpu_sees_it(shim):
    dev = shim("auto")
    with emulation.configured(rules=[emulation.Rule("fmod")]):
        with pytest.raises(RuntimeError, match="must match the size") as info:
            torch.fmod(torch.rand(3, device=dev), torch.rand(4, device=dev))
    assert "torch.fmod" not in auto.failures()
    assert "The parameter is incorrect" in str(info.value.__cause__)


def test_other_errors_pass_through_untouched(shim):
    dev = shim("auto")
    with pytest.raises(TypeError):
        torch.add(torch.rand(2, device=dev), "x")


@pytest.mark.emulated_only(
    reason="injects a failing emulation.Rule for aten::hypot, which the real binary computes")
def test_off_mode_keeps_the_raw_error(shim):
    dev = shim("off")
    assert "auto" not in dmlshim.patches.installed()
    with emulation.configured(rules=[emulation.Rule("hypot")]):
        with pytest.raises(RuntimeError, match="The parameter is incorrect"):
            torch.hypot(torch.rand(2, device=dev), torch.rand(2, device=dev))


@pytest.mark.emulated_only(
    reason="injects a failing emulation.Rule for aten::hypot, which the real binary computes")
def test_cpu_calls_are_never_touched(shim):
    shim("auto")
    with emulation.configured(rules=[emulation.Rule("hypot")]):
        torch.hypot(torch.rand(2), torch.rand(2))             # CPU: no rule applies
    assert auto.failures() == {}


@pytest.mark.emulated_only(
    reason="injects a failing emulation.Rule for aten::softplus, which the real binary computes")
def test_worker_threads_are_covered(shim, assert_parity):
    dev = shim("auto")
    x = torch.rand(64, 8)
    want = torch.nn.functional.softplus(x, beta=2.0)

    def work(_):
        return torch.nn.functional.softplus(x.to(dev), beta=2.0).cpu()

    with emulation.configured(rules=[emulation.Rule("softplus")]), warnings.catch_warnings():
        warnings.simplefilter("ignore", auto.DirectMLFallbackWarning)
        with ThreadPoolExecutor(4) as pool:              # a worker's exception re-raises here
            results = list(pool.map(work, range(4)))
    for r in results:
        assert_parity(r, want)


def test_deactivate_restores_every_entry_point(shim):
    before = {(id(o), n): vars(o).get(n) for o, n, _ in auto.entry_points()}
    add, tensor_add = torch.add, torch.Tensor.add
    shim("auto")
    assert torch.add is not add and "add" in vars(torch.Tensor)
    dmlshim.deactivate()
    after = {(id(o), n): vars(o).get(n) for o, n, _ in auto.entry_points()}
    assert after == before
    assert torch.add is add and torch.Tensor.add is tensor_add
    assert "lstm" not in vars(torch._VF)


def test_lstm_rescued_by_auto_alone(dml_device, assert_parity):
    """Only the catch-all, none of the known patches: nn.LSTM's aten::lstm needs
    _thnn_fused_lstm_cell, which DirectML lacks (failure_modes.md #1); auto retries
    torch._VF.lstm on the CPU. Runs on real DirectML too."""
    from dmlshim.patches._wrap import Context

    torch.manual_seed(0)
    lstm = torch.nn.LSTM(6, 5, num_layers=2, bidirectional=True, batch_first=True)
    x = torch.rand(3, 7, 6)
    want, (h, c) = lstm(x)
    with pytest.raises(NotImplementedError, match="_thnn_fused_lstm_cell"):
        lstm.to(dml_device)(x.to(dml_device))
    auto.forget()
    auto.install(Context(fallback="auto"))
    try:
        with pytest.warns(auto.DirectMLFallbackWarning, match="_VF.lstm"):
            got, (gh, gc) = lstm(x.to(dml_device))
    finally:
        auto.uninstall()
        auto.forget()
    assert got.device == dml_device
    assert_parity((got, gh, gc), (want, h, c))


def test_torchscript_still_compiles(shim, assert_same):
    shim("auto")
    scripted = torch.jit.script(torch.nn.Sequential(torch.nn.Conv1d(2, 2, 3), torch.nn.GELU()))
    x = torch.rand(1, 2, 6)
    assert_same(scripted(x), scripted.forward(x))       # CPU both sides


# ---------------------------------------------------------------- property test

# Looked up at call time (lambdas): a reference taken before activate() is not
# covered (see dmlshim/patches/auto.py).
UNARY = {"exp": lambda t: torch.exp(t), "sigmoid": lambda t: torch.sigmoid(t),
         "tanh": lambda t: t.tanh(), "abs": lambda t: torch.abs(t), "neg": lambda t: -t,
         "sqrt": lambda t: torch.sqrt(t.abs()), "cumsum": lambda t: t.cumsum(-1),
         "softmax": lambda t: torch.softmax(t, -1), "sum": lambda t: t.sum(-1, keepdim=True),
         "amax": lambda t: t.amax(-1, keepdim=True), "flip": lambda t: t.flip(-1),
         "sort": lambda t: t.sort(-1)[0]}
BINARY = {"add": lambda a, b: torch.add(a, b), "mul": lambda a, b: a * b,
          "maximum": lambda a, b: torch.maximum(a, b), "atan2": lambda a, b: torch.atan2(a, b),
          "sub": lambda a, b: a - b, "div": lambda a, b: a / (b.abs() + 1)}
# the aten op each step reaches on the device: amax as -amin(-x) (nan_reductions' fix, on
# wherever the emulated device's probe finds amax skipping NaN, as the real binary's does)
ATEN = {"sqrt": "sqrt", "cumsum": "cumsum", "softmax": "_softmax", "sum": "sum", "amax": "amin",
        "sort": "sort", "mul": "mul", "sub": "sub", "div": "div"}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
@pytest.mark.emulated_only(
    reason="injects failing emulation.Rules for a random subset of ops the real binary computes")
def test_auto_parity_over_random_ops_with_injected_failures(shim, data, assert_parity):
    """Random chains of ops on random shapes; a random subset of the ops fails on
    the device (E_INVALIDARG, NotImplementedError or a localized error): with
    auto the result is bit-identical to the CPU's."""
    dev = shim("auto")                                          # idempotent
    auto.forget()
    shape = data.draw(st.lists(st.integers(1, 5), min_size=1, max_size=3), label="shape")
    steps = data.draw(st.lists(st.sampled_from(sorted(UNARY) + sorted(BINARY)), min_size=1,
                               max_size=6), label="ops")
    failing = data.draw(st.sets(st.sampled_from(steps)), label="failing")
    error = data.draw(st.sampled_from(["invalidarg", "notimpl", "cp936"]), label="error")
    rules = [emulation.Rule(ATEN.get(name, name),
                            error=NotImplementedError if error == "notimpl" else RuntimeError,
                            message="The parameter is incorrect.") for name in sorted(failing)]
    torch.manual_seed(0)
    x, y = torch.randn(shape), torch.randn(shape)

    def run(a, b):
        for name in steps:
            a = UNARY[name](a) if name in UNARY else BINARY[name](a, b)
        return a

    want = run(x, y)
    with emulation.configured(rules=rules, localized_errors="cp936" if error == "cp936" else None), \
            warnings.catch_warnings():
        warnings.simplefilter("ignore", auto.DirectMLFallbackWarning)
        got = run(x.to(dev), y.to(dev))
    assert got.device == dev
    assert_parity(got.cpu(), want)
    assert bool(auto.failures()) == bool(failing)     # the injected failures were met


# ---------------------------------------------------------------- op contracts (issue 12)

def _packed_inputs(dev):
    g = torch.Generator().manual_seed(0)
    x, gru = torch.randn(3, 5, 4, generator=g), torch.nn.GRU(4, 6, batch_first=True)
    return x, gru, x.to(dev), torch.nn.GRU(4, 6, batch_first=True).to(dev).requires_grad_(False)


def test_device_lengths_raise_as_on_cuda(shim, dml_device):
    # CUDA refuses lengths on the device; the shim must not retry that on the CPU and
    # hand back a PackedSequence whose batch_sizes then fail in the GRU.
    from torch.nn.utils.rnn import pack_padded_sequence
    x = torch.randn(3, 5, 4).to(dml_device)
    lengths = torch.tensor([5, 3, 2]).to(dml_device)
    for fallback in (None, "auto"):
        if fallback:
            shim(fallback)
        with pytest.raises(RuntimeError, match="'lengths' argument should be a 1D CPU int64 tensor"):
            pack_padded_sequence(x, lengths, batch_first=True)


@pytest.mark.emulated_only(
    reason="injects a failing emulation.Rule for aten::cat, which the real binary computes inside "
           "pack_padded_sequence")
def test_cpu_retry_keeps_batch_sizes_on_the_cpu(shim, dml_device, assert_parity):
    from torch.nn.utils.rnn import pack_padded_sequence
    x, gru, x_dev, gru_dev = _packed_inputs(dml_device)
    gru_dev.load_state_dict(gru.state_dict())
    lengths = torch.tensor([5, 3, 2])
    expected = gru(pack_padded_sequence(x, lengths, batch_first=True))[1]
    # an invented failure inside the composite op: the whole call is retried on the CPU
    with emulation.configured(rules=[emulation.Rule("cat", source="invented")], extend=True):
        with pytest.raises(RuntimeError, match="The parameter is incorrect"):
            pack_padded_sequence(x_dev, lengths, batch_first=True)
        shim("auto")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            packed = pack_padded_sequence(x_dev, lengths, batch_first=True)
        assert packed.data.device == dml_device and packed.batch_sizes.device.type == "cpu"
        got = gru_dev(packed)[1]
    assert_parity(got.cpu(), expected)
