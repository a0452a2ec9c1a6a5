"""``sort``/``topk`` and ``log_softmax`` of a float tensor holding NaN on the real torch-directml
0.2.5 binary (defect ``nan_sort``; ``laws.nan``: measured by hand, no public report).  Its sort
is a stable merge sort whose comparisons with NaN are false, so a NaN lands among the values
(``sort([0, 1, nan])`` gives ``[nan, 0, 1]``; ``topk`` is its first ``k``; ``argsort`` and
``msort`` are ``sort``); the CPU sorts NaN as the largest value, after +inf, equal NaNs in
their order.  Its ``log_softmax`` skips NaN in the slice's max: a slice holding NaN or +inf
gives values at its other positions where the CPU has NaN throughout.

The fix stays on the device and reads nothing.  ``sort``: the device's stable sort of ``x``
with NaN as +inf (NaN and +inf tie, in their order), then its stable sort of the NaN mask
taken in that order (NaN after the rest ascending, before it descending), the two
permutations composed by ``gather``: the CPU's stable order, exact (isnan, where, two sorts,
three gathers and a cast).  ``stable=False`` gets that stable order too: the CPU's own order
of equal values is its kernel's (not stable past 16 or so elements), the values the same.
``topk``: the kernel's topk of a key with NaN above +inf (``_top``), the values gathered.  ``log_softmax``: the kernel's result, NaN put in by ``where`` over the slices holding
NaN or +inf, told from the result (``laws.nan.kept``: its sum, ``< inf``, ``where``).  The
``out=`` overloads compute the functional call (through the fixes before this one) and write
it into their outs.  Every float call pays these kernels, NaN or not: whether a slice holds
one is known only from its values.  Measured on lavapipe (its kernels run on the CPU, two
shared cores: noisy): ``sort`` of (64, 256) 2x, (4, 4096) 3x; ``topk`` measured as two whole sorts
first (3x to 5x on lavapipe, 56x for 5 of (8, 32000) on the emulator), now one topk; ``log_softmax`` of (64, 1024)
and (4, 32000) 2x to 3.5x.
"""
from __future__ import annotations

import contextvars

import torch

from ..laws.nan import LOG_SOFTMAX, ORDERED, TOPKS, bound, kept, nan_ordered, ordering
from .. import trace
from . import _gate, _select
from .dispatcher import Done, below
from ._patch import Patch

PATCH = Patch("nan_sort", "sort/argsort/msort/topk place NaN among the values, log_softmax of a slice holding NaN or "
                          "+inf gives values where the CPU has NaN (measured on the real 0.2.5 binary): the device's "
                          "stable sort with NaN as +inf, then of the NaN mask; NaN put in by where, on the device "
                          "(no read; 2x to 5x the sort or topk, 2x to 3.5x log_softmax on lavapipe)",
              # after rank_limit (6-D: flattened first), sort_scalar (0-dim, empty) and int_range, whose
              # sort/topk indices' span it keeps (its fix passes the call on to this one)
              after=("rank_limit", "sort_scalar", "int_range"))

_aten = torch.ops.aten
_NAN, _INF = float("nan"), float("inf")
_FLOATS = frozenset({torch.float16, torch.float32, torch.float64, torch.bfloat16})
_OUTS = (_aten.sort.values, _aten.sort.values_stable, _aten.topk.values)
# True while this fix runs the device's own kernels: the real binary's functional sort/topk/
# log_softmax call their out= overload through the dispatcher, which must pass through
_INSIDE: contextvars.ContextVar = contextvars.ContextVar("dmlshim_nan_sort_inside", default=False)


def _in_cpu_order(x, dim, descending, keyset):
    """``(values, indices)`` of the CPU's stable sort of ``x`` along ``dim``, on the device."""
    token = _INSIDE.set(True)
    try:
        return _two_sorts(x, dim, descending, keyset)
    finally:
        _INSIDE.reset(token)


def _two_sorts(x, dim, descending, keyset):
    nan = torch.isnan(x)
    sort = _aten.sort.stable.redispatch           # the device's own kernel (merge sort: stable)
    _, first = sort(below(keyset), torch.where(nan, _INF, x), stable=True, dim=dim, descending=descending)
    mask = nan.to(x.dtype).gather(dim, first)
    _, second = sort(below(keyset), mask, stable=True, dim=dim, descending=descending)
    indices = first.gather(dim, second)
    return x.gather(dim, indices), indices


@_gate.watching(_gate.Watch(dtypes=_FLOATS))
def _ordered(op, keyset, args, kwargs):
    if _INSIDE.get() or not nan_ordered(op, args, kwargs):
        return None
    self, dim, descending, k = ordering(op, args, kwargs)
    if k is not None and not 0 < k <= self.shape[dim]:
        return None                                 # the kernel's own answer (its error)
    if op in _OUTS:
        return _into_outs(op, args, kwargs, self, dim, descending, k)
    with trace.substitute():                        # the op computed another way on the device
        if k is not None and k < self.shape[dim]:
            return Done(_top(self, k, dim, descending, bound(op, args, kwargs).get("sorted", True), keyset))
        return Done(_in_cpu_order(self, dim, descending, keyset))


def _top(x, k, dim, largest, sorted_, keyset):
    """``topk`` of a key that orders NaN above +inf, as the CPU does: NaN as +inf, +inf as the
    dtype's largest finite value (float16 keyed in float32, where that is above any float16);
    the values gathered from ``x``.  The kernel's one topk and a few elementwise kernels, not two
    whole sorts (a decoder's topk of its vocabulary, every step).  Equal values come in the
    kernel's order, as the CPU's do in its; a float32 slice holding both +inf and the largest
    finite float32 may order those two otherwise."""
    key = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x        # +inf above any of theirs
    key = torch.where(torch.isnan(key), _INF, torch.where(key == _INF, torch.finfo(key.dtype).max, key))
    token = _INSIDE.set(True)
    try:
        _, indices = _aten.topk.default.redispatch(below(keyset), key, k, dim, largest, sorted_)
    finally:
        _INSIDE.reset(token)
    return x.gather(dim, indices), indices


def _into_outs(op, args, kwargs, self, dim, descending, k):
    """An ``out=`` overload: the functional call (its fixes: this one's, ``rank_limit``'s ...)
    written into the outs."""
    named = bound(op, args, kwargs)
    if op in TOPKS:
        result = torch.topk(self, k, dim, descending, named["sorted"])
    else:
        result = torch.sort(self, stable=named.get("stable"), dim=dim, descending=descending)
    with trace.substitute():
        outs = (named["values"], named["indices"])
        for out, value in zip(outs, result):
            _select.grow_out(out, value)
        return Done(outs)


@_gate.watching(_gate.Watch(dtypes=_FLOATS))
def _log_softmax(op, keyset, args, kwargs):
    if _INSIDE.get() or not nan_ordered(op, args, kwargs):
        return None
    self, dim, _, _ = ordering(op, args, kwargs)
    token = _INSIDE.set(True)
    try:
        result = _select.pass_on(op, keyset, args, kwargs, after=_log_softmax)     # the op's own kernel
    finally:
        _INSIDE.reset(token)
    with trace.substitute():                        # NaN over the slices holding NaN or +inf
        return Done(torch.where(kept(result, dim), result, _NAN))


_kernels = _select.Kernels(__name__, {**{op: _ordered for op in ORDERED}, **{op: _log_softmax for op in LOG_SOFTMAX}})
install, uninstall = _kernels.install, _kernels.uninstall
