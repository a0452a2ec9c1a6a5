"""benchmarks/fidelity.py's committed results (issue 40 item 2): every defect has a row, a
row agrees by outcome class (not by broken or not), a row that differs says why, and
docs/fidelity.md's count is the file's.  Fast: reads the file, runs nothing on a device."""
import importlib.util
import json
import re
import sys
import time
from pathlib import Path

import pytest
import torch

from dmlshim import probing

ROOT = Path(__file__).resolve().parent.parent
RESULTS = json.loads((ROOT / "benchmarks" / "results" / "fidelity-defects.json").read_text(encoding="utf-8"))


def _module(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


fidelity = _module(ROOT / "benchmarks" / "fidelity.py", "fidelity_bench")


def test_the_results_cover_every_defect_and_extra_case_on_every_device():
    names = [d.name for d in probing.all_defects()] + [name for name, _, _ in fidelity._extra_cases()]
    assert [r["name"] for r in RESULTS["rows"]] == names, "re-run benchmarks/fidelity.py"
    for r in RESULTS["rows"]:
        assert set(r["outcomes"]) == set(fidelity.DEVICES), r["name"]
        assert all(o and o["class"] for o in r["outcomes"].values()), r["name"]


def test_a_row_agrees_by_class_and_one_that_differs_gives_its_reason():
    for r in RESULTS["rows"]:
        o = r["outcomes"]
        assert r["agree"] == all(fidelity.agree(o[emu], o[real]) for emu, real in fidelity.PAIRS), r["name"]
        assert r["agree"] or r["specific"], f"{r['name']} differs without a reason (fidelity.SPECIFIC)"


def test_the_docs_count_of_agreeing_rows_is_the_files():
    """The page types no count: the table's generated first line gives it, from the file."""
    sys.path.insert(0, str(ROOT / "docs"))
    try:
        import gen_tables
    finally:
        sys.path.remove(str(ROOT / "docs"))
    agreeing, total, _ = gen_tables.fidelity_agreement(RESULTS)
    assert gen_tables.fidelity_defects_table().startswith(f"{agreeing} of {total} rows agree")
    page = (ROOT / "docs" / "fidelity.md").read_text(encoding="utf-8")
    assert "<!-- results: fidelity defects -->" in page and not re.findall(r"\d+ of \d+ rows agree", page)


def test_every_probe_s_calls_can_be_seen():
    for d in probing.all_defects():
        if not d.static:
            assert fidelity._case_of(d.probe) or d.probe.__module__.startswith("dmlshim.catalogue."), d.name


def test_outcome_classes():
    from dmlshim.catalogue.probes import differ as _differ
    x = torch.arange(6.0).view(2, 3)
    outputs = fidelity._outputs((x, torch.empty(0), x.bool(), x + 1), (x, x, x, x), _differ)
    assert [o[0] for o in outputs] == ["equal", "wrong shape", "wrong dtype", "wrong values"]
    # a GPU's rounding is the probe's tolerance: equal
    assert fidelity._outputs(x + 1e-7, x, _differ)[0][0] == "equal"


def test_an_hresult_is_compared_by_name_and_other_errors_by_first_words():
    windows, linux = RuntimeError("The parameter is incorrect."), RuntimeError("Unknown error -2147024809")
    assert fidelity.first_words(windows) == fidelity.first_words(linux) == "RuntimeError: E_INVALIDARG"
    assert fidelity.first_words(NotImplementedError("Could not run 'aten::copy_' with")) == \
        "NotImplementedError: Could not run"
    raised = {"class": "raised", "words": "RuntimeError: E_INVALIDARG"}
    assert fidelity.agree(raised, dict(raised)) and not fidelity.agree(raised, {**raised, "words": "x"})
    shape = {"class": "wrong shape", "outputs": [["wrong shape", "float32", [0]]]}
    assert not fidelity.agree(shape, {"class": "wrong shape", "outputs": [["wrong shape", "float32", [1]]]})


def test_bounded_raises_its_own_error_and_reads_a_timeout_as_hung():
    with pytest.raises(TypeError):
        fidelity.bounded(lambda: (_ for _ in ()).throw(TypeError("no")))
    assert fidelity.bounded(lambda: time.sleep(1), timeout=0.05)["class"] == "hung"
