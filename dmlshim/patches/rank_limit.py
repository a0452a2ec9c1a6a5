"""Ops on tensors of more than 5 dimensions that end the process on the real torch-directml 0.2.5
binary ('Check failed: rank <= DML_TENSOR_DIMENSION_COUNT_MAX'; ``laws.ranks``; in the field
microsoft/DirectML#537): Swin-style window attention, einops patterns, grouped heads; and
``cumsum``, ``index_select``, ``native_layer_norm`` of 5, which raise.

Where the meaning allows, the call runs on the device on fewer dimensions, as views where the
layout allows (a contiguous copy otherwise, which the binary gets right at any rank):

- a reduction over some dimensions: the kept ones first, the reduced ones last, as (kept,
  reduced), reduced over the last;
- an op along one dimension (scans, sorts, ``topk``, ``argmax``, ``gather``,
  ``index_select``, one-dimension ``flip``, ``cat``): as (before, along, after);
- ``where``: its operands expanded to the result's shape, flattened;
- ``native_layer_norm``: as (rows, normalized elements);
- a binary op whose operands broadcast: the operands expanded first (right at any rank); of
  one element: flattened;
- ``Tensor.copy_`` into a permuted destination (which the binary fills in memory order, its
  strides ignored): as one dimension in memory order.  Python calls only: a BackendSelect kernel
  for ``aten::copy_`` breaks every torch-directml copy (``broadcast_copy``'s note).

The rest (``sum()`` of everything, ``prod``, ``any``/``all``, ``var``, ``std_mean``,
``logsumexp``, norms, the scatters, ``constant_pad_nd``, a ``gather`` whose index is narrower
than ``self``, several ``flip`` dimensions) runs on the CPU.  Static: a probe would
end the process.
"""
from __future__ import annotations

import math

import torch

from ..laws import ranks
from ..laws.ranks import RANK_MAX, limit
from . import _gate, _select
from ._wrap import PatchSet
from .dispatcher import Done
from ._patch import Patch

PATCH = Patch("rank_limit", "reductions, scans, sorts, cat, where, gather, index_select, flip, layer_norm and "
                            "broadcasting binary ops of more than 5 dimensions end the process (measured on the "
                            "real 0.2.5 binary; DirectML#537): on fewer dimensions on the device, else on the CPU",
              # first in every chain it shares but mul's and cat's, which make their fixed call
              # again from the top, so it reaches this one (a fix before it that redispatched below
              # would hand the call of 6 dimensions to the kernel that ends the process)
              # (Tensor.copy_: outside copy_to_cpu's wrapper, inside int_range's)
              after=("mul", "cat", "copy_to_cpu"),
              before=("gather", "layer_norm", "empty_layer_norm", "empty_reduction", "sort_scalar", "int_range",
                      "nan_reductions", "int_broadcast", "bool_minmax", "flip_dims", "refused", "pad_negative",
                      "pad_zero", "pad_value", "empty_broadcast", "var_correction"))

_aten = torch.ops.aten


def _past(op) -> _gate.Watch:
    """The gate's watch: a tensor of more dimensions than ``op``'s kernel takes."""
    return _gate.Watch(ranks=frozenset(range(limit(op) + 1, 64)))


def _dims(dim, rank: int):
    """``dim`` (None, an int or a list) as sorted non-negative dimensions; None = every one."""
    if dim is None or (isinstance(dim, (list, tuple)) and len(dim) == 0):
        return list(range(rank))
    dims = [dim] if isinstance(dim, int) else list(dim)
    return sorted({d % rank for d in dims})


def _around(shape, d: int):
    """``(before, along, after)``: ``shape`` collapsed around dimension ``d``."""
    return math.prod(shape[:d]), shape[d], math.prod(shape[d + 1:])


def _reduced(op, keyset, args, kwargs):
    """sum/mean/amax over some dimensions, as (kept, reduced) reduced over the last."""
    self = args[0]
    if self.dim() <= RANK_MAX:
        return None
    dim = args[1] if len(args) > 1 else kwargs.get("dim")
    keepdim = args[2] if len(args) > 2 else kwargs.get("keepdim", False)
    reduced = _dims(dim, self.dim())
    kept = [d for d in range(self.dim()) if d not in reduced]
    flat = self.permute(kept + reduced).reshape(math.prod(self.shape[d] for d in kept), -1)
    out = op(flat, [1], False, **{k: v for k, v in kwargs.items() if k == "dtype"})
    shape = [1 if d in reduced else s for d, s in enumerate(self.shape)] if keepdim else \
        [self.shape[d] for d in kept]
    return Done(out.reshape(shape))


def _along(op, keyset, args, kwargs):
    """An op along one dimension, as (before, along, after) along the middle one."""
    self = args[0]
    if op is _aten.cat.default:
        return _cat(args, kwargs)
    if self.dim() <= limit(op):
        return None
    if op in (_aten.argmax.default, _aten.argmin.default):
        dim = args[1] if len(args) > 1 else kwargs.get("dim")
        if dim is None:                               # over every element: a flat argmax
            keepdim = args[2] if len(args) > 2 else kwargs.get("keepdim", False)
            out = op(self.reshape(-1), 0)
            return Done(out.reshape([1] * self.dim()) if keepdim else out)
    if op is _aten.flip.default:
        dims = _dims(args[1], self.dim())
        if len(dims) != 1:
            return _select.on_cpu(op, args, kwargs)
        d = dims[0]
        return Done(self.reshape(_around(self.shape, d)).flip([1]).reshape(self.shape))
    if op is _aten.gather.default:
        return _gather(op, args, kwargs)
    d = (args[1] if len(args) > 1 else kwargs.get("dim", -1)) % self.dim()
    if op is _aten.topk.default:                       # topk(self, k, dim, largest, sorted)
        d = (args[2] if len(args) > 2 else kwargs.get("dim", -1)) % self.dim()
        rest = (args[1], 1, *args[3:])
    elif op is _aten.sort.stable:                      # sort.stable(self, *, stable, dim, descending)
        d = kwargs.get("dim", -1) % self.dim()
        kwargs = {**kwargs, "dim": 1}
        rest = ()
    else:
        rest = (1, *args[2:])
    out = op(self.reshape(_around(self.shape, d)), *rest, **kwargs)
    return Done(_unflatten(out, self.shape, d))


def _unflatten(out, shape, d):
    """``out`` of a (before, n, after) call back in ``shape``'s dimensions, ``n`` at ``d``
    (1 where a keepdim reduction kept it, gone where it did not)."""
    if isinstance(out, tuple):
        return tuple(_unflatten(o, shape, d) for o in out)
    if out.dim() == 2:                                 # the middle dimension reduced away
        return out.reshape([*shape[:d], *shape[d + 1:]])
    return out.reshape([*shape[:d], out.shape[1], *shape[d + 1:]])


def _gather(op, args, kwargs):
    self, dim, index = args[0], args[1], args[2]
    d = dim % self.dim()
    if index.dim() != self.dim() or any(index.shape[i] != self.shape[i] for i in range(self.dim()) if i != d):
        return _select.on_cpu(op, args, kwargs)        # a narrower index: its rows are not self's
    out = op(self.reshape(_around(self.shape, d)), 1, index.reshape(_around(index.shape, d)), *args[3:], **kwargs)
    return Done(out.reshape(index.shape))


def _cat(args, kwargs):
    tensors = args[0]
    dim = args[1] if len(args) > 1 else kwargs.get("dim", 0)
    shaped = [t for t in tensors if t.dim() > 1 or t.numel() > 0]     # cat skips a legacy 1-D empty
    if not shaped or max(t.dim() for t in shaped) <= RANK_MAX:
        return None
    rank = shaped[0].dim()
    d = dim % rank
    flat = [t.reshape(_around(t.shape, d)) for t in shaped]
    out = torch.cat(flat, 1)
    shape = list(shaped[0].shape)
    shape[d] = out.shape[1]
    return Done(out.reshape(shape))


def _where(op, keyset, args, kwargs):
    tensors = [a for a in args[:3] if isinstance(a, torch.Tensor)]
    shape = torch.broadcast_shapes(*(t.shape for t in tensors))
    if len(shape) <= RANK_MAX:
        return None
    flat = [a.expand(shape).reshape(-1) if isinstance(a, torch.Tensor) and a.dim() > 0 else a for a in args[:3]]
    return Done(op(*flat).reshape(shape))


def _layer_norm(op, keyset, args, kwargs):
    """``native_layer_norm(input, normalized_shape, weight, bias, eps)`` as (rows, elements)."""
    x, normalized, weight, bias, eps = args
    if x.dim() <= limit(op):
        return None
    n, k = math.prod(normalized), len(normalized)
    out, mean, rstd = op(x.reshape(-1, n), [n], None if weight is None else weight.reshape(n),
                         None if bias is None else bias.reshape(n), eps)
    stats = [*x.shape[:x.dim() - k], *([1] * k)]
    return Done((out.reshape(x.shape), mean.reshape(stats), rstd.reshape(stats)))


def _expanded(op, keyset, args, kwargs):
    """A binary op whose operands broadcast past the limit, on operands expanded first; of
    one-element operands, on them flattened (a 0-dim one stays: a number to type promotion)."""
    a, b = args[0], args[1]
    if ranks.one_element_past_the_limit(a, b):
        shape = torch.broadcast_shapes(a.shape, b.shape)
        if math.prod(shape) == 1:
            flat = [t.reshape(-1) if isinstance(t, torch.Tensor) and t.dim() > 0 else t for t in (a, b)]
            return Done(op(*flat, *args[2:], **kwargs).reshape(shape))
    expanded = ranks.expanded(args)
    return None if expanded is args else (expanded, kwargs)


def _on_cpu(op, keyset, args, kwargs):
    if not ranks.past_the_limit(args, limit(op)):
        return None
    if op in ranks.IN_PLACE_ON_CPU:
        return _select.in_place_on_cpu(op, args, kwargs)
    return _select.on_cpu(op, args, kwargs)


for _fix in (_reduced, _along, _where, _layer_norm, _expanded, _on_cpu):
    _gate.watching(_past)(_fix)
_TABLE = {**{op: _reduced for op in ranks.REDUCTIONS}, **{op: _along for op in ranks.ALONG_ONE},
          **{op: _where for op in ranks.WHERE}, **{op: _layer_norm for op in ranks.LAYER_NORM},
          **{op: _expanded for op in ranks.BINARY},
          **{op: _on_cpu for op in ranks.ON_CPU + ranks.IN_PLACE_ON_CPU + ranks.PAD}}
_kernels = _select.Kernels(__name__, _TABLE)


def _copy(func, args, kwargs):
    """``dst.copy_(src)`` into a permuted destination past the limit: as one dimension, in
    ``dst``'s memory order (the source expanded and laid out the same way: right at any rank)."""
    dst, src = args[0], (args[1] if len(args) > 1 else kwargs.pop("src"))
    if not (isinstance(src, torch.Tensor) and ranks.copied_in_memory_order(dst)):
        return "pass", func(dst, src, *args[2:], **kwargs)
    order = ranks.memory_order(dst)
    torch.empty(dst.shape, device="meta").copy_(torch.empty(src.shape, device="meta"))   # torch's errors
    flat = src.expand(dst.shape).permute(order).reshape(-1)
    func(dst.permute(order).view(-1), flat, *args[2:], **kwargs)
    return "flatten", dst


def _copies_past_the_limit(target: str):
    def select(instance, args, kwargs):
        return not instance.is_cpu and instance.device.type == target and instance.dim() > RANK_MAX
    return select


_patches = PatchSet(__name__)


def install(ctx) -> None:
    """The fixes, first in their overloads' chains, and ``copy_``'s Python entry point."""
    _kernels.install(ctx)
    _patches.intercept(ctx, torch.Tensor, "copy_", _copy, select=_copies_past_the_limit(ctx.target))


def uninstall() -> None:
    _patches.restore()
    _kernels.uninstall()
