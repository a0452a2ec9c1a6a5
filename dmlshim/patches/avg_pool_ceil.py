"""``avg_pool`` with ``ceil_mode=True`` and ``count_include_pad=True`` divides a last window
that runs past the padded input by the whole kernel on the real torch-directml 0.2.5 binary;
PyTorch divides by the part inside the input and its padding.  Measured with OpInfo's
``avg_pool1d`` sample (kernel 6, stride 3, padding 2 of 9 values) and on ramps; the backward,
``count_include_pad=False`` and windows inside the padded input are right.  ``avg_pool1d``
reaches ``avg_pool2d``, the DirectML kernel.  Fixed on the device: the input padded with zeros
explicitly, pooled without padding and with ``count_include_pad=False`` (each window then
divided by its part inside the padded input, as PyTorch's), cropped to PyTorch's shape.
Autograd records ``avg_pool2d`` with the caller's arguments.  No public report.
"""
from __future__ import annotations

import torch

from ..laws.pooling import last_window_past
from . import _select
from .dispatcher import Done
from ._patch import Patch

PATCH = Patch("avg_pool_ceil", "avg_pool with ceil_mode and count_include_pad divides a last window past the "
                               "padded input by the whole kernel (measured on the real 0.2.5 binary): padded "
                               "explicitly, count_include_pad=False, on the device")

_aten = torch.ops.aten
_NAMES = ("self", "kernel_size", "stride", "padding", "ceil_mode", "count_include_pad", "divisor_override")


def _inside(op, keyset, args, kwargs):
    a = {**dict(zip(_NAMES, args)), **kwargs}
    found = last_window_past(**a)
    if found is None:
        return None
    kernel, stride, padding, sizes = found
    x = a["self"]
    if any(padding):
        x = _aten.constant_pad_nd.default(x, [padding[1], padding[1], padding[0], padding[0]], 0)
    pooled = _aten.avg_pool2d.default(x, kernel, stride, [0, 0], True, False, None)
    for dim, size in zip((-2, -1), sizes):
        pooled = pooled.narrow(dim, 0, size)
    return Done(pooled.contiguous())


_kernels = _select.Kernels(__name__, {_aten.avg_pool2d.default: _inside})
install, uninstall = _kernels.install, _kernels.uninstall
