"""The catalogue's types: a :class:`Defect` (one row) and a probe's :class:`Verdict`."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional, Tuple

import torch

# Where a defect was found (Defect.found)
CATALOGUE = "failure_modes.md"     # a row of docs/directml/failure_modes.md (older builds' reports)
REPORTED = "public report"         # reported against torch-directml 0.2.5 (failure_modes.md #41-#47)
MEASURED = "real binary"           # measured on the real 0.2.5 binary (issue 25, docs/realdml.md)
FOUND = (CATALOGUE, REPORTED, MEASURED)

# the source of the defects the real binary showed and no public report names
NO_REPORT = "the real 0.2.5 binary (no public report)"


@dataclass(frozen=True)
class Verdict:
    """What a probe saw: ``broken`` and the figure that says why (``"max |Δ| 3.6"``,
    ``"RuntimeError: The parameter is incorrect."``, ``"equal"``)."""

    broken: bool
    figure: str


@dataclass(frozen=True)
class Defect:
    """One DirectML defect.

    Attributes:
        name: short identifier, e.g. ``"pad_order"`` (docs anchor: docs/defects.md#pad_order).
        row: its failure_modes.md row, e.g. ``"#42"``.
        source: public source, e.g. ``"microsoft/DirectML#687"``.
        summary: what a user sees, one line.
        probe: ``probe(device) -> Verdict``: a tiny call on ``device`` compared with the
            CPU.  ``None`` = static (never probed; always assumed present).
        fixes: the fixes this defect enables (patch module names in the registry,
            ``"dispatcher:<gate>"`` entries of the dispatcher net, ``"refused:<group>"``).
        found: where it was found: :data:`CATALOGUE`, :data:`REPORTED` or :data:`MEASURED`.
        rules: the emulator's rules that produce it, named by a function of theirs (their
            ``when``/``replace``/``bind``/``message``/``op``) or an op name, several words
            meaning all of them; ``"module:function"`` names one in ``dmlshim.emulation``
            (``catalogue.where.emulator_rules`` resolves them).
        repro: for a static defect, ``repro(device)``: the call that shows it, never run in a
            user's process (``benchmarks/fidelity.py`` runs it in a child of its own); ``None``
            for a probed one (its probe's case is the repro).
        topic: for a row its fix module declares (``DEFECTS`` beside the fix), the catalogue
            topic module whose table it joins (``"memory"``); a topic module's own rows leave it
            empty.
    """

    name: str
    row: str
    source: str
    summary: str
    probe: Optional[Callable[[torch.device], Verdict]] = None
    fixes: Tuple[str, ...] = ()
    found: str = CATALOGUE
    rules: Tuple[str, ...] = ()
    repro: Optional[Callable[[torch.device], object]] = None
    topic: str = ""

    @property
    def static(self) -> bool:
        return self.probe is None
