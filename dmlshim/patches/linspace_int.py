"""``linspace`` of an integer dtype is silently wrong on the real torch-directml 0.2.5 binary,
and of bool refused: its kernel (``linspace.out``, which every overload reaches) truncates
the step to the integer type (``linspace(0, 10, 7)``: ``0, 1, ... 6``; ``-2.0 .. -3`` in 50:
``-2`` everywhere), where the CPU steps in double and builds the second half from the end;
bool raises ``value cannot be converted to type uint8_t without overflow`` for a negative
start.  Float dtypes are right (measured with OpInfo's int64 and bool samples, and int8 ...
uint8 ramps).  Such a call runs on the CPU (a factory: the result is copied to the device
once) into the device ``out``.  No public report.
"""
from __future__ import annotations

import torch

from . import _select
from ._patch import Patch

PATCH = Patch("linspace_int", "linspace of an integer dtype truncates its step, of bool is refused (measured on "
                              "the real 0.2.5 binary): on the CPU")

_aten = torch.ops.aten
OPS = (_aten.linspace.out,)


def _integral_out(op, keyset, args, kwargs):
    out = kwargs.get("out")
    if out is None or out.is_floating_point() or out.is_complex():
        return None
    return _select.on_cpu_into_outs(op, keyset, args, kwargs)


_kernels = _select.Kernels(__name__, {op: _integral_out for op in OPS})
install, uninstall = _kernels.install, _kernels.uninstall
