"""Every DirectML defect dmlshim knows, as data: one :class:`Defect` per row, one table per topic.

A topic module holds its rows; a defect added since issue 49 keeps its row in its fix module
instead (``DEFECTS``, with ``topic=``), beside its fix and its emulator rule, and joins the
topic's table from there (:func:`rows`).

A row names the defect, its failure_modes.md row, its public source, what a user sees,
where it was found (``found``: failure_modes.md, a public report against 0.2.5, or
measured on the real binary), its **probe** (a tiny call on the device whose CPU answer is
known) and the **fixes** it enables; ``dmlshim.probing`` runs the probes and installs the
fixes of the defects found.  A defect without a probe is static: always assumed on a
DirectML device, because probing it is unsafe (it aborts the process) or untestable.
``python -m dmlshim doctor --explain NAME`` prints where everything about one defect lives
(:mod:`.where`).  Docs: docs/defects.md (issue 40, item 7).
"""
from __future__ import annotations

import difflib
import functools
from typing import Dict, List, Tuple

from . import arithmetic, dtypes, indexing, integers, layers, memory, pooling
from .defect import CATALOGUE, FOUND, MEASURED, REPORTED, Defect, Verdict  # noqa: F401

# the topic modules, in table order
TOPICS = (dtypes, arithmetic, integers, indexing, memory, pooling, layers)


def rows(topic) -> Tuple[Defect, ...]:
    """``topic``'s rows: its module's, then those its fix modules declare (a patch module's
    ``DEFECTS``, each row naming the topic: ``Defect(..., topic="memory")``)."""
    return topic.DEFECTS + tuple(d for d in _declared() if d.topic == topic.__name__.rpartition(".")[2])


@functools.lru_cache(maxsize=None)
def _declared() -> Tuple[Defect, ...]:
    from .. import patches              # at first use: the patch modules import this package
    return tuple(d for module in patches.MODULES.values() for d in getattr(module, "DEFECTS", ()))


@functools.lru_cache(maxsize=None)
def _all() -> Tuple[Defect, ...]:
    return tuple(d for topic in TOPICS for d in rows(topic))


@functools.lru_cache(maxsize=None)
def _by_name() -> Dict[str, Defect]:
    return {d.name: d for d in _all()}


def __getattr__(name: str):
    if name == "DEFECTS":               # every row, topic by topic (made at first use, then kept)
        return _all()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def close_matches(name: str) -> List[str]:
    """The defect names closest to ``name`` (difflib), best first."""
    return difflib.get_close_matches(name, list(_by_name()), n=5, cutoff=0.5)


def by_name(name: str) -> Defect:
    """The defect called ``name``.

    Raises:
        KeyError: no such defect; the message lists the close matches.
    """
    try:
        return _by_name()[name]
    except KeyError:
        near = close_matches(name)
        raise KeyError(f"no defect named {name!r}" + (f"; close matches: {', '.join(near)}" if near
                                                      else "; python -m dmlshim info lists them")) from None


def topic_of(defect: Defect):
    """The topic module that holds ``defect``'s row."""
    return next(t for t in TOPICS if defect in rows(t))


def markdown_table() -> str:
    """docs/defects.md's defect tables, one per topic, generated from the rows (tests check
    it); each defect's first cell carries its anchor (docs/defects.md#NAME)."""
    parts = []
    for topic in TOPICS:
        lines = [f"### {topic.TOPIC}", "", "| defect | row | found | what goes wrong | source | probe | fixes |",
                 "|---|---|---|---|---|---|---|"]
        for d in rows(topic):
            # one line per row: a docstring's line breaks would end the table row
            probe = " ".join((d.probe.__doc__ or d.probe.__name__).split()) if d.probe else "static: never probed"
            lines.append(f'| <a id="{d.name}"></a>`{d.name}` | {d.row} | {d.found} | {d.summary} | {d.source} | '
                         f"{probe} | " + ", ".join(f"`{f}`" for f in d.fixes) + " |")
        parts.append("\n".join(lines))
    return "\n\n".join(parts)
