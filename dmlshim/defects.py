"""DirectML defects as data: what goes wrong, how to detect it, which fix it enables.

One :class:`Defect` per row of failure_modes.md that dmlshim fixes.  A defect with a
``probe`` is detected on the user's own device (a tiny call with a known CPU answer);
one without (``static``) is always assumed, because probing it is unsafe (bf16 and
complex abort the process, rows #8, #9).  Only the fixes of detected or static defects
are installed (docs: "What gets fixed").
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional, Tuple

import torch


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
        name: short identifier, e.g. ``"pad_order"``.
        row: its failure_modes.md row, e.g. ``"#42"``.
        source: public source, e.g. ``"microsoft/DirectML#687"``.
        summary: what a user sees, one line.
        probe: ``probe(device) -> Verdict``: a tiny call on ``device`` compared with the
            CPU.  ``None`` = static (never probed; always assumed present).
        fixes: the fixes this defect enables (patch module names in the registry, or
            the names of dispatcher-net entries).
    """

    name: str
    row: str
    source: str
    summary: str
    probe: Optional[Callable[[torch.device], Verdict]] = None
    fixes: Tuple[str, ...] = ()

    @property
    def static(self) -> bool:
        return self.probe is None
