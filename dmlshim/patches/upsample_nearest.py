"""``F.interpolate(mode="nearest")`` at a non-integer scale reads the wrong source pixels
on torch-directml 0.2.5.

Its source index is ``floor(dst * (1 / float32(scale)))``, the reciprocal taken in float32
(PyTorch: ``float32(1 / scale)``, and ``in / out`` without a scale), so every 17th column
of a 1.7x upsample comes from the pixel before; and the operator first built for a shape
is reused whatever scale a later call passes (seen on the real binary; failure_modes.md
#60).  Fixed on the device: ``index_select`` with the CPU kernel's own indices, backward
included (``_resample``).  Docs: docs/defects.md ("Upsampling").
"""
from __future__ import annotations

from . import _resample
from ._patch import Patch

PATCH = Patch("upsample_nearest", "nearest upsampling at a non-integer scale reads the pixel before (#60): "
                                  "index_select with the CPU kernel's indices, on the device")

_kernels = _resample.kernels("nearest", __name__)
install, uninstall = _kernels.install, _kernels.uninstall
