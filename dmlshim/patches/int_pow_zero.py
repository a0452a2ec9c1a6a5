"""Integer ``pow`` of a zero base to a negative exponent gives the int32 maximum on the real
torch-directml 0.2.5 binary (it computes in float: ``0 ** -1`` is inf, saturated), where the
CPU gives 0 (``powi``: any base but 1 and -1 to a negative power).  Other bases are right
(measured with OpInfo's int64 ``__rpow__`` samples and zero, +-1, +-2, 3 to exponents -3 ... 8).
Fixed on the device: those elements set to 0 after the call.  ``pow.Tensor_Tensor``'s
operands of different ranks get leading size-1 dimensions here too (``int_broadcast``'s
fix: the first fix in an overload's chain that answers is the only one).  No public report.
"""
from __future__ import annotations

import torch

from ..laws.integers import zero_to_negative
from . import _select
from .dispatcher import Done
from .int_broadcast import leading_ones
from ._patch import Patch

PATCH = Patch("int_pow_zero", "integer pow of a zero base to a negative exponent gives the int32 maximum "
                              "(measured on the real 0.2.5 binary): those elements 0, on the device",
              # it computes the whole call itself (_select.itself, int_broadcast's leading ones
              # included), so it answers before the fixes of pow it would otherwise hand on to
              before=("bool_exp2", "int_broadcast"))

_aten = torch.ops.aten
OPS = (_aten.pow.Tensor_Tensor, _aten.pow_.Tensor, _aten.pow.Scalar)


def _zeroed(op, keyset, args, kwargs):
    base, exponent = args[0], args[1]
    if not zero_to_negative(base, exponent):
        return None
    mask = exponent < 0 if not isinstance(base, torch.Tensor) else (base == 0) & (exponent < 0)
    if isinstance(base, torch.Tensor) and base.dim() and exponent.dim() and base.dim() != exponent.dim():
        base, exponent = leading_ones(base, exponent)   # int_broadcast's fix: this one answers first
    result = _select.itself(op, keyset, base, exponent, *args[2:], **kwargs)
    return Done(result.masked_fill_(mask, 0))


_kernels = _select.Kernels(__name__, {op: _zeroed for op in OPS})
install, uninstall = _kernels.install, _kernels.uninstall
