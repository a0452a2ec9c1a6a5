"""``masked_select`` with an input smaller than its mask is wrong on the real 0.2.5 binary.

Measured (OpInfo's samples and by hand): ``masked_select(arange(3), mask[2, 3])`` returns
``[0, 2, 2]`` where the CPU returns ``[0, 2, 1, 2]`` (a sample of 51 elements came back
with 10); a mask that broadcasts to the input, non-contiguous and expanded inputs are
right.  So an input that must broadcast is expanded to the common shape first, on the
device (an expanded input is right there).  Docs: docs/defects.md.
"""
from __future__ import annotations

import torch

from . import _select

_aten = torch.ops.aten


def _input_broadcasts(op, keyset, args, kwargs):
    self, mask = args[0], args[1]
    shape = torch.broadcast_shapes(self.shape, mask.shape)
    if self.shape == shape:
        return None
    return (self.expand(shape), mask, *args[2:]), kwargs


_kernels = _select.Kernels({_aten.masked_select.default: _input_broadcasts})
install, uninstall = _kernels.install, _kernels.uninstall
