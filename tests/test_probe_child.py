"""Probes in a child process (dmlshim.probe_child, issue 50 item 3): a probe that ends the
process ends only its child and is a broken verdict; the first probing of a real adapter
runs there and is cached; a hung probe is killed at its deadline."""
import os
import sys
import time
from pathlib import Path

import pytest

from dmlshim import probe_child, probing
from dmlshim.catalogue import Verdict

TESTS = str(Path(__file__).resolve().parent)


@pytest.fixture
def tiny(monkeypatch):
    """The child finds tests/crashing_probes.py."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (TESTS, os.environ.get("PYTHONPATH")) if p))
    return lambda names, timeout=30.0: probe_child.probe_in_children(
        names, "emulated", timeout, defects="crashing_probes:DEFECTS")


@pytest.mark.skipif(sys.platform == "win32", reason="os.kill(SIGSEGV) is POSIX")
def test_a_probe_that_ends_its_child_is_broken_and_the_rest_run(tiny):
    verdicts = tiny(["fine", "segfault", "after"])
    assert verdicts == {"fine": Verdict(False, "equal on privateuseone"),
                        "segfault": Verdict(True, "ends the process (SIGSEGV)"),
                        "after": Verdict(True, "max |Δ| 1")}
    assert probe_child.ended_the_process({n: v.figure for n, v in verdicts.items()}) == {"segfault": "SIGSEGV"}


def test_a_hung_probe_is_killed_at_its_deadline(tiny):
    start = time.perf_counter()
    verdicts = tiny(["hangs", "fine"], timeout=1.0)
    assert verdicts == {"hangs": Verdict(True, "timed out after 1 s"),
                        "fine": Verdict(False, "equal on privateuseone")}
    assert time.perf_counter() - start < 50                # not the probe's 60 s sleep


def test_a_child_that_cannot_start_raises(tiny, monkeypatch):
    with pytest.raises(probe_child.ChildError, match="no probe named nothing"):
        tiny(["nothing"])
    monkeypatch.setattr(sys, "executable", "")
    with pytest.raises(probe_child.ChildError, match="no Python interpreter"):
        tiny(["fine"])


@pytest.fixture
def fake_gpu(dml_device, monkeypatch, tmp_path):
    """The test device seen as a real adapter, its verdicts cached in tmp_path; every
    probe_in_children call counted."""
    monkeypatch.setattr(probing, "target_device", lambda target: (dml_device, "Fake GPU", False))
    monkeypatch.setattr(probing, "cache_dir", lambda: str(tmp_path))
    calls = []
    real = probe_child.probe_in_children
    monkeypatch.setattr(probe_child, "probe_in_children", lambda *a, **k: calls.append(a) or real(*a, **k))
    return calls


def test_the_first_probing_runs_in_a_child_and_is_cached(fake_gpu, tmp_path):
    cold = probing.detect("privateuseone", "auto")
    assert cold.cache == "cold" and len(fake_gpu) == 1 and len(list(tmp_path.iterdir())) == 1
    assert fake_gpu[0][0] == [d.name for d in probing.all_defects() if not d.static]
    assert cold.status["empty_cat"] == probing.DETECTED
    warm = probing.detect("privateuseone", "auto")
    assert warm.cache == "warm" and len(fake_gpu) == 1 and warm.verdicts == cold.verdicts


def test_without_a_child_it_probes_in_threads(fake_gpu, monkeypatch, caplog):
    """Threads contain no process end: the probes that may end it (fallback_out's eye, with
    tiled resources off on the real binary) are left out here."""
    monkeypatch.setattr(sys, "executable", "")
    defects = [d for d in probing.all_defects() if d.name != "fallback_out"]
    detection = probing.detect("privateuseone", "refresh", defects=defects)
    assert detection.cache == "refresh" and detection.status["empty_cat"] == probing.DETECTED
    assert "probing in this process (worker threads): no Python interpreter" in caplog.text


def test_doctor_names_the_probes_that_ended_their_child():
    from dmlshim import doctor

    report = {"device": "privateuseone:0", "adapter": "GPU", "driver": None, "float64": False,
              "versions": {}, "conformance": {"skipped": True},
              "probes": {"device": "privateuseone:0", "mode": "refresh", "cache": "refresh", "seconds": 1.0,
                         "fixes_on": ["fallback_out"], "defects": [
                             {"name": "fallback_out", "row": "none", "status": "detected",
                              "figure": "ends the process (SIGSEGV)", "fixes": ["fallback_out"]}]},
              "ended_child_process": {"fallback_out": "SIGSEGV"}}
    assert "probes that ended their child process: fallback_out (SIGSEGV)" in doctor.format_report(report)


def test_the_fallback_out_probe_in_a_child_on_the_test_device(dml_device):
    """The first real case (issue 50): with tiled resources off, the real binary's ``eye``
    (torch-directml's CPU fallback of ``eye.m_out``) ends the process; in a child, that is the
    probe's verdict and the caller lives on.  With them on (and on the emulator) the probe
    finds the empty out= it was written for.  Both ways the defect is detected."""
    device = "emulated" if dml_device.type == "privateuseone" and _emulated() else f"directml:{dml_device.index or 0}"
    verdict = probe_child.probe_in_children(["fallback_out"], device, probing.TIMEOUT)["fallback_out"]
    assert verdict.broken, verdict
    if device.startswith("directml") and os.environ.get("VKD3D_TILED_RESOURCES") == "0":
        assert verdict.figure == "ends the process (SIGSEGV)"


def _emulated() -> bool:
    from dmlshim import emulation
    return emulation.is_installed() and "torch_directml" not in sys.modules
