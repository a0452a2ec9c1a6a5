"""report()'s split of each handled call's seconds: own + substitute + overhead (issue 38).

Timings are only bounded from below by deliberate sleeps (a sleep never returns early), with
margins; everything else compares structure and sums, so a loaded machine cannot flake them."""
import json
import time
import types

import pytest
import torch

import dmlshim
from dmlshim import fallback, trace
from dmlshim.patches._wrap import Context, PatchSet

SLOW = 0.05          # seconds an original sleeps
BUSY = 0.03          # seconds a handler sleeps in its own Python


@pytest.fixture(autouse=True)
def _fresh():
    dmlshim.deactivate()
    trace.reset()
    yield
    dmlshim.deactivate()
    trace.reset()


def _rows():
    return {r["op"]: r for r in dmlshim.report().rows}


def _assert_parts(row):
    assert row["own"] >= 0 and row["substitute"] >= 0 and row["overhead"] >= 0, row
    assert row["own"] + row["substitute"] + row["overhead"] == pytest.approx(row["seconds"], abs=1e-9), row


def _slow(x):
    time.sleep(SLOW)
    return x


@pytest.fixture
def intercepted():
    """``intercept(owner, handler)``: ``owner.slow`` (an original that sleeps SLOW) behind an
    intercept() wrapper that hands every call to ``handler``; undone afterwards."""
    made = []

    def make(handler, name="slow", func=_slow):
        owner = types.ModuleType("dmlshim_test_owner")
        setattr(owner, name, func)
        patches = PatchSet("test_trace_split")
        ctx = Context(target="privateuseone", fallback="known", present=False)
        patches.intercept(ctx, owner, name, handler, op=f"test.{name}", select=lambda i, a, k: True)
        made.append(patches)
        return owner
    yield make
    for patches in made:
        patches.restore()


def test_a_slow_original_is_own_time_not_overhead(intercepted):
    def handler(func, args, kwargs):
        time.sleep(BUSY)                      # the shim's own Python: overhead
        return "coerce", func(*args, **kwargs)
    owner = intercepted(handler)
    assert owner.slow(1) == 1
    row = _rows()["test.slow"]
    _assert_parts(row)
    assert row["own"] >= 0.9 * SLOW
    assert row["overhead"] >= 0.9 * BUSY
    assert row["substitute"] == 0


def test_a_cpu_run_is_substitute_and_its_call_of_the_original_is_not_own(intercepted):
    def handler(func, args, kwargs):
        return "cpu", fallback.run_on_cpu(func, args, kwargs)
    owner = intercepted(handler)
    x = torch.ones(3)
    assert owner.slow(x) is x
    row = _rows()["test.slow"]
    _assert_parts(row)
    assert row["substitute"] >= 0.9 * SLOW
    assert row["own"] == 0


def test_marked_device_work_is_substitute(intercepted):
    def handler(func, args, kwargs):
        with trace.substitute():
            time.sleep(SLOW)                   # e.g. the op recomputed with other kernels
            with trace.own():                  # nested: counted once, in the outer region
                time.sleep(BUSY)
        return "coerce", args[0]
    owner = intercepted(handler)
    owner.slow(2)
    row = _rows()["test.slow"]
    _assert_parts(row)
    assert row["substitute"] >= 0.9 * (SLOW + BUSY)
    assert row["own"] == 0


def test_a_handled_call_nested_in_another_is_counted_once(intercepted):
    """An original that reaches another handled call (a wrapper's original reaching a
    dispatcher kernel): the inner call's time is in its own row only."""
    def inner_handler(func, args, kwargs):
        time.sleep(SLOW)                       # the inner call's overhead
        return "coerce", func(*args, **kwargs)

    def original(x):
        return trace.call("test.inner", inner_handler, lambda y: y, (x,), {})

    def outer_handler(func, args, kwargs):
        return "pass", func(*args, **kwargs)
    owner = intercepted(outer_handler, name="outer", func=original)
    start = time.perf_counter()
    owner.outer(3)
    wall = time.perf_counter() - start
    rows = _rows()
    inner, outer = rows["test.inner"], rows["test.outer"]
    _assert_parts(inner)
    _assert_parts(outer)
    assert inner["overhead"] >= 0.9 * SLOW
    assert outer["seconds"] < inner["seconds"]          # the inner call is left out of it
    totals = dmlshim.report().totals
    assert totals["seconds"] <= wall                    # each second once
    assert totals["own"] + totals["substitute"] + totals["overhead"] == pytest.approx(totals["seconds"], abs=1e-9)


def test_an_error_is_recorded_with_its_parts(intercepted):
    def handler(func, args, kwargs):
        func(*args, **kwargs)
        raise ValueError("boom")
    owner = intercepted(handler)
    with pytest.raises(ValueError):
        owner.slow(1)
    row = _rows()["test.slow"]
    assert row["actions"] == {"error": 1}
    _assert_parts(row)
    assert row["own"] >= 0.9 * SLOW
    # nothing left open: a later record outside any call is not nested anywhere
    assert trace._current.get() is None


def test_record_takes_parts_and_defaults_to_overhead():
    trace.record("test.a", "coerce", 0.01)
    trace.record("test.b", "cpu", 0.02, substitute=0.015)
    rows = _rows()
    assert (rows["test.a"]["own"], rows["test.a"]["substitute"]) == (0, 0)
    assert rows["test.a"]["overhead"] == pytest.approx(0.01)
    assert rows["test.b"]["substitute"] == pytest.approx(0.015)
    assert rows["test.b"]["overhead"] == pytest.approx(0.005)


def test_device_rows_sum_and_classify(dml_device, default_shim):
    """On the device: a CPU island (the LSTM) is substitute; float * bool's redispatch own,
    its cast of the bool operand substitute; every row's parts sum to its seconds."""
    lstm = torch.nn.LSTM(4, 4).to(dml_device)
    lstm(torch.randn(2, 1, 4).to(dml_device))
    x = torch.randn(2, 3).to(dml_device)
    m = (torch.randn(2, 3) > 0).to(dml_device)
    torch.ops.aten.mul.Tensor(x, m)
    rows = _rows()
    for row in rows.values():
        _assert_parts(row)
    lstm_row = rows["aten::lstm.input"]
    assert lstm_row["actions"] == {"cpu": 1}
    assert lstm_row["own"] == 0 and lstm_row["substitute"] > lstm_row["overhead"]
    mul = rows["aten::mul.Tensor"]
    assert mul["actions"] == {"coerce": 1} and mul["own"] > 0 and mul["substitute"] > 0


def test_upsample_recomputed_on_the_device_is_substitute(dml_device, default_shim):
    if not any(r["name"] == "upsample_bilinear" and r["status"] == "detected"
               for r in dmlshim.report().defects["defects"]):
        pytest.skip("this device's bilinear upsample needs no fix")
    x = torch.randn(1, 3, 16, 16).to(dml_device)
    torch.nn.functional.interpolate(x, scale_factor=2, mode="bilinear")
    row = _rows()["aten::upsample_bilinear2d"]
    _assert_parts(row)
    assert row["own"] == 0 and row["substitute"] > 0


def test_report_table_totals_and_json(dml_device, tmp_path):
    path = tmp_path / "t.jsonl"
    dmlshim.activate(fallback="known", trace=str(path))
    x = torch.ones(3, 4).to(dml_device)
    m = (torch.arange(12).reshape(3, 4) % 2 == 0).to(dml_device)
    x * m
    torch.cat([x, torch.zeros(0, 4).to(dml_device)])
    report = dmlshim.report()
    dmlshim.deactivate()
    table = str(report).splitlines()
    assert table[0].split() == ["op", "calls", "actions", "ms", "own", "substitute", "overhead",
                                "host->dev", "dev->host"]
    total = next(line for line in table if line.startswith("total: "))
    assert f"{report.totals['calls']} calls" in total and "own " in total and "overhead " in total
    data = report.to_dict()
    assert set(data["totals"]) == {"calls", "seconds", "own", "substitute", "overhead", "h2d", "d2h",
                                   "passed_calls", "passed_seconds"}
    assert data["totals"]["calls"] == sum(r["calls"] for r in data["ops"])
    assert json.dumps(data)
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert records and all({"us_own", "us_substitute", "us_overhead"} <= set(r) for r in records)
    for r in records:
        assert r["us_own"] + r["us_substitute"] + r["us_overhead"] == pytest.approx(r["us"], abs=0.3)


def test_a_report_of_rows_without_parts_still_renders():
    """Rows from an older file (no own/substitute/overhead) render, their parts as 0."""
    old = trace.Report([{"op": "torch.cat", "calls": 1, "actions": {"pass": 1}, "seconds": 0.001,
                         "h2d": 0, "d2h": 0}], {})
    assert "torch.cat" in str(old) and old.totals["seconds"] == 0.001


def test_a_python_kernel_that_passes_a_call_through_is_overhead_in_no_row(dml_device, default_shim):
    from dmlshim.patches import _select
    if not _select.holds(torch.ops.aten.cat.default):
        pytest.skip("this device's cat needs no fix: no Python kernel holds it")
    empty = torch.empty(0, 4).to(dml_device)
    trace.reset()
    torch.ops.aten.cat.default([empty])          # cat's kernel looks (an empty input), passes
    report = dmlshim.report()
    assert report.rows == [] and report.passed["aten::cat"]["calls"] == 1
    totals = report.totals
    assert totals["passed_calls"] == 1 and totals["passed_seconds"] > 0
    assert totals["overhead"] == totals["seconds"] == totals["passed_seconds"]
    assert "passed through" in str(report) and report.to_dict()["passed"] == report.passed
    trace.reset()
    assert dmlshim.report().passed == {}


def test_a_kernel_without_a_row_counts_its_checks_as_passed_and_leaves_its_own_time_outside():
    """A kernel that ran the op without a row (refused's retry): its checks are overhead in
    ``passed``, out of the enclosing call's time; its marked call of the op stays in the
    enclosing call's region."""
    checks = 0.2
    counter = trace.passed_counter("test::kernel")
    outer = trace.begin()
    with trace.own():                          # the enclosing call's original ...
        inner = trace.begin()                  # ... reaches a kernel
        time.sleep(checks)                     # its checks
        with trace.own():
            time.sleep(SLOW)                   # the op, run as it is
        trace.end(inner, None, passed=counter)
    trace.end(outer, "test.outer", "pass")
    passed = dmlshim.report().passed["test::kernel"]
    row = _rows()["test.outer"]
    _assert_parts(row)
    assert passed["calls"] == 1 and passed["seconds"] >= 0.9 * checks
    assert row["own"] >= 0.9 * SLOW and row["own"] < SLOW + checks / 2     # the checks left out
    assert dmlshim.report().totals["seconds"] == pytest.approx(row["seconds"] + passed["seconds"])


def test_a_fix_running_the_op_itself_counts_it_as_own(dml_device):
    """A fix that amends what the op gives runs the op below its fixes (``native_batch_norm``'s
    saved statistics in eval mode, ``batch_norm_stats``): that time is the call's own, not
    dmlshim's overhead.  It was overhead: 283 of the 290 ms GFPGAN's RetinaFace and
    Real-ESRGAN run counted as dmlshim's (``benchmarks/model_syncs.py``)."""
    bn = torch.nn.BatchNorm2d(3).eval().to(dml_device)
    x = torch.randn(2, 3, 8, 8).to(dml_device)
    dmlshim.activate(fallback="known")
    trace.reset()
    with torch.no_grad():
        bn(x)
    row = _rows()["aten::native_batch_norm"]
    _assert_parts(row)
    assert row["actions"] == {"coerce": 1} and row["own"] > 0, row


def test_counting_gives_the_device_and_cpu_calls(dml_device):
    """``trace.counting()`` counts the aten calls with a device tensor and those dmlshim ran
    on the CPU (an LSTM's island), and ``report()`` shows both (issue 38, item 4)."""
    a, b = torch.randn(4).to(dml_device), torch.randn(4).to(dml_device)
    lstm = torch.nn.LSTM(4, 4).to(dml_device)
    x = torch.randn(3, 1, 4).to(dml_device)
    dmlshim.activate(fallback="known")
    trace.reset()
    with trace.counting() as ops:
        a + b
        torch.ones(3) * 2                           # a CPU call: not counted
    assert (ops.device, ops.cpu) == (1, 0)
    with torch.no_grad(), trace.counting() as more:
        lstm(x)
    assert more.device >= 1 and more.cpu == 1      # aten::lstm on the CPU, its copies on the device
    report = dmlshim.report()
    assert report.ops == {"device": 1 + more.device, "cpu": 1} == report.to_dict()["counted"]
    assert f"aten calls counted (trace.counting): {1 + more.device} on the device, 1 run on the CPU" in str(report)
    trace.reset()
    assert dmlshim.report().ops == {}
