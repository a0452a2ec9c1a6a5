"""``exp2`` of a bool tensor and ``pow`` of a number to a bool exponent give 1 everywhere on
the real torch-directml 0.2.5 binary (the exponent read as 0): ``exp2([True, False])`` is
``[1., 1.]`` where the CPU gives ``[2., 1.]``, so is ``ldexp(x, bool)`` (torch's composite:
``x * pow(2., other)``).  Integer exponents and a tensor base are right (measured with
OpInfo's bool samples).  Fixed on the device: the exponent cast to the result's dtype first
(``exp2``: the default float dtype).  No public report.
"""
from __future__ import annotations

import torch

from ..laws.integers import EXP2, POW, bool_exponent
from . import _select
from ._patch import Patch

PATCH = Patch("bool_exp2", "exp2 of bool, pow of a number to a bool exponent give 1 (measured on the real "
                           "0.2.5 binary): the exponent cast to the result's dtype, on the device")

_aten = torch.ops.aten
OPS = EXP2 + POW


def _cast(op, keyset, args, kwargs):
    if not bool_exponent(op, args):
        return None
    if op in EXP2:
        return (args[0].to(torch.get_default_dtype()),) + tuple(args[1:]), kwargs
    return (args[0], args[1].to(torch.result_type(args[0], args[1]))) + tuple(args[2:]), kwargs


_kernels = _select.Kernels(__name__, {op: _cast for op in OPS})
install, uninstall = _kernels.install, _kernels.uninstall
