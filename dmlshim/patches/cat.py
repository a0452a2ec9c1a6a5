"""cat/stack with an empty (numel 0) input fail on DirectML.

``RuntimeError: The parameter is incorrect.`` (E_INVALIDARG): microsoft/VibeVoice#49
(failure_modes.md #19); DirectML has no 0-size tensor handling (fdwr in DirectML
PR#527; failure_modes.md #20).  FunASR's BiCifParaformer hits it at
``cif_predictor.py:85``: ``cat(f32[43,512], f32[0,512])``.

Cheapest correct fix first: the result of ``cat`` does not depend on empty inputs
except through their dtype (type promotion includes them) and the result shape.  So
the shape and dtype are computed on the ``meta`` device with the original function
(which also raises PyTorch's own errors for bad input); then the non-empty inputs,
cast to the promoted dtype, are concatenated on the device.  An empty result is
allocated on the device.  Only what cannot be done that way (``out=``, or an empty
input that needs a gradient) runs on the CPU and comes back.
"""
from __future__ import annotations

import torch

from .. import fallback
from ._wrap import Context, PatchSet

_patches = PatchSet(__name__)

_ENTRY_POINTS = ((torch, "cat"), (torch, "concat"), (torch, "concatenate"), (torch, "stack"))


def _split(args, kwargs):
    """(tensors, rest_args, kwargs_without_tensors, key) where key says where the list was."""
    if args:
        return args[0], args[1:], kwargs, None
    key = "tensors"
    return kwargs[key], (), {k: v for k, v in kwargs.items() if k != key}, key


def _call(func, tensors, rest, kwargs, key):
    if key is None:
        return func(tensors, *rest, **kwargs)
    return func(**{key: tensors}, **kwargs)


def _select(ctx: Context):
    target = ctx.target

    def select(instance, args, kwargs):
        tensors = args[0] if args else kwargs.get("tensors", ())
        if not isinstance(tensors, (list, tuple)):
            return False
        on_target = empty = False
        for t in tensors:
            if isinstance(t, torch.Tensor):
                empty = empty or t.numel() == 0
                on_target = on_target or (not t.is_cpu and t.device.type == target)
        return on_target and empty       # only calls with an empty input need us
    return select


def _handle(func, args, kwargs):
    tensors, rest, kw, key = _split(args, kwargs)
    tensors = list(tensors)
    needs_grad = torch.is_grad_enabled() and any(t.requires_grad and t.numel() == 0 for t in tensors)
    if "out" in kw or needs_grad:
        return "cpu", fallback.run_on_cpu(func, args, kwargs)
    meta = _call(func, [torch.empty_like(t, device="meta") for t in tensors], rest, kw, key)
    device = next(t.device for t in tensors if not t.is_cpu)
    keep = [t for t in tensors if t.numel()]
    if meta.numel() == 0 or not keep:
        return "drop-empty", torch.empty(meta.shape, dtype=meta.dtype, device=device)
    keep = [t if t.dtype == meta.dtype else t.to(meta.dtype) for t in keep]
    result = _call(func, keep, rest, kw, key)
    if result.shape != meta.shape:       # cannot happen for cat; be safe rather than wrong
        return "cpu", fallback.run_on_cpu(func, args, kwargs)
    return "drop-empty", result


def install(ctx: Context) -> None:
    select = _select(ctx)
    for owner, name in _ENTRY_POINTS:
        _patches.intercept(ctx, owner, name, _handle, op=f"torch.{name}", select=select)


def uninstall() -> None:
    _patches.restore()
