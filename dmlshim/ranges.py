"""The value ranges of integer device tensors that are known without reading the device.

The integer fixes (``patches/int_range.py``) decide by a tensor's least and greatest value
whether DirectML computes a call exactly; reading them is a device-to-host sync, which on a
GPU waits for the queue to drain.  Where a range is known at no cost (a small tensor copied
from the CPU, ``arange``'s bounds, a result whose range follows from its operands'), it is
kept here, beside the tensor: keyed by ``id``, checked by a weak reference and the tensor's
version, which every in-place write to it or a view of it moves.  A view's range is its
base's (its values are among them), unless it reads the memory as another dtype, or a 1-D
view written in place has its own beside the rest of its base (:func:`remember_region`: a
loop over a tensor's columns).  Never in the tensor's ``__dict__``.

A floating tensor has a span only where its values are known to be whole numbers the dtype
holds exactly (a bool mask cast to float, a sum of one, within 2**24 for float32): a mask's
``sum(1).int()`` is a length whose range is known (SenseVoice's encoder).

Not seen: a write through ``.data`` (another version counter) or through memory torch does
not track; an inference tensor has no version, so none is kept for one.

No lock, though autograd's threads write here too: each table entry is one dict item,
replaced whole (atomic under the GIL), every read checks the entry's weak reference and
version, and a dead tensor's callback drops only its own entry (:func:`_drop`), so a race can
lose a span (then read again) but never lend one tensor's span to another.
"""
from __future__ import annotations

import functools
import weakref
from typing import Dict, Optional, Tuple

import torch

from .laws.integers import Span, integral  # noqa: F401  (integral: the ranges' dtypes, re-exported)
# id -> (weak reference, version, span, exact: the least and greatest values themselves, not a bound)
_known: Dict[int, Tuple[weakref.ref, int, Span, bool]] = {}
# the compiled gate's table of spans (keep_in), or None: it decides int_range's commonest
# calls in C++ by the spans kept there, and keeps their results' spans there alone
_gate_table = None
_INT64 = (-2 ** 63, 2 ** 63 - 1)


def keep_in(gate) -> None:
    """Keep every span in the compiled gate's table too (``gate``: its module, which has
    ``span_set``/``span_get``/``span_drop``/``span_clear``; None: Python's alone), and read
    there the spans of the calls it decides itself (``_gate.ranged``)."""
    global _gate_table
    _gate_table = gate


def _entry(t: torch.Tensor) -> Optional[Tuple[Span, bool]]:
    """``(span, exact)`` kept for ``t`` at its version, here or in the gate's table."""
    entry = _valid(_known, t)
    if entry is not None:
        return entry[2], entry[3]
    return _gate_table.span_get(t) if _gate_table is not None else None


def known_span(t: torch.Tensor) -> Optional[Span]:
    """``(least, greatest)`` of integer device tensor ``t``'s values, known without a device
    read, or None.  For a floating ``t``: its values are whole numbers within the span.  A
    view's: its own, else its region's (:func:`remember_region`), else its base's."""
    entry = _entry(t)
    if entry is not None:
        return entry[0]
    base = t._base
    if base is None or base.dtype != t.dtype:
        return None
    span = _region_span(t, base)
    if span is not None:
        return span
    entry = _entry(base)
    return entry[0] if entry is not None else None


def known_exactly(t: torch.Tensor) -> bool:
    """Whether ``t``'s span kept is its values' own (read, copied over, filled), not a bound
    (a view's is its base's, a bound)."""
    entry = _entry(t)
    return entry is not None and entry[1]


def _valid(table, t):
    """``t``'s entry in ``table`` (weak reference and version first), if still ``t``'s and
    no write moved its version since."""
    entry = table.get(id(t))
    if entry is not None and entry[0]() is t and entry[1] == _version(t):
        return entry
    return None


def remember(t, span: Optional[Span], exact: bool = False) -> None:
    """Keep ``span`` beside integer device tensor ``t`` until its next write (nothing for a
    CPU, bool, complex or inference tensor).  A floating ``t``: only a span of Python ints
    its dtype holds every integer of, the caller's word that every value is a whole number."""
    if span is None or not isinstance(t, torch.Tensor) or t.is_cpu or not _holds(t.dtype, span):
        return
    version = _version(t)
    if version is not None:
        key = id(t)
        _known[key] = (weakref.ref(t, functools.partial(_drop, _known, key)), version, span, exact)
        if _gate_table is not None:
            if type(span[0]) is int and type(span[1]) is int and _INT64[0] <= span[0] and span[1] <= _INT64[1]:
                _gate_table.span_set(t, span[0], span[1], exact)
            else:
                _gate_table.span_drop(t)          # an older span there would outlive this one


# id(base) -> (weak reference, version, rest, length, stride, {storage offset: span}): the
# 1-D views of ``base`` of one length and stride written since ``rest`` bounded all of it,
# each with its own span; ``rest`` still bounds every element outside them
_regions: Dict[int, tuple] = {}
_LONGEST = 64                 # elements of a region: finding an overlap costs one look for each


def version(t: torch.Tensor) -> Optional[int]:
    """``t``'s version counter (None for an inference tensor): a caller keeps it before a write
    it then tells :func:`remember_region`."""
    return _version(t)


def _storage_offset(t: torch.Tensor) -> Optional[int]:
    """``t.storage_offset()``: what :func:`locate` replaces where the device hides it."""
    return t.storage_offset()


_offset_of = _storage_offset


def locate(offset_of=None) -> None:
    """Where a view begins in its storage, in elements, or None where not known:
    ``offset_of(t)`` (``int_range``'s on a device whose views read offset 0, the real
    binary's); None: ``storage_offset()``."""
    global _offset_of
    _offset_of = offset_of or _storage_offset


def view_key(view: torch.Tensor) -> Optional[Tuple[int, int, int]]:
    """``(storage offset, length, stride)`` of a view with one dimension of more than one
    element at most, whose elements are at ``offset + i * stride`` for ``i < length``; None
    for another view, or one whose offset is not known (:func:`locate`)."""
    offset = _offset_of(view)
    return None if offset is None else _key(offset, list(zip(view.shape, view.stride())))


def _key(offset: int, dims) -> Optional[Tuple[int, int, int]]:
    """:func:`view_key` from a storage offset and ``(size, stride)`` pairs."""
    long = [(n, stride) for n, stride in dims if n != 1]
    if len(long) > 1 or any(n == 0 for n, _ in long):
        return None
    n, stride = long[0] if long else (1, 1)
    return (offset, n, stride) if 0 < stride and n <= _LONGEST else None


def index_key(t: torch.Tensor, index) -> Optional[Tuple[int, int, int]]:
    """:func:`view_key` of ``t[index]`` for a basic ``index`` (numbers, slices of numbers,
    ``None``, ``...``) from ``t``'s geometry, without making the view (a device op per
    ``x[i] = v``); None for another index (tensors, lists: a copy, not a view)."""
    offset = _offset_of(t)
    if offset is None:
        return None
    items = list(index) if type(index) is tuple else [index]
    if items.count(Ellipsis) == 1:
        at = items.index(Ellipsis)
        given = sum(1 for i in items if i is not None and i is not Ellipsis)
        items[at:at + 1] = [slice(None)] * (t.dim() - given)
    dims, d = [], 0
    for i in items:
        if i is None:
            continue
        if d >= t.dim():
            return None
        size, stride = t.shape[d], t.stride(d)
        if type(i) is int and -size <= i < size:
            offset += (i % size) * stride
        elif type(i) is slice and all(type(x) in (int, type(None)) for x in (i.start, i.stop, i.step)):
            start, stop, step = i.indices(size)
            offset += start * stride
            dims.append((len(range(start, stop, step)), stride * step))
        else:
            return None
        d += 1
    return _key(offset, dims + list(zip(t.shape[d:], t.stride()[d:])))


def _overlaps(written, offset: int, n: int, stride: int) -> bool:
    """Whether the view at ``offset`` shares an element with another one of ``written``, all of
    length ``n`` and stride ``stride``: two such views overlap iff their offsets differ by
    ``j * stride`` with ``0 < |j| < n``."""
    return any(offset + j * stride in written for j in range(1 - n, n) if j)


def _region_span(view: torch.Tensor, base: torch.Tensor) -> Optional[Span]:
    """``view``'s span from its base's regions: its own where written, ``rest`` where it
    shares no element with one; None otherwise (the base's span holds it)."""
    entry = _valid(_regions, base)
    key = view_key(view) if entry is not None else None
    if key is None or key[1:] != entry[3:5]:
        return None
    written = entry[5]
    if key[0] in written:
        return written[key[0]]
    return None if _overlaps(written, *key) else entry[2]


def remember_region(base: torch.Tensor, key, span: Optional[Span], before: Optional[int],
                    whole: Optional[Span]) -> None:
    """The view of integer device tensor ``base`` at ``key`` (:func:`view_key`, None for
    another view) was just written whole, each value now within ``span``; ``before``: the
    base's version before that write, ``whole``: the base's span then.  Each such view keeps
    its own span beside the rest of its base, so a view no tracked write touched keeps the
    bound from before those writes instead of the union of all: SenseVoice's CTC alignment
    writes ``path[:, t - 1] += path[:, t] - d`` once per column, whose one span per tensor
    doubled each step (a read every 24 steps), where a column's grows by the previous one's.
    Sound while every write since is told here: any other moves the version, and the
    regions are dropped; views of one length and stride only, whose overlaps are exact."""
    now = _version(base) if key is not None else None
    if now is None or span is None or not _holds(base.dtype, span):
        _regions.pop(id(base), None)
        return
    offset, n, stride = key
    entry = _regions.get(id(base))
    if entry is not None and entry[0]() is base and entry[1] == before and entry[3:5] == (n, stride) \
            and (offset in entry[5] or not _overlaps(entry[5], *key)):
        rest, written = entry[2], entry[5]
    elif whole is not None:
        rest, written = whole, {}            # the base's span before: every element's
    else:
        _regions.pop(id(base), None)
        return
    written[offset] = span
    ref = weakref.ref(base, functools.partial(_drop, _regions, id(base)))
    _regions[id(base)] = (ref, now, rest, n, stride, written)


def has_regions(t: torch.Tensor) -> bool:
    """Whether ``t`` (a base) keeps the spans of views written since its version moved last."""
    return _valid(_regions, t) is not None


_LIMITS: Dict[torch.dtype, Span] = {}
# every integer of this magnitude a floating dtype holds (its significand's bits and one)
_WHOLE = {torch.float16: 2 ** 11, torch.bfloat16: 2 ** 8, torch.float32: 2 ** 24, torch.float64: 2 ** 53}


def _holds(dtype: torch.dtype, span: Span) -> bool:
    """``dtype`` holds every value of ``span``: else its values wrapped, and the span bounds
    nothing.  A floating dtype: every integer of ``span`` (float32: within 2**24), whose ends
    are Python ints (a whole-number span); never a bool or complex one."""
    limits = _LIMITS.get(dtype)
    if limits is None:
        if dtype.is_floating_point:
            whole = _WHOLE.get(dtype, 0)
            limits = (-whole, whole) if whole else (1, 0)
        elif integral(dtype):
            info = torch.iinfo(dtype)
            limits = (info.min, info.max)
        else:
            limits = (1, 0)                 # holds nothing
        _LIMITS[dtype] = limits
    if dtype.is_floating_point and not (type(span[0]) is int and type(span[1]) is int):
        return False
    return limits[0] <= span[0] and span[1] <= limits[1]


# id -> (weak reference, version): tensors made by ``torch.empty_like`` called from Python,
# not written since (their values are whatever the memory held: none the model may rely on)
_unwritten: Dict[int, Tuple[weakref.ref, int]] = {}


def mark_unwritten(t: torch.Tensor) -> None:
    """``t`` was just made uninitialized by a call from Python (``torch.empty_like``): until
    its version moves, no value of it is one the model wrote.  Only from Python: a C++
    composite may write a tensor it made without moving its version (torch's factories do)."""
    version = _version(t) if isinstance(t, torch.Tensor) and not t.is_cpu else None
    if version is not None:
        key = id(t)
        _unwritten[key] = (weakref.ref(t, functools.partial(_drop, _unwritten, key)), version)


def unwritten(t: torch.Tensor) -> bool:
    """Whether ``t`` holds only uninitialized memory (:func:`mark_unwritten`, version unmoved).
    Asked from Python, where a write by any call has moved the version by then."""
    entry = _unwritten.get(id(t))
    return entry is not None and entry[0]() is t and entry[1] == _version(t)


def forget(t: torch.Tensor) -> None:
    """Drop the span kept for ``t`` and its base (a bound, to be read instead)."""
    for candidate in (t, t._base):
        if candidate is not None:
            _known.pop(id(candidate), None)
            _regions.pop(id(candidate), None)
            if _gate_table is not None:
                _gate_table.span_drop(candidate)


def forget_all() -> None:
    """Forget every range kept (``deactivate()``)."""
    _known.clear()
    _regions.clear()
    _unwritten.clear()
    if _gate_table is not None:
        _gate_table.span_clear()


def _drop(table: dict, key: int, ref: weakref.ref) -> None:
    """A dead tensor's entry out of ``table``: only while it is still that tensor's (another
    tensor given the same ``id`` since, on another thread, keeps its own)."""
    entry = table.get(key)
    if entry is not None and entry[0] is ref:
        table.pop(key, None)


def _version(t: torch.Tensor) -> Optional[int]:
    try:
        return t._version
    except RuntimeError:                # "Inference tensors do not track version counter"
        return None
