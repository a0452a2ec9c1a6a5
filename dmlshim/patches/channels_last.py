"""``memory_format=torch.channels_last`` (or ``channels_last_3d``) is refused for DirectML
tensors by the real torch-directml 0.2.5 binary.

Its ``empty.memory_format`` kernel raises "'memory_format' argument is must be Contiguous for
DML tensors", and ``x.to(memory_format=)``, ``x.to(dml, memory_format=)``, ``clone``,
``empty_like`` (so ``zeros_like`` ...), ``torch.empty`` and ``Module.to(memory_format=)`` all
reach it (measured, float32 and int64).  Its tensors hold those strides well: a CPU
channels-last tensor moved there keeps them, ``empty_strided`` makes them, and ``copy_``,
conv, the norms, pooling, softmax and the pointwise ops measured read them right.  So the fix
makes the CPU's strides with ``empty_strided`` (torch's own checks and strides, computed on
the ``meta`` device) and copies into them, on the device.  No public report.
"""
from __future__ import annotations

import torch

from .. import _torch_compat
from . import _gate, _select, dispatcher
from ._wrap import PatchSet
from .dispatcher import Done
from ._patch import Patch

PATCH = Patch("channels_last", "memory_format=channels_last is refused for device tensors ('must be "
                               "Contiguous for DML tensors', measured on the real 0.2.5 binary): the CPU's "
                               "strides by empty_strided and a copy, on the device",
              # int_range's int64 clone guard hands the call on to this one's clone (_select.pass_on)
              after=("int_range",))

_aten = torch.ops.aten
FORMATS = (torch.channels_last, torch.channels_last_3d)


def _meta(t: torch.Tensor) -> torch.Tensor:
    return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="meta")


def _target(device, fallback: torch.device) -> torch.device:
    return fallback if device is None else torch.device(device)


def _made(like: torch.Tensor, device: torch.device, source=None, non_blocking=False) -> Done:
    """A device tensor of ``like``'s (a meta tensor's) shape, strides and dtype, ``source``
    copied into it."""
    made = _aten.empty_strided.default(like.shape, like.stride(), dtype=like.dtype, device=device)
    if source is not None:
        made.copy_(source, non_blocking)
    return Done(made)


def _to_copy_to(target: str):
    """``_to_copy`` in a named memory format: the net's ``_to_copy`` hook (the net's kernel
    holds this overload, and sees a CPU ``self`` moved to the device too).  To a ``target``
    device in a channels-last format: made by :func:`_made`.  From one to the CPU: the real
    binary's copy gives the source's strides whatever the format (failure_modes.md #64's
    rebinding), so the CPU result is restrided when they differ."""
    @_gate.watching(_gate.Watch(memory_format=True))
    def fix(op, args, kwargs):
        fmt = kwargs.get("memory_format")
        if fmt is None or fmt is torch.preserve_format or _select.aside():
            return None
        self = args[0]
        device = _target(kwargs.get("device"), self.device)
        to_device = device.type == target and fmt in FORMATS
        to_cpu = device.type == "cpu" and self.device.type == target
        if not (to_device or to_cpu) or kwargs.get("layout") not in (None, torch.strided):
            return None
        like = op(_meta(self), dtype=kwargs.get("dtype"), memory_format=fmt)
        if to_device:
            return _made(like, device, self, kwargs.get("non_blocking", False))
        copied = op(self, **dict(kwargs, memory_format=torch.preserve_format))
        if copied.stride() == like.stride():
            return Done(copied)
        return Done(torch.empty_strided(like.shape, like.stride(), dtype=like.dtype).copy_(copied))
    return fix


@_gate.watching(_gate.Watch(memory_format=True))
def _clone(op, keyset, args, kwargs):
    if kwargs.get("memory_format") not in FORMATS:
        return None
    self = args[0]
    return _made(op(_meta(self), memory_format=kwargs["memory_format"]), self.device, self)


@_gate.watching(_gate.Watch(memory_format=True))
def _empty_like(op, keyset, args, kwargs):
    if kwargs.get("memory_format") not in FORMATS or kwargs.get("layout") not in (None, torch.strided):
        return None
    self = args[0]
    device = _target(kwargs.get("device"), self.device)
    if device.type != self.device.type:
        return None
    return _made(op(_meta(self), dtype=kwargs.get("dtype"), memory_format=kwargs["memory_format"]), device)


def _empty(func, args, kwargs):
    """``torch.empty(..., device=dml, memory_format=channels_last)``: a factory, which no
    BackendSelect kernel of ours sees without standing in for torch's own on every allocation."""
    like = func(*args, **dict(kwargs, device="meta", pin_memory=False))
    made = _made(like, torch.device(kwargs["device"])).result
    return "channels last", made.requires_grad_(like.requires_grad)


def _is_contiguous(func, args, kwargs):
    """The real binary answers ``is_contiguous(memory_format=)`` as ``is_contiguous()``: the
    answer from the strides, as torch's own."""
    return "strides", _torch_compat.is_contiguous_for_memory_format(args[0], memory_format=kwargs["memory_format"])


def _contiguous(func, args, kwargs):
    """``contiguous(memory_format=channels_last)``, which the real binary answers with the
    tensor itself (its ``is_contiguous`` ignores the format): a channels-last clone unless the
    strides are already so."""
    self, fmt = args[0], kwargs["memory_format"]
    if _torch_compat.is_contiguous_for_memory_format(self, memory_format=fmt):
        return "pass", self
    return "channels last", self.clone(memory_format=fmt)


def _format_on(target: str):
    def select(instance, args, kwargs):
        return (kwargs.get("memory_format") in FORMATS and not instance.is_cpu
                and instance.device.type == target and not _select.aside())
    return select


def _empty_on(target: str):
    def select(instance, args, kwargs):
        device = kwargs.get("device")
        return (kwargs.get("memory_format") in FORMATS and device is not None
                and torch.device(device).type == target and not _select.aside())
    return select


_kernels = _select.Kernels(__name__, {_aten.clone.default: _clone, _aten.empty_like.default: _empty_like})
_patches = PatchSet(__name__)
_hook = dispatcher.Hook(__name__, "_to_copy", _to_copy_to)


def install(ctx) -> None:
    """The kernels of ``clone`` and ``empty_like``, the net's ``_to_copy`` hook, and the Python
    entry points ``torch.empty``, ``Tensor.is_contiguous`` and ``Tensor.contiguous``."""
    _kernels.install(ctx)
    _hook.install(ctx)
    # their selects want a memory_format= (no plain value): the front passes other device calls by
    _patches.intercept(ctx, torch, "empty", _empty, select=_empty_on(ctx.target), device=_gate.Watch())
    for name, handler in (("is_contiguous", _is_contiguous), ("contiguous", _contiguous)):
        _patches.intercept(ctx, torch.Tensor, name, handler, select=_format_on(ctx.target), device=_gate.Watch())


def uninstall() -> None:
    _patches.restore()
    _hook.uninstall()
    _kernels.uninstall()
