"""``F.cross_entropy(..., reduction='none')``: every gradient is 0 on DirectML.

The loss is right and autograd looks normal, but the backward (``nll_loss_backward``
with reduction 'none') returns zeros, so nothing trains (microsoft/DirectML#739, #740,
0.2.5; failure_modes.md #44).  That backward runs on the CPU; the mean/sum reductions
stay on the device.  Docs: docs/reported-defects.md.
"""
from __future__ import annotations

import torch

from . import _select
from ._patch import Patch

PATCH = Patch("losses", "cross_entropy(reduction='none') gradients all zero (DirectML#739, #740; #44): "
                        "nll_loss_backward 'none' on the CPU")

_aten = torch.ops.aten
_NONE = 0    # at::Reduction::None


def _reduction_none(op, keyset, args, kwargs):
    return _select.on_cpu(op, args, kwargs) if args[4] == _NONE else None


_kernels = _select.Kernels(__name__, {_aten.nll_loss_backward.default: _reduction_none,
                            _aten.nll_loss_backward.grad_input: _reduction_none})
install, uninstall = _kernels.install, _kernels.uninstall
