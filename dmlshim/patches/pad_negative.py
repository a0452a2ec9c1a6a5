"""Negative padding on the real torch-directml 0.2.5 binary.

``replication_pad1d``/``2d`` with a negative begin pad (left, top) is silently wrong: every
value along that dimension is the input's last one (a negative end pad is right).
``constant_pad_nd`` with pads of both signs is refused: "torch-dml currently doesn't support
a mix of positive and negative padding values".  Both are fixed on the device: replication
as PyTorch's index map (``index_select`` of ``clamp(j - begin, 0, size - 1)`` per dimension,
which also covers a crop past the whole input), a constant pad as a crop (``narrow``: a view)
then the pads made non-negative.
No public report (OpInfo's ``pad`` ``replicate_negative`` samples; docs/defects.md).
"""
from __future__ import annotations

from typing import List, Sequence, Tuple

import torch

from . import _select
from .dispatcher import Done
from ._patch import Patch

PATCH = Patch("pad_negative", "replication_pad with a negative begin pad is silently wrong, constant_pad_nd "
                              "with mixed signs refused (measured on the real 0.2.5 binary): crop, then pad")

_aten = torch.ops.aten


def crop(x: torch.Tensor, pad: Sequence[int]) -> Tuple[torch.Tensor, List[int]]:
    """``x`` narrowed by ``pad``'s negative entries (``F.pad``'s order: last dimension first,
    begin then end) and the pads left to apply (each ``max(p, 0)``)."""
    pad = [int(p) for p in pad]
    for i in range(len(pad) // 2):
        dim = x.dim() - 1 - i
        begin, end = max(-pad[2 * i], 0), max(-pad[2 * i + 1], 0)
        x = x.narrow(dim, begin, max(x.size(dim) - begin - end, 0))
    return x, [max(p, 0) for p in pad]


def _cropped(x, pad, rest, kwargs):
    cropped, pad = crop(x, pad)
    if 0 in cropped.shape[x.dim() - len(pad) // 2:]:
        return None                               # nothing left: the device's own error
    return (cropped, pad) + tuple(rest), kwargs


def replication_index(size: int, begin: int, end: int) -> torch.Tensor:
    """PyTorch's replicate map for one dimension: output ``j`` reads input
    ``clamp(j - begin, 0, size - 1)`` (int64, on the CPU)."""
    return (torch.arange(size + begin + end) - begin).clamp(0, size - 1)


def replicate(x: torch.Tensor, pad: Sequence[int]) -> torch.Tensor:
    """``F.pad(x, pad, "replicate")`` as PyTorch's CPU kernel indexes it (``replication_index``)."""
    for i in range(len(pad) // 2):
        dim, begin, end = x.dim() - 1 - i, int(pad[2 * i]), int(pad[2 * i + 1])
        x = x.index_select(dim, replication_index(x.size(dim), begin, end).to(x.device))
    return x


def _negative_begin(op, keyset, args, kwargs):
    x, pad = args[0], [int(p) for p in args[1]]
    if not any(p < 0 for p in pad[0::2]):
        return None
    if 0 in x.shape or any(x.size(x.dim() - 1 - i) + pad[2 * i] + pad[2 * i + 1] <= 0 for i in range(len(pad) // 2)):
        return None                               # the op's own error
    return Done(replicate(x, pad))


def _mixed_signs(op, keyset, args, kwargs):
    pad = [int(p) for p in args[1]]
    if not (min(pad) < 0 < max(pad)):
        return None
    fixed = _cropped(args[0], pad, args[2:], kwargs)
    if fixed is None:
        return None
    # the fixes after this one see the cropped call too (pad_value's: a value other than 0)
    return Done(_select.pass_on(op, keyset, *fixed, after=_mixed_signs))


_kernels = _select.Kernels(__name__, {_aten.replication_pad1d.default: _negative_begin,
                            _aten.replication_pad2d.default: _negative_begin,
                            _aten.constant_pad_nd.default: _mixed_signs})
install, uninstall = _kernels.install, _kernels.uninstall
