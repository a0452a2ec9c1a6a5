"""``native_layer_norm`` of an input with no elements is refused on the real torch-directml
0.2.5 binary (``m_device->CreateOperator``; (0, 1) with ``[1]``, (0, 3), (2, 0) with ``[0]``,
with weights or without: OpInfo's samples, then by hand).  Such a call runs on the CPU, before
the kernel: nothing to compute (its mean and rstd have the batch's elements, NaN for
``[0]``).  No public report (docs/conformance.md).
"""
from __future__ import annotations

import torch

from . import _gate, _select
from ._patch import Patch

PATCH = Patch("empty_layer_norm", "native_layer_norm of an input with no elements refused (CreateOperator; measured "
                                  "on the real 0.2.5 binary): on the CPU (nothing to compute)",
              # measured on the real binary (conformance over every sample); here: before layer_norm's
              # contiguous fix of the same overload (#45), whose fixed call would reach the kernel
              before=("layer_norm",))

_aten = torch.ops.aten


@_gate.watching(_gate.Watch(empty=True))
def _empty_input(op, keyset, args, kwargs):
    if args[0].numel():
        return None
    return _select.on_cpu(op, args, kwargs)


_kernels = _select.Kernels(__name__, {_aten.native_layer_norm.default: _empty_input})
install, uninstall = _kernels.install, _kernels.uninstall
