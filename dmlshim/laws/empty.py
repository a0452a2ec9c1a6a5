"""Unary ops and ``pow`` of an input with no elements come back with another dtype or shape
on the real torch-directml 0.2.5 binary (defect ``empty_unary``; measured with OpInfo's
(1, 0, 3) samples, no public report): float16 ``log2``/``log10`` give float32, integer
``sinc`` the input's dtype, an int64 or bool ``pow`` int32, bool ``bitwise_not`` shape ``[0]``.
"""
from __future__ import annotations

import torch


def empty(args) -> bool:
    """A tensor operand with no elements (the result has none either): the case."""
    return any(isinstance(a, torch.Tensor) and a.numel() == 0 for a in args[:2])


# empty_broadcast: binary kernels of the real binary broadcast an operand with no elements as
# if it were 1-D ``[0]`` (measured with OpInfo's (0, 1, 3) with (0, 10, 3) samples and by hand):
# the call raises 'The size of tensor a (0) must match the size of tensor b (3) ...' unless
# ``[0]`` broadcasts against the result, i.e. unless its last dimension is 0 or 1 ((2, 1, 0)
# with (2, 5, 0), (1, 0) with (5, 1) and (3, 0) with (3, 1) are right).  sub/rsub of float32
# only (float16 and integers right); every dtype of bitwise_xor; the in-place ops below with a
# tensor operand, every dtype (their number overloads are right); add, mul, div, atan2 ...,
# clamp_, lerp_, masked_fill_, copy_ and the logical ops are right.  ``mul_`` fails the same
# way: the dispatcher net's ``mul`` fix answers an empty ``self`` (``_empty_inplace``).  Not
# modelled: with a 0-dim device operand ((0, 3) - tensor(2.)) float32 ``sub`` and ``add_`` return
# shape [0] instead of raising, and float32 ``rsub`` of (0, 3) with (1, 3) or (0,) with (1,)
# raises E_INVALIDARG; the fix covers them (an operand with no elements).
_aten = torch.ops.aten
FLOAT32_OPS = (_aten.sub.Tensor, _aten.sub.out, _aten.rsub.Tensor)
ANY_DTYPE_OPS = (_aten.bitwise_xor.Tensor, _aten.bitwise_xor.Scalar, _aten.bitwise_xor.Scalar_Tensor,
                 _aten.bitwise_xor.Tensor_out, _aten.bitwise_xor.Scalar_out)
IN_PLACE_OPS = (_aten.add_.Tensor, _aten.sub_.Tensor, _aten.div_.Tensor, _aten.div_.Tensor_mode,
                _aten.pow_.Tensor, _aten.remainder_.Tensor, _aten.atan2_.default, _aten.addcmul_.default,
                _aten.addcdiv_.default, _aten.bitwise_and_.Tensor, _aten.bitwise_or_.Tensor,
                _aten.bitwise_xor_.Tensor, _aten.bitwise_xor_.Scalar)
BROADCAST_OPS = FLOAT32_OPS + ANY_DTYPE_OPS + IN_PLACE_OPS


def any_empty(args) -> bool:
    """A tensor operand with no elements among the first three arguments: the fix's case (the
    result has none either, or the call is the CPU's error)."""
    for a in args[:3]:
        if isinstance(a, torch.Tensor) and a.numel() == 0:
            return True
    return False


def flattened_refused(op, args) -> bool:
    """``empty_broadcast``: whether the real binary refuses ``op(*args)`` (the law above):
    an operand with no elements, the result's last dimension past 1, and for
    :data:`FLOAT32_OPS` a float32 ``self``."""
    tensors = [a for a in args[:3] if isinstance(a, torch.Tensor)]
    if not any(t.numel() == 0 for t in tensors) or (op in FLOAT32_OPS and tensors[0].dtype != torch.float32):
        return False
    try:
        shape = torch.broadcast_shapes(*(t.shape for t in tensors))
    except RuntimeError:                # the CPU's own error: the kernel raises it
        return False
    if op in IN_PLACE_OPS and tuple(shape) != tuple(tensors[0].shape):
        return False                    # torch's own in-place check first: "doesn't match the broadcast shape"
    return len(shape) > 0 and shape[-1] > 1

