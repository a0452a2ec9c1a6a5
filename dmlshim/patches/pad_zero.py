"""``F.pad`` with nothing to pad returns an uninitialised tensor on DirectML.

``constant_pad_nd`` whose pads are all 0 (``F.pad(x, (0, 0, 0, pad_num))`` with
``pad_num == 0``, a pad to a multiple the input already is) gives a tensor of the right
shape that torch-directml never wrote: zeros, or stale device memory (the real 0.2.5 binary,
any rank; failure_modes.md #63; no public report).  Fun-ASR-Nano's audio adaptor pads its
encoder output that way.  The fix returns what the CPU kernel returns, a copy
(``self.clone()``), on the device.  Docs: docs/defects.md.
"""
from __future__ import annotations

import torch

from . import _select
from .dispatcher import Done
from ._patch import Patch

PATCH = Patch("pad_zero", "constant_pad_nd with every pad 0 returns an uninitialised tensor (measured on the "
                          "real 0.2.5 binary; #63): a copy, on the device",
              # pad_negative hands its cropped call on (_select.pass_on): a crop that leaves every
              # pad 0 is this one's call
              after=("pad_negative",))

_aten = torch.ops.aten


def _nothing_to_pad(op, keyset, args, kwargs):
    if any(int(p) for p in args[1]):
        return None
    return Done(args[0].clone())


_kernels = _select.Kernels(__name__, {_aten.constant_pad_nd.default: _nothing_to_pad})
install, uninstall = _kernels.install, _kernels.uninstall
