"""Defects seen on the real torch-directml 0.2.5 binary (issue 25), as data.

Measured with the real binary under ``dmlshim realdml run`` (float32), each against the
CPU; the evidence, and which public report each matches: docs/defects.md ("Upsampling",
"PReLU").  The probes reuse :func:`dmlshim.reported._probe` (fixes stand aside, the CPU's
answer compared within a GPU's rounding).  ``prelu_channels`` aborts the process, so it is
static: the abort is a check in torch-directml's host code (``dml_tensor_desc.cc``), the
same on every adapter, so a probe in a child process could only confirm it, at the price of
a second torch-directml start.
"""
from __future__ import annotations

from typing import Tuple

import torch
import torch.nn.functional as F

from .defects import Defect
from .reported import _probe


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


def _repeat_5d(device):
    """A 5-D `repeat` (FunASR's CTC prefix scorer)."""
    x = torch.arange(12.0).view(1, 2, 1, 2, 3).to(device)
    return x.repeat(2, 1, 3, 1, 1)


OBSERVED: Tuple[Defect, ...] = (
    Defect("upsample_bilinear", "#21", "microsoft/DirectML#482; the real 0.2.5 binary",
           "bilinear interpolate: align_corners=False without the half-pixel offset; a shape's "
           "first align_corners sticks (silent)", _probe(_bilinear), ("upsample_bilinear",)),
    Defect("upsample_nearest", "#60", "the real 0.2.5 binary (no public report)",
           "nearest interpolate at a non-integer scale: some pixels from the one before; a "
           "shape's first scale sticks (silent)", _probe(_nearest), ("upsample_nearest",)),
    Defect("repeat_5d", "#61", "Comfy-Org/ComfyUI#5860; the real 0.2.5 binary",
           "Tensor.repeat with more than 4 dimensions: 'the dimesion of at::Tensor must be 4 "
           "or lower, but got 5'", _probe(_repeat_5d), ("repeat",)),
    # static: probing it would abort the process
    Defect("prelu_channels", "#29", "microsoft/DirectML#271, #445; the real 0.2.5 binary",
           "nn.PReLU(C) on a 4-D/5-D input aborts the process ('rank <= "
           "DML_TENSOR_DIMENSION_COUNT_MAX'); 3-D raises", None, ("prelu",)),
)
