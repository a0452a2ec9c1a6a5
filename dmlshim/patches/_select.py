"""The reported-defect fixes' BackendSelect kernels: their table, install and probe gating.

A fix sits at the **BackendSelect** key of each aten overload it names, as the dispatcher
net's do (``dispatcher.py`` explains why BackendSelect), so it holds however the op is
reached (Python, C++ composites, TorchScript, ``backward()``, ``inference_mode``, any
thread).  Its kernel is the net's, ``dispatcher.fix_kernel`` (its docstring says what a
fix returns); here it stands aside, passing every call through unchanged, for the shim's
own work (``fallback.busy()``) and for every call made while :func:`standing_aside`
(probes: they must see the raw device, ``backward()`` included, which runs on autograd's
device thread).
"""
from __future__ import annotations

import contextlib
import threading
from typing import Dict, Optional

import torch

from .. import fallback, trace
from .dispatcher import Done, Fix, backend_key, fix_kernel


_aside = 0                  # > 0 while a probe runs: fixes stand aside on every thread
_aside_lock = threading.Lock()


@contextlib.contextmanager
def standing_aside():
    """The reported-defect fixes pass every call through, on every thread, for the block
    (a probe's milliseconds: ``dmlshim.reported``)."""
    global _aside
    with _aside_lock:
        _aside += 1
    try:
        yield
    finally:
        with _aside_lock:
            _aside -= 1


def aside() -> bool:
    """Whether the fixes stand aside now (a probe, or the shim's own work)."""
    return _aside > 0 or fallback.busy()


def on_cpu(op, args, kwargs) -> Done:
    """The call run on the CPU, its results back on the device (always right)."""
    name = op.name()
    return Done(trace.call(name, lambda f, a, k: ("cpu", fallback.run_on_cpu(f, a, k, op=name)),
                           op, args, kwargs), record=False)


def register(table: Dict[torch._ops.OpOverload, Fix], target: str) -> Optional[torch.library.Library]:
    """A ``Library`` holding ``table``'s kernels at BackendSelect (None: no dispatch key
    for ``target``).  ``library._destroy()`` removes them."""
    backend = backend_key(target)
    if backend is None:
        return None
    library = torch.library.Library("aten", "IMPL")
    for op, fix in table.items():
        library.impl(op.name().split("::", 1)[1], fix_kernel(op, fix, backend, aside=aside),
                     "BackendSelect", with_keyset=True)
    return library


class Kernels:
    """``install(ctx)``/``uninstall()`` for a patch module made of BackendSelect fixes."""

    def __init__(self, table: Dict[torch._ops.OpOverload, Fix]):
        self.table = table
        self._library = None

    def install(self, ctx) -> None:
        if self._library is None:
            self._library = register(self.table, ctx.target)

    def uninstall(self) -> None:
        library, self._library = self._library, None
        if library is not None:
            library._destroy()

    def installed(self) -> bool:
        return self._library is not None
