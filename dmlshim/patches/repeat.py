"""``Tensor.repeat`` with more than 4 dimensions is refused by torch-directml 0.2.5.

"the dimesion of at::Tensor must be 4 or lower, but got 5" (Comfy-Org/ComfyUI#5860; the
real 0.2.5 binary; failure_modes.md #61): its repeat kernel takes at most 4 dimensions,
while ``cat``, ``expand`` and element-wise ops on 5-D tensors work there.  FunASR's CTC
prefix scorer repeats a 5-D tensor (``ctc_prefix_score.py:108``).  Fixed on the device for
a 5-D result: one ``cat`` of ``r`` copies per repeated dimension; a 6-D or larger result
on the CPU (a 6-D ``cat`` aborts the process: ``rank <= DML_TENSOR_DIMENSION_COUNT_MAX``,
as #29).  Not fixed: autograd's backward of such a repeat reshapes the gradient to twice
as many dimensions and aborts the same way (measured on the real binary).
Docs: docs/defects.md ("Seen on the real binary").
"""
from __future__ import annotations

import torch

from . import _select
from .dispatcher import Done
from ._patch import Patch

PATCH = Patch("repeat", "Tensor.repeat with more than 4 dimensions refused: 'must be 4 or lower' "
                        "(ComfyUI#5860; #61): one cat per repeated dimension, on the device")

_aten = torch.ops.aten
MAX_DIM = 4
MAX_CAT_DIM = 5    # DML_TENSOR_DIMENSION_COUNT_MAX: a 6-D cat aborts (dml_tensor_desc.cc:80)


def by_cat(x: torch.Tensor, repeats) -> torch.Tensor:
    """``x.repeat(*repeats)`` from ``cat``: a new tensor of shape ``repeats[i] * size[i]``
    (``x`` padded with leading 1s to ``len(repeats)`` dimensions), on ``x``'s device."""
    repeats = [int(r) for r in repeats]
    shape = [1] * (len(repeats) - x.dim()) + list(x.shape)
    out = x.reshape(shape)
    if 0 in repeats or out.numel() == 0:
        return x.new_empty([r * s for r, s in zip(repeats, shape)])
    copied = False
    for dim, r in enumerate(repeats):
        if r > 1:
            out, copied = torch.cat([out] * r, dim), True
    return out if copied else out.clone()   # repeat never returns a view


def _over_four(op, keyset, args, kwargs):
    x, repeats = args[0], args[1]
    rank = max(x.dim(), len(repeats))
    if rank <= MAX_DIM or len(repeats) < x.dim():
        return None
    if rank > MAX_CAT_DIM:      # cat of such tensors aborts the process there
        return _select.on_cpu(op, args, kwargs)
    return Done(by_cat(x, repeats))


_kernels = _select.Kernels(__name__, {_aten.repeat.default: _over_four})
install, uninstall = _kernels.install, _kernels.uninstall
