"""Binary ops with an operand of no elements fail on the real torch-directml 0.2.5 binary:
its kernels broadcast that operand as if it were 1-D ``[0]``, so ``sub`` of float32 (and
``rsub``, ``isclose`` and ``diff``, which call it), every ``bitwise_xor`` and the in-place
``add_``/``sub_``/``mul_``/``div_``/``pow_``/``bitwise_or_`` ... with a tensor operand raise
'The size of tensor a (0) must match the size of tensor b (3) at non-singleton dimension 1'
for a (0, 1, 3) with a (0, 10, 3) operand, or any result whose last dimension is past 1
(``laws.empty``; measured with OpInfo's samples and by hand).  A result with no elements
needs no computing: its shape, strides and dtype come from the CPU's kernel called on stand-ins
of no memory (expanded 0-dim tensors: torch's own checks and errors, nothing computed) and an
empty device tensor is the answer, before the kernel, no transfer; an in-place call returns
``self``, an ``out=`` is grown to the result's shape.
No public report (docs/conformance.md).
"""
from __future__ import annotations

import torch

from ..laws.empty import BROADCAST_OPS, IN_PLACE_OPS, any_empty
from .. import fallback
from . import _gate, _select
from .dispatcher import Done
from ._patch import Patch

PATCH = Patch("empty_broadcast", "sub/rsub of float32, bitwise_xor and in-place add_/sub_/div_/pow_/bitwise_or_ ... "
                                 "with an operand of no elements raise 'The size of tensor a (0) must match' "
                                 "(measured on the real 0.2.5 binary): the empty result's shape from meta, "
                                 "on the device (nothing to compute)",
              # sub/rsub.Tensor and the in-place ops are in int_broadcast's and int_range's chains,
              # pow_.Tensor in int_pow_zero's: an empty result has nothing to compute
              before=("int_broadcast", "int_range", "int_pow_zero"))


def _stand_in(a):
    """A device operand's stand-in on the CPU: of its shape and dtype, no memory (an expanded
    0-dim tensor; the result has no elements, so nothing reads it); a CPU 0-dim tensor (a
    wrapped number) as is."""
    if isinstance(a, torch.Tensor) and not (a.is_cpu and a.dim() == 0):
        return torch.empty((), dtype=a.dtype).expand(a.shape)
    return a


@_gate.watching(_gate.Watch(empty=True))
def _on_cpu_stand_ins(op, keyset, args, kwargs):
    if not any_empty(args):
        return None
    in_place = op in IN_PLACE_OPS
    outs = _select.out_names(op)
    cpu_args = [torch.empty(a.shape, dtype=a.dtype) if in_place and i == 0 else _stand_in(a)
                for i, a in enumerate(args)]           # self written to: memory of its own
    cpu_kwargs = {k: torch.empty(v.shape, dtype=v.dtype) if k in outs else _stand_in(v) for k, v in kwargs.items()}
    with fallback.guard():
        result = op(*cpu_args, **cpu_kwargs)           # the CPU's checks and errors, nothing computed
    if in_place:
        return Done(args[0])
    if outs:
        out = kwargs[outs[0]]
        _select.grow_out(out, cpu_kwargs[outs[0]])
        return Done(out)
    device = next(a.device for a in args if isinstance(a, torch.Tensor) and not a.is_cpu)
    return Done(torch.empty_strided(result.shape, result.stride(), dtype=result.dtype, device=device))


_kernels = _select.Kernels(__name__, {op: _on_cpu_stand_ins for op in BROADCAST_OPS})
install, uninstall = _kernels.install, _kernels.uninstall
