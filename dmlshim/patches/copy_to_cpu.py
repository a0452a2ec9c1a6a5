"""A copy from the device into an existing CPU tensor rebinds that tensor on DirectML.

torch-directml 0.2.5's device-to-CPU ``copy_`` (the real binary; failure_modes.md #64; no
public report) does not write into the destination's memory: it gives the destination a
new CPU storage holding the source, in the source's dtype.  So ``cpu[1:3].copy_(d)``,
``cpu[:, 1] = d`` and ``cpu.t().copy_(d)`` leave ``cpu`` as it was, an alias of ``cpu``
taken before ``cpu.copy_(d)`` keeps the old values, and an int64 ``cpu`` given a float32
source becomes float32.  openai-whisper writes the language it detected that way
(``tokens[:, 1] = lang_tokens``, ``tokens`` on the CPU): raw, every transcript is decoded as
English.  The fix moves the source to the CPU first (``.cpu()``, a new tensor: right) and
copies there, at ``Tensor.copy_`` and ``Tensor.__setitem__``.  Python entry points only: a
BackendSelect kernel for ``aten::copy_`` breaks torch-directml's copies (``broadcast_copy``),
so C++ callers of ``copy_`` are not covered.  Docs: docs/defects.md.
"""
from __future__ import annotations

import torch

from ._wrap import Context, PatchSet
from ._patch import FALLBACK_MODES, Patch

PATCH = Patch("copy_to_cpu", "a copy from the device into a CPU tensor rebinds it to new storage in the "
                             "source's dtype: views and aliases never see it (measured on the real 0.2.5 "
                             "binary; #64): the source moved to the CPU first", modes=FALLBACK_MODES,
              # Tensor.copy_: outside broadcast_copy's wrapper, which then expands the moved source
              after=("broadcast_copy",))

_patches = PatchSet(__name__)


def _on(target: str, value):
    return isinstance(value, torch.Tensor) and not value.is_cpu and value.device.type == target


def _copy(func, args, kwargs):
    self, src = args[0], (args[1] if len(args) > 1 else kwargs.pop("src"))
    return "cpu", func(self, src.cpu(), *args[2:], **kwargs)


def _setitem(func, args, kwargs):
    self, index, value = args
    return "cpu", func(self, index, value.cpu())


def install(ctx: Context) -> None:
    target = ctx.target

    def copy_from_device(instance, args, kwargs):
        return instance.is_cpu and _on(target, args[0] if args else kwargs.get("src"))

    def set_from_device(instance, args, kwargs):
        return instance.is_cpu and len(args) == 2 and _on(target, args[1])

    _patches.intercept(ctx, torch.Tensor, "copy_", _copy, select=copy_from_device)
    _patches.intercept(ctx, torch.Tensor, "__setitem__", _setitem, select=set_from_device)


def uninstall() -> None:
    _patches.restore()
