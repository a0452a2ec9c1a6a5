"""``masked_select`` whose input must broadcast to the mask is silently wrong on the real
torch-directml 0.2.5 binary.

The result is too short: of the mask's (broadcast) True positions DirectML takes the first
``input.numel()`` and reads the flat input at each, clamped to its end (``arange(3)`` under a
2x3 mask: ``[0, 2, 2]`` for the CPU's ``[0, 2, 1, 2]``; a 0-dim input gives one value).  A
mask that broadcasts to the input is right, and so is an input expanded beforehand, so the
fix expands both to the broadcast shape (the input copied contiguous) and stays on the device.  No public
report (OpInfo's ``masked_select`` samples; ``torch.combinations`` goes through it).
"""
from __future__ import annotations

import torch

from . import _select
from ._patch import Patch

PATCH = Patch("masked_select", "masked_select with an input that broadcasts to the mask comes back too short "
                               "(measured on the real 0.2.5 binary): both expanded first, on the device")

_aten = torch.ops.aten


def _input_broadcasts(op, keyset, args, kwargs):
    self, mask = args[0], args[1]
    try:
        shape = torch.broadcast_shapes(self.shape, mask.shape)
    except RuntimeError:
        return None                     # the op's own error
    if self.shape == shape:
        return None
    # contiguous: an all-zero-stride input (a 0-dim one expanded) fails CreateOperator there
    return (self.expand(shape).contiguous(), mask.expand(shape)) + tuple(args[2:]), kwargs


_kernels = _select.Kernels(__name__, {_aten.masked_select.default: _input_broadcasts})
install, uninstall = _kernels.install, _kernels.uninstall
