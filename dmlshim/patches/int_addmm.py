"""``addmm``/``baddbmm`` of integer tensors with a fractional ``alpha`` or ``beta`` are silently
wrong on the real torch-directml 0.2.5 binary: it scales by the float values, where PyTorch
casts both to the tensors' integer type first (``alpha=0.6, beta=0.2`` gives zeros on the CPU).
Measured with OpInfo's int64 samples; integral ``alpha``/``beta`` (1 and 1, 2 and 3) and float
tensors are right, so the fix truncates them as the CPU does and stays on the device.  No
public report.
"""
from __future__ import annotations

import torch

from ..laws.integers import fractional
from . import _gate, _select
from ._patch import Patch

PATCH = Patch("int_addmm", "addmm/baddbmm of integers with a fractional alpha/beta scale by the float values "
                           "(measured on the real 0.2.5 binary): truncated as the CPU does, on the device",
              # int_range hands its call on (_select.pass_on); this one's is redispatched below the chain
              after=("int_range",))

_aten = torch.ops.aten
OPS = (_aten.addmm.default, _aten.addmm_.default, _aten.baddbmm.default, _aten.baddbmm_.default)


@_gate.watching(_gate.Watch(dtypes=_gate.INTEGERS))
def _truncated(op, keyset, args, kwargs):
    alpha, beta = kwargs.get("alpha", 1), kwargs.get("beta", 1)
    if not fractional(args[0], alpha, beta):
        return None
    return args, {**kwargs, "alpha": int(alpha), "beta": int(beta)}


_kernels = _select.Kernels(__name__, {op: _truncated for op in OPS})
install, uninstall = _kernels.install, _kernels.uninstall
