"""Operands that broadcast, as the real torch-directml 0.2.5 binary gets them wrong (defects
``broadcast_copy`` and ``int_broadcast``; measured there, no public report).
"""
from __future__ import annotations

import torch

_aten = torch.ops.aten


def wrong_on_device(self, src) -> bool:
    """``broadcast_copy``: whether ``self.copy_(src)`` (``self`` on the device) is a case
    measured wrong.  A CPU ``src`` of fewer elements lands in ``self``'s first elements, the
    rest kept; a device ``src`` of fewer dimensions fills ``self`` with its first element.
    A source of ``self``'s rank, a 0-dim one and an expanded one are right."""
    if not isinstance(src, torch.Tensor) or src.dim() == 0:
        return False
    return src.numel() < self.numel() if src.is_cpu else src.dim() < self.dim()


# int_broadcast: a binary op that casts an operand reads the operand of fewer dimensions as its
# first value everywhere ([[10, 20, 30], [40, 50, 60]] // [1, 2, 3] gives the dividend;
# OpInfo's binary-ufunc samples with a (5, 1) and a (5,) operand).
# These cast integer operands (they compute in float): wrong for integers of one dtype too
INTEGER_OPS = (_aten.div.Tensor, _aten.div.Tensor_mode, _aten.div_.Tensor, _aten.div_.Tensor_mode,
               _aten.remainder.Tensor, _aten.remainder_.Tensor, _aten.floor_divide.default,
               _aten.floor_divide_.Tensor, _aten.atan2.default, _aten.atan2_.default,
               _aten.pow.Tensor_Tensor, _aten.pow_.Tensor)
# these cast an operand only when the dtypes differ (int64 + int64 of different ranks is right)
# Not rsub.Tensor: the real binary's rsub.Scalar (``7 - x``) calls it with the number wrapped on
# the device, which no Python kernel can receive (torch's INTERNAL ASSERT "tensor.device().is_cpu()")
MIXED_OPS = (_aten.add.Tensor, _aten.add_.Tensor, _aten.sub.Tensor, _aten.sub_.Tensor,
             _aten.maximum.default, _aten.minimum.default,
             _aten.eq.Tensor, _aten.ne.Tensor, _aten.lt.Tensor, _aten.le.Tensor, _aten.gt.Tensor, _aten.ge.Tensor,
             _aten.mul.Tensor, _aten.mul_.Tensor)
OPS = INTEGER_OPS + MIXED_OPS


def _integral(t) -> bool:
    return not (t.is_floating_point() or t.is_complex())


def ranks_differ(a, b, integer_op: bool = True) -> bool:
    """Two tensors, neither 0-dim, of different ranks, one of them cast: of different dtypes,
    or both integer or bool for an op of :data:`INTEGER_OPS`.  The failing case."""
    return (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.dim() > 0 and b.dim() > 0
            and a.dim() != b.dim() and (a.dtype != b.dtype or (integer_op and _integral(a) and _integral(b))))


# masked_fill_rank: masked_fill_ (which masked_fill's composite calls) of a ``self`` or mask of
# 5 dimensions is refused ('m_device->CreateOperator'), of 6 to 8 ends the process ('Check
# failed: rank <= DML_TENSOR_DIMENSION_COUNT_MAX'); up to 4 is right, and so is a 1-D
# masked_fill of the same elements, flattened, at every rank (measured: OpInfo's nanquantile
# of a 4-D input with a tensor q and keepdim, then by hand, float32 and int64, a broadcast
# mask too).  ``where`` of 6 or more dimensions ends the process too (not fixed here).
MASKED_FILL_RANKS = 4


def masked_fill_rank(self, mask) -> int:
    """The rank the kernel gets: ``self``'s or the mask's, the larger."""
    return max(self.dim(), mask.dim()) if isinstance(mask, torch.Tensor) else self.dim()
