"""The catalogue of defects (issue 40, item 7): one row per defect, and from its name one
step to its probe, fix modules, emulator rules, tests and docs anchor
(``python -m dmlshim doctor --explain NAME``)."""
import re
from pathlib import Path

import pytest

from dmlshim import catalogue, patches, probing
from dmlshim.__main__ import main
from dmlshim.catalogue import where
from dmlshim.patches import dispatcher, refused

ROOT = Path(__file__).resolve().parent.parent
NAMES = [d.name for d in catalogue.DEFECTS]


def test_one_row_per_name_topic_by_topic():
    assert len(NAMES) == len(set(NAMES))                  # one row per name, no count to keep
    assert probing.all_defects() == catalogue.DEFECTS
    assert [d for t in catalogue.TOPICS for d in catalogue.rows(t)] == list(catalogue.DEFECTS)
    # a row kept beside its fix joins its topic's table (docs/internals.md, "Adding a defect")
    beside = [d for d in catalogue.DEFECTS if d.topic]
    assert all(d in catalogue.rows(catalogue.topic_of(d)) and d not in catalogue.topic_of(d).DEFECTS
                          for d in beside)
    assert {d.found for d in catalogue.DEFECTS} == set(catalogue.FOUND)


@pytest.mark.parametrize("name", NAMES)
def test_every_place_of_a_defect_resolves(name):
    d = catalogue.by_name(name)
    assert d.static or re.fullmatch(r"dmlshim\.(catalogue|patches)\.\w+:\w+ \(dmlshim/(catalogue|patches)/\w+\.py:\d+\)",
                                    where.probe(d))
    registry = {p.name for p in patches.REGISTRY}
    net = {dispatcher.gate(op) for op in (*dispatcher.FIXES, *dispatcher.ISLANDS,
                                         *(op for op, _ in dispatcher._composite_overloads()))}
    net |= {"dispatcher:" + g for g in dispatcher.GATES.values()}     # ops a torch may lack
    for fix, path in where.fixes(d):
        assert (ROOT / path.split(" ")[0]).is_file(), path
        kind, _, entry = fix.rpartition(":")
        assert {"": entry in registry, "refused": entry in refused.GROUPS,
                "dispatcher": fix in net}[kind], fix
    assert all(hit for _, hit in where.emulator_rules(d)), "a rules key matches no emulator rule"
    assert f'<a id="{name}"></a>' in (ROOT / "docs" / "defects.md").read_text(encoding="utf-8")


def test_explain_prints_probe_fixes_rules_tests_and_docs(capsys):
    assert main(["doctor", "--explain", "gather"]) == 0
    out = capsys.readouterr().out
    for line in ("probe     dmlshim.catalogue.indexing:_gather (dmlshim/catalogue/indexing.py:",
                 "fixes     gather: dmlshim/patches/gather.py",
                 "emulator  _last_dim: dmlshim/emulation/rules.py:",
                 "tests     tests/test_",
                 "docs      docs/defects.md#gather"):
        assert line in out, line
    for path in re.findall(r"((?:dmlshim|tests)/[\w/]+\.py)", out):
        assert (ROOT / path).is_file(), path


def test_explain_a_static_defect_and_a_module_rule(capsys):
    assert main(["doctor", "--explain", "tensor_new"]) == 0
    assert "emulator  legacy_new:refused: dmlshim/emulation/legacy_new.py:" in capsys.readouterr().out
    assert main(["doctor", "--explain", "bfloat16"]) == 0
    assert "probe     static: never probed" in capsys.readouterr().out


def test_explain_an_unknown_name_lists_close_matches(capsys):
    assert main(["doctor", "--explain", "gathr"]) == 2
    assert "no defect named 'gathr'; close matches: gather" in capsys.readouterr().out
    with pytest.raises(KeyError, match="close matches: pad_zero"):
        catalogue.by_name("pad_zeros")
