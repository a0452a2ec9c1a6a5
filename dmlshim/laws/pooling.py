"""Which pooling windows the real torch-directml 0.2.5 binary computes (defects
``adaptive_pool`` and ``avg_pool_ceil``; measured there, no public report).
"""
from __future__ import annotations

import math

import torch


def dml_windows_agree(size: int, out: int) -> bool:
    """``adaptive_pool``: whether DirectML's window grid is PyTorch's for one dimension.
    DirectML's output ``j`` averages ``kernel = size - (out-1)*stride`` values from ``j *
    stride``, ``stride = size // out`` (an upsampling returns an earlier call's values);
    PyTorch's ``[floor(j*size/out), ceil((j+1)*size/out))``.  Measured on ramps (8 -> 3,
    6 -> 4 wrong; 8 -> 4, 7 -> 3, 5 -> 2 right) and OpInfo's ``adaptive_avg_pool`` samples."""
    stride = size // out
    if out == 1 or size == out:
        return True
    if stride == 0:
        return False
    kernel = size - (out - 1) * stride
    return all(math.floor(j * size / out) == j * stride and math.ceil((j + 1) * size / out) == j * stride + kernel
               for j in range(out))


def _pair(values, default=None):
    values = [int(v) for v in values] if len(values) else default
    return values * 2 if len(values) == 1 else values


def _size(length, kernel, stride, pad):
    """PyTorch's ceil-mode output size (``pooling_output_shape``, dilation 1)."""
    out = (length + 2 * pad - kernel + stride - 1) // stride + 1
    return out - 1 if (out - 1) * stride >= length + pad else out


def last_window_past(self, kernel_size, stride=(), padding=0, ceil_mode=False, count_include_pad=True,
                     divisor_override=None):
    """``avg_pool_ceil``: with ``ceil_mode`` and ``count_include_pad`` DirectML divides a last
    window that runs past the padded input by the whole kernel (PyTorch: by its part inside
    the input and its padding).  ``(kernel, stride, padding, sizes)`` of such a call, else
    None.  Measured with OpInfo's ``avg_pool1d`` sample (kernel 6, stride 3, padding 2 of 9
    values) and on ramps."""
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


def unbatched(self) -> bool:
    """``max_pool_unbatched``: ``max_pool2d_with_indices`` and its backward refuse an unbatched
    (C, H, W) input: 'Dimension out of range (expected to be in range of [-3, 2], but got 3)';
    ``pad_unbatched``: ``reflection_pad2d`` refuses one: 'vector::_M_range_check: __n (which is
    3) >= this->size() (which is 3)' (its backward, ``replication_pad2d``, ``reflection_pad1d``
    of a 2-D and ``reflection_pad3d`` of a 4-D input are right; measured, a batch of one is
    right)."""
    return self.dim() == 3


def dilated(dilation) -> bool:
    """``max_pool_indices``: ``max_pool2d_with_indices`` with a dilation past 1 gives wrong
    values (and indices), every kernel, stride and padding tried (measured; its backward is
    right)."""
    return any(d != 1 for d in (dilation if isinstance(dilation, (list, tuple)) else (dilation,)))


def flat_index_offsets(self):
    """``max_pool_indices``: without a dilation, ``max_pool2d_with_indices`` of an (N, C, H, W)
    input counts its indices over the whole tensor: the CPU's ``h * W + w`` plus ``(n * C + c) *
    H * W`` (measured, padding too; its backward ignores them).  That offset per plane, (N, C, 1,
    1), as a CPU int64 tensor."""
    n, c, h, w = self.shape
    return (torch.arange(n * c, dtype=torch.int64) * (h * w)).view(n, c, 1, 1)
