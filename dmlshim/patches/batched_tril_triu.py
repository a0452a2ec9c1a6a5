"""``tril``/``triu`` of a batch of matrices are silently wrong on the real torch-directml 0.2.5
binary.

The values come from the input, the mask is wrong: DirectML keeps the diagonals ``k <= c - r
< e`` with ``e = max(size(0), size(1))`` (a 2-D input's width, or more: right), wrapping round
when ``k > e``, and ``tril`` keeps the complement of ``triu(k + 1)``'s, none when ``k + 1 ==
e``; a ``k`` outside the matrix is right (``(2, 3, 4).triu()`` drops ``[0, 3]``; ``(1, 1, 3,
3).triu()`` keeps the diagonal only; 5-D inputs are refused, E_INVALIDARG).  Measured on 494
calls, 2-D to 4-D, ``k`` in -6 ... 6 (docs/defects.md).  2-D inputs are right, so the fix
takes the 2-D mask of the last two dimensions on the device and selects with ``where``, the
batch flattened to 3-D (a 6-D ``where`` aborts the process).  No public report.
"""
from __future__ import annotations

import math

import torch

from .. import fallback
from . import _select
from .dispatcher import Done
from ._patch import Patch

PATCH = Patch("batched_tril_triu", "tril/triu of a batch of matrices keep the wrong diagonals (measured on "
                                   "the real 0.2.5 binary): the 2-D mask of the last two dimensions, where, "
                                   "on the device")

_aten = torch.ops.aten
UPPER = (_aten.triu.default, _aten.triu_.default, _aten.triu.out)
LOWER = (_aten.tril.default, _aten.tril_.default, _aten.tril.out)
IN_PLACE = (_aten.triu_.default, _aten.tril_.default)


def triangle(x: torch.Tensor, diagonal: int, upper: bool) -> torch.Tensor:
    """``x.triu(diagonal)`` (``upper``) or ``x.tril(diagonal)`` of an input of 3 or more
    dimensions, computed from the 2-D mask of its last two: a new contiguous tensor of
    ``x``'s shape and dtype, on ``x``'s device."""
    rows, cols = x.shape[-2:]
    ones = torch.ones(rows, cols, dtype=torch.bool, device=x.device)
    mask = ones.triu(diagonal) if upper else ones.tril(diagonal)
    zero = torch.zeros((), dtype=x.dtype, device=x.device)
    return torch.where(mask, x.reshape(math.prod(x.shape[:-2]), rows, cols), zero).view(x.shape)


def _masked(op, keyset, args, kwargs):
    self = args[0]
    if self.dim() <= 2:
        return None
    diagonal = args[1] if len(args) > 1 else kwargs.get("diagonal", 0)
    result = triangle(self, diagonal, op in UPPER)
    if op in IN_PLACE:
        return Done(self.copy_(result))
    if "out" in kwargs:
        return Done(fallback.write_out(kwargs["out"], result))
    return Done(result)


_kernels = _select.Kernels(__name__, {op: _masked for op in UPPER + LOWER})
install, uninstall = _kernels.install, _kernels.uninstall
