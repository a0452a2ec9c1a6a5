"""What a patch module declares about itself: its :class:`Patch` entry, ``PATCH``.

The registry (``dmlshim.patches``) reads ``PATCH`` from every module it imports, so a
module's name, what it fixes, when it installs and where it goes among the others are
written once, beside the fix itself.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Tuple

from ..config import FALLBACK_MODES  # noqa: F401  (modes=FALLBACK_MODES, for the modules)


@dataclass(frozen=True)
class Patch:
    """One patch module's entry: ``PATCH = Patch(...)`` at its top.

    ``name``: module ``dmlshim.patches.<name>``.  ``doc``: what it fixes and the source
    of the DirectML fact.  ``imports``: third-party modules that trigger a lazy install
    (empty = install at ``activate()``).  ``modes``: the ``fallback`` modes it is
    installed in.  In ``"off"`` the ``PatchSet.intercept`` wrappers only observe and
    trace (they fix nothing), so patches built on ``intercept`` may stay listed there.
    ``anywhere``: installed with no target device too, because no call passes through
    it (a module alias); every other patch waits until a device appears
    (``Context.present``), so a CPU-only or CUDA machine pays nothing per call.
    ``after`` / ``before``: patches this one must be installed after / before, and whose
    fixes it follows / precedes in every BackendSelect chain they share: the registry
    installs in :func:`dmlshim.patches.rank` order (a topological order of these, ties by
    name), ``_select``'s chains and the dispatcher net's hooks are sorted by it
    (tests/test_fix_order.py asks every two patches that share an overload or a wrapped
    attribute for a declared relation); the comment beside them says why.
    """

    name: str
    doc: str
    imports: Tuple[str, ...] = ()
    modes: Tuple[str, ...] = ("auto", "known")
    anywhere: bool = False
    after: Tuple[str, ...] = ()
    before: Tuple[str, ...] = ()
