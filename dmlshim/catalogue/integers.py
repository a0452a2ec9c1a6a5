"""Integers: refused math, broadcasts read as one value, float32 arithmetic (wrong past 2**24),
zero to a negative power, integer linspace/arange, unique of bytes, addmm's scales."""
from __future__ import annotations

from typing import Tuple

import torch

from .defect import MEASURED, NO_REPORT, Defect
from .probes import case_probe

TOPIC = "Integers"


def _int_math_refused(device):
    """`log2` of an int64 ramp."""
    return torch.log2(torch.arange(1, 5).to(device))


def _int_broadcast(device):
    """`floor_divide` of a 2x3 int64 ramp by a row of 3."""
    return torch.floor_divide((torch.arange(1, 7) * 10).view(2, 3).to(device), torch.tensor([1, 2, 3]).to(device))


def _int_range(device):
    """`x + 1` and `x.clone()` of int64 `[2**24 + 1, 2**40 + 5]` (the defect: `[2**24, 6]` and
    `[2**24 + 1, 5]`)."""
    x = torch.tensor([2 ** 24 + 1, 2 ** 40 + 5]).to(device)
    return x + 1, x.clone()


def _int_pow_zero(device):
    """`pow` of int64 `[0, 2, 0]` to `[-1, -1, 2]` (the CPU: zeros; the defect: the int32 maximum
    first)."""
    return torch.pow(torch.tensor([0, 2, 0]).to(device), torch.tensor([-1, -1, 2]).to(device))


def _linspace_int(device):
    """`linspace(0, 10, 7)` as int64 on the device (the defect: 0 ... 6)."""
    return torch.linspace(0, 10, 7, dtype=torch.int64, device=device)


def _arange_float32(device):
    """`arange(2**24, 2**24 + 5)` and `arange(14.7, 19.7, 0.05)` on the device (the defect: 4
    values, and 101)."""
    return torch.arange(2 ** 24, 2 ** 24 + 5, device=device), torch.arange(14.7, 19.7, 0.05, device=device)


def _unique_bytes(device):
    """`unique` of a uint8 `[3, 0, 3]` (the defect: `[3]`)."""
    return torch.unique(torch.tensor([3, 0, 3], dtype=torch.uint8).to(device))


def _int_addmm(device):
    """`addmm` of 2x2 int64 ramps with `alpha=1.5, beta=0.5` (the CPU: 1 and 0)."""
    m = torch.arange(4).view(2, 2).to(device)
    return torch.addmm(m, m, m, alpha=1.5, beta=0.5)


DEFECTS: Tuple[Defect, ...] = (
    Defect("int_math_refused", "none", NO_REPORT,
           "log10/log2/isnan/isinf (E_INVALIDARG) and sinc (CreateOperator) of integer or bool "
           "tensors", case_probe(_int_math_refused), ("refused:int_math_refused",), found=MEASURED,
           rules=("log2 _integer", "sinc _integer")),
    Defect("int_broadcast", "none", NO_REPORT,
           "binary ops of operands of different ranks, one of them cast (integer div/remainder/"
           "floor_divide/atan2/pow; add, mul, lt ... of mixed dtypes): the smaller one read as its "
           "first value (silent)", case_probe(_int_broadcast), ("int_broadcast", "dispatcher:rsub"),
           found=MEASURED, rules=("_first_value_of_the_smaller",)),
    Defect("int_range", "none", NO_REPORT,
           "integer add/sub/mul with a number, neg, pow, floor_divide/remainder and mm compute in "
           "float32: wrong past 2**24, saturated past int32 (one-byte dtypes past theirs); int64 clone, "
           "sub, maximum, clamp, sort read values past int32 by their low 32 bits (silent)",
           case_probe(_int_range), ("int_range", "dispatcher:rsub"), found=MEASURED,
           rules=("_dml_integers", "_int64_copy_past_32_bits", "_int64_fill_past_32_bits")),
    Defect("int_pow_zero", "none", NO_REPORT,
           "integer pow of a zero base to a negative exponent gives the int32 maximum (the CPU: 0; "
           "silent)", case_probe(_int_pow_zero), ("int_pow_zero",), found=MEASURED,
           rules=("_zero_to_negative",)),
    Defect("linspace_int", "none", NO_REPORT,
           "linspace of an integer dtype truncates the step (silent); of bool with a negative start "
           "'value cannot be converted to type uint8_t'", case_probe(_linspace_int), ("linspace_int",),
           found=MEASURED, rules=("_integral_linspace",)),
    Defect("arange_float32", "none", NO_REPORT,
           "arange's length computed in float32: arange(2**24, 2**24 + 5) has 4 values, past 2**31 "
           "none, fractional steps one more or fewer (silent)", case_probe(_arange_float32),
           ("arange_float32",), found=MEASURED, rules=("_arange_differs",)),
    Defect("unique_bytes", "none", NO_REPORT,
           "unique of bool/uint8/int8 drops the zeros (silent); of an input of 2 or more dimensions "
           "aborts the process", case_probe(_unique_bytes), ("unique_bytes",), found=MEASURED,
           rules=("_unique_of_bytes",)),
    Defect("int_addmm", "none", NO_REPORT,
           "addmm/baddbmm of integer tensors with a fractional alpha or beta scale by the float "
           "values (the CPU truncates them first; silent)", case_probe(_int_addmm), ("int_addmm",),
           found=MEASURED, rules=("_fractional_scalars",)),
)
