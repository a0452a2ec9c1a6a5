"""Integer ``div``/``remainder``/``floor_divide``/``atan2``/``pow`` of operands of different
ranks are silently wrong on the real torch-directml 0.2.5 binary.

The operand with fewer dimensions is read as its first value everywhere: ``[[10, 20, 30],
[40, 50, 60]] // [1, 2, 3]`` gives ``[[10, 20, 30], [40, 50, 60]]`` (measured; as a copy from a
source of fewer dimensions, defect ``broadcast_copy``).  Float operands, operands of the same
rank ((2, 3) with (2, 1), (2, 3) with (1, 3)), a 0-dim operand (``x // 2``) and operands
expanded beforehand are right, so the fix gives the smaller operand leading size-1 dimensions
(a view) and stays on the device.  No public report (OpInfo's binary-ufunc samples with a (5, 1) and a (5,) operand).
"""
from __future__ import annotations

import torch

from . import _select

_aten = torch.ops.aten

OPS = (_aten.div.Tensor, _aten.div.Tensor_mode, _aten.div_.Tensor, _aten.div_.Tensor_mode,
       _aten.remainder.Tensor, _aten.remainder_.Tensor, _aten.floor_divide.default,
       _aten.floor_divide_.Tensor, _aten.atan2.default, _aten.atan2_.default,
       _aten.pow.Tensor_Tensor, _aten.pow_.Tensor)


def ranks_differ(a, b) -> bool:
    """Two integer or bool tensors, neither 0-dim, of different ranks: the failing case."""
    return (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.dim() > 0 and b.dim() > 0
            and a.dim() != b.dim() and not (a.is_floating_point() or a.is_complex())
            and not (b.is_floating_point() or b.is_complex()))


def _same_rank(op, keyset, args, kwargs):
    """The operand of fewer dimensions gets leading size-1 ones (a view): the broadcast is the
    same, and so is the CPU's loop over it (expanding would change float rounding in atan2)."""
    a, b = args[0], args[1]
    if not ranks_differ(a, b):
        return None
    rank = max(a.dim(), b.dim())
    a, b = (t[(None,) * (rank - t.dim())] for t in (a, b))
    return (a, b) + tuple(args[2:]), kwargs


_kernels = _select.Kernels({op: _same_rank for op in OPS})
install, uninstall = _kernels.install, _kernels.uninstall
