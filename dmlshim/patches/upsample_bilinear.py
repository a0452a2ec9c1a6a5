"""``F.interpolate(mode="bilinear")`` gives wrong values on torch-directml 0.2.5.

``upsample_bilinear2d`` with ``align_corners=False`` reads source ``dst / scale``, without
PyTorch's half-pixel offset, and the operator first built for a shape is reused whatever
``align_corners`` a later call asks for (seen on the real binary; microsoft/DirectML#482,
failure_modes.md #21: GFPGAN's output corrupted).  The backward is wrong too.  Fixed on
the device: the op, its ``out=`` form and its backward as two one-axis resamplings with
PyTorch's own source tables (``_resample``).  Docs: docs/defects.md ("Upsampling").
"""
from __future__ import annotations

from . import _resample
from ._patch import Patch

PATCH = Patch("upsample_bilinear", "bilinear upsampling without the half-pixel offset (DirectML#482; #21): "
                                   "two one-axis resamplings with PyTorch's tables, on the device")

_kernels = _resample.kernels("linear", __name__)
install, uninstall = _kernels.install, _kernels.uninstall
