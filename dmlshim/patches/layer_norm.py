"""``layer_norm`` on a non-contiguous input: wrong values or an error on DirectML.

A permuted input gives wrong values (max abs diff 3.6), ``x[::2]`` raises
``RuntimeError: m_device->CreateOperator...`` (microsoft/DirectML#588, 0.2.1; unknown on
0.2.5; failure_modes.md #45).  The reported workaround, ``.contiguous()`` first, is made
on the device for the input (and the backward's input and gradient).
Docs: docs/reported-defects.md.
"""
from __future__ import annotations

import torch

from . import _select
from ._patch import Patch

PATCH = Patch("layer_norm", "layer_norm on a non-contiguous input: wrong values or CreateOperator error "
                            "(DirectML#588; #45): .contiguous() on the device")

_aten = torch.ops.aten


def _contiguous(*positions):
    def fix(op, keyset, args, kwargs):
        if all(args[i].is_contiguous() for i in positions):
            return None
        return [a.contiguous() if i in positions else a for i, a in enumerate(args)], kwargs
    return fix


_kernels = _select.Kernels(__name__, {_aten.native_layer_norm.default: _contiguous(0),
                            _aten.native_layer_norm_backward.default: _contiguous(0, 1)})
install, uninstall = _kernels.install, _kernels.uninstall
