"""cat/stack with an empty (numel 0) input fail on DirectML.

``RuntimeError: The parameter is incorrect.`` (E_INVALIDARG): microsoft/VibeVoice#49
(failure_modes.md #19); DirectML has no 0-size tensor handling (fdwr in DirectML
PR#527; failure_modes.md #20).  FunASR's BiCifParaformer hits it at
``cif_predictor.py:85``: ``cat(f32[43,512], f32[0,512])``.

Cheapest correct fix first: the result of ``cat`` does not depend on empty inputs
except through the result dtype (type promotion includes them) and shape.  Both are
computed here from the inputs' metadata (``torch.promote_types``; sizes along
``dim``; 1-D empty tensors are skipped as ``cat`` itself does); then the non-empty
inputs, cast to the promoted dtype, are concatenated on the device, and an empty
result is allocated on the device.  (The ``meta`` device would do the same, but its
first use imports 800 modules in 2.8 s and each call costs 130 us.)  Anything else
- ``out=``, an empty input that needs a gradient, inputs the CPU would refuse (so the
CPU raises its own error) - runs on the CPU and comes back.
"""
from __future__ import annotations

import torch

from .. import fallback
from . import _gate
from ._wrap import Context, PatchSet

_patches = PatchSet(__name__)

_ENTRY_POINTS = ((torch, "cat"), (torch, "concat"), (torch, "concatenate"), (torch, "stack"))


def _split(args, kwargs):
    """(tensors, dim) of a cat/concat/concatenate/stack call."""
    tensors = args[0] if args else kwargs["tensors"]
    dim = args[1] if len(args) > 1 else kwargs.get("dim", kwargs.get("axis", 0))
    return list(tensors), dim


def result_meta(stack: bool, tensors, dim):
    """(shape, dtype) of ``cat``/``stack`` over ``tensors``, or None when the CPU would
    refuse them (mismatched sizes, bad ``dim``, non-integer ``dim``)."""
    if not tensors or not isinstance(dim, int):
        return None
    dtype = tensors[0].dtype
    for t in tensors[1:]:
        dtype = torch.promote_types(dtype, t.dtype)
    if stack:
        shape = tensors[0].shape
        if any(t.shape != shape for t in tensors) or not -len(shape) - 1 <= dim <= len(shape):
            return None
        d = dim % (len(shape) + 1)
        return (*shape[:d], len(tensors), *shape[d:]), dtype
    kept = [t for t in tensors if not (t.dim() == 1 and t.numel() == 0)]   # cat's legacy skip
    if not kept:
        return (0,), dtype
    ref = kept[0].shape
    if not ref or not -len(ref) <= dim < len(ref):
        return None
    d = dim % len(ref)
    if any(len(t.shape) != len(ref) or t.shape[:d] != ref[:d] or t.shape[d + 1:] != ref[d + 1:]
           for t in kept):
        return None
    return (*ref[:d], sum(t.shape[d] for t in kept), *ref[d + 1:]), dtype


def drop_empty(stack: bool, tensors, dim):
    """``tensors`` without their empty (numel 0) inputs, cast to the result dtype
    (``result_meta``), for the same ``cat``/``stack``; the empty result itself (a Tensor on
    the inputs' device) when the result is empty; None when the CPU would refuse them."""
    meta = result_meta(stack, tensors, dim)
    if meta is None:
        return None
    shape, dtype = meta
    keep = [t if t.dtype == dtype else t.to(dtype) for t in tensors if t.numel()]
    if not keep or 0 in shape:                         # an empty result: no cat at all
        return torch.empty(shape, dtype=dtype, device=next(t.device for t in tensors if not t.is_cpu))
    return keep


def _select(ctx: Context):
    target, Tensor = ctx.target, torch.Tensor

    def select(instance, args, kwargs):
        tensors = args[0] if args else kwargs.get("tensors", ())
        if not isinstance(tensors, (list, tuple)):
            return False
        for t in tensors:                   # the fast path: all on the CPU
            if isinstance(t, Tensor) and not t.is_cpu:
                break
        else:
            return False
        for t in tensors:                   # only calls with an empty input need us
            if isinstance(t, Tensor) and t.numel() == 0:
                break
        else:
            return False
        for t in tensors:
            if isinstance(t, Tensor) and not t.is_cpu and t.device.type == target:
                return True
        return False
    return select


def _handler(stack: bool):
    def handle(func, args, kwargs):
        tensors, dim = _split(args, kwargs)
        needs_grad = torch.is_grad_enabled() and any(t.requires_grad and not t.numel() for t in tensors)
        keep = None if "out" in kwargs or needs_grad else drop_empty(stack, tensors, dim)
        if keep is None:
            return "cpu", fallback.run_on_cpu(func, args, kwargs)
        return "drop-empty", keep if isinstance(keep, torch.Tensor) else func(keep, dim)
    return handle


def install(ctx: Context) -> None:
    select = _select(ctx)
    for owner, name in _ENTRY_POINTS:
        # the front passes a device call by unless an input is empty (select's test)
        _patches.intercept(ctx, owner, name, _handler(name == "stack"), select=select,
                           device=_gate.Watch(empty=True))


def uninstall() -> None:
    _patches.restore()
