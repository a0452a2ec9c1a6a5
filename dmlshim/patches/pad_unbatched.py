"""``reflection_pad2d`` (``F.pad(mode="reflect")``, ``nn.ReflectionPad2d``) of an unbatched 3-D
input (C, H, W) is refused on the real torch-directml 0.2.5 binary: 'vector::_M_range_check:
__n (which is 3) >= this->size() (which is 3)' (OpInfo's ``nn.ReflectionPad2d`` module sample,
then by hand: every pad; unequal pairs reach the ``pad`` patch's CPU call, which is right).
The same call with a batch of one is right, so the fix adds that dimension (a view) and takes
it off the result, on the device.  No public report.
"""
from __future__ import annotations

import torch

from ..laws.pooling import unbatched
from . import _gate, _select
from .dispatcher import Done
from ._patch import Patch

PATCH = Patch("pad_unbatched", "reflection_pad2d of an unbatched 3-D input: 'vector::_M_range_check' (measured on "
                               "the real 0.2.5 binary): with a batch of one, on the device",
              # pad's CPU answer of unequal pairs holds at any rank; this one's batched call goes
              # through the whole chain again (the op called, not redispatched)
              after=("pad",))

_aten = torch.ops.aten


@_gate.watching(_gate.Watch(ranks=frozenset({3})))
def _batched(op, keyset, args, kwargs):
    if not unbatched(args[0]):
        return None
    return Done(op(args[0].unsqueeze(0), *args[1:], **kwargs).squeeze(0))


_kernels = _select.Kernels(__name__, {_aten.reflection_pad2d.default: _batched})
install, uninstall = _kernels.install, _kernels.uninstall
