"""``scatter_add`` with a repeated index is silently wrong on the real torch-directml 0.2.5 binary.

Where the index names one place more than once along ``dim``, DirectML writes it once: the
place gets ``self`` plus the last ``src`` value written there, not plus their sum
(``zeros(3).scatter_add(0, [0, 1, 1], [1, 2, 3])`` gives ``[1, 3, 0]`` for ``[1, 5, 0]``;
every dtype, 1-D to 4-D; ``scatter(..., reduce="add"/"multiply")`` alike).  An index longer
than ``self`` along ``dim`` is refused (E_INVALIDARG), one smaller elsewhere too
("partially modified dimensions"), a ``src`` of another shape than the index too.  Measured
(docs/defects.md); no public report.  ``index_put_`` with ``accumulate=True`` is right on the
real binary, repeats included, so the fix writes ``src`` there at the index's coordinates
(the index along ``dim``, ``arange`` along the others) and stays on the device;
``reduce="multiply"`` runs on the CPU (``index_put`` has no product).
"""
from __future__ import annotations

from typing import Tuple

import torch

from .. import fallback
from . import _select
from .dispatcher import Done
from ._patch import Patch

PATCH = Patch("scatter_repeated", "scatter_add/scatter(reduce=) with a repeated index write it once (measured "
                                  "on the real 0.2.5 binary): index_put_(accumulate=True), on the device",
              # gather's dim=-1 fix hands the dimension counted from 0 on; refused's retry answers all
              after=("gather",), before=("refused",))

_aten = torch.ops.aten
FUNCTIONAL = (_aten.scatter_add.default, _aten.scatter.reduce, _aten.scatter.value_reduce)
IN_PLACE = (_aten.scatter_add_.default, _aten.scatter_.reduce, _aten.scatter_.value_reduce)
OUT = (_aten.scatter_add.out, _aten.scatter.reduce_out, _aten.scatter.value_reduce_out)


def _valid(self, dim, index, src) -> bool:
    """A call torch accepts and the fix can compute (else the op runs, for torch's error):
    same ranks, same device, an int64 index no larger than ``src``, nor than ``self`` but
    along ``dim``."""
    rank = self.dim()
    if not (rank and isinstance(index, torch.Tensor) and index.dtype == torch.int64
            and index.dim() == rank and index.device == self.device and -rank <= dim < rank):
        return False
    if isinstance(src, torch.Tensor) and (src.dtype != self.dtype or src.dim() != rank
                                          or src.device != self.device
                                          or any(i > s for i, s in zip(index.shape, src.shape))):
        return False
    return all(i <= s for d, (i, s) in enumerate(zip(index.shape, self.shape)) if d != dim % rank)


def coordinates(index: torch.Tensor, dim: int) -> Tuple[torch.Tensor, ...]:
    """``index_put``'s indices for a scatter along ``dim`` (0 <= dim < index.dim()): ``index``
    itself along ``dim``, ``arange`` along the others, each shaped to broadcast to
    ``index.shape`` (int64, on ``index``'s device)."""
    coords = []
    for d, size in enumerate(index.shape):
        if d == dim:
            coords.append(index)
            continue
        shape = [1] * index.dim()
        shape[d] = size
        coords.append(torch.arange(size, device=index.device).view(shape))
    return tuple(coords)


def accumulate_(target, dim, index, src) -> torch.Tensor:
    """``target.scatter_add_(dim, index, src)`` through ``index_put_(accumulate=True)``;
    ``src`` a tensor at least as large as ``index`` or a number.  Returns ``target``."""
    if index.numel() == 0:
        return target
    if isinstance(src, torch.Tensor):
        src = src[tuple(slice(0, size) for size in index.shape)]
    else:
        src = torch.full(index.shape, src, dtype=target.dtype, device=target.device)
    return target.index_put_(coordinates(index, dim % target.dim()), src, accumulate=True)


def _summed(op, keyset, args, kwargs):
    self, dim, index, src = args[:4]
    if not _valid(self, dim, index, src):
        return None
    if kwargs.get("reduce", "add") != "add":
        return _select.on_cpu(op, args, kwargs)
    if op in IN_PLACE:
        return Done(accumulate_(self, dim, index, src))
    result = accumulate_(self.clone(), dim, index, src)
    return Done(fallback.write_out(kwargs["out"], result) if op in OUT else result)


_kernels = _select.Kernels(__name__, {op: _summed for op in FUNCTIONAL + IN_PLACE + OUT})
install, uninstall = _kernels.install, _kernels.uninstall
