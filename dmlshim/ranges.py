"""The value ranges of integer device tensors that are known without reading the device.

The integer fixes (``patches/int_range.py``) decide by a tensor's least and greatest value
whether DirectML computes a call exactly; reading them is a device-to-host sync, which on a
GPU waits for the queue to drain.  Where a range is known at no cost (a small tensor copied
from the CPU, ``arange``'s bounds, a result whose range follows from its operands'), it is
kept here, beside the tensor: keyed by ``id``, checked by a weak reference and the tensor's
version, which every in-place write to it or a view of it moves.  A view's range is its
base's (its values are among them), unless it reads the memory as another dtype.  Never in
the tensor's ``__dict__``.

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
    read, or None."""
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
    CPU, float or inference tensor)."""
    if span is None or not isinstance(t, torch.Tensor) or t.is_cpu or not integral(t.dtype) \
            or not _holds(t.dtype, span):
        return
    version = _version(t)
    if version is not None:
        key = id(t)
        _known[key] = (weakref.ref(t, lambda _, key=key: _known.pop(key, None)), version, span, exact)


_LIMITS: Dict[torch.dtype, Span] = {}


def _holds(dtype: torch.dtype, span: Span) -> bool:
    """``dtype`` holds every value of ``span``: else its values wrapped, and the span bounds
    nothing."""
    limits = _LIMITS.get(dtype)
    if limits is None:
        info = torch.iinfo(dtype)
        limits = _LIMITS[dtype] = (info.min, info.max)
    return limits[0] <= span[0] and span[1] <= limits[1]


def forget(t: torch.Tensor) -> None:
    """Drop the span kept for ``t`` and its base (a bound, to be read instead)."""
    for candidate in (t, t._base):
        if candidate is not None:
            _known.pop(id(candidate), None)


def forget_all() -> None:
    """Forget every range kept (``deactivate()``)."""
    _known.clear()


def _version(t: torch.Tensor) -> Optional[int]:
    try:
        return t._version
    except RuntimeError:                # "Inference tensors do not track version counter"
        return None
