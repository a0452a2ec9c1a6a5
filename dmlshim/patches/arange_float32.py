"""``arange`` takes its length from float32 on the real torch-directml 0.2.5 binary.

Its kernel (``arange.start_out``, which every ``torch.arange`` reaches) computes the length
as ``ceil((f32(end) - f32(start)) / f32(step))`` in float32, where the CPU computes it in
double: ``arange(2**24, 2**24 + 5)`` has 4 values, ``arange(2**31 - 2, 2**31 + 3)`` and
``arange(2**33, 2**33 + 3)`` none; with fractional steps 18 of 300 random ranges had one value
more or fewer (``arange(14.7, 19.7, 0.05)``: 101 for 100), every one as this law (measured).
Float values past 2**24 differ from the CPU's too.  Such a call, or one with a bound past
2**24, runs on the CPU (a factory: the result is copied to the device once) into the device
``out``; every other on the device.  No public report.
"""
from __future__ import annotations

import torch

from .. import fallback, ranges, trace
from ..laws.integers import arange_differs, cpu_length
from . import _select
from .dispatcher import Done, below
from ._patch import Patch

PATCH = Patch("arange_float32", "arange takes its length from float32: values dropped or added, none past 2**31 "
                                "(measured on the real 0.2.5 binary): on the CPU")

_aten = torch.ops.aten
OPS = (_aten.arange.start_out,)
def _arange(op, keyset, args, kwargs):
    """On the CPU where the device differs; else on the device, the result written into the
    caller's ``out``: the kernel gives its ``out`` a new tensor (failure_modes.md #65), which
    a C++ caller's variable follows but a Python kernel's caller does not (``torch.arange``
    would come back empty), so this kernel never passes a call through."""
    start, end = args[0], args[1]
    step = args[2] if len(args) > 2 else kwargs.get("step", 1)
    if arange_differs(start, end, step, kwargs["out"].dtype):
        return _select.on_cpu_into_outs(op, keyset, args, kwargs)
    out = kwargs["out"]
    with trace.own():                             # the call itself, on the device
        made = op.redispatch(below(keyset), *args, **kwargs)
    if made is not out and out.numel() == 0:      # torch's composite's own: no one else sees it
        with torch.inference_mode(out.is_inference()):
            out.data = made
    elif made is not out:
        with fallback.guard():                    # the shim's own work: auto's retry stands aside
            _select.grow_out(out, made)
    if ranges.integral(out.dtype) and all(type(v) is int for v in (start, end, step)):
        count = cpu_length(start, end, step, out.dtype)      # its values' range, for int_range
        last = start + (count - 1) * step
        if count:
            ranges.remember(out, (min(start, last), max(start, last)))
    return Done(out, record=False)


_kernels = _select.Kernels(__name__, {op: _arange for op in OPS})
install, uninstall = _kernels.install, _kernels.uninstall
