"""NaN in the real torch-directml 0.2.5 binary's max/min reductions (defect ``nan_reductions``;
measured by hand, float32 and float16, after OpInfo's ``masked.amax``/``argmax``/``logsumexp``/
``norm`` samples; no public report).

``amax``, ``max()``, ``max(dim)``, ``min()`` and ``min(dim)`` skip NaN (fmax/fmin): a slice of
NaN only gives -inf (max) or inf (min); ``amin`` propagates it, as the CPU does.  ``argmax``/
``argmin`` and ``max``/``min(dim)``'s indices scan with a strict comparison from the first
element, so a NaN is never taken unless it is the first (the CPU takes the first NaN).
``logsumexp`` subtracts a NaN-skipping max: a slice of -inf only, or holding +inf, gives NaN
(the CPU: -inf, inf).  ``linalg_vector_norm`` with ord inf/-inf is such a max/min of ``|x|``.
Also wrong with NaN, not fixed: ``sort``/``topk`` (NaN placed among the values) and
``log_softmax`` (values of other positions where the CPU has NaN).
"""
from __future__ import annotations

import torch

_aten = torch.ops.aten
MAX_OPS = (_aten.amax.default, _aten.max.default, _aten.max.dim, _aten.argmax.default)
MIN_OPS = (_aten.min.default, _aten.min.dim, _aten.argmin.default)
OPS = MAX_OPS + MIN_OPS + (_aten.logsumexp.default, _aten.linalg_vector_norm.default)
INDICES = (_aten.max.dim, _aten.min.dim, _aten.argmax.default, _aten.argmin.default)
_INF = (float("inf"), float("-inf"))


def nan_blind(op, args, kwargs) -> bool:
    """Whether ``op(*args, **kwargs)`` is one the law covers: a floating ``self`` (for the
    norm, ord inf or -inf)."""
    if not args[0].is_floating_point():
        return False
    if op is _aten.linalg_vector_norm.default:
        return (args[1] if len(args) > 1 else kwargs.get("ord", 2)) in _INF
    return True


def reduced(op, args, kwargs):
    """``(dims, keepdim)`` the call reduces over: ``dims`` a list (every dimension for none),
    or None for a flattened ``argmax``/``argmin`` without ``dim``."""
    self = args[0]
    every = list(range(self.dim()))
    if op in (_aten.max.default, _aten.min.default):
        return every, False
    if op is _aten.linalg_vector_norm.default:
        dim = args[2] if len(args) > 2 else kwargs.get("dim")
        keepdim = args[3] if len(args) > 3 else kwargs.get("keepdim", False)
    else:
        dim = args[1] if len(args) > 1 else kwargs.get("dim", None if op in INDICES else [])
        keepdim = args[2] if len(args) > 2 else kwargs.get("keepdim", False)
    if op in (_aten.argmax.default, _aten.argmin.default) and dim is None:
        return None, keepdim
    if isinstance(dim, int):
        return [dim], keepdim
    return (list(dim) if dim else every), keepdim
