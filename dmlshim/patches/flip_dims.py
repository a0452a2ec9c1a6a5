"""``flip`` with a negative dimension, or of a 0-dim tensor, ends the process on the real
torch-directml 0.2.5 binary (signal 11: ``x.flip(-1)``, 1-D to 3-D; ``flip(0)`` of a 0-dim
tensor).  The same call with the dimension counted from 0 is right (measured), so the fix
counts it from 0, on the device; a 0-dim tensor, and a dimension out of range (torch's
error), run on the CPU.  Static: a probe would end the process.  No public report (OpInfo's
``flip`` samples; docs/defects.md).
"""
from __future__ import annotations

import torch

from . import _select
from ._patch import Patch

PATCH = Patch("flip_dims", "flip with a negative dimension or of a 0-dim tensor ends the process (measured on "
                           "the real 0.2.5 binary): the dimension counted from 0, on the device",
              # int_range keeps the span of the flip this one fixes (_select.pass_on)
              after=("int_range",))

_aten = torch.ops.aten
OVERLOADS = (_aten.flip.default, _aten.flip.out)


def _dims_from_zero(op, keyset, args, kwargs):
    self, dims = args[0], args[1]
    rank = self.dim()
    if rank == 0 or any(not -rank <= d < rank for d in dims):
        return _select.on_cpu(op, args, kwargs)
    if all(d >= 0 for d in dims):
        return None
    return (self, [d % rank for d in dims], *args[2:]), kwargs


_kernels = _select.Kernels(__name__, {op: _dims_from_zero for op in OVERLOADS})
install, uninstall = _kernels.install, _kernels.uninstall
