"""``max_pool2d_with_indices`` (``max_pool1d``/``2d`` with ``return_indices``, ``nn.MaxPool``) on
the real torch-directml 0.2.5 binary counts its indices over the whole tensor, ``(n * C + c) *
H * W + h * W + w`` where the CPU counts per plane (``laws.pooling``; OpInfo's ``nn.MaxPool1d``/
``2d`` module samples, then by hand; its backward ignores them and is right), and with a
dilation past 1 its values are wrong.  The fix subtracts each plane's offset from the device's
indices (one elementwise pass; the offsets uploaded once per shape, their spans kept for
``int_range``: no read); a dilated call runs on the CPU.  No public report.
"""
from __future__ import annotations

import functools

import torch

from .. import ranges
from ..laws.pooling import dilated, flat_index_offsets
from . import _select
from .dispatcher import Done
from ._patch import Patch

PATCH = Patch("max_pool_indices", "max_pool2d_with_indices counts its indices over the whole tensor, not per plane; "
                                  "with a dilation its values are wrong (measured on the real 0.2.5 binary): the "
                                  "planes' offsets subtracted on the device; a dilated call on the CPU",
              # after max_pool_ceil (ceil_mode: the CPU's indices) and max_pool_unbatched (3-D: batched)
              after=("max_pool_ceil", "max_pool_unbatched"))

_aten = torch.ops.aten


@functools.lru_cache(maxsize=64)
def _offsets(shape, device):
    with torch.inference_mode(False):
        offsets = flat_index_offsets(torch.empty(shape, device="meta")).to(device)
    return offsets


def _per_plane(op, keyset, args, kwargs):
    self = args[0]
    if dilated(args[4] if len(args) > 4 else kwargs.get("dilation", 1)):
        return _select.on_cpu(op, args, kwargs)
    ceil_mode = args[5] if len(args) > 5 else kwargs.get("ceil_mode", False)
    # 3-D: max_pool_unbatched's, batched; ceil_mode: max_pool_ceil's (the CPU's indices)
    if self.dim() != 4 or self.size(0) * self.size(1) == 1 or ceil_mode:
        return None
    values, indices = _select.pass_on(op, keyset, args, kwargs, after=_per_plane)
    n, c, h, w = self.shape
    offsets = _offsets(tuple(self.shape), self.device)
    ranges.remember(offsets, (0, (n * c - 1) * h * w))
    ranges.remember(indices, (0, n * c * h * w - 1))
    fixed = indices - offsets
    ranges.remember(fixed, (0, h * w - 1))
    return Done((values, fixed))


_kernels = _select.Kernels(__name__, {_aten.max_pool2d_with_indices.default: _per_plane})
install, uninstall = _kernels.install, _kernels.uninstall
