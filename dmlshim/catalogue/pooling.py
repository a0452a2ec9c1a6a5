"""Pooling, resampling and padding: F.pad's pair order, bilinear/nearest upsampling,
avg/max/adaptive pooling, negative and zero pads."""
from __future__ import annotations

from typing import Tuple

import torch
import torch.nn.functional as F

from .defect import MEASURED, NO_REPORT, REPORTED, Defect
from .probes import case_probe

TOPIC = "Pooling, resampling and padding"


def _pad_order(device):
    """Real-ESRGAN x2's pad of an odd width: F.pad(img, (0, 1, 0, 0), 'reflect')."""
    return F.pad(torch.arange(12.0).view(1, 1, 3, 4).to(device), (0, 1, 0, 0), "reflect")


def _bilinear(device):
    """Bilinear 2x of a 3x5 ramp (DirectML#482), after align_corners=True on the same shape."""
    x = torch.arange(15.0).view(1, 1, 3, 5).to(device)
    corners = F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=True)
    return corners, F.interpolate(x, scale_factor=2, mode="bilinear")


def _nearest(device):
    """Nearest 1.7x of a 17-pixel row by scale, then the same shape by size."""
    x = torch.arange(17.0).view(1, 1, 1, 17).to(device)
    return (F.interpolate(x, scale_factor=(1.0, 1.7), mode="nearest"),
            F.interpolate(x, size=(1, 28), mode="nearest"))


def _avg_pool_refused(device):
    """`avg_pool2d` of a 4x4 ramp with `divisor_override=2`."""
    x = torch.arange(16.0).view(1, 1, 4, 4).to(device)
    return F.avg_pool2d(x, 2, divisor_override=2)


def _adaptive_pool(device):
    """`adaptive_avg_pool1d` of an 8-value ramp of squares to 3."""
    return F.adaptive_avg_pool1d((torch.arange(8.0) ** 2).view(1, 1, 8).to(device), 3)


def _pad_negative(device):
    """`F.pad(x, (-1, 1), "replicate")` of a 6-value ramp."""
    return F.pad(torch.arange(6.0).view(1, 1, 6).to(device), (-1, 1), mode="replicate")


def _pad_zero(device):
    """`F.pad(x, (0, 0))` of a 2x3 ramp (nothing to pad)."""
    return F.pad(torch.arange(1.0, 7.0).view(2, 3).to(device), (0, 0))


def _avg_pool_ceil(device):
    """`avg_pool1d` of a 9-value ramp, kernel 3, stride 3, padding 1, `ceil_mode=True`."""
    return F.avg_pool1d(torch.arange(1.0, 10.0).view(1, 1, 9).to(device), 3, 3, 1, ceil_mode=True)


def _pad_value(device):
    """`constant_pad_nd` of a 1x3 ramp by (1, 1) with 0, then with 2.0 (the defect: 0 both
    times). Value 0 first: the fix pads with 0 only, so the operator the probe leaves behind
    agrees with it."""
    x = (torch.arange(3.0).view(1, 3) + 10).to(device)
    return torch.constant_pad_nd(x, (1, 1), 0.0), torch.constant_pad_nd(x, (1, 1), 2.0)


def _max_pool_unbatched(device):
    """`max_pool2d` (kernel 2, with indices) of a 1x4x4 ramp: no batch dimension."""
    return torch.nn.functional.max_pool2d(torch.arange(16.0).view(1, 4, 4).to(device), 2, return_indices=True)


def _max_pool_indices(device):
    """The indices of `max_pool2d` (kernel 2) of a 1x2x2x2 ramp: two planes (the defect: the
    second's counted from 4)."""
    return torch.nn.functional.max_pool2d(torch.arange(8.0).view(1, 2, 2, 2).to(device), 2, return_indices=True)[1]


def _pad_unbatched(device):
    """`F.pad(mode="reflect")` of a 1x3x3 ramp by 1 on each side: no batch dimension."""
    return F.pad(torch.arange(9.0).view(1, 3, 3).to(device), (1, 1, 1, 1), mode="reflect")


def _max_pool_ceil(device):
    """`max_pool2d` of a 1x1x3x6 ramp, kernel 3, stride 2, `ceil_mode=True`."""
    return torch.nn.functional.max_pool2d(torch.arange(18.0).view(1, 1, 3, 6).to(device), 3, 2,
                                          ceil_mode=True)


DEFECTS: Tuple[Defect, ...] = (
    Defect("pad_order", "#42", "microsoft/DirectML#687",
           "F.pad's (left, right, top, bottom) applied as (top, bottom, left, right)",
           case_probe(_pad_order), ("pad",), found=REPORTED, rules=("_pad_pairs_differ",)),
    Defect("upsample_bilinear", "#21", "microsoft/DirectML#482; the real 0.2.5 binary",
           "bilinear interpolate: align_corners=False without the half-pixel offset; a shape's "
           "first align_corners sticks (silent)", case_probe(_bilinear), ("upsample_bilinear",),
           found=MEASURED, rules=("_half_pixel", "_half_pixel_backward")),
    Defect("upsample_nearest", "#60", NO_REPORT,
           "nearest interpolate at a non-integer scale: some pixels from the one before; a "
           "shape's first scale sticks (silent)", case_probe(_nearest), ("upsample_nearest",),
           found=MEASURED, rules=("upsample_nearest2d", "upsample_nearest2d_backward")),
    Defect("avg_pool_refused", "none", NO_REPORT,
           "avg_pool2d/3d with divisor_override ('Divisor override isn't supported for "
           "DirectML.') or of integers (E_INVALIDARG)", case_probe(_avg_pool_refused),
           ("refused:avg_pool_refused",), found=MEASURED,
           rules=("_divisor_override", "avg_pool2d _integer")),
    Defect("adaptive_pool", "none", NO_REPORT,
           "adaptive_avg_pool (and interpolate 'area') off DirectML's window grid (stride = in // "
           "out, kernel = in - (out-1)*stride) or upsampling (silent)", case_probe(_adaptive_pool),
           ("adaptive_pool",), found=MEASURED, rules=("_off_grid",)),
    Defect("pad_negative", "none", NO_REPORT,
           "replicate pad with a negative begin pad: the last value everywhere (silent); constant "
           "pad with mixed signs refused", case_probe(_pad_negative), ("pad_negative",), found=MEASURED,
           rules=("_negative_begin", "_mixed_signs")),
    Defect("pad_zero", "#63", NO_REPORT,
           "F.pad/constant_pad_nd with every pad 0: a tensor never written (zeros or stale values; "
           "silent)", case_probe(_pad_zero), ("pad_zero",), found=MEASURED, rules=("_nothing_to_pad",)),
    Defect("avg_pool_ceil", "none", NO_REPORT,
           "avg_pool with ceil_mode=True and count_include_pad=True divides a last window past the "
           "padded input by the whole kernel (silent)", case_probe(_avg_pool_ceil), ("avg_pool_ceil",),
           found=MEASURED, rules=("_last_window_past",)),
    Defect("max_pool_ceil", "none", NO_REPORT,
           "max_pool2d with ceil_mode=True: floor mode's shape, other indices, gradients elsewhere "
           "(silent)", case_probe(_max_pool_ceil), ("max_pool_ceil",), found=MEASURED,
           rules=("_ceil_mode",)),
    Defect("max_pool_unbatched", "none", NO_REPORT,
           "max_pool2d_with_indices and its backward of an unbatched 3-D input: 'Dimension out of range "
           "(expected to be in range of [-3, 2], but got 3)'", case_probe(_max_pool_unbatched),
           ("max_pool_unbatched",), found=MEASURED, rules=("_unbatched_pool", "_unbatched_pool_backward")),
    Defect("max_pool_indices", "none", NO_REPORT,
           "max_pool2d_with_indices counts its indices over the whole tensor ((n * C + c) * H * W + h * W + w; "
           "the backward ignores them); with a dilation past 1 its values are wrong (silent)",
           case_probe(_max_pool_indices), ("max_pool_indices",), found=MEASURED,
           rules=("_flat_indices", "_dml_pool_backward")),
    Defect("pad_unbatched", "none", NO_REPORT,
           "reflection_pad2d (F.pad reflect, nn.ReflectionPad2d) of an unbatched 3-D input: "
           "'vector::_M_range_check: __n (which is 3) >= this->size() (which is 3)'",
           case_probe(_pad_unbatched), ("pad_unbatched",), found=MEASURED, rules=("reflection_pad2d _unbatched_pool",)),
    # found by conformance over every OpInfo sample (issue 40, docs/conformance.md)
    Defect("pad_value", "none", NO_REPORT,
           "constant_pad_nd (F.pad 'constant') keeps the pad value of its first call per input shape, pads "
           "and dtype (silent); an empty input refused (CreateOperator)", case_probe(_pad_value), ("pad_value",),
           found=MEASURED, rules=("_pad_value_cached", "constant_pad_nd _pad_of_empty")),
)
