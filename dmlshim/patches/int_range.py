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

The fix keeps a call on the device when its values allow (``laws/integers.py``): each
operand's range, the result's by interval arithmetic; a call leaving the exact span runs on
the CPU, but int32/int64 ``x + n``, ``x - n``, ``x * n`` (the number a 0-dim device tensor:
:func:`_as_two_tensors`), a floor division of a known range by a positive number
(:func:`_floor_by_trunc`) and an int64 comparison with a side known within 2**24
(:func:`_compared_in_float32`).  A range is known without a read where it can be (a copy
from the CPU, a fill, a mask's ``sum``, its operands'), kept beside its tensor
(:func:`known_span`, by tensor and version) until a write changes it; only an unknown one is
read (a ``range read`` in ``dmlshim.report()``: on the CPU up to 65536 elements, in float32 on
the device beyond).  ``x[i] = v`` past 32 bits becomes ``index_put_`` of flat positions into
the whole tensor; writes into such views reached otherwise are not held (docs/realdml.md).
No public report; ONNX Runtime's DirectML provider reads int64 as strided int32 (``Remap64bit``).
"""
from __future__ import annotations

import contextvars
import time
from typing import Optional

import torch

from .. import fallback, ranges, trace
from ..laws import integers
from ..laws.integers import RULES, Span
from ..ranges import forget, forget_all, integral, known_exactly, known_span, mark_unwritten, remember, unwritten
from . import _gate, _select
from ._wrap import PatchSet
from .offset_views import anchor_of
from ._patch import Patch

PATCH = Patch("int_range", "integer arithmetic computes in float32 (add/sub/mul with a number, neg, pow, // and %, "
                           "mm): exact only within 2**24, saturating; int64 clone/sub/maximum/clamp/sort read 32 "
                           "bits (measured on the real 0.2.5 binary): calls whose values leave that span on the CPU",
              # its spans are of the call those hand on (gather's dim from 0: _select.pass_on) or make
              # again (masked_fill_rank's flattened call); an empty sum has nothing to compute; unique's
              # counts go to the CPU; int_pow_zero and bool_exp2 answer as the registry had them
              # mul's cast and cat's dropped empties make their call again, which this one then sees
              after=("gather", "unique", "empty_reduction", "masked_fill_rank", "int_pow_zero", "bool_exp2",
                     "mul", "cat"))

_aten = torch.ops.aten
_ON_THE_HOST = 1 << 16                # elements: a smaller tensor's range is read on the CPU, exactly
_AT_THE_COPY = 1 << 12                # elements: a CPU tensor this small has its span taken when copied over


def _span(value, op=None) -> Optional[Span]:
    """``value``'s least and greatest element (``laws.integers.host_span``).  A device
    tensor's span is :func:`known_span` where it is known; else one device sync, counted as a
    ``range read`` of ``op`` (``dmlshim.report()``) and kept: a tensor of up to 65536 elements
    is read on the CPU (one copy, exact); a larger one is reduced on the device in float32,
    flat, since int64 ``min``/``max`` read 32 bits on NVIDIA's driver (``[-1, -2**31 -
    1].min()`` gives -1) and a reduction of more than 5 dimensions ends the process; float32
    keeps every value :func:`outside` allows, and a larger one rounds to a value it refuses."""
    if isinstance(value, torch.Tensor) and not value.is_cpu and integral(value.dtype) and value.numel():
        span = known_span(value)
        if span is None:
            whole = _whole(value)
            span = _read(whole, op)
            remember(whole, span, exact=True)
        return span
    return integers.host_span(value)


def _exact_span(value, op=None) -> Optional[Span]:
    """:func:`_span`, a bound kept dropped first, so the values are read (see :func:`_assess`)."""
    if isinstance(value, torch.Tensor) and not value.is_cpu and not known_exactly(value):
        forget(value)
    return _span(value, op)


def _bounded(args) -> bool:
    """An integer device operand whose span kept is a bound, not its values' own."""
    return any(isinstance(a, torch.Tensor) and not a.is_cpu and integral(a.dtype) and a.numel()
               and not known_exactly(a) for a in args)


def _assess(op, args, kwargs):
    """``laws.integers.assess`` by the spans kept; where a kept bound (a value added to itself
    in a loop) leaves the exact span, by the values read instead: one sync,
    where the CPU's copy would have been one too, and the call stays on the device.  A first
    write into uninitialized memory (:func:`_first_write`) measures no ``self``, and its
    result's span is not known."""
    measure, exact = _span, _exact_span
    if op in _FIRST_WRITES and args and args[0] is _FRESH.get():
        fresh = args[0]
        measure = lambda value, op=None: (0, 0) if value is fresh else _span(value, op)          # noqa: E731
        exact = lambda value, op=None: (0, 0) if value is fresh else _exact_span(value, op)      # noqa: E731
    leaves, span = integers.assess(op, args, kwargs, measure)
    if leaves and _bounded(args[1:] if measure is not _span else args):
        leaves, span = integers.assess(op, args, kwargs, exact)
    return leaves, (span if measure is _span else None)


# the tensor a Python ``scatter_`` is writing into first, uninitialized (_first_write)
_FRESH: contextvars.ContextVar = contextvars.ContextVar("dmlshim_int_range_fresh", default=None)
_FIRST_WRITES = (_aten.scatter_.src, _aten.scatter_.value)


def _empty_like(func, args, kwargs):
    """``torch.empty_like`` of an integer device tensor, from Python: its result marked
    uninitialized (``ranges.mark_unwritten``) until its first write."""
    result = func(*args, **kwargs)
    if isinstance(result, torch.Tensor) and integral(result.dtype):
        mark_unwritten(result)
    return "pass", result


def _first_write(func, args, kwargs):
    """``Tensor.scatter_`` into an integer device tensor ``torch.empty_like`` made and nothing
    wrote since (its version unmoved, asked here, above every kernel): the values the call
    does not write are uninitialized on the CPU too, so the law's 32 bits of them change no
    value the model may rely on, and ``self`` is not measured (no read: a device's garbage
    past 32 bits sent ``pack_padded_sequence``'s ``invert_permutation`` to the CPU after two
    reads).  Its result's span stays unknown (whatever was not written)."""
    self = args[0]
    if not unwritten(self):
        return "pass", func(*args, **kwargs)
    token = _FRESH.set(self)
    try:
        return "pass", func(*args, **kwargs)
    finally:
        _FRESH.reset(token)


def _whole(value: torch.Tensor) -> torch.Tensor:
    """What to read for view ``value``'s span: its base where that is small (one sync all the
    same), whose span outlives the view (``path[:, t]`` of a loop over ``path``'s columns)."""
    base = value._base
    if base is not None and base.dtype == value.dtype and base.numel() <= _AT_THE_COPY:
        return base
    return value


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
    trace.record(op.name() if op is not None else "int_range", "range read",   # the tensor read,
                 time.perf_counter() - start, d2h=read, args=(value,))         # in DMLSHIM_TRACE
    return span


def _unread_span(t, op=None) -> Optional[Span]:
    """``t``'s span where it costs no device read: computed for a CPU tensor or a number
    (``laws.integers.host_span``), kept for a device tensor (:func:`known_span`); else None.
    ``op``: unused (``laws.integers.assess`` measures with it)."""
    if not isinstance(t, torch.Tensor):
        return integers.host_span(t)
    return _span(t) if t.is_cpu else known_span(t)


@_gate.watching(_gate.Watch(dtypes=_gate.INTEGERS, device_arg=True))
def _copied_over(op, args, kwargs, result) -> None:
    """The dispatcher net's after-hook of ``_to_copy``: a small integer CPU tensor copied to
    the device gives its span on the CPU, without a read; a cast on the device keeps a bool's
    0..1 (``mask.long()``, ``mask.float()``) or an integer's known span, and a cast of whole
    floats to integers theirs (a mask's ``sum(1).int()``; whole numbers cast exactly,
    whatever the rounding; ``remember`` drops a span the new dtype does not hold)."""
    source = args[0]
    if not isinstance(result, torch.Tensor) or result.is_cpu:
        return
    if source.is_cpu:
        if integral(result.dtype) and 0 < source.numel() <= _AT_THE_COPY:
            remember(result, _span(source), exact=True)
    elif integral(result.dtype) or result.is_floating_point():
        _keep(result, (0, 1) if source.dtype == torch.bool else known_span(source))


def _keep(t: torch.Tensor, span: Optional[Span]) -> None:
    """:func:`remember`; a floating ``t`` whose whole-number span is kept is marked for the
    gate too (``_gate.mark``), whose ``sum`` watches such tensors alone (:func:`_summed`)."""
    remember(t, span)
    if t.is_floating_point() and known_span(t) is not None:
        _gate.mark(t)


@_gate.watching(_gate.Watch(dtypes=frozenset({torch.bool}), marked=True))
def _summed(op, keyset, args, kwargs):
    """``sum`` of a bool mask (0..1) or of a float one (marked: :func:`_keep`): on the device
    as it is, its result's span n times the operand's (n the elements summed into each).
    Exact: integers sum with every bit, and whole floats whose every partial sum the result's
    dtype holds (``remember`` checks the bound: 2**24 for float32) sum exactly in any order.
    SeACo-Paraformer's and SenseVoice's encoders' lengths: ``masks.squeeze(1).sum(1)``.  Not
    watched: integer sums (their span unknown as often as not; each would cost the kernel)."""
    x = args[0]
    span = (0, 1) if x.dtype == torch.bool else known_span(x)
    if span is None:
        return None
    result = _select.pass_on(op, keyset, args, kwargs, after=_summed, traced=True)
    n = _summed_count(op, x, args, kwargs)
    _keep(result, (n * span[0], n * span[1]))
    return _select.Done(result, record=False)


def _summed_count(op, x: torch.Tensor, args, kwargs) -> int:
    """How many of ``x``'s elements ``sum`` adds into each of its results."""
    dims = args[1] if len(args) > 1 else kwargs.get("dim")
    if op is _aten.sum.default or not dims or x.dim() == 0:
        return x.numel()
    n = 1
    for d in {d % x.dim() for d in dims}:
        n *= x.shape[d]
    return n


_SUMS = (_aten.sum.dim_IntList, _aten.sum.default)


def _operand_span(value) -> Optional[Span]:
    """A value's span known without a device read: a bool's 0..1, an integral number's own,
    an integer tensor's :func:`_unread_span`; None for a float."""
    if isinstance(value, torch.Tensor):
        if value.dtype == torch.bool:
            return (0, 1)
        return _unread_span(value) if integral(value.dtype) else None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return (int(value), int(value)) if isinstance(value, int) else None


@_gate.ranged(lambda op: "fill" if op is _aten.fill_.Scalar else None)     # in the gate: a fill's value
@_gate.watching(_gate.Watch(dtypes=_gate.INTEGERS))
def _spanned(op, keyset, args, kwargs):
    """An integer op the defect leaves exact (``laws.integers.SPANS``: ``&``, ``|``,
    ``cumsum``, the fills that end ``torch.zeros``/``ones``): on the device as it is, its
    result's span kept from its operands' known ones (no read).  A fill in place at the top
    level moves the version after this returns, so its span is dropped there (kept inside a
    factory: torch's factories run below ``ADInplaceOrView``, their version stays 0)."""
    span_of, measured = integers.SPANS[op]
    spans = [_operand_span(args[i]) for i in measured]
    result = _select.pass_on(op, keyset, args, kwargs, after=_spanned, traced=True)
    if all(s is not None for s in spans) and isinstance(result, torch.Tensor):
        remember(result, span_of(spans, args, kwargs), exact=op in _FILLS)
    return _select.Done(result, record=False)


# every value the one filled: exact.  ones_like: a kernel of its own on the real binary (and a
# new tensor, version 0): transformers' ``ones_like(x, dtype=torch.int64).cumsum(0) - 1``
_FILLS = (_aten.fill_.Scalar, _aten.zero_.default, _aten.ones_like.default)


@_gate.watching(_gate.Watch(dtypes=_gate.INTEGERS))
def _full(op, args, kwargs, result) -> None:
    """The dispatcher net's after-hook of ``full`` (a kernel of its own on the real binary, no
    ``fill_`` to see): a new integer tensor, every value its fill value.  Watched where
    ``dtype=`` is an integer; ``torch.full(size, 7)`` infers int64 below the gate, unseen."""
    if isinstance(result, torch.Tensor) and not result.is_cpu and integral(result.dtype):
        remember(result, _operand_span(args[1] if len(args) > 1 else kwargs.get("fill_value")), exact=True)


# integer dtypes, not bool: a float masked_fill_'s bool mask stays in C++
_INTEGRAL = _gate.Watch(dtypes=frozenset(d for d in _gate.INTEGERS if integral(d)))


@_gate.watching(_INTEGRAL)
def _masked_filled(op, keyset, args, kwargs):
    """``masked_fill_`` of an integer device tensor whose span is known, by a value whose span
    is too: on the device as it is, its result's span the union of both (each value is
    ``self``'s or the fill).  The real binary returns a new tensor here (failure_modes.md
    #65), which the net's kernel copies into ``self`` (``dispatcher._written_back``): with its
    span kept, that int64 ``copy_`` (its 32 bits, :func:`_copy`) reads nothing (Whisper's
    ``F.pad(tokens, (0, 1), value=eot)``: ``pad_value``'s ``masked_fill``).  A result that is
    ``self`` keeps nothing: its version moves after this returns."""
    self = args[0]
    value = args[2] if len(args) > 2 else kwargs.get("value")
    span = integers.union([known_span(self), _operand_span(value)])
    if span is None:
        return None
    result = _select.pass_on(op, keyset, args, kwargs, after=_masked_filled, traced=True)
    if result is not self:
        remember(result, span)
    return _select.Done(result, record=False)


_MASKED_FILLS = (_aten.masked_fill_.Scalar, _aten.masked_fill_.Tensor)


MUL = (_aten.mul.Tensor, _aten.mul_.Tensor, _aten.mul.out)
PUT = (_aten._index_put_impl_.default,)           # the dispatcher net's kernel asks net_fix


def outside(op, args, kwargs) -> bool:
    """Whether the call's operands or result leave the span its law keeps exact (the failing
    case, ``laws.integers.outside``), device tensors measured by :func:`_span`."""
    return integers.outside(op, args, kwargs, _span)


# ops whose RULES span is no bound of the result's values, only of what the law reads: clamp
# moves values to its bounds (not measured), diag_embed adds zeros
_NOT_A_BOUND = {_aten.clamp.default, _aten.clamp_.default, _aten.clamp_min.default, _aten.clamp_min_.default,
                _aten.clamp_max.default, _aten.clamp_max_.default, _aten.diag_embed.default}


def _out_forms(op) -> tuple:
    """The ``out=`` overloads :data:`RULES` holds of ``op``'s name (``add``'s for ``add.Tensor``
    and ``add_.Tensor``): where the real binary's functional kernel writes its result."""
    name = op._schema.name.rstrip("_")
    return tuple(o for o in RULES if o is not op and o._schema.name == name
                 and any(a.is_out for a in o._schema.arguments))


_OUT_FORMS = {op: _out_forms(op) for op in RULES}
# the functional call _guarded is passing on: its kernel's call of the op's out= overload,
# whose operands that call measured already, passes at once (the real binary's sub.Tensor
# reaches sub.out: each integer op would pay the Python twice)
_PASSING: contextvars.ContextVar = contextvars.ContextVar("dmlshim_int_range_passing", default=None)


# the calls of a decode loop (``i + 1``, ``i > 3``, ``i.clone()``): where no other fix watches
# one, the compiled gate decides it by these laws itself, from the spans it keeps too
# (``ranges.keep_in``), with the verdict and the result's span this fix would give
# (an "out form": the out= overload the real binary's functional kernel calls while the gate
# passes that call on, as _PASSING here: each law's op's _OUT_FORMS)
_LAWS_IN_THE_GATE = {_aten.add.Tensor: "sum", _aten.add.Scalar: "sum", _aten.sub.Tensor: "difference",
                     _aten.sub.Scalar: "difference", _aten.mul.Tensor: "product", _aten.mul.Scalar: "product",
                     _aten.clone.default: "unchanged", **{op: "compare" for op in integers.COMPARISONS}}
_LAWS_IN_THE_GATE.update({out: "out form" for op in list(_LAWS_IN_THE_GATE) for out in _OUT_FORMS.get(op, ())})


@_gate.ranged(_LAWS_IN_THE_GATE.get)
@_gate.watching(lambda op: _gate.ALWAYS if op in _SORTS else _gate.Watch(dtypes=_gate.INTEGERS))
def _guarded(op, keyset, args, kwargs):
    """The call on the CPU when its values leave the exact span, else on the device, its
    result's span kept (:func:`remember`): the law's, or where the call is exact anyway (two
    tensors added), its operands' known ones; ``sort``/``topk`` indices from the shape; an
    integer floor division of a known span by a positive number by truncation
    (:func:`_floor_by_trunc`)."""
    passing = _PASSING.get()
    if passing is not None and op in _OUT_FORMS.get(passing, ()):
        return None
    if keyset is not None and integers.floor_division(op, args, kwargs):
        done = _floor_by_trunc(op, args, kwargs)
        if done is not None:
            return done
    if keyset is not None and op in integers.COMPARISONS:
        done = _compared_in_float32(op, args, kwargs)
        if done is not None:
            return done
    number = _number_of(op, args, kwargs)       # the net's mul too (keyset None)
    if number is not None and known_span(args[0]) is None:
        return _as_two_tensors(op, args[0], number)
    # with a number: a bound kept is enough (two tensors hold what it leaves), no exact read
    leaves, span = _assess(op, args, kwargs) if number is None else integers.assess(op, args, kwargs, _span)
    if leaves:
        return _select.on_cpu(op, args, kwargs) if number is None else _as_two_tensors(op, args[0], number)
    if span is None and op not in _SORTS:
        span = _unread_result_span(op, args, kwargs)
    if keyset is None or op in _NOT_A_BOUND or (span is None and op not in _SORTS):
        return None
    token = _PASSING.set(op)
    try:
        result = _select.pass_on(op, keyset, args, kwargs, after=_guarded, traced=True)
    finally:
        _PASSING.reset(token)
    if op in _SORTS:
        remember(result[1], _index_span(args[0], _sort_dim(op, args, kwargs)))
    remember(result[0] if isinstance(result, (tuple, list)) else result, span)
    return _select.Done(result, record=False)


# functional floor divisions (in place and out=: on the CPU, as before)
_FLOORS_BY_TRUNC = (_aten.floor_divide.default, _aten.floor_divide.Scalar, _aten.div.Tensor_mode,
                    _aten.div.Scalar_mode)
_HALF_EXACT = integers.FLOAT_EXACT // 2     # a quotient's dividend plus divisor below: exact


def _integral_number(x: torch.Tensor, n) -> Optional[int]:
    """``n`` as a Python int where it is an integral number that keeps ``x``'s dtype: an
    ``int``, or the 0-dim CPU tensor a number becomes (read on the host: no device sync);
    else None (a float, a bool, a device tensor)."""
    if isinstance(n, torch.Tensor):
        if not integers.is_number(n) or not integral(n.dtype) or torch.result_type(x, n) != x.dtype:
            return None
        n = n.item()
    return n if type(n) is int else None


def _floor_by_trunc(op, args, kwargs) -> Optional[_select.Done]:
    """``x // n`` of an integer device tensor whose span is known, ``n`` a positive integral
    number, on the device: ``(x + m*n) // n - m``, the division by truncation, which equals the
    floor for a nonnegative dividend (``m`` the least that makes ``x + m*n`` one).  The device's
    floor division multiplies by ``1/n`` in float32 and misses multiples of ``n`` (the
    emulator's law: ``41 // 41`` gives 0, ``-49 // 7`` -8); ``div(rounding_mode="trunc")``
    divides, right on both drivers (docs/defects.md, ``int_range``), and a correctly rounded
    float32 quotient truncates exactly while dividend plus divisor stays below 2**24 (the margin
    here: 2**23).  Each step a call the law keeps exact, its span kept.  None where a span is
    unknown, the divisor is not a positive integer, or the shifted span leaves that margin or
    the dtype: the call goes on as before (on the CPU).  Fun-ASR-Nano's adaptor:
    ``(ilens - 1) // self.k + 1``."""
    if op not in _FLOORS_BY_TRUNC:
        return None
    x, n = args[0], (args[1] if len(args) > 1 else kwargs.get("other"))
    if not isinstance(x, torch.Tensor) or x.is_cpu or not integral(x.dtype):
        return None
    n = _integral_number(x, n)
    span = known_span(x)
    if n is None or n <= 0 or span is None:
        return None
    lo, hi = span
    shift = -(lo // n) if lo < 0 else 0           # the least m with lo + m*n >= 0
    top = hi + shift * n
    if top + n >= _HALF_EXACT or top >= integers.refused(x.dtype, integers.FLOAT32)[1]:
        return None
    shifted = x + shift * n if shift else x
    quotient = torch.div(shifted, n, rounding_mode="trunc")
    remember(quotient, ((lo + shift * n) // n, top // n))    # tighter than the law's, for the step after
    result = quotient - shift if shift else quotient
    remember(result, (lo // n, hi // n))
    return _select.Done(result)


def _compared_in_float32(op, args, kwargs) -> Optional[_select.Done]:
    """An int64 comparison (``lt``/``le``/``gt``/``ge``) of a device tensor whose span is not
    known with an integer operand whose span is, within float32's exact integers (-2**24,
    2**24): both sides cast to float32 and compared on the device, no read.  The real
    binary's int64 comparison reads 32 bits (``3e9 < 1`` gives True), but its int64 ->
    float32 cast reads all 64 and rounds to nearest, as the CPU's does (docs/defects.md,
    ``int_range``): rounding is monotonic and leaves every integer within 2**24 as it is, so
    ``x < c`` iff ``float(x) < c`` for such a ``c`` (``x <= c - 1`` rounds to at most ``c - 1``,
    ``x >= c`` to at least ``c``), and so for ``le``, ``gt``, ``ge``, element by element.  None
    otherwise (both spans known: the law decides; neither: a read).  SeACo-Paraformer's
    ``torch.max(pre_token_length) < 1`` and ``sequence_mask(ys_in_lens)``: lengths cast from
    float sums, compared with a number and with an ``arange``."""
    sides = (args[0], args[1] if len(args) > 1 else kwargs.get("other"))
    spans = [_unread_span(v) for v in sides]
    if [s is None for s in spans].count(True) != 1:
        return None
    unknown = spans.index(None)
    x, (lo, hi) = sides[unknown], spans[1 - unknown]
    if x.is_cpu or x.dtype != torch.int64 or not -integers.FLOAT_EXACT < lo <= hi < integers.FLOAT_EXACT:
        return None
    floats = [v.float() if isinstance(v, torch.Tensor) else v for v in sides]
    return _select.Done(op(*floats))


# x + n, x - n, x * n (and in place): op -> the two-tensor call and the number's sign
_WITH_A_NUMBER = {_aten.add.Tensor: (torch.add, 1), _aten.add.Scalar: (torch.add, 1),
                  _aten.sub.Tensor: (torch.add, -1), _aten.sub.Scalar: (torch.add, -1),
                  _aten.mul.Tensor: (torch.mul, 1), _aten.mul.Scalar: (torch.mul, 1),
                  _aten.add_.Tensor: (torch.Tensor.add_, 1), _aten.add_.Scalar: (torch.Tensor.add_, 1),
                  _aten.sub_.Tensor: (torch.Tensor.add_, -1), _aten.sub_.Scalar: (torch.Tensor.add_, -1),
                  _aten.mul_.Tensor: (torch.Tensor.mul_, 1), _aten.mul_.Scalar: (torch.Tensor.mul_, 1)}
_IN_PLACE_WITH_A_NUMBER = {op for op in _WITH_A_NUMBER if op._schema.name.endswith("_")}


def _number_of(op, args, kwargs) -> Optional[int]:
    """The number of ``x + n``, ``x - n``, ``x * n`` (``-alpha * n`` for ``sub``) where ``x`` is
    an int32 or int64 device tensor and two tensors can compute it (:func:`_as_two_tensors`):
    ``n`` an integral number within the dtype, an in-place ``x`` no view and contiguous (a
    write into a view keeps the law's way); else None."""
    if op not in _WITH_A_NUMBER:
        return None
    x, n = args[0], (args[1] if len(args) > 1 else kwargs.get("other"))
    alpha = integers.alpha_of(args, kwargs)
    if not isinstance(x, torch.Tensor) or x.is_cpu or x.dtype not in (torch.int32, torch.int64) \
            or type(alpha) is not int:
        return None
    if op in _IN_PLACE_WITH_A_NUMBER and (x._base is not None or not x.is_contiguous()):
        return None                                # (the real binary's views read offset 0)
    n = _integral_number(x, n)
    if n is None:
        return None
    call, sign = _WITH_A_NUMBER[op]
    number = n if call is torch.mul or call is torch.Tensor.mul_ else sign * alpha * n
    info = torch.iinfo(x.dtype)
    return number if info.min <= number <= info.max else None


def _as_two_tensors(op, x: torch.Tensor, number: int) -> _select.Done:
    """``x + n``, ``x - n``, ``x * n`` whose range is unknown or leaves float32's exact span:
    the number as a 0-dim device tensor (``torch.full``) and the two tensors added or
    multiplied on the device, no read.  The real binary computes an integer op with a number
    in float32, but two tensors with every bit, wrapping at the dtype's bounds as the CPU does
    (measured there for int32 and int64: ``2**63 - 1 + 1``, ``2**40 + 5 - 1``, ``46341 *
    46341``; docs/defects.md, ``int_range``).  The two-tensor call keeps its result's span
    where ``x``'s is known.  SeACo-Paraformer's CIF: ``max_label_len - l.size(0)``."""
    call = _WITH_A_NUMBER[op][0]
    return _select.Done(call(x, torch.full((), number, dtype=x.dtype, device=x.device)))


def _unread_result_span(op, args, kwargs) -> Optional[Span]:
    """An integer call's result span by its law's interval arithmetic from operand spans
    known without a read (:func:`_unread_span`), for a call the law leaves alone (``a + b``
    of two tensors is exact, but its range is still wanted next); None if one is unknown."""
    rule = integers.RULES.get(op)
    first = args[0] if args else None
    if rule is None or not isinstance(first, torch.Tensor) or not integral(first.dtype) \
            or first.is_cpu:
        return None
    spans = []
    for i in rule[1]:
        value = args[i] if i < len(args) else None
        found = _unread_span(value)
        if found is None:
            return None
        spans.append(found)
    return rule[0](spans, args, kwargs)


_SORTS = {_aten.sort.default: 1, _aten.sort.stable: 2, _aten.topk.default: 2}   # op -> dim's place


def _sort_dim(op, args, kwargs) -> int:
    place = _SORTS[op]
    return args[place] if len(args) > place else kwargs.get("dim", -1)


def _index_span(x: torch.Tensor, dim) -> Span:
    """The span of indices into ``x`` along ``dim`` (all of it flat when None): 0 to the
    size less one, known from the shape."""
    size = x.numel() if dim is None or x.dim() == 0 else x.shape[dim]
    return (0, max(size - 1, 0))


@_gate.watching(_gate.Watch(dtypes=_gate.INTEGERS))
def _concatenated(op, keyset, args, kwargs):
    """``cat`` of integer tensors whose ranges are all known: their union (a decoder's
    growing token list).  Passes (None) otherwise."""
    spans = [_unread_span(t) for t in args[0] if t.numel()]
    if not spans or not all(integral(t.dtype) for t in args[0]) or None in spans:
        return None
    result = _select.pass_on(op, keyset, args, kwargs, after=_concatenated, traced=True)
    remember(result, integers.union(spans))
    return _select.Done(result, record=False)


@_gate.watching(_gate.Watch(dtypes=_gate.INTEGERS))
def _indexed(op, args, kwargs, result) -> None:
    """The dispatcher net's after-hook of ``index`` (``x[mask]``, ``x[idx]``): its values are
    among ``x``'s, so they have ``x``'s range where that is known."""
    if isinstance(result, torch.Tensor) and not args[0].is_cpu:
        _keep(result, known_span(args[0]))


@_gate.watching(_gate.Watch(dtypes=_gate.INTEGERS))
def _within_source(op, keyset, args, kwargs):
    """``index``/``gather``/``index_select``/``flip`` of an integer tensor whose range is
    known: its values are among the source's, so the result has the source's range (a
    decoder's ``tokens[mask]``: Whisper's timestamps).  Passes (None) otherwise."""
    source = args[0]
    span = known_span(source) if integral(source.dtype) and not source.is_cpu else None
    if span is None:
        return None
    result = _select.pass_on(op, keyset, args, kwargs, after=_within_source, traced=True)
    remember(result, span)
    return _select.Done(result, record=False)


# gather, index_select and flip: already held by other fixes where int_range is (gather's,
# refused's, flip_dims'), so this adds a step to their chains, not a kernel; index: a kernel
# of its own unless the net holds it (cpu_index), which tells _indexed instead
_SOURCES = (_aten.gather.default, _aten.index_select.default, _aten.flip.default)
_INDEX = _aten.index.Tensor


def _indices(op, keyset, args, kwargs):
    """``argmax``/``argmin`` and ``max``/``min`` along a dim: on the device as they are, their
    indices' range kept from the input's shape (0 to the reduced size less one), so an
    integer op on them reads nothing (a greedy decoder's next token: Whisper's; a CTC
    alignment's backpointers: SenseVoice's)."""
    result = _select.pass_on(op, keyset, args, kwargs, after=_indices, traced=True)
    dim = args[1] if len(args) > 1 else kwargs.get("dim")
    remember(result[1] if isinstance(result, tuple) else result, _index_span(args[0], dim))
    return _select.Done(result, record=False)


# Python kernels of their own, as argmax's: max/min along a dim give the indices a CTC
# alignment writes (the device call pays the kernel; docs/performance.md)
_INDICES = (_aten.argmax.default, _aten.argmin.default, _aten.max.dim, _aten.min.dim)


@_gate.watching(_gate.Watch(dtypes=_gate.INTEGERS))
def net_fix(op, args, kwargs):
    """``_index_put_impl_``'s fix for the dispatcher net's kernel (None: nothing to fix)."""
    return _guarded(op, None, args, kwargs)


def _copy(func, args, kwargs):
    """``Tensor.copy_`` between int64 device tensors: from a CPU copy of a source past 32 bits
    (a BackendSelect kernel for ``aten::copy_`` breaks torch-directml's copies: broadcast_copy)."""
    self, src = args[0], (args[1] if len(args) > 1 else kwargs.pop("src"))
    if isinstance(src, torch.Tensor) and not src.is_cpu and past_32_bits(src):
        return "cpu source", func(self, trace.to_host(src), *args[2:], **kwargs)
    return "pass", func(self, src, *args[2:], **kwargs)


def past_32_bits(value) -> bool:
    """An int64 tensor or a Python int past the span the 32-bit law keeps (device tensors
    measured by :func:`_span`)."""
    past = integers.past_32_bits(value, _span)
    if past and _bounded((value,)):
        return integers.past_32_bits(value, _exact_span)
    return past


def _on_host(index):
    if isinstance(index, torch.Tensor):
        return trace.to_host(index)
    return tuple(_on_host(i) for i in index) if isinstance(index, (tuple, list)) else index


def _setitem(func, args, kwargs):
    """``x[i] = v`` into an integer device tensor: its span after, the union of its own before
    and ``v``'s, kept once the version has settled (``x[x < 0] = 0``: Fun-ASR-Nano's
    ``fake_token_len``).  Into an int64 one, ``v`` past 32 bits: the real binary keeps the
    low 32 bits of a write into a view with an offset or strides (``fill_``, ``copy_``, from
    the CPU too), which a slice or a single place is.  Written as ``index_put_`` of the places'
    flat positions into the whole tensor (held above: on the CPU, written back whole)."""
    self, index, value = args
    written = _operand_span(value)
    if self.dtype != torch.int64 or self._base is not None or not self.is_contiguous() \
            or (written is not None and _within_32_bits(written)) or not past_32_bits(value):
        if type(value) is int and self.dtype == torch.int64:   # copied over, its range known:
            value = torch.tensor(value, dtype=self.dtype).to(self.device)   # torch's own is not
        after = integers.union([known_span(self), written])
        base, key, before = _region_of(self, index)
        func(self, index, value)
        remember(self, after)           # at the write's version, which moved in func
        if base is not None:
            ranges.remember_region(base, key, written, before, None)
        return "pass", None
    places = torch.arange(self.numel()).view(self.shape)[_on_host(index)]
    value = torch.as_tensor(value, dtype=self.dtype)
    while value.dim() > places.dim() and value.shape[0] == 1:
        value = value[0]                       # setitem's leading ones
    values = value.to(self.device).expand(places.shape).reshape(-1)
    self.view(-1).index_put_((places.reshape(-1).to(self.device),), values)
    return "flat index_put_", None


_INT32 = integers.refused(torch.int64, integers.BITS32)      # the 32-bit law's exact span, open


def _within_32_bits(span: Span) -> bool:
    """Every value of ``span`` is one the 32-bit law keeps (:func:`past_32_bits`'s answer,
    known without measuring again)."""
    return _INT32[0] < span[0] and span[1] < _INT32[1]


def _offset_of(t: torch.Tensor) -> Optional[int]:
    """Where ``t`` begins in its storage, in elements, for ``ranges.view_key``: a root's 0
    (a tensor with no base: no offset of its own), a view's as ``offset_views`` recorded it
    when it was made (the real binary's ``storage_offset()`` reads 0 for a view; the
    emulator's too is recorded), else a nonzero ``storage_offset()``; None for a view at 0 or
    made unseen (before ``activate()``), which the two cannot be told apart by."""
    if t._base is None:
        return 0 if t.storage_offset() == 0 else None
    anchor, offset = anchor_of(t)
    if anchor is not t:
        return offset
    return t.storage_offset() or None


def _region_of(self: torch.Tensor, index):
    """The base ``self[index]`` writes into, the view's region key there and the base's
    version, where that base keeps its views' spans apart (``ranges.remember_region``);
    else ``(None, None, None)``."""
    base = self if self._base is None else self._base
    if not ranges.has_regions(base):
        return None, None, None
    return base, ranges.index_key(self, index), ranges.version(base)


def _in_place(law, place: int = 1):
    """``x += y``/``x -= y``/``x.masked_fill_(m, v)`` of an integer device tensor: its span
    from ``law`` (``laws.integers``) and ``args[place]``'s once the version has settled (it
    moves after the kernels return, so theirs is stale), and a view's base's span the union of
    its own before and the view's after (``path[:, t] += d``)."""
    def handler(func, args, kwargs):
        self, other = args[0], (args[place] if len(args) > place else kwargs.get("value"))
        base = self._base
        base = base if base is not None and base.dtype == self.dtype else None
        before, by = known_span(self), _operand_span(other)
        whole = known_span(base) if base is not None else None
        version = ranges.version(base) if base is not None else None
        result = func(*args, **kwargs)
        if before is not None and by is not None and result is self:
            after = law([before, by], args, {})
            remember(self, after)
            if base is not None:
                remember(base, integers.union([whole, after]))
                ranges.remember_region(base, ranges.view_key(self), after, version, whole)
        return "pass", result
    return handler


# Python entry points, not kernels: only there has the version settled.  masked_fill_: a
# decoder's position_ids (transformers' generate, each step)
_IN_PLACE = {"__iadd__": _in_place(integers._sum), "__isub__": _in_place(integers._difference),
             "masked_fill_": _in_place(integers._unchanged, place=2)}


def _on(target: str, dtype_ok):
    """A wrapper's select: the instance a ``target`` device tensor whose dtype ``dtype_ok``."""
    def select(instance, args, kwargs):
        return not instance.is_cpu and dtype_ok(instance.dtype) and instance.device.type == target
    return select


def _integer_on(target: str):
    return _on(target, integral)


def _first_on(target: str):
    """``empty_like``'s select: its input a ``target`` device tensor of an integer dtype (an
    integer ``dtype=`` of a float input: not seen, as the front passes it by)."""
    def select(_, args, kwargs):
        first = args[0] if args else kwargs.get("input")
        return isinstance(first, torch.Tensor) and not first.is_cpu and first.device.type == target \
            and integral(first.dtype) and integral(kwargs.get("dtype") or first.dtype)
    return select


def _int64_on(target: str):
    return _on(target, lambda dtype: dtype == torch.int64)


_kernels = _select.Kernels(__name__, {**{op: _guarded for op in RULES if op not in MUL + PUT},
                           **{op: _guarded for op in MUL if op is not _aten.mul.out},
                           _aten.cat.default: _concatenated,
                           **{op: _indices for op in _INDICES},
                           **{op: _within_source for op in _SOURCES},
                           **{op: _spanned for op in integers.SPANS},
                           **{op: _summed for op in _SUMS},
                           **{op: _masked_filled for op in _MASKED_FILLS}})
_index_kernel = _select.Kernels(__name__, {_INDEX: _within_source})
# mul.out only where mul's fix holds it: the real binary's mul.Tensor reaches its mul.out, and
# a Python kernel there alone would change what float x bool gives (a float out for bool)
_mul_out_kernel = _select.Kernels(__name__, {_aten.mul.out: _guarded})
# _index_put_impl_'s: through the dispatcher net's kernel where it holds one
_put_kernels = _select.Kernels(__name__, {op: _guarded for op in PUT})
_patches = PatchSet(__name__)


def install(ctx) -> None:
    """The kernels, ``_index_put_impl_``'s through the dispatcher net's kernel where it holds
    one, and the Python entry points ``Tensor.copy_`` and ``__setitem__``."""
    from . import dispatcher
    _kernels.install(ctx)
    ranges.locate(_offset_of)
    # their selects look at self's dtype (empty_like's: its input's): the front passes a
    # device call by unless a tensor is of such a dtype (_INTEGRAL)
    _patches.intercept(ctx, torch.Tensor, "copy_", _copy, select=_int64_on(ctx.target),
                       device=_gate.Watch(dtypes=frozenset({torch.int64})))
    for owner, name, handler, select in ((torch.Tensor, "__setitem__", _setitem, _integer_on),
                                         (torch.Tensor, "scatter_", _first_write, _integer_on),
                                         (torch, "empty_like", _empty_like, _first_on)):
        _patches.intercept(ctx, owner, name, handler, select=select(ctx.target), device=_INTEGRAL)
    for name, handler in _IN_PLACE.items():
        _patches.intercept(ctx, torch.Tensor, name, handler, select=_integer_on(ctx.target), device=_INTEGRAL)
    dispatcher.add_hook("_index_put_impl_", net_fix, owner=__name__)
    if not all(dispatcher.holds(op) for op in PUT):
        _put_kernels.install(ctx)
    dispatcher.add_hook("_to_copy", _copied_over, after=True, owner=__name__)
    dispatcher.add_hook("index", _indexed, after=True, owner=__name__)
    dispatcher.add_hook("full", _full, after=True, owner=__name__)
    if not dispatcher.holds(_INDEX):
        _index_kernel.install(ctx)
    if _select.holds(_aten.mul.out):
        _mul_out_kernel.install(ctx)


def uninstall() -> None:
    from . import dispatcher
    _patches.restore()
    dispatcher.remove_hook("_to_copy", _copied_over, after=True)
    dispatcher.remove_hook("index", _indexed, after=True)
    dispatcher.remove_hook("full", _full, after=True)
    _index_kernel.uninstall()
    _mul_out_kernel.uninstall()
    ranges.locate(None)
    forget_all()
    dispatcher.remove_hook("_index_put_impl_", net_fix)
    _put_kernels.uninstall()
    _kernels.uninstall()
