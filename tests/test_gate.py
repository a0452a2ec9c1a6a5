"""The compiled gate (dmlshim/patches/_gate.py): dmlshim's BackendSelect kernels see only
calls with a tensor or a ``device=`` of the target device; every other call, on the CPU
or another device, runs no Python.  Both ways: with ``DMLSHIM_GATE=python`` the Python
kernels run on CPU calls too, and the fixes give the CPU's results either way."""
import os
import sys

import pytest
import torch

import dmlshim
from dmlshim import ranges
from dmlshim.patches import _gate

KERNEL_FILES = ("dispatcher.py", "_select.py")
CPU_CALLS = {
    "a * b": lambda a, b: a * b,
    "torch.cat": lambda a, b: torch.cat([a, b]),
    "index": lambda a, b: a[torch.tensor([0, 2])],
    "to(float64)": lambda a, b: a.to(torch.float64),
    "torch.full": lambda a, b: torch.full((3,), 2.0),
    "gather": lambda a, b: torch.gather(a, 0, torch.tensor([1, 0])),
}


@pytest.fixture
def gate(monkeypatch, request):
    """dmlshim active (fallback="known") with DMLSHIM_GATE=request.param."""
    if request.param == "compiled" and _gate.extension("auto") is None:
        pytest.fail("no compiled gate on a machine with g++ and ninja (the suite's machine)")
    monkeypatch.setenv("DMLSHIM_GATE", request.param)
    dmlshim.deactivate()
    dmlshim.activate(fallback="known", trace=0)
    yield request.param
    dmlshim.deactivate()


def _python_kernel_calls(fn, where=lambda path: path.endswith(KERNEL_FILES), emulator: bool = True) -> int:
    """How many calls of a Python function in dmlshim's kernel modules (or in the files
    ``where(path)`` picks) ``fn()`` makes, the Python gate's pass-through (``passed``, what a
    call no fix watches runs) left out; ``emulator=False``: leaving out those the emulated
    device's own Python kernels make (its ``_to_copy`` calls ``Tensor.to``: a real device
    makes none)."""
    calls = []

    def in_emulator(frame):
        while frame is not None:
            if "dmlshim/emulation/" in frame.f_code.co_filename:
                return True
            frame = frame.f_back
        return False

    def passed(frame):
        """Whether ``frame`` runs under the Python gate's pass-through (``passed``): that
        and what the device's kernels call themselves.  Such a nested call brings its
        wrapped numbers as 0-dim CPU tensors, which Python cannot tell from CPU operands (the
        real binary's ``mul`` calls ``mul.out`` with its number): the Python gate sends some
        of those to the fixes, which the compiled gate, reading ``is_wrapped_number``, does
        not."""
        while frame is not None:
            if frame.f_code.co_name == "passed":
                return True
            frame = frame.f_back
        return False

    def profile(frame, event, arg):
        if event == "call" and where(frame.f_code.co_filename) and not passed(frame) \
                and (emulator or not in_emulator(frame)):
            calls.append(frame.f_code.co_name)
    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return len(calls)


@pytest.mark.parametrize("gate", ["compiled", "python"], indirect=True)
@pytest.mark.parametrize("call", list(CPU_CALLS))
def test_cpu_calls_run_no_python_kernel_behind_the_gate(gate, call, assert_same):
    a, b = torch.randn(4), torch.randn(4)
    expected = CPU_CALLS[call](a, b)
    gates = KERNEL_FILES + (("_gate.py",) if gate == "python" else ())     # the PythonGate's own call
    calls = _python_kernel_calls(lambda: CPU_CALLS[call](a, b), where=lambda path: path.endswith(gates))
    if gate == "compiled":
        assert calls == 0
    elif call != "gather":                 # gather's fix is gated on a defect the device shows
        assert calls > 0                   # the Python gate at BackendSelect sees every call
    assert_same(CPU_CALLS[call](a, b), expected)


@pytest.mark.parametrize("gate", ["compiled", "python"], indirect=True)
def test_device_calls_are_fixed_either_way(gate, dml_device, assert_parity, assert_same):
    x, m = torch.randn(3, 4), torch.rand(3, 4) > 0.5
    xd, md = x.to(dml_device), m.to(dml_device)
    got = xd * md                                            # float x bool (#17)
    assert got.dtype == torch.float32
    assert_parity(got, x * m)
    assert_parity(torch.cat([xd, torch.empty(0, device=dml_device)]), x)    # empty input (#19)
    assert_same(xd[torch.tensor([2, 0])], x[torch.tensor([2, 0])])          # CPU indices (#10)


@pytest.mark.parametrize("gate", ["compiled"], indirect=True)
def test_factories_and_casts_keep_their_device_behind_the_gate(gate, dml_device):
    """_to_copy and full: the gate adds the key of their device= as torch's own
    BackendSelect kernel, which it stands in for, does."""
    cpu = torch.ones(2)
    assert cpu.to("meta").device.type == "meta"
    assert torch.full((2,), 1.0, device="meta").device.type == "meta"
    assert torch.full((2,), 1.0).device.type == "cpu"
    assert torch.full((2,), 1.0, device=dml_device).device == dml_device
    assert cpu.to(dml_device, torch.float16).dtype == torch.float16
    assert torch.full((2,), 3, dtype=torch.int64).dtype == torch.int64


def test_deactivate_removes_the_gate(dml_device, monkeypatch):
    monkeypatch.setenv("DMLSHIM_GATE", "compiled")
    dmlshim.deactivate()
    dmlshim.activate(fallback="known", trace=0)
    assert "gate.cpp" in torch._C._dispatch_dump("aten::mul.Tensor")
    dmlshim.deactivate()
    dump = torch._C._dispatch_dump("aten::mul.Tensor")
    assert "gate.cpp" not in dump and "FPGA" not in dump
    assert "gate.cpp" not in torch._C._dispatch_dump("aten::_to_copy")   # torch's own is back
    assert "BackendSelect" in torch._C._dispatch_dump("aten::_to_copy")


def test_hot_overloads_get_the_typed_gate(dml_device, monkeypatch):
    """mul.Tensor's gate is unboxed (no stack a CPU call boxes and unboxes), and _to_copy's,
    which stands in for torch's own BackendSelect kernel, and the fills' (a boxed gate sends
    every in-place device call to Python); full's is boxed."""
    monkeypatch.setenv("DMLSHIM_GATE", "compiled")
    dmlshim.deactivate()
    dmlshim.activate(fallback="known", trace=0)
    try:
        for op in ("aten::mul.Tensor", "aten::_to_copy", "aten::fill_.Scalar", "aten::zero_"):
            line = next(l for l in torch._C._dispatch_dump(op).splitlines() if l.startswith("BackendSelect:"))
            assert "gate.cpp" in line and "unboxed" in line, line
        line = next(l for l in torch._C._dispatch_dump("aten::full").splitlines() if l.startswith("BackendSelect:"))
        assert "gate.cpp" in line and "boxed" in line and "unboxed" not in line, line
    finally:
        dmlshim.deactivate()


def test_a_bad_gate_value_names_the_variable(monkeypatch):
    monkeypatch.setenv("DMLSHIM_GATE", "fast")
    dmlshim.deactivate()
    with pytest.raises(ValueError, match="DMLSHIM_GATE='fast'.*auto, compiled, python"):
        dmlshim.activate()


def test_compiled_mode_without_a_compiler_raises(monkeypatch):
    monkeypatch.setattr(_gate, "_tried", [(None, _gate.Status("python", "python", "no c++"))])
    monkeypatch.setattr(_gate, "_warned", [])
    with pytest.raises(RuntimeError, match="DMLSHIM_GATE=compiled.*no c\\+\\+"):
        _gate.extension("compiled")
    assert _gate.extension("auto") is None and _gate.extension("python") is None


def test_count_sees_python_kernels(dml_device, monkeypatch):
    """The counter itself: a device call behind the gate does reach the Python kernel."""
    monkeypatch.setenv("DMLSHIM_GATE", "compiled")
    dmlshim.deactivate()
    dmlshim.activate(fallback="known", trace=0)
    try:
        xd = torch.randn(3).to(dml_device)
        assert _python_kernel_calls(lambda: xd * (xd > 0)) > 0
    finally:
        dmlshim.deactivate()


@pytest.mark.parametrize("gate", ["compiled"], indirect=True)
def test_report_splits_device_reads_into_the_models_and_dmlshims(gate, dml_device):
    """Behind the gate, ``.item()`` and ``.cpu()`` of device tensors are counted as the
    model's reads; dmlshim's own (an integer range nothing knew) apart."""
    x = torch.arange(8).to(dml_device)
    big = torch.arange(5000).to(dml_device)     # too large to take its range at the copy
    dmlshim.trace.reset()
    assert x.sum().item() == 28
    assert x.cpu().tolist() == list(range(8))
    assert big.clone().cpu()[-1].item() == 4999  # a read of the device, then a CPU item()
    syncs = dmlshim.report().syncs
    assert syncs["model"]["aten::_local_scalar_dense"] == {"reads": 1, "bytes": 8}
    copies = syncs["model"]["aten::_to_copy"]    # the real binary's item() copies once more (8 B)
    assert copies["reads"] in (2, 3) and copies["bytes"] - (8 + 5000) * 8 in (0, 8), copies
    assert syncs["dmlshim"] == {"aten::clone": {"reads": 1, "bytes": 5000 * 8}}
    text = str(dmlshim.report())
    assert "device-to-host reads, the model's: " in text and "device-to-host reads, dmlshim's: 1 " in text


@pytest.mark.parametrize("gate", ["compiled", "python"], indirect=True)
def test_argument_parsers_device_scalar_read_reaches_the_read_kernel(gate, dml_device):
    """torch's argument parser reads ``torch.arange(t)``'s device scalar holding the GIL;
    with either gate the read goes through dmlshim's ``_local_scalar_dense`` kernel, which
    redispatches with the GIL let go (the real binary's deadlock without it:
    test_reliability.py's ``test_device_scalar_read_in_the_argument_parser_lets_go_of_the_gil``)."""
    n = torch.tensor(5).to(dml_device)
    dmlshim.trace.reset()
    assert torch.arange(n).tolist() == [0, 1, 2, 3, 4]
    assert dmlshim.report().syncs["model"]["aten::_local_scalar_dense"] == {"reads": 1, "bytes": 8}


# the Python-level entry points CPU models reach most, each wrapped by a patch, auto or both
FRONTED = {
    "a * b": lambda a, b: a * b,
    "a + b": lambda a, b: a + b,
    "a.mul(b)": lambda a, b: a.mul(b),
    "view": lambda a, b: a.view(2, 2),
    "torch.cat": lambda a, b: torch.cat([a, b]),
    "torch.matmul": lambda a, b: torch.matmul(a.view(2, 2), b.view(2, 2)),
    "F.linear": lambda a, b: torch.nn.functional.linear(a.view(2, 2), b.view(2, 2), b[:2]),
    "to(float16)": lambda a, b: a.to(torch.float16),
    "sum(dtype=)": lambda a, b: a.sum(dtype=torch.float32),
}


def _python_calls_in_dmlshim(fn) -> int:
    return _python_kernel_calls(fn, where=lambda path: "dmlshim" in path)


@pytest.mark.parametrize("mode", ["compiled", "python"])
@pytest.mark.parametrize("call", list(FRONTED))
def test_cpu_calls_run_no_python_wrapper_behind_the_front(mode, call, monkeypatch, dml_device, assert_same):
    """With the compiled gate a CPU call of plain values passes every Python-level wrapper
    (the patches' and auto's, fallback="auto") in C: no dmlshim Python runs at all."""
    monkeypatch.setenv("DMLSHIM_GATE", mode)
    a, b = torch.randn(4), torch.randn(4)
    expected = FRONTED[call](a, b)
    dmlshim.deactivate()
    dmlshim.activate(trace=0)
    try:
        calls = _python_calls_in_dmlshim(lambda: FRONTED[call](a, b))
        assert (calls == 0) if mode == "compiled" else (calls > 0)
        assert_same(FRONTED[call](a, b), expected)
    finally:
        dmlshim.deactivate()


@pytest.mark.parametrize("gate", ["compiled"], indirect=True)
def test_the_front_reads_as_the_function_it_wraps(gate, dml_device, assert_same):
    import inspect
    import pickle
    import types
    front = vars(torch)["cat"]
    assert type(front).__name__ == "Front"
    assert front.__name__ == "cat" and inspect.isfunction(front) and isinstance(front, types.FunctionType)
    assert front.__dmlshim_fast__ is dmlshim.patches._wrap.original(torch, "cat")
    assert pickle.loads(pickle.dumps(torch.cat)) is front.__dmlshim_fast__     # as without dmlshim
    a = torch.randn(3)
    assert_same(a.mul(2), a * 2)
    assert_same(torch.Tensor.mul(a, 2), a * 2)
    assert_same(torch.cat(tensors=[a, a]), torch.cat([a, a]))


@pytest.mark.parametrize("gate", ["compiled"], indirect=True)
def test_calls_of_other_values_reach_the_wrappers(gate, dml_device, assert_parity):
    """A device tensor, a CPU island, a str device, a dtype the device cannot hold: the
    Python wrapper decides, as without the front."""
    x, m = torch.randn(3, 4), torch.rand(3, 4) > 0.5
    got = torch.Tensor.__mul__(x.to(dml_device), m.to(dml_device))
    assert got.dtype == torch.float32
    assert_parity(got, x * m)
    moved = torch.randn(2, dtype=torch.float64).to(dml_device)     # float64 transfer: dtypes' wrapper
    assert moved.device == dml_device
    assert torch.cat([x.to(dml_device), torch.empty(0, 4, device=dml_device)]).shape == (3, 4)


# device calls none of whose fixes acts: the gate's watch (each fix's _gate.Watch) keeps them
# in C++ on the emulated device with every defect (and so every fix) on
DEVICE_CALLS = {
    "a * b": lambda a, m, w, i: a * b_of(a),
    "a + b": lambda a, m, w, i: a + 1.5,
    "a - b, broadcast": lambda a, m, w, i: m - a[:4],
    "view": lambda a, m, w, i: a.view(2, 4),
    "a[1:]": lambda a, m, w, i: a[1:],
    "torch.cat": lambda a, m, w, i: torch.cat([a, a]),
    "F.linear": lambda a, m, w, i: torch.nn.functional.linear(m, w),
    "torch.matmul": lambda a, m, w, i: torch.matmul(m, w),
    "F.conv1d": lambda a, m, w, i: torch.nn.functional.conv1d(m.view(1, 4, 4), w.view(4, 4, 1)),
    "to(float16)": lambda a, m, w, i: a.to(torch.float16),
    "clone": lambda a, m, w, i: m.clone(),
    "sum": lambda a, m, w, i: m.sum(0),
    "torch.ones, torch.zeros (float fills)": lambda a, m, w, i: torch.ones(4, device=a.device) + torch.zeros(
        4, device=a.device),
    "fill_": lambda a, m, w, i: m.clone().fill_(2.5),
    "views of inference tensors, in inference mode": lambda a, m, w, i: _in_inference(
        lambda: (m * 1).view(16).view(4, 4).t()),
    # int64 of a span int_range keeps (an upload): its laws, decided in the compiled gate
    "int64 i + 1": lambda a, m, w, i: i + 1,
    "int64 i - 2, i * 3": lambda a, m, w, i: (i - 2, i * 3),
    "int64 i > 3, i <= 2": lambda a, m, w, i: (i > 3, i <= 2),
    "int64 clone": lambda a, m, w, i: i.clone(),
}


# device calls with nothing to fix that the Python gate sends to the fixes all the same: a
# slice's anchor (offset_views) is kept in C++ by the compiled gate only
PYTHON_GATE_ENTERS = {"a[1:]"}


def b_of(a):
    return a


def _device_values(d):
    torch.manual_seed(0)
    return (torch.randn(8).to(d), torch.randn(4, 4).to(d), torch.randn(4, 4).to(d),
            torch.arange(8).to(d))


@pytest.mark.parametrize("gate", ["compiled", "python"], indirect=True)
@pytest.mark.parametrize("call", list(DEVICE_CALLS))
def test_device_calls_with_nothing_to_fix_run_no_python_kernel(gate, call, dml_device, assert_parity):
    """The Python gate decides as the compiled one does (``_gate.PythonGate``), but for what
    only the compiled gate does in C++ (records a slice's anchor for offset_views): that
    enters the fixes there."""
    values = _device_values(dml_device)
    fixes_entered = _python_kernel_calls(lambda: DEVICE_CALLS[call](*values))
    assert (fixes_entered > 0) == (gate == "python" and call in PYTHON_GATE_ENTERS), fixes_entered
    cpu = [v.cpu() for v in values]
    assert_parity(DEVICE_CALLS[call](*values), DEVICE_CALLS[call](*cpu))


# a device call each fix may act on: the watch sends it to the Python kernel
WATCHED = {
    "an integer result past 2**24 (int_range)": lambda a, m, w, i: i + 2 ** 24,
    "an integer of a span not kept (int_range reads it)": lambda a, m, w, i: _forgotten(i) > 3,
    "an integer view (int_range keeps views apart)": lambda a, m, w, i: i[1:].clone(),
    "an integer number that is a float (int_range)": lambda a, m, w, i: i * 2.5,
    "a bool number (mul)": lambda a, m, w, i: a * True,
    "a bool tensor (mul)": lambda a, m, w, i: a * (a > 0),
    "an empty input (cat)": lambda a, m, w, i: torch.ops.aten.cat.default([a, a[:0]]),
    "mixed dtypes, ranks differ (int_broadcast)": lambda a, m, w, i: m + a[:4].half(),
    "a view of an offset view (offset_views)": lambda a, m, w, i: a[1:].view(7, 1),
    "a view in inference mode (inference_mode)": lambda a, m, w, i: _in_inference(lambda: m.view(16)),
    "an offset view of an inference tensor (offset_views)": lambda a, m, w, i: _in_inference(lambda: (m * 1)[1:]),
    "CPU indices (index)": lambda a, m, w, i: a[torch.tensor([1, 0])],
    "a channels-last clone (channels_last)": lambda a, m, w, i: m.view(1, 1, 4, 4).clone(
        memory_format=torch.channels_last),
    "an integer fill (int_range keeps its span)": lambda a, m, w, i: torch.zeros(4, dtype=torch.int64, device=a.device),
    "a copy to the CPU (the model's read, counted)": lambda a, m, w, i: a.cpu(),
    "an empty reduction (empty_reduction)": lambda a, m, w, i: m[:0].sum(0),
    "a transposed convolution's output padding": lambda a, m, w, i: torch.nn.functional.conv_transpose1d(
        m.view(1, 4, 4), w.view(4, 4, 1), stride=2, output_padding=1),
    "an empty operand (empty_broadcast)": lambda a, m, w, i: torch.ops.aten.sub.Tensor(m[:0], m[:0]),
    "an unbatched max pool (max_pool_unbatched)": lambda a, m, w, i: torch.ops.aten.max_pool2d_with_indices(
        m.view(1, 4, 4), [2, 2]),
    "a 5-D masked_fill_ (masked_fill_rank)": lambda a, m, w, i: m.view(1, 1, 1, 4, 4).clone().masked_fill_(
        m.view(1, 1, 1, 4, 4) > 0, 0.0),
}


def _forgotten(t):
    ranges.forget(t)
    return t


def _in_inference(fn):
    with torch.inference_mode():
        return fn()


@pytest.mark.parametrize("gate", ["compiled", "python"], indirect=True)
@pytest.mark.parametrize("case", list(WATCHED))
def test_device_calls_a_fix_may_act_on_reach_the_python_kernel(gate, case, dml_device, assert_parity):
    values = _device_values(dml_device)
    assert _python_kernel_calls(lambda: WATCHED[case](*values)) > 0
    assert_parity(WATCHED[case](*values), WATCHED[case](*[v.cpu() for v in values]))


@pytest.mark.parametrize("gate", ["compiled", "python"], indirect=True)
def test_integer_calls_decided_by_a_law_keep_their_results_span(gate, dml_device):
    """Either gate keeps the same spans: the compiled one in its table (``ranges.keep_in``)
    for the calls it decides itself, read back through ``ranges``; a bound, not the values."""
    i = torch.arange(8).to(dml_device)
    assert ranges.known_span(i) == (0, 7) and ranges.known_exactly(i)
    results = {"i + 1": i + 1, "i - 3": i - 3, "i * -2": i * -2, "clone": i.clone(),
               "add.Scalar": torch.ops.aten.add.Scalar(i, 5, alpha=2)}
    assert {k: ranges.known_span(v) for k, v in results.items()} == {
        "i + 1": (1, 8), "i - 3": (-3, 4), "i * -2": (-14, 0), "clone": (0, 7), "add.Scalar": (10, 17)}
    assert not any(ranges.known_exactly(v) for v in results.values())
    ones = torch.ones(4, dtype=torch.int64, device=dml_device)     # fill_(1) inside the factory
    assert ranges.known_span(ones) == (1, 1) and ranges.known_exactly(ones)
    j = results["i + 1"]
    j.add_(1)                                          # a write: the span kept is gone
    assert ranges.known_span(j) is None
    assert ranges.known_span(results["clone"][1:]) == (0, 7)     # a view: its base's


def test_the_python_gates_laws_take_what_the_compiled_ones_take(dml_device):
    """``_gate.rule``, csrc/gate.cpp's ``rule`` in Python: a Python int (not a bool or float),
    ``self`` an int32/int64 device tensor of a span kept, not a view, every value within the
    law's exact span; else None (the fix decides)."""
    i = torch.arange(8).to(dml_device)
    ranges.remember(i, (0, 7), exact=True)

    def rule(law, *args, **kwargs):
        return _gate.rule(_gate.LAWS[law], dml_device.type, args, kwargs)

    assert rule("sum", i, 1) == (True, (1, 8), False)
    assert rule("sum", i, True) is None and rule("sum", i, 1.0) is None and rule("sum", i, 2 ** 24) is None
    assert rule("difference", i, 2, alpha=3) == (True, (-6, 1), False)
    assert rule("product", i, -2) == (True, (-14, 0), False)
    assert rule("compare", i, 3) == (False, None, False) and rule("compare", i, 2 ** 31) is None
    assert rule("unchanged", i) == (True, (0, 7), False) and rule("unchanged", i[1:]) is None
    assert rule("fill", i, 2 ** 31) == (True, (2 ** 31, 2 ** 31), True) and rule("fill", i.int(), 2 ** 31) is None
    assert rule("sum", i.float(), 1) is None and rule("sum", i.cpu(), 1) is None
    ranges.forget(i)
    assert rule("sum", i, 1) is None and rule("compare", i, 3) is None


def test_set_watch_tells_a_ranged_fix_law_with_what_the_others_watch():
    @_gate.ranged(lambda op: "sum" if op is torch.ops.aten.add.Tensor else None)
    @_gate.watching(_gate.Watch(dtypes=_gate.INTEGERS))
    def ranged_fix(op, keyset, args, kwargs):
        return None

    @_gate.watching(_gate.Watch(mixed=True))
    def other(op, keyset, args, kwargs):
        return None

    told = []

    class Registration:
        def watch(self, *bits):
            told.append(("watch", *bits))

        def ranged(self, law, *bits):
            told.append(("ranged", law, *bits))

    _gate.set_watch(Registration(), torch.ops.aten.add.Tensor, [ranged_fix, other])
    _gate.set_watch(Registration(), torch.ops.aten.sub.Tensor, [ranged_fix, other])
    mixed = _gate.Watch(mixed=True).flags()
    integers = sorted(_gate.INTEGERS, key=str)
    assert told == [("watch", mixed, integers, [], []), ("ranged", _gate.LAWS["sum"], mixed, [], [], []),
                    ("watch", mixed, integers, [], []), ("ranged", 0, 0, [], [], [])]


@pytest.mark.parametrize("gate", ["compiled", "python"], indirect=True)
def test_a_sum_of_a_marked_float_reaches_the_python_kernel(gate, dml_device, assert_parity):
    """int_range keeps a float mask's whole-number span and marks the mask (``_gate.mark``):
    its sum, and a view's, go to the Python kernel (an encoder's lengths, their span kept),
    as a bool mask's does; a float sum of any other tensor, and an integer one, stay in C++
    (DEVICE_CALLS' ``sum``)."""
    m = torch.rand(3, 1, 4) > 0.5
    mask = m.to(dml_device).float()
    other = torch.randn(3, 4).to(dml_device)
    assert _python_kernel_calls(lambda: mask.squeeze(1).sum(1)) > 0
    assert _python_kernel_calls(lambda: mask.sum()) > 0
    assert _python_kernel_calls(lambda: other.sum(1)) == 0
    ints, bools = torch.arange(8).to(dml_device), m.to(dml_device)
    assert _python_kernel_calls(lambda: ints.sum()) == 0            # an integer sum: not watched
    assert _python_kernel_calls(lambda: bools.sum()) > 0            # a bool one: 0..1, always known
    assert_parity(mask.squeeze(1).sum(1), m.float().squeeze(1).sum(1))


@pytest.mark.parametrize("gate", ["compiled"], indirect=True)
def test_views_the_gate_makes_at_an_offset_alias_their_base(gate, dml_device, assert_same):
    """``x[1:]`` of a root is made in C++ and marked (offset_views' anchor, the base): a view
    of it, then, is made from the base by the Python fix, and a write through it reaches ``x``
    (the emulator's rule for failure_modes.md #62 copies otherwise)."""
    x = torch.zeros(8)
    xd = x.to(dml_device)
    tail = xd[1:]
    assert _python_kernel_calls(lambda: xd[1:]) == 0
    anchor, offset = _gate.anchored(tail)
    assert anchor is xd and offset == 1
    tail[2:4].view(2).fill_(5.0)
    x[1:][2:4].view(2).fill_(5.0)
    assert_same(xd, x)


def test_a_watch_unites_its_fixes_and_a_retry_of_a_write_is_always():
    integers = _gate.Watch(dtypes=_gate.INTEGERS)
    union = integers | _gate.Watch(empty=True, numbers=frozenset({torch.bool}), ranks=frozenset({3}))
    assert union.dtypes == _gate.INTEGERS and union.empty and union.numbers == {torch.bool} and union.ranks == {3}
    assert torch.int64 in _gate.INTEGERS and torch.bool in _gate.INTEGERS and torch.float16 not in _gate.INTEGERS
    assert _gate.ALWAYS.flags() == 1 and _gate.Watch(catch=True).flags() == 1 << 6

    @_gate.watching(_gate.Watch(catch=True))
    def retry(op, keyset, args, kwargs):
        return None

    told = []

    class Registration:
        def watch(self, flags, dtypes, numbers, ranks):
            told.append(flags)

        def ranged(self, law, flags, dtypes, numbers, ranks):
            assert (law, flags, dtypes, numbers, ranks) == (0, 0, [], [], [])    # no ranged fix: no law

    _gate.set_watch(Registration(), torch.ops.aten.mm.default, [retry])
    _gate.set_watch(Registration(), torch.ops.aten.mm.out, [retry])       # writes out=
    _gate.set_watch(Registration(), torch.ops.aten.mm.default, [lambda *a: None])   # declares nothing
    assert told == [1 << 6, (1 << 6) | 1, 1]


def _shim_calls(fn) -> int:
    """Calls of dmlshim's wrappers and kernels (dmlshim/patches) ``fn()`` makes, not counting
    the emulated device's own."""
    return _python_kernel_calls(fn, where=lambda path: "dmlshim/patches/" in path, emulator=False)


# Python-level entry points whose wrappers pass a device call of held dtypes by: their front
# runs it in C (device mode) under auto's guard
DEVICE_FRONTED = {
    "a * b": lambda a, b: a * b,
    "a + b": lambda a, b: a + b,
    "view": lambda a, b: a.view(2, 2),
    "torch.cat": lambda a, b: torch.cat([a, b]),
    "torch.matmul": lambda a, b: torch.matmul(a.view(2, 2), b.view(2, 2)),
    "F.linear": lambda a, b: torch.nn.functional.linear(a.view(2, 2), b.view(2, 2)),
    "to(float16)": lambda a, b: a.to(torch.float16),
    "F.conv1d": lambda a, b: torch.nn.functional.conv1d(a.view(1, 1, 4), b[:2].view(1, 1, 2)),
}


@pytest.mark.parametrize("call", list(DEVICE_FRONTED))
def test_device_calls_run_no_python_wrapper_behind_the_front(call, monkeypatch, dml_device, assert_parity):
    """fallback="auto": no dmlshim Python at all for a device call the wrappers pass by (their
    selects, auto's memo empty), nor in the gate's kernels when no fix acts."""
    monkeypatch.setenv("DMLSHIM_GATE", "compiled")
    a, b = torch.randn(4), torch.randn(4)
    ad, bd = a.to(dml_device), b.to(dml_device)
    dmlshim.deactivate()
    dmlshim.activate(trace=0)
    try:
        assert _shim_calls(lambda: DEVICE_FRONTED[call](ad, bd)) == 0
        assert_parity(DEVICE_FRONTED[call](ad, bd), DEVICE_FRONTED[call](a, b))
    finally:
        dmlshim.deactivate()


@pytest.mark.parametrize("gate", ["compiled"], indirect=True)
def test_a_device_call_a_wrapper_acts_on_reaches_it(gate, dml_device, assert_parity):
    """A bool operand (mul's watch) and an empty input (cat's) reach their BackendSelect fixes."""
    x = torch.randn(4)
    xd = x.to(dml_device)
    assert _shim_calls(lambda: xd * (xd > 0)) > 0
    dmlshim.trace.reset()
    assert_parity(torch.cat([xd, xd[:0]]), x)
    assert dmlshim.report().rows and any(r["op"] == "aten::cat" for r in dmlshim.report().rows)


@pytest.mark.emulated_only("an emulation.Rule makes hypot fail")
def test_a_failing_device_call_through_the_front_is_retried_on_the_cpu(monkeypatch, dml_device, assert_parity):
    """auto's guard in device mode: the device's error goes to its retry on the CPU (one
    DirectMLFallbackWarning), and the next call of that signature to the CPU at once (the
    memo, then held: the front sends the op's calls to the wrapper)."""
    from dmlshim import emulation
    from dmlshim.patches.auto import DirectMLFallbackWarning
    monkeypatch.setenv("DMLSHIM_GATE", "compiled")
    x = torch.randn(4, 1, 8)
    xd = x.to(dml_device)
    dmlshim.deactivate()
    dmlshim.activate(trace=0)
    try:
        assert torch.hypot.__dmlshim_device__ is not None          # its front has a device mode
        with emulation.configured(rules=[emulation.Rule("hypot", source="invented")]):
            with pytest.warns(DirectMLFallbackWarning, match="hypot"):
                first = torch.hypot(xd, xd)
            assert_parity(first, torch.hypot(x, x))
            dmlshim.trace.reset()
            assert_parity(torch.hypot(xd, xd), torch.hypot(x, x))
            assert [r["actions"] for r in dmlshim.report().rows if r["op"] == "torch.hypot"] == [{"cpu": 1}]
    finally:
        dmlshim.deactivate()


COMPILED_CPU_CODE = """
import os, sys, torch
import dmlshim
from dmlshim import emulation
emulation.install()
torch.manual_seed(0)
a, b = torch.randn(8), torch.randn(8)
f = lambda a, b: torch.cat([a * b, (a + b).view(-1)]).to(torch.float16).sum()
expected = f(a, b)
dmlshim.activate(trace=0)
assert type(vars(torch)["cat"]).__name__ == "Front"
got = torch.compile(f, backend=sys.argv[1])(a, b)
assert got.dtype == expected.dtype and got.item() == expected.item(), (got, expected)
print("same")
"""


@pytest.mark.emulated_only("a child process installs the emulated device")
@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_torch_compile_of_cpu_code_traces_through_the_fronts(backend):
    """torch._dynamo guards the functions it inlines with weak references: a front must take
    one ("cannot create weak reference to 'dmlshim.Front' object" before).  In a process of
    its own, as a user's: after the suite's many activate()/deactivate() cycles dynamo's
    closure guard on ``torch.cat`` fails (docs/limitations.md)."""
    import subprocess
    env = dict(os.environ, DMLSHIM_GATE="compiled")
    done = subprocess.run([sys.executable, "-c", COMPILED_CPU_CODE, backend], capture_output=True, text=True,
                          env=env, timeout=600)
    assert done.returncode == 0 and done.stdout.strip().endswith("same"), done.stderr[-2000:]


VIEW_FAMILY = ("aten::view", "aten::as_strided", "aten::_unsafe_view", "aten::split.Tensor", "aten::unfold")


def _dump_line(op: str, key: str) -> str:
    return next((l for l in torch._C._dispatch_dump_table(op).splitlines() if l.startswith(key + ":")), "")


def test_the_view_family_stands_at_the_backend_key(dml_device, monkeypatch, assert_same):
    """The view fixes (offset_views, inference_mode) act on the device's calls only: their
    compiled gate takes the device kernel's place at PrivateUse1, so a CPU view, slice,
    transpose or split meets no kernel of dmlshim's; deactivate() puts the device's back."""
    monkeypatch.setenv("DMLSHIM_GATE", "compiled")
    dmlshim.deactivate()
    before = {op: _dump_line(op, "PrivateUse1") for op in VIEW_FAMILY}
    dmlshim.activate(fallback="known", trace=0)
    try:
        for op in VIEW_FAMILY:
            assert "gate.cpp" in _dump_line(op, "PrivateUse1"), op
            assert "gate.cpp" not in _dump_line(op, "BackendSelect"), op
        a, m = torch.randn(8), torch.randn(4, 4)
        assert _python_kernel_calls(lambda: (a.view(2, 4), a[1:], m.t(), a.split(3), a.unfold(0, 2, 2))) == 0
        assert_same(m.t()[1:].contiguous(), m.clone().t()[1:].contiguous())
    finally:
        dmlshim.deactivate()
    assert {op: _dump_line(op, "PrivateUse1") for op in VIEW_FAMILY} == before


@pytest.mark.parametrize("gate", ["compiled", "python"], indirect=True)
def test_a_view_call_a_fix_passes_on_reaches_the_device_kernel(gate, dml_device, assert_same):
    """A call the backend gate sends to Python and the fix passes on (an anchored view whose
    shape is invalid: no geometry) runs the device's own kernel, which raises as the CPU's
    does, instead of coming back to the gate; the fixed calls around it still alias."""
    x = torch.zeros(8)
    tail = x.to(dml_device)[1:]
    with pytest.raises(RuntimeError, match="invalid for input of size 7"):
        x[1:].view(3)
    with pytest.raises(RuntimeError, match="invalid for input of size 7"):
        tail.view(3)
    tail.view(7)[2:4].fill_(5.0)
    x[1:].view(7)[2:4].fill_(5.0)
    assert_same(tail, x[1:])


@pytest.mark.parametrize("gate", ["compiled"], indirect=True)
def test_the_front_calls_a_builtin_as_cpython_does(gate, dml_device):
    """The front calls a C function or method descriptor of torch's at once (no second
    vectorcall); a self of another type, or none, gets the descriptor's own TypeError."""
    original = dmlshim.patches._wrap.original(torch.Tensor, "view")
    assert type(vars(torch.Tensor)["view"]).__name__ == "Front"
    for args in ((5, 2), ()):
        with pytest.raises(TypeError) as raised:
            torch.Tensor.view(*args)
        with pytest.raises(TypeError) as expected:
            original(*args)
        assert str(raised.value) == str(expected.value)
    a = torch.arange(6.0)
    assert torch.Tensor.view(a, 2, 3).shape == (2, 3) and a.view(size=(3, 2)).shape == (3, 2)
    assert torch.cat([a, a], dim=0).shape == (12,)
