"""Views of normal tensors inside ``torch.inference_mode()`` fail on DirectML.

``RuntimeError: Cannot set version_counter for inference tensor`` (microsoft/DirectML#602,
0.2.5 confirmed there; #622, #450; vladmandic/sdnext#3464; failure_modes.md #41):
torch-directml's view kernels make the view as a new tensor, an inference tensor inside
inference_mode; torch then gives it the version counter of its base, a normal tensor
(a module's weight moved to the device before), which an inference tensor refuses.
``nn.Linear``'s ``weight.t()`` is such a view.  The fix runs those view kernels with
inference mode off, so the view is a normal tensor, exactly what the CPU makes; inference
tensors and every other call are left alone.  Docs: docs/reported-defects.md.
"""
from __future__ import annotations

import torch

from .. import _torch_compat, trace
from ..dml_ops import aten_op, view_kernels
from . import _gate, _select
from .dispatcher import Done, below
from ._patch import Patch

PATCH = Patch("inference_mode", "views of normal tensors inside torch.inference_mode(): 'Cannot set "
                                "version_counter for inference tensor' (DirectML#602, #622; #41)")


@_gate.at_backend
@_gate.watching(_gate.Watch(view=True))
def _normal_view(op, keyset, args, kwargs):
    if not torch.is_inference_mode_enabled() or args[0].is_inference():
        return None
    with _torch_compat.inference_mode_off(), trace.own():          # the view itself: its own time
        return Done(op.redispatch(below(keyset), *args, **kwargs), record=False)


# torch-directml's own view kernels, read from its registrations (dml_ops.view_kernels;
# the emulator's rule for #41 fails on the same list)
_kernels = _select.Kernels(__name__, {aten_op(name): _normal_view for name in view_kernels()})
install, uninstall = _kernels.install, _kernels.uninstall
