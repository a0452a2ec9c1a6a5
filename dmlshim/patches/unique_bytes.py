"""``torch.unique`` (``_unique2``) of a one-byte dtype (bool, uint8, int8) drops the zeros on
the real torch-directml 0.2.5 binary (``unique([True, False])`` is ``[True]``, of a 0-dim
False ``[]``), and of an input of two or more dimensions aborts the process
(``dml_tensor_desc.cc:76 Check failed: broadcast_sizes.size() >= sizes.size()``, any dtype).
Wider dtypes and 0-dim/1-D inputs are right (measured with OpInfo's bool samples).  Fixed on
the device: the input flattened (``unique`` without ``dim`` flattens anyway; the inverse
indices take the input's shape back) and a one-byte one widened to int32, the values cast
back.  No public report.
"""
from __future__ import annotations

import torch

from ..laws.integers import BYTES
from . import _select
from .dispatcher import Done
from ._patch import Patch

PATCH = Patch("unique_bytes", "unique of bool/uint8/int8 drops the zeros, of >= 2 dimensions aborts (measured "
                              "on the real 0.2.5 binary): flattened, widened to int32, on the device",
              # unique's counts go to the CPU, right for every dtype and rank; int_range's guard hands
              # the call on to this one, which computes it below the chain (_select.itself): before
              # it, an int64 of >= 2 dimensions past 32 bits came back wrong (issue 49)
              after=("unique", "int_range"))

_aten = torch.ops.aten
OPS = (_aten._unique2.default,)


def _flat_wide(op, keyset, args, kwargs):
    x = args[0]
    if x.dtype not in BYTES and x.dim() < 2:
        return None
    flat = x.reshape(-1)
    values, inverse, counts = _select.itself(op, keyset, flat.to(torch.int32) if x.dtype in BYTES else flat,
                                             *args[1:], **kwargs)
    return_inverse = args[2] if len(args) > 2 else kwargs.get("return_inverse", False)
    return Done((values.to(x.dtype), inverse.reshape(x.shape) if return_inverse else inverse, counts))


_kernels = _select.Kernels(__name__, {op: _flat_wide for op in OPS})
install, uninstall = _kernels.install, _kernels.uninstall
