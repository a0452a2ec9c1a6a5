"""Probe, then fix (issue 18): each defect detected exactly when its emulator rule is on,
its fix on exactly then, and the result equal to the CPU's either way.  The tests that set
the emulator's rules are ``emulated_only``; the probing machinery's own (the cache, DMLSHIM_PROBE,
the report) run on the real device too."""
import json
import re
import time

import pytest
import torch

import dmlshim
from dmlshim import catalogue, emulation, patches, probing
from dmlshim.catalogue import Defect, Verdict
from dmlshim.emulation import legacy_new, rules
from dmlshim.patches import dispatcher, rank_limit, refused

# the reason of the tests that set the emulator's rules
_RULES = "turns the defect's emulator rule on or off (emulation.configure) to assert probe and fix both ways"

BY_NAME = {d.name: d for d in catalogue.DEFECTS}
# defect -> the default emulator rules that produce it
RULES = {
    "float_times_bool": lambda r: r.when is rules._bool_times_other,
    "empty_cat": lambda r: r.op == "cat",
    "lstm": lambda r: isinstance(r.op, str) and r.op.startswith("_thnn_fused_lstm"),
    "gru": lambda r: isinstance(r.op, str) and r.op.startswith("_thnn_fused_gru"),
    # older builds' rule (unconfirmed_rules): the real 0.2.5 binary takes CPU indices
    "cpu_index": lambda r: r.op == rules.CPU_INDEX_OPS,
    "float64": lambda r: r.op is rules._is_float64_math or r.op == "rsub.Scalar",
    "broadcast_copy": lambda r: r.op == "copy_" and r.when is rules._broadcast_copy,
    "autocast": lambda r: r.when is rules._in_device_autocast,
}


def _call(name, device):
    """(device result on the CPU, CPU result) of the call each defect breaks."""
    x, mask = torch.tensor([1.5, -2.0, 3.0]), torch.tensor([True, False, True])
    if name == "float_times_bool":
        return (x.to(device) * mask.to(device)).cpu(), x * mask
    if name == "empty_cat":
        x, e = x.view(1, 3), torch.empty(0, 3)     # a legacy (0,) input is skipped, also by DirectML
        return torch.cat([x.to(device), e.to(device)]).cpu(), torch.cat([x, e])
    if name in ("lstm", "gru"):
        torch.manual_seed(0)
        rnn, seq = (torch.nn.LSTM if name == "lstm" else torch.nn.GRU)(3, 4), torch.randn(5, 2, 3)
        want = rnn(seq)[0]
        return rnn.to(device)(seq.to(device))[0].cpu(), want
    if name == "cpu_index":
        idx = torch.tensor([2, 0])
        return x.to(device)[idx].cpu(), x[idx]
    if name == "broadcast_copy":
        base = torch.arange(6.0).reshape(2, 3)
        d = base.to(device)
        d.copy_(x)
        return d.cpu(), base.copy_(x)
    if name == "autocast":
        with torch.autocast(device.type, dtype=torch.float16):
            got = x.to(device) * 2
        return got.cpu(), x * 2
    if name == "float64":
        return torch.cumsum(x.to(device), 0, dtype=torch.float64).cpu(), torch.cumsum(x, 0, dtype=torch.float64)
    raise AssertionError(name)


def _unfixed_profile(name):
    """Without the rnn fix the device runs the fused LSTM/GRU cells, which sum in another
    order than the CPU's kernel (max |Δ| 1.49e-08): the "device" profile holds them."""
    return "device" if name in ("lstm", "gru") else None


def _fix_on(fix):
    if fix.startswith("dispatcher:"):
        # the net's own FIXES kernels (another patch may hold the same overload: int_range's mul)
        if not all(dispatcher.holds(op) for op in dispatcher.FIXES if dispatcher.gate(op) == fix):
            return False
        registered = dispatcher.registered()
        ops = [op.name() for op in dispatcher.ISLANDS if dispatcher.gate(op) == fix]
        ops += [op.name() for op, _ in dispatcher._composite_overloads() if dispatcher.gate(op) == fix]
        return all(registered[o] for o in ops)      # no op at all: _scaled_mm_v2 before torch 2.10
    if fix.startswith("refused:"):
        return fix.split(":", 1)[1] in refused.installed()
    return fix in patches.installed()


def _own_fixes(detection, name):
    """The fixes of ``name`` that no other detected or static defect enables."""
    others = {f for d in detection.defects if d.name != name
              and detection.status[d.name] in (probing.DETECTED, probing.STATIC) for f in d.fixes}
    return set(BY_NAME[name].fixes) - others


@pytest.mark.emulated_only(reason=_RULES)
@pytest.mark.parametrize("name", sorted(RULES))
def test_rule_on_is_detected_and_fixed(dml_device, shim_off, name, assert_parity, assert_differs):
    emulation.configure(rules=[r for r in rules.default_rules() + rules.unconfirmed_rules() if RULES[name](r)])
    got, want = _call_or_error(name, dml_device)
    if got is not None:
        assert_differs(got, want)                                     # the defect reproduces
    dmlshim.activate(fallback="known")
    detection = probing.last()
    assert [d for d, s in detection.status.items() if s == probing.DETECTED] == [name]
    assert all(_fix_on(f) for f in BY_NAME[name].fixes)
    assert_parity(*_call(name, dml_device))


@pytest.mark.emulated_only(reason=_RULES)
@pytest.mark.parametrize("name", sorted(RULES))
def test_rule_off_is_not_detected_and_not_fixed(dml_device, shim_off, name, assert_parity):
    emulation.configure(rules=[r for r in rules.default_rules() if not RULES[name](r)])
    dmlshim.activate(fallback="known")
    detection = probing.last()
    assert detection.status[name] == probing.NOT_DETECTED
    assert not detection.verdicts[name].broken      # "equal", or "max |Δ| 1.49e-08" (fused RNN cells)
    assert not any(_fix_on(f) for f in _own_fixes(detection, name))
    assert_parity(*_call(name, dml_device), profile=_unfixed_profile(name))   # correct without the fix


@pytest.mark.emulated_only(reason="legacy_new.refused(): the emulator's Tensor.new refusal of other builds")
def test_tensor_new_both_ways(dml_device, shim_off, assert_same):
    dmlshim.activate(fallback="known")
    assert probing.last().status["tensor_new"] == probing.NOT_DETECTED
    # new_device_index is modelled on torch >= 2.5 only (tests/test_legacy_new.py: _NO_MODEL)
    if torch.__version__.startswith("2.4."):
        assert "legacy_new" not in patches.installed()
    else:
        assert probing.last().status["new_device_index"] == probing.DETECTED   # legacy_new on for it
    dmlshim.deactivate()
    with legacy_new.refused():
        x = torch.zeros(1, device=dml_device)
        with pytest.raises(RuntimeError, match="new\\(\\): expected key"):
            x.new([1.0, 2.0])
        dmlshim.activate(fallback="known")
        assert probing.last().status["tensor_new"] == probing.DETECTED
        assert "legacy_new" in patches.installed()
        assert_same(x.new([1.0, 2.0]), torch.tensor([1.0, 2.0]))
        dmlshim.deactivate()


@pytest.mark.emulated_only(reason="emulation.configure(rules=[]): a device with no defect")
def test_no_rules_no_optional_fix(dml_device, shim_off, assert_parity):
    emulation.configure(rules=[])
    dmlshim.activate(fallback="auto")
    detection = probing.last()
    assert {s for s in detection.status.values()} == {probing.NOT_DETECTED, probing.STATIC}
    static = {f for d in probing.all_defects() if d.static for f in d.fixes}
    assert detection.fixes == static
    # of the patches some defect enables, only the static defects' are installed (others,
    # e.g. jit for core torch's #48 or basicsr on a torchvision import, fix no DirectML defect)
    gated = {f for d in probing.all_defects() for f in d.fixes}
    assert set(patches.installed()) & gated <= static
    registered = dispatcher.registered()
    # CPU index/index_put/rsub pay nothing; mul and cat carry rank_limit's kernel (a static
    # defect: torch-directml's own rank check), which passes every call of 5 dimensions or fewer
    held = set(rank_limit._kernels.table)
    assert not any(registered[op.name()] for op in dispatcher.FIXES if op not in held)
    for name in RULES:
        assert_parity(*_call(name, dml_device), f"{name}: ", profile=_unfixed_profile(name))


@pytest.mark.emulated_only(reason="injects a user's emulation.Rule (cat of an empty input)")
def test_a_users_own_rule_is_detected_and_fixed(dml_device, shim_off, assert_same):
    # behaves like row #19/#20, but is not the project's rule object
    mine = emulation.Rule(lambda op: op.name() == "aten::cat", when=lambda ts, *a, **k: any(t.numel() == 0 for t in ts),
                          message="The parameter is incorrect.", source="my AMD card")
    emulation.configure(rules=[mine])
    x = torch.ones(2, 3, device=dml_device)
    with pytest.raises(RuntimeError, match="parameter is incorrect"):
        torch.cat([x, torch.ones(0, 3, device=dml_device)])
    dmlshim.activate(fallback="known")
    assert probing.last().status["empty_cat"] == probing.DETECTED
    assert _fix_on("cat") and _fix_on("dispatcher:cat")
    assert_same(torch.cat([x, torch.ones(0, 3, device=dml_device)]), torch.ones(2, 3))
    assert_same(torch.ops.aten.cat([x, torch.ones(0, 3, device=dml_device)]), torch.ones(2, 3))


def test_no_device_installs_no_optional_kernel(shim_off):
    before = torch._C._dispatch_dump("aten::mul.Tensor")
    dmlshim.activate(target="cuda")                      # no CUDA here: nothing to probe
    detection = probing.last()
    assert detection.device is None and detection.fixes == frozenset()
    assert set(detection.status.values()) == {probing.NOT_PROBED}
    assert not any(dispatcher.registered().values())
    assert torch._C._dispatch_dump("aten::mul.Tensor") == before       # CPU mul not intercepted
    assert not set(patches.installed()) & {f for d in probing.all_defects() for f in d.fixes}


@pytest.mark.emulated_only(reason="emulation.configure(rules=[]): a device with no defect")
def test_probe_off_enables_every_fix_on_a_device_with_no_defect(dml_device, shim_off, monkeypatch):
    monkeypatch.setenv("DMLSHIM_PROBE", "off")
    emulation.configure(rules=[])
    dmlshim.activate(fallback="known")
    assert probing.last().fixes is None
    assert all(_fix_on(f) for d in probing.all_defects() for f in d.fixes)


def test_probe_off_enables_the_fixes_of_defects_not_detected(dml_device, shim_off, monkeypatch):
    dmlshim.activate(fallback="known")
    off = [d for d in probing.all_defects() if probing.last().status[d.name] == probing.NOT_DETECTED]
    assert off                  # cpu_index on either device: its rule is off by default
    dmlshim.deactivate()
    monkeypatch.setenv("DMLSHIM_PROBE", "off")
    dmlshim.activate(fallback="known")
    assert probing.last().fixes is None
    assert all(_fix_on(f) for d in probing.all_defects() for f in d.fixes if f != "auto")


def test_bad_probe_value(monkeypatch, shim_off):
    monkeypatch.setenv("DMLSHIM_PROBE", "sometimes")
    with pytest.raises(ValueError, match="DMLSHIM_PROBE='sometimes': allowed values are auto, off, refresh"):
        dmlshim.activate()


def test_probes_leave_rng_and_warnings_alone(dml_device, shim_off, recwarn, assert_same):
    state = torch.get_rng_state()
    dmlshim.activate(fallback="known")
    assert_same(torch.get_rng_state(), state)
    assert not [w for w in recwarn if "fall back" in str(w.message)]


@pytest.mark.emulated_only(reason="emulation.records(): the emulator's per-op counts")
def test_probes_leave_the_records_alone(dml_device, shim_off):
    emulation.reset_records()
    dmlshim.activate(fallback="known")
    assert emulation.records() == {}


def test_a_raising_or_hanging_probe_is_broken():
    def boom(device):
        raise ValueError("boom")

    assert probing.run_probe(Defect("x", "#0", "", "", boom), torch.device("cpu")) == Verdict(True, "ValueError: boom")
    start = time.perf_counter()
    verdict = probing.run_probe(Defect("y", "#0", "", "", lambda d: time.sleep(2)), torch.device("cpu"), timeout=0.1)
    assert verdict == Verdict(True, "timed out after 0.1 s") and time.perf_counter() - start < 1.5


@pytest.fixture
def fake_gpu(dml_device, monkeypatch, tmp_path):
    """The test device seen as an adapter named "Fake GPU" (the emulated one as a real
    one), its verdicts cached in tmp_path."""
    monkeypatch.setattr(probing, "target_device", lambda target: (dml_device, "Fake GPU", False))
    monkeypatch.setattr(probing, "cache_dir", lambda: str(tmp_path))
    probing._memo.clear()
    return tmp_path


def test_cache_cold_warm_refresh(fake_gpu):
    cold = probing.detect("privateuseone", "auto")
    assert cold.cache == "cold" and cold.status["empty_cat"] == probing.DETECTED
    [path] = fake_gpu.iterdir()
    data = json.loads(path.read_text())
    assert data["key"]["adapter"] == "Fake GPU" and data["key"]["dmlshim"] == dmlshim.__version__
    data["verdicts"]["empty_cat"] = {"broken": False, "figure": "from the cache"}
    path.write_text(json.dumps(data))
    warm = probing.detect("privateuseone", "auto")                     # read back, not probed
    assert warm.cache == "warm" and warm.verdicts["empty_cat"] == Verdict(False, "from the cache")
    assert "cat" not in warm.fixes
    fresh = probing.detect("privateuseone", "refresh")
    assert fresh.cache == "refresh" and fresh.status["empty_cat"] == probing.DETECTED
    assert json.loads(path.read_text())["verdicts"]["empty_cat"]["broken"] is True


@pytest.mark.parametrize("content", ["{not json", '{"format": 1, "key": {}, "verdicts": {}}', "[]"])
def test_a_corrupt_cache_is_ignored_with_a_warning(fake_gpu, content):
    probing.detect("privateuseone", "auto")
    [path] = fake_gpu.iterdir()
    path.write_text(content)
    with pytest.warns(RuntimeWarning, match="ignoring the probe cache"):
        again = probing.detect("privateuseone", "auto")
    assert again.cache == "cold" and again.status["empty_cat"] == probing.DETECTED


@pytest.mark.emulated_only(reason="the emulated device (emulation.install) is the one never cached")
def test_the_emulated_device_is_never_cached(dml_device, monkeypatch, tmp_path):
    monkeypatch.setattr(probing, "cache_dir", lambda: str(tmp_path))
    assert probing.detect("privateuseone", "auto").cache == "none"
    assert probing.detect("privateuseone", "refresh").cache == "none"
    assert list(tmp_path.iterdir()) == []


def test_report_and_info_list_the_defects(dml_device, shim_off, capsys):
    from dmlshim.__main__ import main

    dmlshim.activate(fallback="known")
    text = str(dmlshim.report())
    assert re.search(r"float_times_bool +#17", text) and "detected" in text and "static" in text
    rows = {d["name"]: d for d in dmlshim.report().to_dict()["defects"]["defects"]}
    assert rows["empty_cat"]["status"] == "detected" and rows["bfloat16"]["status"] == "static"
    assert rows["tensor_new"]["status"] == "not detected"
    assert main(["info"]) == 0
    out = capsys.readouterr().out
    assert "(layer_norm)" in out                                         # an off fix, in brackets
    assert re.search(r"float_times_bool +#17 +detected +mul +bool", out)      # its one fix


def _call_or_error(name, device):
    try:
        return _call(name, device)
    except (RuntimeError, NotImplementedError):
        return None, None


def test_the_docs_table_is_current():
    from pathlib import Path
    page = (Path(__file__).resolve().parent.parent / "docs" / "defects.md").read_text(encoding="utf-8")
    assert catalogue.markdown_table() in page
