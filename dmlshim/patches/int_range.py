"""Integer arithmetic past float32's 24 bits, and int64 values past 32 bits, are silently wrong
on the real torch-directml 0.2.5 binary (measured: docs/defects.md, ``int_range``).

* **through float32**: integer ``add``/``sub``/``mul`` with a number, ``neg``, ``pow``,
  ``floor_divide``/``div(rounding_mode=)``/``remainder`` and ``mm``/``addmm``/``bmm``/
  ``baddbmm`` compute in float32 and saturate: exact within 2**24 (``16777217 + 1`` gives
  16777216), clamped to int32's range (a one-byte dtype's own: uint8 ``200 * 2`` gives 255);
* **32 bits**: int64 ``clone``, ``copy_`` between device tensors, ``sub`` of two tensors,
  ``maximum``/``minimum``, ``clamp``, comparisons, ``sort``/``topk``, ``unique`` read values
  past int32's range by their low 32 bits (``x.clone()`` of ``2**40 + 5`` gives 5), and so do
  writes: ``index_put_`` (accumulate too), ``scatter_``, ``masked_scatter_``, ``fill_``/
  ``copy_`` into a view with an offset (``x[1:3] = v``, ``torch.diag``), even from the CPU.

The fix keeps a call on the device when its values allow it: each tensor operand's range, the
result's by interval arithmetic; a call leaving the exact span runs on the CPU.  A range is
known without a device read where it can be: a small integer tensor copied from the CPU has
it at the copy, a result kept on the device has it from its operands', and every range is
kept beside its tensor (:func:`known_span`, keyed by the tensor and its version) until a
write changes it.  Only an unknown range is read (one sync: on the CPU up to 65536
elements, reduced on the device in float32 beyond), counted in ``dmlshim.report()`` as a
``range read``.  ``x[i] = v``
past 32 bits becomes ``index_put_`` of flat positions into the whole tensor.  Not held: writes
into such views reached otherwise (docs/realdml.md).  No public
report; ONNX Runtime's DirectML provider maps 64-bit integers to strided 32-bit ones
(``DmlOperator.cpp``, ``Remap64bitDmlDataTypesTo32bit``).
"""
from __future__ import annotations

import time
from typing import Callable, Dict, Optional, Tuple

import torch

from .. import fallback, trace
from ..ranges import forget_all, integral, known_span, remember
from . import _select
from ._wrap import PatchSet

_aten = torch.ops.aten
Span = Tuple[int, int]
FLOAT_EXACT = 2 ** 24                 # float32 holds every integer of this magnitude
_ON_THE_HOST = 1 << 16                # elements: a smaller tensor's range is read on the CPU, exactly
_AT_THE_COPY = 1 << 12                # elements: a CPU tensor this small has its span taken when copied over


def _span(value, op=None) -> Optional[Span]:
    """``value``'s least and greatest element (a number is both), None for a float, bool or
    complex one.  A device tensor's span is :func:`known_span` where it is known; else one
    device sync, counted as a ``range read`` of ``op`` (``dmlshim.report()``) and kept: a
    tensor of up to 65536 elements is read on the CPU (one copy, exact); a larger one is
    reduced on the device in float32, flat, since int64 ``min``/``max`` read 32 bits on
    NVIDIA's driver (``[-1, -2**31 - 1].min()`` gives -1) and a reduction of more than 5
    dimensions ends the process; float32 keeps every value :func:`outside` allows, and a
    larger one rounds to a value it refuses."""
    if isinstance(value, torch.Tensor):
        if not integral(value.dtype):
            return None
        if value.numel() == 0:
            return (0, 0)
        if value.is_cpu:
            return (int(value.min()), int(value.max()))
        span = known_span(value)
        if span is None:
            span = _read(value, op)
            remember(value, span)
        return span
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return (value, value)


def _read(value: torch.Tensor, op) -> Span:
    """The span of a device tensor nothing knows: one device-to-host read, counted."""
    start = time.perf_counter()
    with fallback.guard():                      # the shim's own read, not the model's
        if value.numel() <= _ON_THE_HOST:
            host = value.cpu()
            span, read = (int(host.min()), int(host.max())), trace.nbytes(value)
        else:
            as_float = value.float().reshape(-1)
            lo, hi = torch.stack([as_float.min(), as_float.max()]).tolist()
            span, read = (int(lo), int(hi)), 8
    trace.record(op.name() if op is not None else "int_range", "range read",
                 time.perf_counter() - start, d2h=read)
    return span


def _unread_span(t: torch.Tensor) -> Optional[Span]:
    """``t``'s span where it costs no device read: computed for a CPU tensor, kept for a
    device one (:func:`known_span`); else None."""
    return _span(t) if t.is_cpu else known_span(t)


def _copied_over(op, args, kwargs, result) -> None:
    """The dispatcher net's after-hook of ``_to_copy``: a small integer CPU tensor copied to
    the device gives its span on the CPU, without a read."""
    source = args[0]
    if source.is_cpu and isinstance(result, torch.Tensor) and not result.is_cpu \
            and integral(result.dtype) and 0 < source.numel() <= _AT_THE_COPY:
        remember(result, _span(source))


def _add(a: Span, b: Span) -> Span:
    return (a[0] + b[0], a[1] + b[1])


def _mul(a: Span, b: Span) -> Span:
    products = [x * y for x in a for y in b]
    return (min(products), max(products))


def _neg(a: Span) -> Span:
    return (-a[1], -a[0])


def _magnitude(*spans: Span) -> int:
    return max(abs(v) for s in spans for v in s)


def _symmetric(bound: int) -> Span:
    return (-bound, bound)


# The result's span from the measured operands' spans: f(spans, args, kwargs).  ``alpha`` and
# ``beta`` are keyword-only in these schemas, so the dispatcher hands them in ``kwargs``.
def _sum(spans, args, kwargs):
    alpha = kwargs.get("alpha", 1)
    return _add(spans[0], _mul(spans[1], (alpha, alpha)))


def _difference(spans, args, kwargs):
    alpha = kwargs.get("alpha", 1)
    return _add(spans[0], _neg(_mul(spans[1], (alpha, alpha))))


def _product(spans, args, kwargs):
    return _mul(spans[0], spans[1])


def _negation(spans, args, kwargs):
    return _neg(spans[0])


def _power(spans, args, kwargs):
    base, top = _magnitude(spans[0]), max(spans[1][1], 0)
    return _symmetric(base ** top if base <= 1 or top <= 64 else 2 ** 64)


def _quotient(spans, args, kwargs):
    return _symmetric(_magnitude(*spans))


def _matrix_product(spans, args, kwargs):
    """k products of an element of each matrix (k their inner size), plus ``beta * input``."""
    *bias, a, b = spans
    bound = args[-1].shape[-2] * abs(kwargs.get("alpha", 1)) * _magnitude(_mul(a, b))
    return _symmetric(bound + (abs(kwargs.get("beta", 1)) * _magnitude(bias[0]) if bias else 0))


def _unchanged(spans, args, kwargs):
    return (min(s[0] for s in spans), max(s[1] for s in spans))


def _put(spans, args, kwargs):
    """``index_put_``: the values written, or with ``accumulate`` each place plus every value."""
    if len(args) > 3 and args[3]:
        return _add(spans[0], _mul(spans[1], (0, args[2].numel())))
    return _unchanged(spans, args, kwargs)


FLOAT32, BITS32 = "through float32", "32 bits"
# op -> (the result's span, which arguments to measure, the law)
RULES: Dict[torch._ops.OpOverload, Tuple[Callable, Tuple[int, ...], str]] = {}


def _rules(ops, span_of, measured, law):
    RULES.update({op: (span_of, measured, law) for op in ops})


_rules((_aten.add.Tensor, _aten.add_.Tensor, _aten.add.Scalar, _aten.add_.Scalar), _sum, (0, 1), FLOAT32)
_rules((_aten.sub.Tensor, _aten.sub_.Tensor, _aten.sub.Scalar, _aten.sub_.Scalar), _difference, (0, 1), FLOAT32)
_rules((_aten.mul.Tensor, _aten.mul_.Tensor, _aten.mul.Scalar, _aten.mul_.Scalar), _product, (0, 1), FLOAT32)
_rules((_aten.neg.default, _aten.neg_.default), _negation, (0,), FLOAT32)
_rules((_aten.pow.Tensor_Scalar, _aten.pow_.Scalar, _aten.pow.Tensor_Tensor, _aten.pow_.Tensor, _aten.pow.Scalar),
       _power, (0, 1), FLOAT32)
_rules((_aten.floor_divide.default, _aten.floor_divide_.Tensor, _aten.floor_divide.Scalar,
        _aten.div.Tensor_mode, _aten.div_.Tensor_mode, _aten.div.Scalar_mode, _aten.remainder.Tensor,
        _aten.remainder_.Tensor, _aten.remainder.Scalar, _aten.remainder_.Scalar), _quotient, (0, 1), FLOAT32)
_rules((_aten.mm.default, _aten.bmm.default), _matrix_product, (0, 1), FLOAT32)
_rules((_aten.addmm.default, _aten.addmm_.default, _aten.baddbmm.default, _aten.baddbmm_.default),
       _matrix_product, (0, 1, 2), FLOAT32)
_rules((_aten.clone.default, _aten.clamp.default, _aten.clamp_.default, _aten.sort.default,
        _aten.sort.stable, _aten.topk.default), _unchanged, (0,), BITS32)
_rules((_aten.clamp_min.default, _aten.clamp_min_.default, _aten.clamp_max.default, _aten.clamp_max_.default,
        _aten._unique2.default), _unchanged, (0,), BITS32)
_rules((_aten.maximum.default, _aten.minimum.default), _unchanged, (0, 1), BITS32)
_COMPARISONS = tuple(getattr(getattr(_aten, name), overload) for name in ("lt", "le", "gt", "ge")
                     for overload in ("Scalar", "Tensor"))
_rules(_COMPARISONS, _unchanged, (0, 1), BITS32)
# writes: x[i] = v, x[mask] = v (index_put_), scatter_, masked_scatter_, torch.diag (C++ copy_)
_rules((_aten._index_put_impl_.default,), _put, (0, 2), BITS32)
_rules((_aten.scatter.src, _aten.scatter_.src, _aten.scatter.value, _aten.scatter_.value), _unchanged, (0, 3), BITS32)
_rules((_aten.masked_scatter.default, _aten.masked_scatter_.default), _unchanged, (0, 2), BITS32)
_rules((_aten.diag_embed.default,), _unchanged, (0,), BITS32)
# out= overloads, measured apart (benchmarks/realdml_gpu/integers.py has the functional ones):
# these as their functional overloads; pow.out, clamp(_min).out, maximum/minimum.out and
# comparisons of two tensors into an out keep every bit, and are not held
_rules((_aten.add.out,), _sum, (0, 1), FLOAT32)
_rules((_aten.sub.out,), _difference, (0, 1), FLOAT32)
_rules((_aten.mul.out,), _product, (0, 1), FLOAT32)
_rules((_aten.neg.out,), _negation, (0,), FLOAT32)
_rules((_aten.floor_divide.out, _aten.div.out_mode, _aten.remainder.Tensor_out, _aten.remainder.Scalar_out),
       _quotient, (0, 1), FLOAT32)
_rules((_aten.mm.out, _aten.bmm.out), _matrix_product, (0, 1), FLOAT32)
_rules((_aten.sort.values, _aten.sort.values_stable, _aten.topk.values), _unchanged, (0,), BITS32)
_rules(tuple(getattr(getattr(_aten, name), "Scalar_out") for name in ("lt", "le", "gt", "ge")),
       _unchanged, (0, 1), BITS32)
MUL = (_aten.mul.Tensor, _aten.mul_.Tensor, _aten.mul.out)     # the dispatcher net's kernel asks net_fix
PUT = (_aten._index_put_impl_.default,)           # and index_put_fix
# two tensors: add and mul keep every bit, sub reads int64 by 32 bits, and comparisons too
_TWO_TENSORS = {op: BITS32 for op in (_aten.sub.Tensor, _aten.sub_.Tensor, _aten.sub.out) + _COMPARISONS}


# integer floor division is floor(x * (1/n)) in float32: wrong at some multiples of n below 0
# whatever their size (-49 // 7 gives -8): by a number on lavapipe (39 of the divisors 1 to 129
# over -3000..2999), by a tensor too on NVIDIA's driver; trunc and remainder were right on both
_FLOORS = (_aten.floor_divide.default, _aten.floor_divide_.Tensor, _aten.floor_divide.Scalar,
           _aten.floor_divide.out)
_MODES = (_aten.div.Tensor_mode, _aten.div_.Tensor_mode, _aten.div.Scalar_mode, _aten.div.out_mode)


def floor_division(op, args, kwargs) -> bool:
    """An integer floor division (``x // n``, ``div(x, n, rounding_mode="floor")``)."""
    return op in _FLOORS or (op in _MODES and kwargs.get("rounding_mode") == "floor")


def _refused(dtype: torch.dtype, law: str) -> Span:
    """The nearest values ``dtype`` does not keep exactly under ``law``, below and above.
    Each is a float32 value, so a value past it never rounds back inside (:func:`_span`);
    the bounds themselves are refused too (2**24, 2**31), which costs nothing real."""
    info = torch.iinfo(dtype)
    bound = 2 ** 31 if law == BITS32 else FLOAT_EXACT
    return (max(info.min - 1, -bound), min(info.max + 1, bound))


def is_number(value) -> bool:
    """A Python number, or the 0-dim CPU tensor a number becomes (``x + 1``)."""
    return not isinstance(value, torch.Tensor) or (value.dim() == 0 and value.is_cpu)


def law_of(op, args) -> Optional[str]:
    """Which law ``op`` computes these arguments by (:data:`FLOAT32`, :data:`BITS32`), None
    where the defect leaves the call alone: float or bool dtypes, two tensors where only a
    number goes through float32 (``add`` and ``mul`` of two tensors keep every bit)."""
    rule = RULES.get(op)                # mul's net kernel asks for mul.out too
    tensor = next((a for a in args if isinstance(a, torch.Tensor)), None)
    if rule is None or tensor is None or not integral(tensor.dtype):
        return None
    law = rule[2]
    if (op in _TWO_TENSORS or op in MUL or op in (_aten.add.Tensor, _aten.add_.Tensor, _aten.add.out)) \
            and isinstance(args[1], torch.Tensor) and not is_number(args[1]):
        law = _TWO_TENSORS.get(op)
    return None if law is None or (law == BITS32 and tensor.dtype != torch.int64) else law


def outside(op, args, kwargs) -> bool:
    """Whether the call's operands or result leave the span its law keeps exact (the failing
    case); False for the calls :func:`law_of` leaves alone and for a float operand."""
    return _assess(op, args, kwargs)[0]


def _assess(op, args, kwargs) -> Tuple[bool, Optional[Span]]:
    """:func:`outside`, and the result's span (None where not computed)."""
    law = law_of(op, args)
    if law is None:
        return False, None
    if floor_division(op, args, kwargs):
        return True, None
    span_of, measured, _ = RULES[op]
    spans = []
    for i in measured:
        value = args[i] if i < len(args) else None
        span = _span(value.item() if isinstance(value, torch.Tensor) and is_number(value) else value, op)
        if span is None:
            return False, None          # a float operand: the call computes in float anyway
        spans.append(span)
    lo, hi = _refused(next(a for a in args if isinstance(a, torch.Tensor)).dtype, law)
    result = span_of(spans, args, kwargs)
    return any(s[0] <= lo or s[1] >= hi for s in spans + [result]), result


# ops whose RULES span is no bound of the result's values, only of what the law reads: clamp
# moves values to its bounds (not measured), diag_embed adds zeros
_NOT_A_BOUND = {_aten.clamp.default, _aten.clamp_.default, _aten.clamp_min.default, _aten.clamp_min_.default,
                _aten.clamp_max.default, _aten.clamp_max_.default, _aten.diag_embed.default}


def _guarded(op, keyset, args, kwargs):
    """The call on the CPU when its values leave the exact span, else on the device, its
    result's span kept (:func:`remember`)."""
    leaves, span = _assess(op, args, kwargs)
    if leaves:
        return _select.on_cpu(op, args, kwargs)
    if span is None or keyset is None or op in _NOT_A_BOUND:
        return None
    result = _select.pass_on(op, keyset, args, kwargs, after=_guarded, traced=True)
    remember(result[0] if isinstance(result, (tuple, list)) else result, span)
    return _select.Done(result, record=False)


def _concatenated(op, args, kwargs, result) -> None:
    """The dispatcher net's after-hook of ``cat``: a concatenation of integer tensors whose
    ranges are all known has their union (a decoder's growing token list)."""
    if not isinstance(result, torch.Tensor) or result.is_cpu or not integral(result.dtype):
        return
    spans = [_unread_span(t) for t in args[0] if t.numel()]
    if spans and all(spans):
        remember(result, (min(s[0] for s in spans), max(s[1] for s in spans)))


def _written(op, args, kwargs, result) -> None:
    """The dispatcher net's after-hook of ``_index_put_impl_``: the tensor's range before the
    write and the values' give its range after (``_put``), kept for ``x[i] = v``'s wrapper
    (:func:`_setitem`), which remembers it once the write and its version bump are done."""
    self, values = args[0], args[2]
    before = known_span(self)            # the version moves after this kernel returns
    written = _unread_span(values)
    if before is not None and written is not None and integral(self.dtype):
        _after_setitem[id(self)] = _put([before, written], args, kwargs)


_after_setitem: Dict[int, Span] = {}     # id(tensor) -> its range once x[i] = v is done


def _indexed(op, args, kwargs, result) -> None:
    """The dispatcher net's after-hook of ``index`` (``x[mask]``, ``x[idx]``): its values are
    among ``x``'s, so they have ``x``'s range where that is known."""
    if isinstance(result, torch.Tensor) and not args[0].is_cpu:
        remember(result, known_span(args[0]))


def _indices(op, keyset, args, kwargs):
    """``argmax``/``argmin``: on the device as they are, their indices' range kept from the
    input's shape (0 to the reduced size less one), so an integer op on them reads nothing
    (a greedy decoder's next token: Whisper's)."""
    result = _select.pass_on(op, keyset, args, kwargs, after=_indices, traced=True)
    x, dim = args[0], (args[1] if len(args) > 1 else kwargs.get("dim"))
    size = x.numel() if dim is None or x.dim() == 0 else x.shape[dim]
    remember(result, (0, max(size - 1, 0)))
    return _select.Done(result, record=False)


_INDICES = (_aten.argmax.default, _aten.argmin.default)


def net_fix(op, args, kwargs):
    """``mul``'s and ``_index_put_impl_``'s fix for the dispatcher net's kernels (None:
    nothing to fix)."""
    return _guarded(op, None, args, kwargs)


def _copy(func, args, kwargs):
    """``Tensor.copy_`` between int64 device tensors: from a CPU copy of a source past 32 bits
    (a BackendSelect kernel for ``aten::copy_`` breaks torch-directml's copies: broadcast_copy)."""
    self, src = args[0], (args[1] if len(args) > 1 else kwargs.pop("src"))
    if isinstance(src, torch.Tensor) and not src.is_cpu and past_32_bits(src):
        return "cpu source", func(self, trace.to_host(src), *args[2:], **kwargs)
    return "pass", func(self, src, *args[2:], **kwargs)


def past_32_bits(value) -> bool:
    """An int64 tensor or a Python int with a value outside the span the 32-bit law keeps."""
    if isinstance(value, torch.Tensor):
        return value.dtype == torch.int64 and outside(_aten.clone.default, (value,), {})
    return isinstance(value, int) and not isinstance(value, bool) and not -(2 ** 31) < value < 2 ** 31


def _on_host(index):
    if isinstance(index, torch.Tensor):
        return trace.to_host(index)
    return tuple(_on_host(i) for i in index) if isinstance(index, (tuple, list)) else index


def _setitem(func, args, kwargs):
    """``x[i] = v`` into an int64 device tensor, ``v`` past 32 bits: the real binary keeps the
    low 32 bits of a write into a view with an offset or strides (``fill_``, ``copy_``, from
    the CPU too), which a slice or a single place is.  Written as ``index_put_`` of the places'
    flat positions into the whole tensor (held above: on the CPU, written back whole)."""
    self, index, value = args
    if self._base is not None or not self.is_contiguous() or not past_32_bits(value):
        if type(value) is int:          # copied over, its range known: torch's own device
            value = torch.tensor(value, dtype=self.dtype).to(self.device)   # scalar is not
        _after_setitem.pop(id(self), None)
        func(self, index, value)
        remember(self, _after_setitem.pop(id(self), None))       # the write's, at its version
        return "pass", None
    places = torch.arange(self.numel()).view(self.shape)[_on_host(index)]
    value = torch.as_tensor(value, dtype=self.dtype)
    while value.dim() > places.dim() and value.shape[0] == 1:
        value = value[0]                       # setitem's leading ones
    values = value.to(self.device).expand(places.shape).reshape(-1)
    self.view(-1).index_put_((places.reshape(-1).to(self.device),), values)
    return "flat index_put_", None


def _int64_on(target: str):
    def select(instance, args, kwargs):
        return not instance.is_cpu and instance.dtype == torch.int64 and instance.device.type == target
    return select


_kernels = _select.Kernels({**{op: _guarded for op in RULES if op not in MUL + PUT},
                           **{op: _indices for op in _INDICES}})
# mul's and _index_put_impl_'s: through the dispatcher net's kernel where it holds one
# Not mul.out alone: the real binary's mul.Tensor reaches its mul.out, and a Python kernel there
# would change what float x bool gives while mul's own fix is off (a float out for bool)
_net_kernels = {ops: _select.Kernels({op: _guarded for op in ops if op is not _aten.mul.out})
                for ops in (MUL, PUT)}
_patches = PatchSet(__name__)


def install(ctx) -> None:
    """The kernels, ``mul``'s and ``_index_put_impl_``'s through the dispatcher net's kernels
    where it holds them, and the Python entry points ``Tensor.copy_`` and ``__setitem__``."""
    from . import dispatcher
    _kernels.install(ctx)
    for name in ("copy_", "__setitem__"):
        _patches.intercept(ctx, torch.Tensor, name, _copy if name == "copy_" else _setitem,
                           select=_int64_on(ctx.target))
    for base, ops in (("mul", MUL), ("_index_put_impl_", PUT)):
        dispatcher.add_hook(base, net_fix)
        if not all(dispatcher.holds(op) for op in ops):
            _net_kernels[ops].install(ctx)
    dispatcher.add_hook("_to_copy", _copied_over, after=True)
    dispatcher.add_hook("cat", _concatenated, after=True)
    dispatcher.add_hook("_index_put_impl_", _written, after=True)
    dispatcher.add_hook("index", _indexed, after=True)


def uninstall() -> None:
    from . import dispatcher
    _patches.restore()
    dispatcher.remove_hook("_to_copy", _copied_over, after=True)
    dispatcher.remove_hook("cat", _concatenated, after=True)
    dispatcher.remove_hook("_index_put_impl_", _written, after=True)
    dispatcher.remove_hook("index", _indexed, after=True)
    forget_all()
    for base, ops in (("mul", MUL), ("_index_put_impl_", PUT)):
        dispatcher.remove_hook(base, net_fix)
        _net_kernels[ops].uninstall()
    _kernels.uninstall()
