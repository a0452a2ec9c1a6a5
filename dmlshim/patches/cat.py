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
first use imports 800 modules in 2.8 s and each call costs 130 us.)  Inputs the CPU
would refuse run on the CPU, which raises its own error.  One BackendSelect fix
(``_select``) of ``cat`` and ``cat.out``: ``stack``, ``concat`` and C++ composites
(``torch.combinations``) reach them; below autograd, so an empty input's gradient is
autograd's own (an empty one).
"""
from __future__ import annotations

import torch

from . import _gate, _select

_aten = torch.ops.aten


def result_meta(tensors, dim):
    """(shape, dtype) of ``cat`` over ``tensors``, or None when the CPU would refuse them
    (mismatched sizes, bad ``dim``, non-integer ``dim``)."""
    if not tensors or not isinstance(dim, int):
        return None
    dtype = tensors[0].dtype
    for t in tensors[1:]:
        dtype = torch.promote_types(dtype, t.dtype)
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


def drop_empty(tensors, dim):
    """``tensors`` without their empty (numel 0) inputs, cast to the result dtype
    (``result_meta``), for the same ``cat``; the empty result itself (a Tensor on the
    inputs' device) when the result is empty; None when the CPU would refuse them."""
    meta = result_meta(tensors, dim)
    if meta is None:
        return None
    shape, dtype = meta
    keep = [t if t.dtype == dtype else t.to(dtype) for t in tensors if t.numel()]
    if not keep or 0 in shape:                         # an empty result: no cat at all
        return torch.empty(shape, dtype=dtype, device=next(t.device for t in tensors if not t.is_cpu))
    return keep


@_gate.watching(_gate.Watch(empty=True))
def _drop_empty(op, keyset, args, kwargs):
    """With an empty input, the call with the empty inputs dropped (:func:`drop_empty` keeps
    the CPU's result dtype and shape); its empty result itself when that is empty."""
    tensors = args[0]
    dim = args[1] if len(args) > 1 else kwargs.get("dim", 0)
    if len(tensors) < 2 or all(t.numel() for t in tensors):
        return None
    keep = drop_empty(tensors, dim)
    if keep is None:
        return _select.on_cpu(op, args, kwargs)        # raises the CPU's own error
    if isinstance(keep, torch.Tensor):
        out = kwargs.get("out")
        if out is None:
            return _select.Done(keep)
        _select.grow_out(out, keep)
        return _select.Done(out)
    # on through the rest of the chain: rank_limit's past 5 dimensions, int_range's spans
    return _select.Done(_select.pass_on(op, keyset, (keep, dim), kwargs, after=_drop_empty))


# cat.out too (stack(out=) reaches it); also while the shim does its own work
# (fallback.busy()): its device concatenations are fixed too.
_kernels = _select.Kernels({_aten.cat.default: _drop_empty, _aten.cat.out: _drop_empty}, while_busy=True)
install, uninstall = _kernels.install, _kernels.uninstall
