"""``python -m dmlshim doctor``: probes + a short conformance pass, as a JSON field report."""
import json

import pytest
import torch

from dmlshim import doctor, emulation, probing
from dmlshim.__main__ import main

OPTIONAL = {d.name for d in probing.all_defects() if not d.static}
# no default rule: torch 2.4.1 accepts Tensor.new (#11); the real 0.2.5 binary takes CPU
# indices (#10) and normalizes strided inputs right (#45), so their rules are off by
# default (emulation.rules.unconfirmed_rules; benchmarks/results/fidelity-defects.json)
NO_DEFAULT_RULE = {"tensor_new", "layer_norm_strided", "cpu_index"}
if torch.__version__.startswith("2.4."):   # new_device_index: not modelled there (test_legacy_new)
    NO_DEFAULT_RULE.add("new_device_index")


@pytest.fixture
def default_rules():
    emulation.configure()
    yield
    emulation.configure()


@pytest.mark.emulated_only(reason="doctor --device emulated: every default emulator rule detected")
def test_doctor_json_reports_every_default_rule_as_detected(dml_device, default_rules, tmp_path, capsys):
    path = tmp_path / "r.json"
    assert main(["doctor", "--device", "emulated", "--json", str(path), "--seconds", "30",
                 "--ops", "^(cat|mul|softmax)$"]) == 0
    out = capsys.readouterr().out
    assert "float_times_bool" in out and f"field report written to {path}" in out
    report = json.loads(path.read_text())
    assert report["device"] == "privateuseone:0" and report["emulated"] is True
    assert report["float64"] is False and report["versions"]["dmlshim"]
    status = {d["name"]: d for d in report["probes"]["defects"]}
    # every defect whose rule is on by default
    assert {n for n, d in status.items() if d["status"] == "detected"} == OPTIONAL - NO_DEFAULT_RULE
    assert status["empty_cat"]["figure"] == "RuntimeError: The parameter is incorrect."
    assert status["bfloat16"]["status"] == "static"
    conf = report["conformance"]
    assert conf["ran"] == conf["samples"] > 0 and conf["classes"]["match"] > 0
    # softmax(dtype=float64) fails raw on a device without float64 (row #7)
    assert conf["classes"].get("float64", 0) > 0
    assert {f["class"] for f in conf["failures"]} == set(conf["classes"]) - {"match"}
    # which gate runs the fixes, where it came from (the suite's machine has a compiler)
    assert report["gate"]["kind"] in ("compiled", "python") and report["gate"]["mode"]
    assert "gate     " in out


@pytest.mark.emulated_only(reason="emulation.configure(rules=[]): no defect detected")
def test_doctor_with_no_rules_reports_none(dml_device, default_rules):
    emulation.configure(rules=[])
    report = doctor.examine("emulated", seconds=0)
    assert {d["status"] for d in report["probes"]["defects"]} == {probing.NOT_DETECTED, probing.STATIC}
    assert report["conformance"] == {"skipped": True}


def test_doctor_without_the_device(capsys):
    assert main(["doctor", "--device", "cuda", "--seconds", "0"]) == 2
    assert "no cuda device is present here" in capsys.readouterr().out
    with pytest.raises(ValueError, match="allowed values are directml, emulated"):
        doctor.examine("gpu")
