"""``masked_fill_`` (and ``masked_fill``, whose composite calls it) of more than 4 dimensions on
the real torch-directml 0.2.5 binary: 5 are refused (``m_device->CreateOperator``), 6 to 8 end
the process ('Check failed: rank <= DML_TENSOR_DIMENSION_COUNT_MAX'); ``nanquantile`` of a 4-D
input with a tensor ``q`` and ``keepdim`` reaches it (OpInfo's samples; ``laws.broadcast``).
A 1-D ``masked_fill_`` of the same elements is right at every rank, so the fix fills ``self``
flattened in its memory order (a view of a contiguous or permuted ``self``; one with gaps: a
flattened copy, copied back) with the mask expanded to ``self``'s shape, laid out the same way
and flattened, on the device.  No public report.
"""
from __future__ import annotations

import torch

from ..laws.broadcast import MASKED_FILL_RANKS, masked_fill_rank
from . import _gate, _select
from .dispatcher import Done
from ._patch import Patch

PATCH = Patch("masked_fill_rank", "masked_fill_ of 5 dimensions refused, of 6 to 8 ends the process (measured on the "
                                  "real 0.2.5 binary; nanquantile with keepdim): flattened, the mask expanded, on "
                                  "the device")

_aten = torch.ops.aten


def _memory_order(self):
    """The permutation that lays ``self`` out in its memory order (strides descending)."""
    return sorted(range(self.dim()), key=lambda i: (-self.stride(i), -self.size(i)))


@_gate.watching(_gate.Watch(ranks=frozenset(range(MASKED_FILL_RANKS + 1, 64))))
def _flattened(op, keyset, args, kwargs):
    self, mask, value = args[0], args[1], args[2]
    if masked_fill_rank(self, mask) <= MASKED_FILL_RANKS:
        return None
    mask = mask.expand(self.shape)                      # torch's own error for a mask that does not fit
    order = _memory_order(self)
    dense = self.permute(order)
    if dense.is_contiguous():                           # contiguous, or a permutation of it (a transpose)
        dense.view(-1).masked_fill_(mask.permute(order).reshape(-1), value)
    else:   # gaps between its elements: a flattened copy, copied back (past 5 dimensions such a copy_
        # is itself wrong on the real binary: docs/conformance.md)
        self.copy_(self.reshape(-1).masked_fill_(mask.reshape(-1), value).view(self.shape))
    return Done(self)


_kernels = _select.Kernels(__name__, {_aten.masked_fill_.Scalar: _flattened, _aten.masked_fill_.Tensor: _flattened})
install, uninstall = _kernels.install, _kernels.uninstall
