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
(``_select``) of ``cat``: ``stack``, ``concat`` and C++ composites (``torch.combinations``)
reach it; below autograd, so an empty input's gradient is autograd's own (an empty one).
``out=`` (``cat.out``) is not held: ``auto`` retries such a call on the CPU.
"""
from __future__ import annotations

import torch

from .. import trace
from . import _gate, _select
from ._patch import Patch

PATCH = Patch("cat", "cat/stack with an empty input: 'The parameter is incorrect.' (failure_modes.md "
                     "#19, #20; DirectML PR#527): the empties dropped on the device, at BackendSelect")

_aten = torch.ops.aten


def drop_empty(tensors, dim):
    """``tensors`` without their empty (numel 0) inputs, cast to the promoted dtype, for the
    same ``cat``; the empty result itself (a Tensor on the inputs' device) when the result is
    empty; None when the CPU would refuse them (mismatched sizes, a bad or non-integer
    ``dim``).  Plain loops: a hot path (FunASR's CIF predictor, every chunk)."""
    if not tensors or not isinstance(dim, int):
        return None
    dtype, kept, device = tensors[0].dtype, [], None
    for t in tensors:
        dtype = torch.promote_types(dtype, t.dtype)
        if device is None and not t.is_cpu:
            device = t.device
        if not (t.dim() == 1 and t.numel() == 0):          # cat's legacy skip
            kept.append(t)
    if not kept:
        return torch.empty((0,), dtype=dtype, device=device)
    ref = kept[0].shape
    if not ref or not -len(ref) <= dim < len(ref):
        return None
    d, total, keep = dim % len(ref), 0, []
    for t in kept:
        shape = t.shape
        if len(shape) != len(ref) or shape[:d] != ref[:d] or shape[d + 1:] != ref[d + 1:]:
            return None
        total += shape[d]
        if t.numel():
            keep.append(t if t.dtype == dtype else t.to(dtype))
    if not keep or total == 0 or 0 in ref[:d] or 0 in ref[d + 1:]:    # an empty result: no cat
        return torch.empty((*ref[:d], total, *ref[d + 1:]), dtype=dtype, device=device)
    return keep


@_gate.watching(_gate.Watch(empty=True))
def _drop_empty(op, keyset, args, kwargs):
    """With an empty input, the call with the empty inputs dropped (:func:`drop_empty` keeps
    the CPU's result dtype and shape); its empty result itself when that is empty."""
    tensors = args[0]
    if len(tensors) < 2:
        return None
    for t in tensors:
        if not t.numel():
            break
    else:
        return None                                    # no empty input
    dim = args[1] if len(args) > 1 else kwargs.get("dim", 0)
    keep = drop_empty(tensors, dim)
    if keep is None:
        return _select.on_cpu(op, args, kwargs)        # raises the CPU's own error
    if isinstance(keep, torch.Tensor):
        return _select.Done(keep)
    # made again from the top: the gate and the rest of the chain see it as any other
    # (rank_limit's past 5 dimensions, int_range's spans)
    return _select.Done(trace.region(False, op, keep, dim, **kwargs))


# Not cat.out: the real binary's cat reaches its cat.out with an empty out tensor, which the
# compiled gate's empty watch would send to Python on every device cat (measured:
# tests/test_gate.py); a call with out= and an empty input is auto's CPU retry.  Also while
# the shim does its own work (fallback.busy()): its device concatenations are fixed too.
_kernels = _select.Kernels(__name__, {_aten.cat.default: _drop_empty}, while_busy=True)
install, uninstall = _kernels.install, _kernels.uninstall
