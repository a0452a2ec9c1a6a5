"""Safety net: bool or integer input to conv1d/2d/3d.

DirectML fails on a convolution whose input is bool (the emulator's default rule;
seen in FunASR's SANM memory block, whose real cause is the float x bool ``mul``
returning bool: DirectML#686, #737, failure_modes.md #17 - see ``patches.mul``).
CPU PyTorch refuses a bool/integer input with a float weight, so there is no CPU
reference for this case: the input is cast to the weight's dtype on the device,
which is what the user plainly meant.  This only makes a model *run*; the mul patch
is what makes it *right* (a bool input has already lost its values).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from . import _gate
from ._wrap import Context, PatchSet

_patches = PatchSet(__name__)

_ENTRY_POINTS = tuple((owner, f"conv{n}d") for n in (1, 2, 3) for owner in (F, torch))


def _select(ctx: Context):
    target = ctx.target

    def select(instance, args, kwargs):
        x = args[0] if args else kwargs.get("input")
        return (isinstance(x, torch.Tensor) and not x.is_cpu and not x.is_floating_point()
                and not x.is_complex() and x.device.type == target)
    return select


def _handle(func, args, kwargs):
    weight = args[1] if len(args) > 1 else kwargs.get("weight")
    if not isinstance(weight, torch.Tensor) or not weight.is_floating_point():
        return "pass", func(*args, **kwargs)
    if args:
        args = (args[0].to(weight.dtype), *args[1:])
    else:
        kwargs = dict(kwargs, input=kwargs["input"].to(weight.dtype))
    return "coerce", func(*args, **kwargs)


def install(ctx: Context) -> None:
    select = _select(ctx)
    for owner, name in _ENTRY_POINTS:
        # the front passes a device call by unless a tensor is an integer or bool (select's test)
        _patches.intercept(ctx, owner, name, _handle, select=select, device=_gate.Watch(dtypes=_gate.INTEGERS))


def uninstall() -> None:
    _patches.restore()
