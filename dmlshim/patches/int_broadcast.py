"""Binary ops of operands of different ranks, one of them cast, are silently wrong on the real
torch-directml 0.2.5 binary.

The operand with fewer dimensions is read as its first value everywhere when the op casts it:
integer ``div``/``remainder``/``floor_divide``/``atan2``/``pow`` (they compute in float), and
any binary op of operands of different dtypes (float with int64, bool or float16, int64 with
int32).  ``[[10, 20, 30], [40, 50, 60]] // [1, 2, 3]`` gives ``[[10, 20, 30], [40, 50, 60]]``,
``float(5, 1) + int64(5)`` each row's first sum five times (measured; as a copy from a source of
fewer dimensions, defect ``broadcast_copy``): ``add``, ``sub``, ``rsub``, ``mul``, ``div``,
``maximum``, ``minimum``, ``lt``/``ge`` and the rest.  Float operands of one dtype, operands of
the same rank ((2, 3) with (2, 1), (2, 3) with (1, 3)), a 0-dim operand (``x // 2``) and
operands expanded beforehand are right, so the fix gives the smaller operand leading size-1
dimensions (a view) and stays on the device.  No public report
(OpInfo's binary-ufunc samples with a (5, 1) and a (5,) operand, ``__rdiv__``'s
``reciprocal(int64) * int64``).
"""
from __future__ import annotations

import torch

from ..laws.broadcast import INTEGER_OPS, OPS, ranks_differ
from . import _gate, _select
from ._patch import Patch

PATCH = Patch("int_broadcast", "binary ops of operands of different ranks, one cast (integer div/remainder/"
                               "floor_divide/atan2/pow; add, mul, lt ... of mixed dtypes), read the smaller one's "
                               "first value (measured on the real 0.2.5 binary): it gets leading size-1 dimensions, "
                               "on the device",
              # int_range measures the operands and hands the call on to this one (_select.pass_on);
              # this one's fixed call is redispatched below the chain, past int_range
              after=("int_range", "mul"))

_aten = torch.ops.aten

def leading_ones(a, b) -> tuple:
    """``a`` and ``b`` as views of one rank: the one of fewer dimensions gets leading size-1
    ones. The broadcast is the same, and so is the CPU's loop over it (expanding would change
    float rounding in atan2)."""
    rank = max(a.dim(), b.dim())
    return tuple(t[(None,) * (rank - t.dim())] for t in (a, b))


# the failing case needs two tensors of rank > 0 of different dtypes (``mixed``), or for an op
# that casts integers, of integer dtypes: an ``i + 1`` of int64 meets neither
@_gate.watching(lambda op: _gate.Watch(dtypes=_gate.INTEGERS, mixed=True) if op in INTEGER_OPS
                else _gate.Watch(mixed=True))
def _same_rank(op, keyset, args, kwargs):
    """The failing case's operands at one rank (:func:`leading_ones`)."""
    a, b = args[0], args[1]
    if not ranks_differ(a, b, op in INTEGER_OPS):
        return None
    return leading_ones(a, b) + tuple(args[2:]), kwargs


_kernels = _select.Kernels(__name__, {op: _same_rank for op in OPS})
install, uninstall = _kernels.install, _kernels.uninstall
