"""NaN in the real torch-directml 0.2.5 binary's max/min reductions (defect ``nan_reductions``;
measured by hand, float32 and float16, after OpInfo's ``masked.amax``/``argmax``/``logsumexp``/
``norm`` samples; no public report).

``amax``, ``max()``, ``max(dim)``, ``min()`` and ``min(dim)`` skip NaN (fmax/fmin): a slice of
NaN only gives -inf (max) or inf (min); ``amin`` propagates it, as the CPU does.  ``argmax``/
``argmin`` and ``max``/``min(dim)``'s indices scan with a strict comparison from the first
element, so a NaN is never taken unless it is the first (the CPU takes the first NaN).
``logsumexp`` subtracts a NaN-skipping max: a slice of -inf only, or holding +inf, gives NaN
(the CPU: -inf, inf).  ``linalg_vector_norm`` with ord inf/-inf is such a max/min of ``|x|``.
``sort``/``topk`` (NaN placed among the values) and ``log_softmax`` (values at the other
positions of a slice where the CPU has NaN): defect ``nan_sort``, below.
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


# ---------------------------------------------------------------- sort, topk, log_softmax
# (defect ``nan_sort``; measured on the real binary, float32 and float16, after OpInfo's
# ``sort``/``topk``/``log_softmax`` samples and by hand)
#
# ``sort`` (every overload, ``stable`` or not: one kernel) is a stable bottom-up merge sort
# (:func:`merged_order`): runs paired from the left, an odd last run carried up, a merge
# taking the left element unless the right one is strictly before it, where "strictly
# before" is ``not (right >= left)`` (``not (right <= left)`` descending).  A comparison
# with NaN is false, so a NaN is "before" everything: it lands among the values wherever its
# runs meet (``sort([0, 1, nan])`` gives ``[nan, 0, 1]``); without NaN it is the CPU's stable
# sort.  ``topk`` is that sort's first ``k`` (descending for ``largest``), ``sorted`` or not;
# ``argsort``/``msort`` are ``sort``; ``argsort(stable=True)`` runs on the CPU (the binary's
# own fallback: right).  Exact for slices of up to :data:`MERGED_EXACT` elements; longer ones
# merge their blocks another way (as wrong, not modelled).  The CPU sorts NaN as the
# largest value, after +inf, equal NaNs in their order.
#
# ``_log_softmax`` computes ``x - m - log(max(s, 1e-20))`` with ``m`` the NaN-skipping max
# (laws above) and ``s = sum(exp(x - m))``: a slice holding NaN gives ``x - m + 46.0517`` at
# its other positions, one holding +inf ``-inf`` there (:func:`merged_log_softmax`).  The
# CPU gives NaN in the whole of such a slice (:func:`clean`, :func:`kept`).  ``softmax`` is right.
SORTS = (_aten.sort.default, _aten.sort.stable, _aten.sort.values, _aten.sort.values_stable)
TOPKS = (_aten.topk.default, _aten.topk.values)
LOG_SOFTMAX = (_aten._log_softmax.default, _aten._log_softmax.out)
ORDERED = SORTS + TOPKS
MERGED_EXACT = 256


def bound(op, args, kwargs) -> dict:
    """Every argument of ``op``'s schema by name, its default where the call leaves it out."""
    arguments = op._schema.arguments
    found = {a.name: a.default_value for a in arguments if not a.is_out}
    found.update(zip((a.name for a in arguments), args))
    found.update(kwargs)
    return found


def ordering(op, args, kwargs):
    """``(self, dim, descending, k)`` of a ``sort``/``topk`` call (``dim`` counted from 0;
    ``descending``: ``largest`` for ``topk``; ``k`` None for ``sort``), or of a
    ``_log_softmax`` one (``descending`` and ``k`` None)."""
    named = bound(op, args, kwargs)
    self = named["self"]
    dim = named["dim"] % max(self.dim(), 1)
    if op in LOG_SOFTMAX:
        return self, dim, None, None
    if op in TOPKS:
        return self, dim, bool(named["largest"]), int(named["k"])
    return self, dim, bool(named["descending"]), None


def nan_ordered(op, args, kwargs) -> bool:
    """Whether the law covers the call: a floating ``self`` of at least one dimension with more
    than one element along ``dim`` (one element is in its place, and its log_softmax right),
    for ``topk`` a ``k`` past 0."""
    self, dim, _, k = ordering(op, args, kwargs)
    return self.is_floating_point() and self.dim() > 0 and self.shape[dim] > 1 and k != 0


def clean(x: torch.Tensor, dim: int) -> torch.Tensor:
    """Where (keepdim) a slice of ``x`` along ``dim`` holds neither NaN nor +inf; elsewhere the
    CPU's log_softmax is NaN throughout (``x < inf`` is false for both)."""
    return (x < float("inf")).all(dim, keepdim=True)


def kept(log_softmax: torch.Tensor, dim: int) -> torch.Tensor:
    """Where (keepdim) a device's log_softmax along ``dim`` is the CPU's as it stands: :func:`clean`
    told from the result, its sum below +inf.  Any log_softmax (``x - ...``) has NaN at a NaN of
    ``x`` and NaN or +inf at a +inf; a clean slice's values are at most about 0 or -inf, NaN
    throughout one of -inf only (the CPU's too).  Three cheap kernels (sum, lt, where): ``all``
    of a bool tensor costs 6x log_softmax itself on lavapipe."""
    return log_softmax.sum(dim, keepdim=True) < float("inf")


def merged_order(values, descending: bool) -> list:
    """The binary's order of one slice (a list of floats): the indices its merge sort gives."""
    runs = [[i] for i in range(len(values))]
    while len(runs) > 1:
        paired = []
        for r in range(0, len(runs) - 1, 2):
            left, right = runs[r], runs[r + 1]
            out, i, j = [], 0, 0
            while i < len(left) and j < len(right):
                a, b = values[left[i]], values[right[j]]
                if (b <= a) if descending else (b >= a):    # False with a NaN: the right one
                    out.append(left[i])
                    i += 1
                else:
                    out.append(right[j])
                    j += 1
            paired.append(out + left[i:] + right[j:])
        if len(runs) % 2:
            paired.append(runs[-1])
        runs = paired
    return runs[0] if runs else []


def merged_log_softmax(x: torch.Tensor, dim: int) -> torch.Tensor:
    """The binary's log_softmax of ``x`` along ``dim``, in float32 (rounded to ``x``'s dtype)."""
    wide = x.float()
    top = torch.where(torch.isnan(wide), float("-inf"), wide).amax(dim, keepdim=True)
    shifted = wide - top
    total = torch.exp(shifted).sum(dim, keepdim=True)
    return (shifted - torch.log(torch.fmax(total, torch.tensor(1e-20)))).to(x.dtype)
