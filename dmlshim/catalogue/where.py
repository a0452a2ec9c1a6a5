"""Where everything about one defect lives: its probe, fix modules, emulator rules, tests
and docs anchor (``python -m dmlshim doctor --explain NAME``; issue 40, item 7).

Fix names resolve by convention: ``"<patch>"`` is ``dmlshim/patches/<patch>.py``,
``"dispatcher:<gate>"`` an entry of ``patches/dispatcher.py``'s net, ``"refused:<group>"``
a group of ``patches/refused.py``.  Emulator rules resolve through each row's ``rules``
(:class:`~dmlshim.catalogue.defect.Defect`): the rules of ``emulation.rules``'
default and unconfirmed sets that carry those function or op names.
"""
from __future__ import annotations

import functools
import importlib
import inspect
import re
from pathlib import Path
from typing import List, Optional, Tuple

from .. import patches
from . import by_name, topic_of
from .defect import Defect

ROOT = Path(__file__).resolve().parents[2]        # the checkout (tests/, docs/ beside dmlshim/)


def _rel(path) -> str:
    path = Path(path).resolve()
    return str(path.relative_to(ROOT)) if ROOT in path.parents else str(path)


def _at(fn) -> str:
    """``path:line`` of a function."""
    fn = inspect.unwrap(fn)
    return f"{_rel(inspect.getsourcefile(fn))}:{inspect.getsourcelines(fn)[1]}"


def probe(defect: Defect) -> Optional[str]:
    """``module:function (path:line)`` of the code the probe runs (a case probe's case), or None."""
    if defect.probe is None:
        return None
    fn = getattr(defect.probe, "case", defect.probe)
    return f"{fn.__module__}:{fn.__qualname__} ({_at(fn)})"


def fixes(defect: Defect) -> List[Tuple[str, str]]:
    """``(fix, path)`` for each fix name."""
    out = []
    for fix in defect.fixes:
        kind, _, entry = fix.rpartition(":")
        module = kind or entry
        found = patches.MODULES.get(module)
        where = _rel(found.__file__) if found is not None else f"dmlshim/patches/{module}.py"
        out.append((fix, where + (f" ({'net entry' if kind == 'dispatcher' else 'group'} {entry})" if kind else "")))
    return out


@functools.lru_cache(maxsize=None)
def _all_rules():
    from ..emulation import rules
    return tuple(rules.default_rules()) + tuple(rules.unconfirmed_rules())


def _parts(rule):
    """(name, function or None) of each named part of a rule: its functions (a closure by its
    maker's name) and op names."""
    for value in (rule.when, rule.replace, rule.bind, rule.message, rule.op):
        if isinstance(value, str):
            yield value, None
        elif isinstance(value, tuple):
            yield from ((v, None) for v in value)
        elif callable(value) and hasattr(value, "__qualname__"):
            yield value.__qualname__.split(".<locals>", 1)[0].rsplit(".", 1)[-1], value


def emulator_rules(defect: Defect) -> List[Tuple[str, str]]:
    """``(key, "path:line: source")`` per emulator rule the row's ``rules`` name (a key that
    matches nothing gives ``(key, "")``)."""
    out = []
    for key in defect.rules:
        if ":" in key:                        # module:function of dmlshim.emulation
            module, fn = key.split(":")
            found = getattr(importlib.import_module(f"dmlshim.emulation.{module}"), fn)
            out.append((key, f"{_at(found)}: {(found.__doc__ or '').split(chr(10))[0].strip()}"))
            continue
        words, hits = set(key.split()), []
        for rule in _all_rules():
            parts = list(_parts(rule))
            if words <= {name for name, _ in parts}:
                fn = next((f for name, f in parts if f is not None and name in words), None)
                hits.append(f"{_at(fn) + ': ' if fn else ''}{rule.source}")
        out += [(key, hit) for hit in dict.fromkeys(hits)] or [(key, "")]
    return out


def tests(defect: Defect) -> List[str]:
    """The test files that name the defect or its one row as a string, else as a word."""
    folder = ROOT / "tests"
    if not folder.is_dir():
        return []
    keys = [defect.name] + ([defect.row] if re.fullmatch(r"#\d+", defect.row) else [])
    quoted = re.compile("|".join(rf"""["']{re.escape(k)}["']""" for k in keys))
    word = re.compile(rf"\b{re.escape(defect.name)}\b")
    texts = {p: p.read_text(encoding="utf-8") for p in sorted(folder.glob("test_*.py"))}
    found = [p for p, t in texts.items() if quoted.search(t)] or [p for p, t in texts.items() if word.search(t)]
    return [_rel(p) for p in found]


def docs(defect: Defect) -> str:
    return f"docs/defects.md#{defect.name}"


def explain(name: str) -> str:
    """Everything about defect ``name``, one line per place (KeyError: unknown, with close matches)."""
    d = by_name(name)
    topic = topic_of(d)
    rules = [f"{key}: {hit}" if hit else f"{key}: NOT FOUND among emulation.rules' rules"
             for key, hit in emulator_rules(d)]
    lines = [f"{d.name} ({'row ' + d.row if d.row[0] == '#' else 'no failure_modes.md row'}): {d.summary}",
             f"  topic     {topic.TOPIC} ({_rel(topic.__file__)})",
             f"  found     {d.found}: {d.source}",
             f"  probe     {probe(d) or 'static: never probed (always assumed on DirectML)'}",
             *_block("fixes", [f"{fix}: {where}" for fix, where in fixes(d)]),
             *_block("emulator", rules or ["none: no emulator rule produces it"]),
             *_block("tests", tests(d) or ["none name it"]),
             f"  docs      {docs(d)}"]
    return "\n".join(lines)


def _block(label: str, items: List[str]) -> List[str]:
    return [f"  {label if i == 0 else '':<9} {item}" for i, item in enumerate(items)]
