"""``F.pad`` with a 4-element pad on DirectML pads as (top, bottom, left, right).

The right order is (left, right, top, bottom); DirectML swaps the pairs (microsoft/
DirectML#687, 0.2.5, seen with ``reflect``; failure_modes.md #42): silently wrong values,
or a wrong shape later (Real-ESRGAN x2 pads an odd width by ``(0, 1, 0, 0)`` before
``pixel_unshuffle``).  Equal pairs are harmless and stay on the device; a call whose
pairs differ runs on the CPU (always right, whatever the device does instead), its
backward too.  Docs: docs/reported-defects.md.
"""
from __future__ import annotations

import torch

from . import _select
from ._patch import Patch

PATCH = Patch("pad", "4-element F.pad applied as (top, bottom, left, right) (DirectML#687; #42): "
                     "reflection_pad2d with unequal pairs on the CPU")

_aten = torch.ops.aten


def _pairs_differ(op, keyset, args, kwargs):
    padding = args[2] if "_backward" in op.name() else args[1]
    if len(padding) == 4 and (padding[0], padding[1]) != (padding[2], padding[3]):
        return _select.on_cpu(op, args, kwargs)
    return None


_kernels = _select.Kernels(__name__, {op: _pairs_differ for op in (
    _aten.reflection_pad2d.default, _aten.reflection_pad2d.out,
    _aten.reflection_pad2d_backward.default, _aten.reflection_pad2d_backward.grad_input)})
install, uninstall = _kernels.install, _kernels.uninstall
