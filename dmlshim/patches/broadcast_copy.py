"""``Tensor.copy_`` of a source that broadcasts gives wrong values on DirectML.

Measured on the real torch-directml 0.2.5 binary (docs/realdml.md; no public report),
``d`` of shape (3, 4) on the device:
- ``d.copy_(cpu_row)``, ``cpu_row`` of shape (4,): the row lands in ``d``'s first 4
  elements, the other 8 keep their values;
- ``d.copy_(dev_row)``, a device source of fewer dimensions: ``d`` is filled with the
  row's first element.
A source of ``d``'s rank (``(1, 4)``, ``(3, 1)``), a 0-dim one, an expanded one, and
``d[1:] = row`` (torch expands it) are right.

Fix: the source is expanded to ``d``'s shape first (a stride-0 view, no copy), which is
right on the device.  A source that does not broadcast gets the CPU's error.  Python
entry point only: a BackendSelect kernel for ``aten::copy_`` (the net's way) breaks
every torch-directml copy on the real binary (garbage values), so C++ callers of
``copy_`` with a broadcasting source are not covered.
"""
from __future__ import annotations

import torch

from ..laws.broadcast import wrong_on_device
from ._wrap import Context, PatchSet
from ._patch import FALLBACK_MODES, Patch

PATCH = Patch("broadcast_copy", "Tensor.copy_ of a source that broadcasts: a CPU one fills only the first "
                                "elements, a device one of fewer dims fills the first value (measured on "
                                "the real 0.2.5 binary): expand the source first", modes=FALLBACK_MODES)

_patches = PatchSet(__name__)


def _copy(func, args, kwargs):
    self, src = args[0], (args[1] if len(args) > 1 else kwargs.pop("src"))
    if not wrong_on_device(self, src):
        return "pass", func(self, src, *args[2:], **kwargs)
    # the CPU's error for a source that does not broadcast (the device copies anyway)
    torch.empty(self.shape, device="meta").copy_(torch.empty(src.shape, device="meta"))
    return "expand", func(self, src.expand(self.shape), *args[2:], **kwargs)


def _on_target(target: str):
    def select(instance, args, kwargs):
        return not instance.is_cpu and instance.device.type == target
    return select


def install(ctx: Context) -> None:
    _patches.intercept(ctx, torch.Tensor, "copy_", _copy, select=_on_target(ctx.target))


def uninstall() -> None:
    _patches.restore()
