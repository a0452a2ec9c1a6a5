"""The documentation's promises (issue 21): a short README, short module docstrings,
every ``DMLSHIM_*`` variable and every public name documented, tables from the results.

The site itself is built by ``make docs`` (``mkdocs build --strict``), in CI."""
import ast
import importlib
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
README_LIMIT = 12 * 1024          # bytes
DOCSTRING_LIMIT = 25              # lines of a module docstring


def test_readme_is_at_most_12_kb_and_opens_with_install_first_run_and_doctor():
    data = (ROOT / "README.md").read_bytes()
    assert len(data) <= README_LIMIT, f"README.md is {len(data)} bytes; the limit is {README_LIMIT}"
    first_screen = "\n".join(data.decode("utf-8").splitlines()[:50])
    for must in ("## Install on Windows", "pip install", "python -m dmlshim doctor", "dmlshim.activate()"):
        assert must in first_screen, f"{must!r} is not in the README's first 50 lines"


def test_no_module_docstring_is_longer_than_25_lines():
    too_long = {}
    for path in sorted((ROOT / "dmlshim").rglob("*.py")):
        doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")), clean=False)
        if doc and len(doc.splitlines()) > DOCSTRING_LIMIT:
            too_long[str(path.relative_to(ROOT))] = len(doc.splitlines())
    assert not too_long, (f"module docstrings over {DOCSTRING_LIMIT} lines: {too_long}; say what and "
                          "why in a few lines and move the rest to a docs/ page")


def test_every_dmlshim_variable_is_in_the_configuration_table():
    used = set()
    for path in (ROOT / "dmlshim").rglob("*.py"):
        used |= set(re.findall(r"\bDMLSHIM_[A-Z0-9_]*[A-Z0-9]\b", path.read_text(encoding="utf-8")))
    table = set(re.findall(r"^\| `(DMLSHIM_[A-Z0-9_]+)`", (DOCS / "configuration.md").read_text(encoding="utf-8"),
                           re.M))
    assert used, "found no DMLSHIM_* variable in dmlshim/: the scan is broken"
    missing = sorted(used - table)
    assert not missing, f"DMLSHIM_* variables missing from docs/configuration.md's table: {missing}"


# A public name documented under another module: dmlshim.DirectMLError lives in dmlshim.errors.
_DOCUMENTED_AS = {("dmlshim", "DirectMLError"): "dmlshim.errors.DirectMLError"}


@pytest.mark.parametrize("module, page", [("dmlshim", "dmlshim.md"),
                                          ("dmlshim.emulation", "emulation.md"),
                                          ("dmlshim.parity", "parity.md")])
def test_the_api_reference_lists_every_public_name(module, page):
    names = importlib.import_module(module).__all__
    directives = set(re.findall(r"^::: (\S+)$", (DOCS / "reference" / page).read_text(encoding="utf-8"), re.M))
    missing = [n for n in names if _DOCUMENTED_AS.get((module, n), f"{module}.{n}") not in directives]
    assert not missing, f"docs/reference/{page} lacks '::: {module}.NAME' for {missing}"


def _gen_tables():
    sys.path.insert(0, str(DOCS))
    try:
        return importlib.import_module("gen_tables")
    finally:
        sys.path.remove(str(DOCS))


def test_result_tables_come_from_the_json_files():
    gen = _gen_tables()
    results = ROOT / "benchmarks" / "results"
    lanes = sorted(results.glob("conformance-torch*.json")) + sorted(results.glob("conformance-realdml*.json"))
    table = gen.conformance_table().splitlines()
    assert len(table) == 2 + len(lanes) >= 3
    for lane in lanes:
        assert any(lane.name in row for row in table), lane.name
    markers = []
    for page in DOCS.rglob("*.md"):
        text = page.read_text(encoding="utf-8")
        markers += gen.MARKER.findall(text)
        filled = gen.on_page_markdown(text)
        assert not gen.MARKER.search(filled), page
    assert ("conformance", "", "") in markers and ("bench", "latest-torch2.4.1.json", "") in markers
    with pytest.raises(ValueError, match="not found"):
        gen.on_page_markdown("<!-- results: bench no-such-file.json -->")
    with pytest.raises(ValueError, match="no row of"):
        gen.on_page_markdown("<!-- results: bench latest-torch2.4.1.json ^no such benchmark -->")
    with pytest.raises(ValueError, match="unknown results marker"):
        gen.on_page_markdown("<!-- results: shoes -->")


def test_readme_and_performance_figures_are_generated_and_current():
    gen = _gen_tables()
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert [m.group(2) for m in gen.REGION.finditer(readme)] == ["headline"]
    assert gen.refresh(readme) == readme, \
        "README.md's generated tables are stale: run python docs/gen_tables.py --write README.md"
    page = (DOCS / "performance.md").read_text(encoding="utf-8")
    assert page.index("<!-- results: headline -->") < page.index("<!-- results: no_device -->")
    headline = gen.headline_table()
    for prefix in ("no_device", "device_present", "rnn_routes", "funasr_bench", "gfpgan_bench"):
        assert f"`{prefix}-torch" in headline, prefix
    assert "`device_present-realdml.json`" in headline and "rnn_routes" not in gen.headline_table(readme=True)


def test_a_filtered_table_keeps_the_matching_rows_and_names_its_run():
    gen = _gen_tables()
    table = gen.on_page_markdown("<!-- results: bench latest-torch2.13.0.json ^shim_overhead: cpu: a \\* b -->")
    rows = [line for line in table.splitlines() if line.startswith("| cpu")]
    assert rows and all(row.startswith("| cpu: a * b |") for row in rows)
    assert table.startswith("`latest-torch2.13.0.json`: ") and "torch 2.13.0" in table and "cores" in table


def test_the_model_figures_show_the_trace_split_where_a_file_has_it():
    """funasr_bench/gfpgan_bench files from before the trace split (no ``overhead_share``)
    render as before; newer ones add dmlshim's overhead and substitute shares."""
    gen = _gen_tables()
    rows = [{"case": "forward 512x512", "variant": "emulated+shim", "ratio": 1.5, "median_s": 1, "min_s": 1}]
    old = {"rows": rows, "extra": {"identical_to_cpu": True}}
    assert gen._model_figure(old) == "forward 512x512: 1.50x; output identical to the CPU's"
    new = {"rows": rows, "extra": {"identical_to_cpu": True, "overhead_share": 0.012, "substitute_share": 0.3}}
    assert gen._model_figure(new).endswith("; dmlshim: overhead 1.2%, substitute 30.0% of device time")
    cases = {"rows": [dict(rows[0], case="5s"), dict(rows[0], case="11s")],
             "extra": {"cases": {"5s": {"identical_to_cpu": True, "overhead_share": 0.01, "substitute_share": 0.2},
                                 "11s": {"identical_to_cpu": True, "overhead_share": 0.02, "substitute_share": 0.2}}}}
    assert "overhead 1.0-2.0%, substitute 20.0% of" in gen._model_figure(cases, ("5s", "11s"))
