"""Where dmlshim's BackendSelect kernels sit: behind a compiled gate, or there themselves.

BackendSelect is in every thread's included key set, so a Python kernel there runs on
every call of its aten overload, on the CPU and CUDA too (about 3 us each; a CPU
``a * b`` took 3.8x as long with ``activate()``).  Where a C++ compiler and ninja exist,
``csrc/gate.cpp`` registers a boxed kernel there instead, which sends only the calls with
a tensor or a ``device=`` of the target device to the Python kernel (registered at the
*trampoline* key, FPGA, that no tensor carries) and every other call straight on: an unboxed
(typed) kernel for the overloads CPU models reach most, a boxed one for the rest.  Without
a compiler (most Windows machines), or with ``DMLSHIM_GATE=python``, the Python kernel
sits at BackendSelect itself, as before.  Both paths run the same Python kernel, so a fix
behaves the same; docs/performance.md has what each costs.
"""
from __future__ import annotations

import functools
import logging
import os
import warnings
from typing import Optional

import torch

from .. import cpp_build, islands

SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "csrc", "gate.cpp")
TRAMPOLINE = "FPGA"
_log = logging.getLogger("dmlshim")


@functools.lru_cache(maxsize=None)
def _extension():
    ext = cpp_build.build("dmlshim_gate", SOURCE)
    ext.set_special(islands.SPECIAL)        # a call holding one of these is not plain (the front)
    return ext


def extension(mode: str = "auto"):
    """The compiled gate's module, or None where ``mode`` is ``"python"`` or (``"auto"``)
    it cannot be built (logged once at INFO, the reason named).

    Raises:
        RuntimeError: ``mode="compiled"`` and the build failed or no compiler exists.
    """
    if mode == "python":
        return None
    try:
        return _extension()
    except Exception as exc:                             # no compiler, or a failed build
        if mode == "compiled":
            raise RuntimeError(f"DMLSHIM_GATE=compiled: the compiled gate could not be built: {exc}") from exc
        _unavailable(str(exc))
        return None


@functools.lru_cache(maxsize=None)
def _unavailable(reason: str) -> None:
    _log.info("dmlshim: no compiled gate (%s); fixes at BackendSelect run as Python kernels "
              "on every call, CPU included", reason)


def below() -> torch._C.DispatchKeySet:
    """The keys under BackendSelect, less the trampoline's once the gate is built: what a
    Python kernel here redispatches to (``dispatcher.below``)."""
    every = torch._C._dispatch_keyset_full_after(torch._C.DispatchKey.BackendSelect)
    return _extension().below() if _extension.cache_info().currsize else every


def register(library: torch.library.Library, op: torch._ops.OpOverload, kernel, target: str,
             mode: str = "auto", *, always: bool = False) -> Optional[object]:
    """Register ``kernel`` (``with_keyset``) for ``op``: behind the compiled gate where
    ``mode`` allows one (returns its registration: ``destroy()`` it with ``library``), else
    at BackendSelect itself (returns None).  ``always``: every call goes to ``kernel`` (an
    op whose CPU arguments may decide, ``_fft_c2r``'s islands)."""
    name = op.name().split("::", 1)[1]
    ext = extension(mode)
    with warnings.catch_warnings():
        # torch has BackendSelect kernels of its own for _to_copy and full; ours stand in
        # for them while installed (the gate adds their device's key, as they do)
        warnings.filterwarnings("ignore", "(?s).*Overriding a previously registered kernel")
        if ext is None:
            library.impl(name, kernel, "BackendSelect", with_keyset=True)
            return None
        library.impl(name, kernel, TRAMPOLINE, with_keyset=True)
    schema = op._schema
    typed = None if always else _typed(ext, schema.name, schema.overload_name, target)
    return typed or ext.gate(schema.name, schema.overload_name, target, always)


def _typed(ext, name: str, overload: str, target: str):
    """The typed (unboxed) gate of a hot overload (``csrc/gate.cpp``'s ``typed_gates``), or
    None: not one of them, or its C++ signature differs in this torch (then the boxed one)."""
    try:
        return ext.typed_gate(name, overload, target)
    except RuntimeError as exc:
        _log.debug("dmlshim: no typed gate for %s.%s (%s)", name, overload, exc)
        return None
