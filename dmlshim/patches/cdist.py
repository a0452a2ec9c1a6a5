"""``_cdist_forward`` (``torch.cdist`` for ``p != 2``, or ``p = 2`` without the matrix
product) is right on the real torch-directml 0.2.5 binary only for 3-D inputs.

Measured with OpInfo's samples: a 2-D pair ``(P, M)``, ``(R, M)`` is read as a batch of
``P`` rows of ``M`` scalars, ``out[b, i] = ||x1[b, i] - x2[b, :]||_p``: ``(3, 5)`` with
``(3, 5)`` gives a ``[3, 5]`` result (the CPU: ``[3, 3]``), ``(5, 5)`` with ``(5, 5)`` wrong
values, ``(3, 5)`` with ``(4, 5)`` "The size of tensor a (4) must match the size of tensor b
(3)"; a 2-D with a 3-D input and 4-D inputs fail the same way; an empty result raises
E_INVALIDARG.  3-D inputs, their batches broadcast, are right, so the fix gives the kernel
3-D inputs (the batch dimensions broadcast and flattened; a 2-D pair one of size 1) and
reshapes the result, on the device.  3-D inputs whose result has no elements (an empty batch,
(0, 4, 5) with (1, 3, 5), or no rows) are refused (E_INVALIDARG, or 'The size of tensor a (0)
must match'; OpInfo's samples past the first 4): their empty result is made on the device,
nothing to compute.  No public report.
"""
from __future__ import annotations

import torch

from ..laws.norms import empty_3d, not_3d
from . import _select
from .dispatcher import Done
from ._patch import Patch

PATCH = Patch("cdist", "_cdist_forward (cdist with p != 2) of inputs that are not 3-D: wrong shapes, values "
                       "or 'size of tensor a must match' (measured on the real 0.2.5 binary): the batch "
                       "flattened to 3-D, on the device")

_aten = torch.ops.aten
OPS = (_aten._cdist_forward.default, _aten._cdist_forward.out)


def _as_3d(op, keyset, args, kwargs):
    x1, x2, p, compute_mode = args[:4]
    if not (not_3d(x1, x2) or empty_3d(x1, x2)) or x1.dim() < 2 or x2.dim() < 2:
        return None
    batch = torch.broadcast_shapes(x1.shape[:-2], x2.shape[:-2])
    shape = (*batch, x1.size(-2), x2.size(-2))
    if 0 in shape:
        result = torch.empty(shape, dtype=x1.dtype, device=x1.device)
    else:
        flat = [x.expand(*batch, *x.shape[-2:]).reshape(-1, *x.shape[-2:]) for x in (x1, x2)]
        result = _aten._cdist_forward.default(*flat, p, compute_mode).view(shape)
    if "out" not in kwargs:
        return Done(result)
    _select.grow_out(kwargs["out"], result)
    return Done(kwargs["out"])


_kernels = _select.Kernels(__name__, {op: _as_3d for op in OPS})
install, uninstall = _kernels.install, _kernels.uninstall
