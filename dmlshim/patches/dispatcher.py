"""The dispatcher-level net: DirectML's silent-quirk fixes, however the aten op is reached.

The ``mul`` patch fixes float x bool (a **bool** result, values lost: DirectML#686, #737;
failure_modes.md #17) at the Python entry points (``torch.mul``, ``Tensor.__mul__`` ...).
It cannot see the same aten op reached any other way: C++ composite ops
(``torch.ldexp(bool_t, int_t)`` is ``at::mul(self, at::pow(2., other))``), calls made by
kernels below Autograd (``mul.Scalar`` -> ``mul.Tensor``; torch-directml's ``mul.Tensor`` is
torch's structured wrapper around its ``mul.out`` kernel), ``torch.ops.aten.mul.Tensor``,
TorchScript, and the multiplications ``backward()`` runs (``amax``'s backward is
``(grad / count) * mask`` with a bool mask: silently wrong gradients).  For each aten
overload in ``FIXES`` this module registers a Python kernel at the **BackendSelect**
dispatch key (``torch.library.Library("aten", "IMPL")``, ``with_keyset=True``).  A call whose
dispatch key set holds the target backend (``PrivateUse1`` for ``privateuseone``) gets its
arguments fixed (here ``mul.coerce_bool_operands``: the bool operand cast on the device to
``torch.result_type``, or to ``self``'s dtype for ``mul_``) and is redispatched below
BackendSelect to the backend kernel; every other call is redispatched unchanged.
torch-directml's (and the emulator's) PrivateUse1 kernels are not replaced, and
``uninstall()`` destroys the ``Library``, which removes the registrations.

Why BackendSelect.  It sits below Autograd and ADInplaceOrView and above the backend, and it
is in every thread's default included dispatch key set (``c10::default_included_set``),
which ``torch.inference_mode()`` leaves alone; torch itself puts non-factory ops there
(``aten::is_pinned``).  So the kernel sees every dispatch of the overload: Python calls, C++
composites, calls from kernels below Autograd, ``backward()`` on the autograd engine's
thread, inference tensors, any thread; autograd records the call above it with the
caller's operands, and torch's ADInplaceOrView kernels still bump version counters.
The alternatives, measured by ``benchmarks/dispatcher_overhead.py --candidates`` (64 floats,
1 thread, µs added to the minimum per call; the bool column is the fixed call's own time,
against 15.6 µs (2.13) / 17.4 µs (2.4.1) for ``torch.mul(x, mask.float())`` by hand)::

    torch 2.13 | 2.4.1        CPU mul     CPU mul*bool  CPU add     dev mul      dev mul*bool  dev add
    shim off                  1.19|1.28   2.28|2.71     1.23|1.28   8.38|9.26    (bool result)  8.22|9.06
    BackendSelect (chosen)   +3.0|+3.6   +3.3|+3.8      0|0       +6.5|+7.4 *  29.5|31.6      0|0
    (a) ADInplaceOrView      +2.8|+3.5   +3.0|+3.6      0|0       +3.4|+3.9    23.8|25.4      0|0
    (b) TorchDispatchMode    +5.0|+4.7   +5.2|+5.2    +3.8|+3.1   +5.2|+4.9    26.0|25.9    +4.1|+3.6
    (c) AutogradPrivateUse1    0|0         0|0          0|0       +3.9|+4.9    24.9|26.1      0|+0.4

    * the emulator computes with CPU ops, so its inner CPU mul passes the net too (+3.0|+3.6);
      on a real backend about +3.5|+3.8, as (a) and (c).

(a), a kernel at ADInplaceOrView redispatching with ``_after_ADInplaceOrView_keyset``, costs
the same and covers less, and breaks autograd: inference tensors carry no ADInplaceOrView
key, so inside ``torch.inference_mode()`` nothing they touch is seen; kernels below Autograd
call ops with ADInplaceOrView excluded (``AutoDispatchBelowADInplaceOrView``), so on torch
2.13, where ``ldexp.Tensor`` became CompositeExplicitAutograd, ``torch.ldexp(bool, int)`` stays
bool (and under ``no_grad`` too); and ``mul_.Tensor``/``mul.out`` have torch's own
ADInplaceOrView kernel, which the registration replaces: in-place muls stop bumping the
version counter, so an in-place change to a tensor saved for backward goes undetected.
(b), a ``TorchDispatchMode``, makes every aten op pay (``add`` too) and only on the thread
that pushed it: a server's worker thread escapes it.  (c), an ``AutogradPrivateUse1``
kernel, leaves CPU calls alone, but it replaces the autograd kernel (it must redispatch to
``AutogradOther``, which holds the same ``VariableType`` kernel, to keep autograd), sees
nothing under ``inference_mode`` (Autograd keys excluded) nor below Autograd (``ldexp`` on
2.13 again); torch-directml registers AutogradPrivateUse1 kernels of its own
(``aten::reshape``).

The price of BackendSelect: while active, every call of a ``FIXES`` overload pays a Python
kernel on every device, the CPU included: +3.0-3.8 µs per mul, +5.6-6.8 µs for ``x * 2.5``
(a wrapped number reaches a Python kernel as a Python number, which ``redispatch`` refuses
for a Tensor argument, so such calls go through the overload's call for one dispatch key,
``OpOverload._op_dk``, which wraps it back); other ops pay nothing; a mul from a C++ thread
takes the GIL.  Fixes are made on the device (no transfer) and show in ``dmlshim.report()``
under the aten name (``aten::mul.Tensor``, action ``coerce``); calls needing nothing are not
recorded.  The ``mul`` patch stays (+0.6 µs per Python-level mul): it fixes the Python entry
points before the dispatcher and names them in the report, carries auto's error handling
inline (without it, ``auto`` would wrap those entry points anyway), and keeps working where
the net is not installed (``fallback="off"`` only observes); with both, a Python-level
``float * bool`` is fixed once, by the wrapper, and the net passes it through.
"""
from __future__ import annotations

import time
from typing import Callable, Dict, Optional, Tuple

import torch

from .. import trace
from ._wrap import Context
from .mul import coerce_bool_operands

_aten = torch.ops.aten
_BOOL = torch.bool
Fix = Callable[[tuple, dict], Optional[Tuple[tuple, dict]]]


def _bool_operand(inplace: bool) -> Fix:
    """mul's fix, ``mul.coerce_bool_operands``, behind a cheap test for a bool operand
    (the dispatcher passes ``self`` and ``other`` positionally)."""
    def fix(args, kwargs):
        if getattr(args[0], "dtype", None) is _BOOL or getattr(args[1], "dtype", None) is _BOOL:
            return coerce_bool_operands(args, kwargs, inplace)
        return None
    return fix


# aten overload -> fix(args, kwargs) -> fixed (args, kwargs), or None when nothing needs
# fixing.  Arguments are as the dispatcher passes them (kwarg-only ones, e.g. out=, in
# kwargs; a wrapped number as a Python number).  Called only for calls with a tensor on
# the target device.  One entry per overload the quirk reaches; add future silent
# quirks here.
FIXES: Dict[torch._ops.OpOverload, Fix] = {
    # failure_modes.md #17, DirectML#686, #737: float x bool gives bool.  torch-directml
    # has one kernel, mul.out (dml_registered_ops.txt); mul.Tensor and mul_.Tensor reach it
    # through torch's structured wrappers; the emulator has a kernel per overload.
    _aten.mul.Tensor: _bool_operand(inplace=False),
    _aten.mul_.Tensor: _bool_operand(inplace=True),
    _aten.mul.out: _bool_operand(inplace=False),
}

KEY = "BackendSelect"
_BELOW = torch._C._dispatch_keyset_full_after(torch._C.DispatchKey.BackendSelect)
_NUMBERS = (bool, int, float, complex)
_library = None


def backend_key(target: str):
    """The dispatch key of device type ``target`` (``privateuseone`` -> ``PrivateUse1``,
    ``cuda`` -> ``CUDA``), or None if torch knows none."""
    try:
        return getattr(torch._C.DispatchKey, torch._C._dispatch_key_for_device(target))
    except (RuntimeError, AttributeError):
        return None


def _kernel(op, fix: Fix, backend, name: str):
    redispatch, call_for_key, below = op.redispatch, op._op_dk, _BELOW

    def next_kernel(keyset, args, kwargs):
        # A wrapped number (the 2.5 of x * 2.5) reaches a Python kernel as a Python
        # number, which redispatch() refuses for a Tensor argument; the overload's call
        # for one dispatch key wraps it back as torch's Python binding does (+2.5 us).
        for a in args:
            if type(a) in _NUMBERS:
                return call_for_key((keyset & below).highestPriorityTypeId(), *args, **kwargs)
        return redispatch(keyset & below, *args, **kwargs)

    def kernel(keyset, *args, **kwargs):
        if keyset.has(backend):                        # a tensor on the target device
            start = time.perf_counter()
            fixed = fix(args, kwargs)
            if fixed is not None:
                result = next_kernel(keyset, *fixed)
                trace.record(name, "coerce", time.perf_counter() - start, args=args, kwargs=kwargs)
                return result
        return next_kernel(keyset, args, kwargs)
    return kernel


def install(ctx: Context) -> None:
    global _library
    backend = backend_key(ctx.target)
    if _library is not None or backend is None:
        return
    library = torch.library.Library("aten", "IMPL")
    for op, fix in FIXES.items():
        name = op.name()                               # "aten::mul.Tensor"
        library.impl(name.split("::", 1)[1], _kernel(op, fix, backend, name), KEY, with_keyset=True)
    _library = library


def uninstall() -> None:
    global _library
    library, _library = _library, None
    if library is not None:
        library._destroy()                             # removes the kernels from the dispatcher


def registered() -> Dict[str, bool]:
    """``{"aten::mul.Tensor": True, ...}``: whether each ``FIXES`` overload has a
    BackendSelect kernel now (read from ``torch._C._dispatch_dump``)."""
    return {op.name(): any(line.startswith(KEY + ":")
                           for line in torch._C._dispatch_dump(op.name()).splitlines())
            for op in FIXES}
