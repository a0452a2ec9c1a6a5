"""``softplus`` with ``beta != 1`` is wrong on the real torch-directml 0.2.5 binary: it takes
the linear branch where ``x > threshold``, PyTorch where ``x * beta > threshold`` (OpInfo's
``beta=3, threshold=0.2`` sample); a ``beta`` below 1 is refused (E_INVALIDARG).
``softplus_backward`` has no linear branch at all, whatever ``beta``: ``grad * z / (z + 1)``
with ``z = exp(x * beta)`` everywhere (NaN where ``z`` overflows).  Measured on ramps.  Fixed on
the device: ``softplus(x * beta) / beta`` with the kernel's right ``beta=1`` case, and the
backward kernel's value, each with ``x``/``grad`` where ``x * beta > threshold``; in float32 for
float16/bfloat16 as the CPU computes them.  No public report.
"""
from __future__ import annotations

import torch

from . import _opmath, _select
from .dispatcher import Done, below
from ._patch import Patch

PATCH = Patch("softplus_beta", "softplus with beta != 1 tests x > threshold, not x * beta, softplus_backward "
                               "has no linear branch (measured on the real 0.2.5 binary): beta=1's kernels on "
                               "x * beta, the linear branch by where, on the device")

_aten = torch.ops.aten


def _scalars(args, kwargs, at):
    beta = args[at] if len(args) > at else kwargs.get("beta", 1)
    threshold = args[at + 1] if len(args) > at + 1 else kwargs.get("threshold", 20)
    return beta, threshold


def _forward(op, keyset, args, kwargs):
    beta, threshold = _scalars(args, kwargs, 1)
    if beta == 1:
        return None
    x = _opmath.wide(args[0])
    scaled = x * beta
    value = torch.where(scaled > threshold, x, _aten.softplus.default(scaled, 1, threshold) / beta)
    return Done(value.to(args[0].dtype))


def _backward(op, keyset, args, kwargs):
    beta, threshold = _scalars(args, kwargs, 2)
    grad, scaled = _opmath.wide(args[0]), _opmath.wide(args[1]) * beta
    value = torch.where(scaled > threshold, grad, op.redispatch(below(keyset), grad, scaled, 1, threshold))
    return Done(value.to(args[0].dtype))


_kernels = _select.Kernels(__name__, {_aten.softplus.default: _forward, _aten.softplus_backward.default: _backward})
install, uninstall = _kernels.install, _kernels.uninstall
