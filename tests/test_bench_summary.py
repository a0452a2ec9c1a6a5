"""``make bench``'s summary (benchmarks/run.py, benchmarks/timing.py) over every committed
results file (issue 48 item 5): every benchmark's rows are summarised, whatever their shape
(benchmarks/model_syncs.py writes one record per model, not timing rows: the summary once
ended in ``KeyError: 'case'`` after an 18-minute run), the results file is written before
the summary, and a ``--quick`` run never writes over the committed figures. Fast: reads
the files, runs no benchmark."""
import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "benchmarks"
RESULTS = sorted((BENCH / "results").glob("*.json"))


def _load_run():
    """benchmarks/run.py as a module (it imports benchmarks/timing.py as ``timing``)."""
    had_timing = "timing" in sys.modules
    sys.path.insert(0, str(BENCH))
    try:
        spec = importlib.util.spec_from_file_location("bench_run", BENCH / "run.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(BENCH))
        if not had_timing:
            sys.modules.pop("timing", None)     # the module keeps its own reference
    return module


run = _load_run()
timing = run.timing


def _results(data, name):
    """The benchmarks of one results file as ``run.py`` holds them (its ``results``), or
    None for a file of another kind (conformance, doctor: no list of rows)."""
    if "results" in data:                         # a make bench run (latest-torch*.json)
        return data["results"]
    if isinstance(data.get("rows"), list):        # one benchmark's file (timing.write_json)
        return [dict(data, benchmark=data.get("benchmark", name))]
    return None


def test_there_are_results_of_both_shapes():
    shapes = set()
    for path in RESULTS:
        for b in _results(json.loads(path.read_text(encoding="utf-8")), path.stem) or []:
            shapes |= {timing.is_timing_row(r) for r in b["rows"]}
    assert shapes == {True, False}, "timing rows and model_syncs' records are both committed"


@pytest.mark.parametrize("path", RESULTS, ids=[p.name for p in RESULTS])
def test_the_summary_covers_every_row_of_every_results_file(path):
    data = json.loads(path.read_text(encoding="utf-8"))
    results = _results(data, path.stem)
    if results is None:
        assert "rows" not in data or isinstance(data["rows"], dict), path.name
        return
    text = run.summary(results, with_markdown=True)
    rows = run.merged_rows(results)
    assert rows or text == "no rows"
    for row in rows:
        cells = timing.cells(row)
        assert len(cells) == len(timing.COLUMNS)
        assert row["benchmark"] in text
        first = row["case"] if timing.is_timing_row(row) else next(
            v for k, v in row.items() if k != "benchmark")
        assert str(first) in text, (path.name, first)


def test_model_syncs_records_read_as_records():
    data = json.loads((BENCH / "results" / "model_syncs-torch2.4.1.json").read_text(encoding="utf-8"))
    rows = run.merged_rows([data])
    assert rows and not any(timing.is_timing_row(r) for r in rows)
    text = timing.format_table(rows)
    assert "model_syncs: SeACo-Paraformer (hotwords)" in text
    assert f"    device ops: {rows[0]['device ops']}" in text
    markdown = run.markdown(rows)
    assert "| model | device ops |" in markdown and "**model_syncs**" in markdown


def test_the_results_file_is_written_before_a_failing_summary(tmp_path, capsys, monkeypatch):
    results = [{"benchmark": "a", "rows": timing.rows("case", {"x": timing.Timing(1e-3, 2e-3, 3)}),
                "wall_s": 1.0},
               {"benchmark": "b", "error": "exit 1", "output_tail": "boom", "wall_s": 2.0}]
    path = tmp_path / "out" / "bench.json"

    def broken(rows):
        raise KeyError("case")
    monkeypatch.setattr(timing, "format_table", broken)
    problem = run.finish(str(path), {"torch": "x"}, True, results)
    assert json.loads(path.read_text(encoding="utf-8"))["results"] == results
    assert "failed: b" in problem and "the summary failed" in problem
    assert "KeyError" in capsys.readouterr().err
    monkeypatch.undo()
    assert run.finish(str(path), {"torch": "x"}, True, results[:1]) is None


def test_a_quick_run_writes_outside_the_committed_results():
    quick = Path(run.default_json({"torch": "2.13.0+cpu"}, True))
    full = Path(run.default_json({"torch": "2.13.0+cpu"}, False))
    assert full == BENCH / "results" / "latest-torch2.13.0.json"
    assert BENCH / "results" not in quick.parents and quick.name == "quick-torch2.13.0.json"


def test_every_benchmark_run_py_runs_takes_quick():
    """run.py passes ``--quick`` to each: one without it would fail every quick run."""
    selected = run.scripts([])
    assert "model_syncs" in selected and "realdml_conformance" not in selected
    for name, path in selected.items():
        text = path.read_text(encoding="utf-8")
        assert "timing.arg_parser(" in text or '"--quick"' in text, name
