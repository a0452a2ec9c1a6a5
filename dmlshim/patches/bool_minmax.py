"""``max()``/``min()`` of a bool tensor (no ``dim``) come back int32 on the real torch-directml
0.2.5 binary, where PyTorch returns bool (measured with OpInfo's ``reduction_no_dim``
samples, a 5x5x5 and a 0-dim input; the values are right).  Fixed on the device: the result
cast back to bool.  No public report.
"""
from __future__ import annotations

import torch

from . import _select
from .dispatcher import Done
from ._patch import Patch

PATCH = Patch("bool_minmax", "max()/min() of a bool tensor come back int32 (measured on the real 0.2.5 "
                             "binary): cast back to bool, on the device")

_aten = torch.ops.aten


def _as_bool(op, keyset, args, kwargs):
    if args[0].dtype != torch.bool:
        return None
    return Done(_select.itself(op, keyset, *args, **kwargs).to(torch.bool))    # no copy if bool


_kernels = _select.Kernels(__name__, {_aten.max.default: _as_bool, _aten.min.default: _as_bool})
install, uninstall = _kernels.install, _kernels.uninstall
