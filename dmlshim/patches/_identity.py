"""torch's identity tables: where torch recognises a function by the object itself.

A ``__torch_function__`` handler receives the attribute as it is *now* (``torch.Tensor.to``
is dmlshim's wrapper while dmlshim is active) and some of torch compares it with
objects it saved earlier: a lazy module's ``UninitializedParameter`` accepts only
``_allowed_methods`` (else ``ValueError: Attempted to use an uninitialized
parameter``), and ``torch.set_default_device`` / ``with torch.device(...)`` move only
the factories of ``_device_constructors()`` (else they silently make CPU tensors).
:func:`alias` adds a wrapper wherever its original sits in such a table, so both are
recognised; :func:`forget` takes it out again. See docs/transparency.md.
"""
from __future__ import annotations

import threading
from typing import Any, Callable, Dict, List

import torch

__all__ = ["TABLES", "prime", "alias", "forget"]

_lock = threading.Lock()
_added: Dict[int, List[Any]] = {}        # id(wrapper) -> the tables it was added to


def _allowed_methods():
    return torch.nn.parameter.UninitializedTensorMixin._allowed_methods       # a list


def _device_constructors():
    from torch.utils import _device
    return _device._device_constructors()                                   # lru_cache'd set


def _tensor_methods():
    # torch.overrides.is_tensor_method_or_property (torch.fx's tracer); absent on old torch
    get = getattr(torch.overrides, "_get_tensor_methods", None)
    return get() if get is not None else None


def _island_metadata():
    from .. import islands
    return islands._METADATA                                                  # our own: a set


# Each returns a mutable list or set that torch (or dmlshim) tests with ``func in table``.
TABLES: List[Callable[[], Any]] = [_allowed_methods, _device_constructors, _tensor_methods,
                                   _island_metadata]

_tables: List[Any] = []


def prime() -> List[Any]:
    """The tables, computed once (before any wrapper exists, so that the cached ones hold
    torch's originals)."""
    with _lock:
        if not _tables:
            for get in TABLES:
                try:
                    table = get()
                except Exception:  # noqa: BLE001 - a private table this torch lacks
                    continue
                if isinstance(table, (list, set)):
                    _tables.append(table)
        return _tables


def alias(original: Any, wrapper: Any) -> None:
    """Put ``wrapper`` into every table that holds ``original``."""
    for table in prime():
        try:
            present = original in table and wrapper not in table
        except TypeError:                   # an unhashable object: in no set
            continue
        if present:
            table.append(wrapper) if isinstance(table, list) else table.add(wrapper)
            with _lock:
                _added.setdefault(id(wrapper), []).append(table)


def forget(wrapper: Any) -> None:
    """Take ``wrapper`` out of the tables :func:`alias` put it in."""
    with _lock:
        tables = _added.pop(id(wrapper), ())
    for table in tables:
        while wrapper in table:
            table.remove(wrapper)
