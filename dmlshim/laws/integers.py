"""How the real torch-directml 0.2.5 binary computes integers: through float32, or int64 by
32 bits (defect ``int_range``), ``arange``'s length in float32 (``arange_float32``), and the
integer and bool cases of ``pow``, ``exp2``, ``addmm`` and ``unique`` it gets wrong
(``int_pow_zero``, ``bool_exp2``, ``int_addmm``, ``unique_bytes``).  Each measured on the real
binary, no public report (docs/defects.md has the rows).
"""
from __future__ import annotations

import math
import struct
from typing import Callable, Dict, Optional, Tuple

import torch

_aten = torch.ops.aten
Span = Tuple[int, int]
FLOAT_EXACT = 2 ** 24                 # float32 holds every integer of this magnitude


def integral(dtype: torch.dtype) -> bool:
    """An integer dtype (not bool)."""
    return not (dtype.is_floating_point or dtype.is_complex or dtype == torch.bool)


# ----------------------------------------------------------------------------- int_range
# Integer add/sub/mul with a number, neg, pow, // and %, mm/addmm/bmm/baddbmm compute in
# float32 and saturate (exact within 2**24, clamped to int32's range, a one-byte dtype's
# own); int64 clone, sub of two tensors, maximum/minimum, clamp, comparisons, sort/topk,
# unique and the writes (index_put_, scatter_, masked_scatter_, diag_embed) read values past
# int32's range by their low 32 bits.  Measured: docs/defects.md, ``int_range``;
# benchmarks/realdml_gpu/integers.py (the same calls wrong on NVIDIA's driver).

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
# ``beta`` are keyword-only in the Tensor and matrix schemas, so the dispatcher hands them in
# ``kwargs``; ``add.Scalar``/``sub.Scalar`` take ``alpha`` third, in ``args``.
def alpha_of(args, kwargs):
    """An ``add``/``sub`` call's ``alpha``: positional (``.Scalar``) or keyword (``.Tensor``)."""
    return args[2] if len(args) > 2 else kwargs.get("alpha", 1)


def _sum(spans, args, kwargs):
    alpha = alpha_of(args, kwargs)
    return _add(spans[0], _mul(spans[1], (alpha, alpha)))


def _difference(spans, args, kwargs):
    alpha = alpha_of(args, kwargs)
    return _add(spans[0], _neg(_mul(spans[1], (alpha, alpha))))


def _product(spans, args, kwargs):
    return _mul(spans[0], spans[1])


def _negation(spans, args, kwargs):
    return _neg(spans[0])


def _power(spans, args, kwargs):
    base, top = _magnitude(spans[0]), max(spans[1][1], 0)
    return _symmetric(base ** top if base <= 1 or top <= 64 else 2 ** 64)


def _quotient(spans, args, kwargs):
    """A quotient or remainder: within the operands' magnitude, and nonnegative where both are
    (a uint8's ``x // 3`` stays within 0..255)."""
    bound = _magnitude(*spans)
    return (0, bound) if all(s[0] >= 0 for s in spans) else _symmetric(bound)


def _matrix_product(spans, args, kwargs):
    """k products of an element of each matrix (k their inner size), plus ``beta * input``."""
    *bias, a, b = spans
    bound = args[-1].shape[-2] * abs(kwargs.get("alpha", 1)) * _magnitude(_mul(a, b))
    return _symmetric(bound + (abs(kwargs.get("beta", 1)) * _magnitude(bias[0]) if bias else 0))


def union(spans) -> Optional[Span]:
    """The least span holding every one of ``spans``; None if one is unknown (None)."""
    if any(s is None for s in spans):
        return None
    return (min(s[0] for s in spans), max(s[1] for s in spans))


def _unchanged(spans, args, kwargs):
    return union(spans)


def put_span(spans, args, kwargs):
    """``index_put_``'s result span: the values written, or with ``accumulate`` each place plus
    every value."""
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
COMPARISONS = tuple(getattr(getattr(_aten, name), overload) for name in ("lt", "le", "gt", "ge")
                     for overload in ("Scalar", "Tensor"))
_rules(COMPARISONS, _unchanged, (0, 1), BITS32)
# writes: x[i] = v, x[mask] = v (index_put_), scatter_, masked_scatter_, torch.diag (C++ copy_)
_rules((_aten._index_put_impl_.default,), put_span, (0, 2), BITS32)
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
# two tensors: add and mul keep every bit, sub reads int64 by 32 bits, and comparisons too
_TWO_TENSORS = {op: BITS32 for op in (_aten.sub.Tensor, _aten.sub_.Tensor, _aten.sub.out) + COMPARISONS}
_EXACT_FOR_TWO = (_aten.add.Tensor, _aten.add_.Tensor, _aten.add.out, _aten.mul.Tensor, _aten.mul_.Tensor,
                  _aten.mul.out)



# ----------------------------------------------------------------------------- exact ops' spans
# Integer ops the defect leaves exact (or that only fill): their result's span from their
# operands', so a later held call reads nothing (``patches/int_range.py``).  Not defects: the
# emulator reads :data:`RULES` alone.  A bool operand spans 0..1.

def _nonnegative(*spans: Span) -> bool:
    return all(s[0] >= 0 for s in spans)


def _ones_below(bound: int) -> int:
    """The least ``2**k - 1`` at or above ``bound >= 0``: every value of its bits or fewer."""
    return (1 << max(bound, 0).bit_length()) - 1


def _and(spans, args, kwargs) -> Optional[Span]:
    """``a & b``: within 0 and a nonnegative operand's greatest (its bits, fewer or as many)."""
    bounds = [s[1] for s in spans if s[0] >= 0]
    return (0, min(bounds)) if bounds else None


def _or_xor(spans, args, kwargs) -> Optional[Span]:
    """``a | b``, ``a ^ b`` of nonnegative operands: within the greatest's bits."""
    return (0, _ones_below(max(s[1] for s in spans))) if _nonnegative(*spans) else None


def _running_sum(spans, args, kwargs) -> Span:
    """``cumsum`` along ``dim``: a sum of 1 to n elements (n the size along it)."""
    x, dim = args[0], args[1] if len(args) > 1 else kwargs["dim"]
    n = x.shape[dim] if x.dim() else 1
    lo, hi = spans[0]
    return (min(lo, n * lo), max(hi, n * hi))


def _filled(spans, args, kwargs) -> Span:
    """``fill_``'s value, ``zero_``'s 0 (``torch.zeros``/``ones``/``full`` end in them)."""
    return spans[0] if spans else (0, 0)


def _ones(spans, args, kwargs) -> Span:
    """``ones_like``'s 1 (a kernel of its own on the real binary: no ``fill_`` to see)."""
    return (1, 1)


# op -> (the result's span, which arguments to measure)
SPANS: Dict[torch._ops.OpOverload, Tuple[Callable, Tuple[int, ...]]] = {
    **{op: (_and, (0, 1)) for op in (_aten.bitwise_and.Tensor, _aten.bitwise_and.Scalar)},
    **{op: (_or_xor, (0, 1)) for op in (_aten.bitwise_or.Tensor, _aten.bitwise_or.Scalar,
                                        _aten.bitwise_xor.Tensor, _aten.bitwise_xor.Scalar)},
    _aten.cumsum.default: (_running_sum, (0,)),
    _aten.fill_.Scalar: (_filled, (1,)), _aten.zero_.default: (_filled, ()),
    _aten.ones_like.default: (_ones, ()),
}

# integer floor division is floor(x * (1/n)) in float32: wrong at some multiples of n below 0
# whatever their size (-49 // 7 gives -8): by a number on lavapipe (39 of the divisors 1 to 129
# over -3000..2999), by a tensor too on NVIDIA's driver; trunc and remainder were right on both
_FLOORS = (_aten.floor_divide.default, _aten.floor_divide_.Tensor, _aten.floor_divide.Scalar,
           _aten.floor_divide.out)
_MODES = (_aten.div.Tensor_mode, _aten.div_.Tensor_mode, _aten.div.Scalar_mode, _aten.div.out_mode)


def floor_division(op, args, kwargs) -> bool:
    """An integer floor division (``x // n``, ``div(x, n, rounding_mode="floor")``)."""
    return op in _FLOORS or (op in _MODES and kwargs.get("rounding_mode") == "floor")


def refused(dtype: torch.dtype, law: str) -> Span:
    """The nearest values ``dtype`` does not keep exactly under ``law``, below and above.
    Each is a float32 value, so a value past it never rounds back inside (a span read in
    float32: ``patches/int_range.py``); the bounds themselves are refused too (2**24, 2**31),
    which costs nothing real."""
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
    rule = RULES.get(op)
    tensor = next((a for a in args if isinstance(a, torch.Tensor)), None)
    if rule is None or tensor is None or not integral(tensor.dtype):
        return None
    law = rule[2]
    if (op in _TWO_TENSORS or op in _EXACT_FOR_TWO) and isinstance(args[1], torch.Tensor) \
            and not is_number(args[1]):
        law = _TWO_TENSORS.get(op)
    return None if law is None or (law == BITS32 and tensor.dtype != torch.int64) else law


def host_span(value, op=None) -> Optional[Span]:
    """``value``'s least and greatest element (a number is both), None for a float, bool or
    complex one; a tensor's read where it is (the emulator's are on the CPU; the fix reads
    device tensors its own way).  ``op``: the call it is measured for (unused here)."""
    if isinstance(value, torch.Tensor):
        if not integral(value.dtype):
            return None
        if value.numel() == 0:
            return (0, 0)
        return (int(value.min()), int(value.max()))
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return (value, value)


def assess(op, args, kwargs, span=host_span) -> Tuple[bool, Optional[Span]]:
    """Whether the call's operands or result leave the span its law keeps exact (the failing
    case), and the result's span (None where not computed); False for the calls
    :func:`law_of` leaves alone and for a float operand.  ``span(value, op)`` measures one
    operand (:func:`host_span`)."""
    law = law_of(op, args)
    if law is None:
        return False, None
    if floor_division(op, args, kwargs):
        return True, None
    span_of, measured, _ = RULES[op]
    spans = []
    for i in measured:
        value = args[i] if i < len(args) else None
        found = span(value.item() if isinstance(value, torch.Tensor) and is_number(value) else value, op)
        if found is None:
            return False, None          # a float operand: the call computes in float anyway
        spans.append(found)
    lo, hi = refused(next(a for a in args if isinstance(a, torch.Tensor)).dtype, law)
    result = span_of(spans, args, kwargs)
    return any(s[0] <= lo or s[1] >= hi for s in spans + [result]), result


def outside(op, args, kwargs, span=host_span) -> bool:
    """:func:`assess`'s verdict alone: the call leaves its law's exact span."""
    return assess(op, args, kwargs, span)[0]


def past_32_bits(value, span=host_span) -> bool:
    """An int64 tensor or a Python int with a value outside the span the 32-bit law keeps
    (a ``fill_``, a ``copy_`` into a view with an offset)."""
    if isinstance(value, torch.Tensor):
        return value.dtype == torch.int64 and outside(_aten.clone.default, (value,), {}, span)
    return isinstance(value, int) and not isinstance(value, bool) and not -(2 ** 31) < value < 2 ** 31


# ----------------------------------------------------------------------------- arange_float32
# arange's kernel (arange.start_out, which every torch.arange reaches) computes its length as
# ceil((f32(end) - f32(start)) / f32(step)) in float32, where the CPU computes it in double:
# arange(2**24, 2**24 + 5) has 4 values, arange(2**31 - 2, 2**31 + 3) none; 18 of 300 random
# fractional ranges one more or fewer, every one as this law (measured).

def _f32(x: float) -> float:
    """``x`` rounded to float32.  One double operation rounded so is float32's own result
    (double holds more than twice float32's bits), so Python floats compute the law."""
    return struct.unpack("f", struct.pack("f", x))[0]


def float32_length(start, end, step) -> int:
    """The real binary's length of ``arange(start, end, step)``: the law, in float32."""
    span = _f32(_f32(float(end)) - _f32(float(start)))
    return max(0, math.ceil(_f32(span / _f32(float(step)))))


def cpu_length(start, end, step, dtype: torch.dtype) -> int:
    """The CPU's length of ``arange(start, end, step)`` into ``dtype`` (ATen's
    ``compute_arange_size``: int64 in integers, truncated bounds; every other dtype in double).
    Python arithmetic, not the ``meta`` device, whose float ``arange`` imports torch._dynamo."""
    if dtype == torch.int64:
        first, last, stride = int(start), int(end), int(step)
        span = last - first + stride - ((stride > 0) - (stride < 0))
        return max(0, abs(span) // abs(stride) * (1 if (span >= 0) == (stride > 0) else -1))
    return max(0, math.ceil((float(end) - float(start)) / float(step)))


def arange_differs(start, end, step, dtype: torch.dtype = torch.float32) -> bool:
    """Whether the device's ``arange`` into ``dtype`` differs from the CPU's: a bound past
    2**24 (float values past it differ too), or another length."""
    if max(abs(float(start)), abs(float(end))) > FLOAT_EXACT:
        return True
    return float32_length(start, end, step) != cpu_length(start, end, step, dtype)


# ----------------------------------------------------------------------------- int_pow_zero
def zero_to_negative(base, exponent) -> bool:
    """``int_pow_zero``: integer ``pow`` of a zero base to a negative exponent gives the int32
    maximum (float math: inf, saturated), where the CPU gives 0.  The case: an integer result
    from a base that may be 0 (a tensor, or the number 0) and a signed integer exponent
    (uint8 cannot be negative).  Measured with OpInfo's int64 ``__rpow__`` samples."""
    if not isinstance(exponent, torch.Tensor) or exponent.dtype in (torch.bool, torch.uint8):
        return False
    if not isinstance(base, torch.Tensor):
        return base == 0 and isinstance(base, int) and integral(exponent.dtype)
    return integral(torch.result_type(base, exponent))


# ----------------------------------------------------------------------------- bool_exp2
EXP2 = (_aten.exp2.default, _aten.exp2.out)
POW = (_aten.pow.Scalar, _aten.pow.Scalar_out)


def bool_exponent(op, args) -> bool:
    """``bool_exp2``: ``exp2`` of a bool tensor and ``pow`` of a number to a bool exponent read
    the exponent as 0 (ones).  The case: ``exp2``'s input, or ``pow``'s tensor after a number
    (a bool number base keeps a bool result, which the CPU refuses too).  Measured with
    OpInfo's bool samples."""
    if op in EXP2:
        return args[0].dtype == torch.bool
    return args[1].dtype == torch.bool and not isinstance(args[0], bool)


# ----------------------------------------------------------------------------- int_addmm
def fractional(self, alpha, beta) -> bool:
    """``int_addmm``: ``addmm``/``baddbmm`` of integers scale by a fractional ``alpha``/``beta``
    as floats, where PyTorch truncates them first.  The case: an integer or bool ``self`` with
    an ``alpha`` or ``beta`` that is not an integer.  Measured with OpInfo's int64 samples."""
    return (isinstance(self, torch.Tensor) and not (self.is_floating_point() or self.is_complex())
            and any(isinstance(s, float) and not s.is_integer() for s in (alpha, beta)))


# ----------------------------------------------------------------------------- unique_bytes
# unique (_unique2) of these dtypes drops the zeros (of >= 2 dimensions, any dtype aborts the
# process); measured with OpInfo's bool samples
BYTES = (torch.bool, torch.uint8, torch.int8)
