"""``max_pool2d_with_indices`` and its backward of an unbatched 3-D input (C, H, W) are refused
on the real torch-directml 0.2.5 binary: 'Dimension out of range (expected to be in range of
[-3, 2], but got 3)' (``max_pool2d``/``nn.MaxPool2d`` of a 3-D input; the backward only with
dmlshim, whose other fixes let the forward through; OpInfo's samples and by hand, every kernel,
stride, padding and dilation tried).  The same call with a batch of one is right, so the fix
adds that dimension (views) and takes it off the results, on the device.  No public report.
"""
from __future__ import annotations

import torch

from ..laws.pooling import unbatched
from . import _gate, _select
from .dispatcher import Done
from ._patch import Patch

PATCH = Patch("max_pool_unbatched", "max_pool2d_with_indices and its backward of an unbatched 3-D input: 'Dimension "
                                    "out of range' (measured on the real 0.2.5 binary): with a batch of one, on the device",
              # before max_pool_ceil, which runs ceil_mode on the CPU: the batched call reaches it
              before=("max_pool_ceil",))

_aten = torch.ops.aten


@_gate.watching(_gate.Watch(ranks=frozenset({3})))
def _forward(op, keyset, args, kwargs):
    if not unbatched(args[0]):
        return None
    values, indices = op(args[0].unsqueeze(0), *args[1:], **kwargs)
    return Done((values.squeeze(0), indices.squeeze(0)))


@_gate.watching(_gate.Watch(ranks=frozenset({3})))
def _backward(op, keyset, args, kwargs):
    # (grad_output, self, kernel_size, stride, padding, dilation, ceil_mode, indices)
    if not unbatched(args[1]):
        return None
    batched = [a.unsqueeze(0) if i in (0, 1, 7) else a for i, a in enumerate(args)]
    return Done(op(*batched, **kwargs).squeeze(0))


_kernels = _select.Kernels(__name__, {_aten.max_pool2d_with_indices.default: _forward,
                            _aten.max_pool2d_with_indices_backward.default: _backward})
install, uninstall = _kernels.install, _kernels.uninstall
