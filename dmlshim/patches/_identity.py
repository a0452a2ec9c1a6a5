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

from .. import _torch_compat

__all__ = ["TABLES", "prime", "alias", "forget"]

_lock = threading.Lock()
_added: Dict[int, List[Any]] = {}        # id(wrapper) -> the tables it was added to


def _island_metadata():
    from .. import islands
    return islands._METADATA                                                  # our own: a set


# Each returns a mutable list or set that torch (or dmlshim) tests with ``func in table``, or
# None where this torch lacks it: _torch_compat.check() names that at activate() (a WARNING,
# and ``python -m dmlshim info``), so a missing table is never a silent change.
TABLES: List[Callable[[], Any]] = [_torch_compat.allowed_methods, _torch_compat.device_constructors,
                                   _torch_compat.tensor_methods, _island_metadata]

_tables: List[Any] = []


def prime() -> List[Any]:
    """The tables, computed once (before any wrapper exists, so that the cached ones hold
    torch's originals)."""
    with _lock:
        if not _tables:
            for get in TABLES:
                table = get()                   # None: missing, and reported by check()
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
