"""Unary ops and ``pow`` of an input with no elements come back with another dtype or shape
on the real torch-directml 0.2.5 binary (its kernels answer an empty input with a tensor of
their own): ``log2``/``log10`` of float16 give float32, ``sinc`` of integers or bool the
input's dtype (the CPU: float32), ``pow`` (``square``) with an int64 or bool result int32,
``bitwise_not`` of bool shape ``[0]`` for a rank other than 1; an ``out=`` or in-place call
gets that tensor back, not its own.  Measured with OpInfo's (1, 0, 3) samples; non-empty
inputs are right.  There is nothing to compute, so such a call runs on the CPU (free) and
its empty result goes back to the device.  No public report.
"""
from __future__ import annotations

import torch

from ..laws.empty import empty
from . import _gate, _select
from ._patch import Patch

PATCH = Patch("empty_unary", "log2/log10/sinc/bitwise_not/pow of an empty input come back with another dtype or "
                             "shape (measured on the real 0.2.5 binary): on the CPU (nothing to compute)",
              # pow's overloads are in int_broadcast's chain too (the first fix that answers wins); an
              # empty input has nothing to compute, so it answers before the fixes that would compute
              # it (pow: int_pow_zero, bool_exp2, int_range, empty_broadcast's pow_; log2/log10/sinc:
              # refused's retry, which would take the device's wrong dtype or shape as an answer)
              before=("int_broadcast", "empty_broadcast", "int_pow_zero", "bool_exp2", "int_range", "refused"))

_aten = torch.ops.aten
FUNCTIONAL = (_aten.log2.default, _aten.log10.default, _aten.sinc.default, _aten.bitwise_not.default,
              _aten.pow.Tensor_Scalar, _aten.pow.Tensor_Tensor, _aten.pow.Scalar)
IN_PLACE = (_aten.log2_.default, _aten.log10_.default, _aten.sinc_.default, _aten.bitwise_not_.default,
            _aten.pow_.Scalar, _aten.pow_.Tensor)
OUT = (_aten.log2.out, _aten.log10.out, _aten.sinc.out, _aten.bitwise_not.out, _aten.pow.Tensor_Scalar_out,
       _aten.pow.Tensor_Tensor_out, _aten.pow.Scalar_out)
OPS = FUNCTIONAL + IN_PLACE + OUT


@_gate.watching(_gate.Watch(empty=True))
def _on_cpu(op, keyset, args, kwargs):
    if not empty(args):
        return None
    if op in OUT:
        return _select.on_cpu_into_outs(op, keyset, args, kwargs)
    if op in IN_PLACE:
        return _select.in_place_on_cpu(op, args, kwargs)
    return _select.on_cpu(op, args, kwargs)


_kernels = _select.Kernels(__name__, {op: _on_cpu for op in OPS})
install, uninstall = _kernels.install, _kernels.uninstall
