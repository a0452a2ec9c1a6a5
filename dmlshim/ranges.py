"""The value ranges of integer device tensors that are known without reading the device.

The integer fixes (``patches/int_range.py``) decide by a tensor's least and greatest value
whether DirectML computes a call exactly; reading them is a device-to-host sync, which on a
GPU waits for the queue to drain.  Where a range is known at no cost (a small tensor copied
from the CPU, ``arange``'s bounds, a result whose range follows from its operands'), it is
kept here, beside the tensor: keyed by ``id``, checked by a weak reference and the tensor's
version, which every in-place write to it or a view of it moves.  A view's range is its
base's (its values are among them), unless it reads the memory as another dtype.  Never in
the tensor's ``__dict__``.

A floating tensor has a span only where its values are known to be whole numbers the dtype
holds exactly (a bool mask cast to float, a sum of one, within 2**24 for float32): a mask's
``sum(1).int()`` is a length whose range is known (SenseVoice's encoder).

Not seen: a write through ``.data`` (another version counter) or through memory torch does
not track; an inference tensor has no version, so none is kept for one.
"""
from __future__ import annotations

import weakref
from typing import Dict, Optional, Tuple

import torch

from .laws.integers import Span, integral  # noqa: F401  (integral: the ranges' dtypes, re-exported)
# id -> (weak reference, version, span, exact: the least and greatest values themselves, not a bound)
_known: Dict[int, Tuple[weakref.ref, int, Span, bool]] = {}


def known_span(t: torch.Tensor) -> Optional[Span]:
    """``(least, greatest)`` of integer device tensor ``t``'s values, known without a device
    read, or None.  For a floating ``t``: its values are whole numbers within the span."""
    entry = _entry(t)
    return entry[2] if entry is not None else None


def known_exactly(t: torch.Tensor) -> bool:
    """Whether ``t``'s span kept is its values' own (read, copied over, filled), not a bound
    (a view's is its base's, a bound)."""
    entry = _known.get(id(t))
    return entry is not None and entry[3] and entry[0]() is t and entry[1] == _version(t)


def _entry(t):
    base = t._base
    for candidate in (t, base if base is not None and base.dtype == t.dtype else None):
        entry = _known.get(id(candidate)) if candidate is not None else None
        if entry is not None and entry[0]() is candidate and entry[1] == _version(candidate):
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
        _known[key] = (weakref.ref(t, lambda _, key=key: _known.pop(key, None)), version, span, exact)


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
        _unwritten[key] = (weakref.ref(t, lambda _, key=key: _unwritten.pop(key, None)), version)


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


def forget_all() -> None:
    """Forget every range kept (``deactivate()``)."""
    _known.clear()
    _unwritten.clear()


def _version(t: torch.Tensor) -> Optional[int]:
    try:
        return t._version
    except RuntimeError:                # "Inference tensors do not track version counter"
        return None
