"""``torch.autocast("privateuseone")`` makes every op fail on DirectML: it is entered off.

Measured on the real torch-directml 0.2.5 binary: inside ``torch.autocast("privateuseone")``
every aten op on the device raises ``NotImplementedError: Could not run 'aten::mm' with
arguments from the 'AutocastPrivateUse1' backend``. torch 2.4 has neither autocast kernels
nor a fallthrough for that key (pytorch/pytorch#128598) and torch-directml registers none;
failure_modes.md #36 read its source as a silent no-op.

Fix: an autocast context (or decorator) for the device is entered disabled, with one
warning, so the block computes in the model's own dtypes, as without autocast. For
float16 speed, cast the model yourself (#36's workaround). ``torch.set_autocast_enabled``
called directly is not covered.
"""
from __future__ import annotations

import warnings

import torch

from ._wrap import Context, PatchSet
from ._patch import Patch

PATCH = Patch("autocast", "inside torch.autocast('privateuseone') every op raises NotImplementedError "
                          "(no AutocastPrivateUse1 kernels; measured on the real 0.2.5 binary, #36): "
                          "the autocast is entered disabled, with a warning")

_patches = PatchSet(__name__)
_warned = False


def _entered_off(target: str):
    def wrapper(wrapped, instance, args, kwargs):
        device_type = args[0] if args else kwargs.get("device_type")
        if device_type == target:
            if len(args) > 2:                    # (device_type, dtype, enabled, ...)
                enabled, args = args[2], (*args[:2], False, *args[3:])
            else:
                enabled, kwargs = kwargs.get("enabled", True), {**kwargs, "enabled": False}
            if enabled:
                _warn(target)
        return wrapped(*args, **kwargs)
    return wrapper


def _warn(target: str) -> None:
    global _warned
    if not _warned:
        _warned = True
        warnings.warn(f"dmlshim: torch.autocast({target!r}) fails every op on DirectML (no "
                      f"AutocastPrivateUse1 kernels; failure_modes.md #36): it runs disabled, "
                      f"in the model's own dtypes (cast to float16 yourself for speed)",
                      RuntimeWarning, stacklevel=4)


def install(ctx: Context) -> None:
    _patches.wrap(ctx, torch.amp.autocast_mode.autocast, "__init__", _entered_off(ctx.target))


def uninstall() -> None:
    _patches.restore()
