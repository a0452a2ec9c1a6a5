"""``bmm``/``baddbmm`` with a CPU operand end the process on the real torch-directml 0.2.5
binary (``terminate called after throwing an instance of 'c10::Error'``, from
``DMLTensor.cpp:30``: its check that every operand is a DirectML tensor, thrown where it
cannot be caught; ``torch.matmul`` of 3-D tensors reaches ``bmm``).  Other kernels raise
that check as a ``RuntimeError``, and ``mm``/``addmm`` take a CPU operand (measured).  The
fix raises torch's own error for operands on two devices before the kernel runs, as the CPU
and CUDA do.  Static: a probe would end the process.  No public report (docs/defects.md).
"""
from __future__ import annotations

import torch

from . import _gate, _select
from ._patch import Patch

PATCH = Patch("bmm_cpu_operand", "bmm/baddbmm with a CPU operand end the process (measured on the real 0.2.5 "
                             "binary): torch's error for operands on two devices, before the kernel",
              # it only raises torch's error, so it goes first: after them, int_addmm's fixed call of
              # a fractional alpha was redispatched past it, to the kernel that ends the process
              # (issue 49)
              before=("int_range", "int_addmm"))

_aten = torch.ops.aten
OVERLOADS = (_aten.bmm.default, _aten.bmm.out, _aten.baddbmm.default, _aten.baddbmm_.default,
             _aten.baddbmm.out)


@_gate.watching(_gate.Watch(off_target=True))
def _refused(op, keyset, args, kwargs):
    tensors = [a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)]
    devices = {str(t.device) for t in tensors}
    if len(devices) < 2:
        return None
    first, other = sorted(devices, key=lambda d: d == "cpu")[:2]
    raise RuntimeError(f"Expected all tensors to be on the same device, but found at least two "
                       f"devices, {first} and {other}! (while checking arguments for {op.name()}; "
                       f"dmlshim: on DirectML this call would end the process)")


_kernels = _select.Kernels(__name__, {op: _refused for op in OVERLOADS})
install, uninstall = _kernels.install, _kernels.uninstall
