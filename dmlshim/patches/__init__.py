"""The registry of patch modules.

Each patch module ``dmlshim/patches/<name>.py`` fixes one concern and exports::

    PATCH = Patch("<name>", "<what it fixes + DirectML source>", after=(...), before=(...))
    def install(ctx: Context) -> None     # wrap or register what it needs
    def uninstall() -> None               # undo exactly that

and, for a DirectML defect, may keep the rest of it beside the fix: its catalogue rows
(``DEFECTS``, ``dmlshim.catalogue``) and the emulator's rules that reproduce it
(``emulated_rules()``, ``dmlshim.emulation.rules``).  The registry imports every module of
the folder (a list ``python -m dmlshim generate`` writes) and installs them in the order
their ``after=``/``before=`` declare (:func:`rank`).  Patches for third-party libraries list
the modules they patch in ``imports``: they are imported and installed only when the first
of those modules is imported (wrapt post-import hooks), so the order of ``import funasr`` and
``dmlshim.activate()`` does not matter.  A patch module must not import its third-party
library at its own top level.  Adding a defect: docs/internals.md ("Adding a defect").
"""
from __future__ import annotations

import functools
import threading
import types
import warnings
from typing import Callable, Dict, List, Tuple

from ._patch import Patch
from ._wrap import Context, PatchSet, original, when_imported  # noqa: F401  (the helper API)
from . import _caller  # noqa: F401


# Every patch module, imported here (generated: ``python -m dmlshim generate`` writes the
# list from the folder; tests/test_layers.py checks it): a reader follows each name to its
# fix, and nothing is loaded by name.  None imports its third-party library at its top level.
# BEGIN generated patch modules
from . import (  # noqa: E402, F401  (read through globals() below)
    adaptive_pool, arange_float32, auto, autocast, avg_pool_ceil, batch_norm_stats,
    batched_tril_triu, bmm_cpu_operand, bool_exp2, bool_minmax, broadcast_copy, cat, cdist,
    channels_last, combinations, conv_transpose_padding, copy_to_cpu, cpu_dtype_copy,
    dispatcher, dropout_backward, dtypes, empty_broadcast, empty_layer_norm, empty_reduction,
    empty_unary, fallback_out, flip_dims, gather, inference_mode, int_addmm, int_broadcast,
    int_pow_zero, int_range, jit, layer_norm, lazy_modules, legacy_new, linspace_int, load,
    losses, masked_fill_rank, masked_select, max_pool_ceil, max_pool_indices,
    max_pool_unbatched, mul, nan_reductions, nan_sort, non_blocking_copy, offset_views,
    out_resize, pad, pad_negative, pad_unbatched, pad_value, pad_zero, prelu, rank_limit,
    refused, repeat, rnn, scatter_repeated, softplus_beta, sort_scalar, unique, unique_bytes,
    upsample_bilinear, upsample_nearest, var_correction, vector_norm)
from ..integrations import (  # noqa: E402, F401  (read through globals() below)
    basicsr, facexlib, funasr, gfpgan)
# END generated patch modules

# Each module's PATCH, by name: the order's source, kept whole (a test that installs fewer
# patches narrows REGISTRY only).
_DECLARED: Dict[str, Patch] = {m.PATCH.name: m.PATCH for m in sorted(
    (m for m in list(globals().values()) if isinstance(m, types.ModuleType) and hasattr(m, "PATCH")),
    key=lambda m: m.PATCH.name)}
MODULES: Dict[str, types.ModuleType] = {name: globals()[name] for name in _DECLARED}   # name -> module


@functools.lru_cache(maxsize=None)
def _ranks() -> Dict[str, int]:
    """Each patch's place in a topological order of the ``after=``/``before=`` the modules
    declare, ties broken by name: the install order, and every chain's."""
    first: Dict[str, set] = {name: set(p.after) for name, p in _DECLARED.items()}   # who goes before it
    for patch in _DECLARED.values():
        unknown = sorted(set(patch.after + patch.before) - set(_DECLARED))
        if unknown:
            raise ValueError(f"patch {patch.name!r} is ordered against {unknown}: no patch module declares them")
        for later in patch.before:
            first[later].add(patch.name)
    placed: List[str] = []
    while len(placed) < len(_DECLARED):
        ready = [name for name in _DECLARED if name not in placed and first[name] <= set(placed)]
        if not ready:
            raise ValueError(f"the patches' after=/before= make a cycle among {sorted(set(first) - set(placed))}")
        placed.append(ready[0])
    return {name: i for i, name in enumerate(placed)}


def rank(name: str) -> int:
    """Where patch ``name``'s fixes go in a chain they share with others' (lower: earlier),
    from the declared order; a name not in REGISTRY (a test's) goes after them all."""
    return _ranks().get(name, len(_DECLARED))


# Every patch, in the order it installs (and uninstalls backwards).
REGISTRY: Tuple[Patch, ...] = tuple(sorted(_DECLARED.values(), key=lambda p: rank(p.name)))


def held() -> Dict[object, Tuple[str, ...]]:
    """``{aten overload: the patches whose BackendSelect fixes hold it, in chain order}``,
    read from every patch module's ``_select.Kernels`` tables (each module imported; its
    third-party library is not), installed or not.  The dispatcher net's hooks hold the
    same overloads as their patch's ``Kernels`` twin (used where the net holds none)."""
    from . import _select
    return _select.tables()


_lock = threading.RLock()
_installed: Dict[str, object] = {}          # name -> imported patch module
_waiting: Dict[str, List[Callable[[], None]]] = {}   # lazy patch name -> cancels of its hooks


def _install(patch: Patch, ctx: Context) -> None:
    with _lock:
        if patch.name in _installed or not ctx.active:
            return
        module = MODULES[patch.name]
        module.install(ctx)
        _installed[patch.name] = module


def _wanted(patch: Patch, ctx: Context) -> bool:
    return (ctx.fallback in patch.modes and ctx.enabled(patch.name)
            and (ctx.present or patch.anywhere))


def install_all(ctx: Context) -> None:
    """Install every registered patch for ``ctx.fallback`` (lazy ones on import) whose
    fix is on (``ctx.enabled``: probed defects, dmlshim.probing); with no target device
    (``ctx.present`` False) only the ``anywhere`` ones.  Patches already installed or
    waiting for their import are left as they are, so it runs again, in registry order,
    when a device appears."""
    _caller.install()                            # warnings inside wrappers name the caller
    for patch in REGISTRY:
        if not _wanted(patch, ctx) or patch.name in _installed or patch.name in _waiting:
            continue
        if not patch.imports:
            _install(patch, ctx)
            continue
        # the first import installs; later ones no-op
        _waiting[patch.name] = [when_imported(module_name, lambda mod, p=patch: _install(p, ctx))
                                for module_name in patch.imports]


def uninstall_all() -> None:
    """Uninstall in reverse order; cancel lazy installs still waiting for an import."""
    with _lock:
        for cancel in (c for cancels in _waiting.values() for c in cancels):
            cancel()
        _waiting.clear()
        for name in reversed(list(_installed)):
            try:
                _installed.pop(name).uninstall()
            except Exception as exc:             # one broken patch must not block the rest
                warnings.warn(f"dmlshim: uninstalling patch {name!r} failed: {exc!r}", RuntimeWarning)
        _caller.uninstall()


def installed() -> List[str]:
    """Names of the patch modules installed now."""
    with _lock:
        return list(_installed)
