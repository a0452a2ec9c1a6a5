"""``native_dropout_backward`` (dropout's gradient) comes back **bool** on the real
torch-directml 0.2.5 binary: its kernel multiplies the float gradient by the bool mask the
way float x bool ``mul`` does (defect ``float_times_bool``: the gradient truncated, then
``!= 0`` and the mask), and the scale is lost.  Measured with OpInfo's samples (float32,
float16, int64 gradients).  Fixed on the device: ``grad * mask * scale`` as PyTorch's own
kernel computes it (``Dropout.cpp``), the mask cast to the gradient's dtype first.  No public
report.
"""
from __future__ import annotations

import torch

from . import _select
from .dispatcher import Done
from ._patch import Patch

PATCH = Patch("dropout_backward", "native_dropout_backward (dropout's gradient) comes back bool (measured on "
                                  "the real 0.2.5 binary): grad * mask * scale, on the device")

_aten = torch.ops.aten


def _grad_times_mask(op, keyset, args, kwargs):
    grad, mask, scale = args[0], args[1], args[2] if len(args) > 2 else kwargs["scale"]
    return Done(_aten.mul.Scalar(_aten.mul.Tensor(grad, mask.to(grad.dtype)), scale))


_kernels = _select.Kernels(__name__, {_aten.native_dropout_backward.default: _grad_times_mask})
install, uninstall = _kernels.install, _kernels.uninstall
