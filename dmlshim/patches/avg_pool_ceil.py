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

from . import _select
from .dispatcher import Done

_aten = torch.ops.aten
_NAMES = ("self", "kernel_size", "stride", "padding", "ceil_mode", "count_include_pad", "divisor_override")


def _pair(values, default=None):
    values = [int(v) for v in values] if len(values) else default
    return values * 2 if len(values) == 1 else values


def _size(length, kernel, stride, pad):
    """PyTorch's ceil-mode output size (``pooling_output_shape``, dilation 1)."""
    out = (length + 2 * pad - kernel + stride - 1) // stride + 1
    return out - 1 if (out - 1) * stride >= length + pad else out


def geometry(self, kernel_size, stride=(), padding=0, ceil_mode=False, count_include_pad=True,
             divisor_override=None):
    """``(kernel, stride, padding, sizes)`` where a last window runs past the padded input
    (``ceil_mode`` and ``count_include_pad``), else None."""
    if not (ceil_mode and count_include_pad) or divisor_override is not None or self.dim() < 3:
        return None
    kernel = _pair(kernel_size)
    stride = _pair(stride, kernel)
    padding = _pair([padding] if isinstance(padding, int) else padding)
    lengths = [int(n) for n in self.shape[-2:]]
    sizes = [_size(n, k, s, p) for n, k, s, p in zip(lengths, kernel, stride, padding)]
    if all((o - 1) * s - p + k <= n + p for o, n, k, s, p in zip(sizes, lengths, kernel, stride, padding)):
        return None
    return kernel, stride, padding, sizes


def _inside(op, keyset, args, kwargs):
    a = {**dict(zip(_NAMES, args)), **kwargs}
    found = geometry(**a)
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


_kernels = _select.Kernels({_aten.avg_pool2d.default: _inside})
install, uninstall = _kernels.install, _kernels.uninstall
