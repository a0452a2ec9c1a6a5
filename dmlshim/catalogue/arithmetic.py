"""Element-wise math and reductions with a wrong dtype, shape or value: float x bool,
bool min/max/exp2, empty unary results, var, vector norms, cdist."""
from __future__ import annotations

from typing import Tuple

import torch

from .defect import CATALOGUE, MEASURED, NO_REPORT, Defect, Verdict
from .probes import case_probe, compare

TOPIC = "Arithmetic and reductions"


def probe_float_times_bool(device) -> Verdict:
    """`f32[3] * bool[3]`: dtype and values"""
    x, mask = torch.tensor([1.5, -2.0, 3.0]), torch.tensor([True, False, True])
    return compare(x.to(device) * mask.to(device), x * mask)


def _bool_minmax(device):
    """`max()` of a bool mask, added to itself (bool: True; the int32 of the defect: 2)."""
    top = torch.tensor([[True, False], [False, False]]).to(device).max()
    return top + top


def _empty_unary(device):
    """`bitwise_not` of an empty 1x0x3 bool tensor, and the element size of `log2` of an empty
    float16 one (the defect: shape [0], and float32's 4)."""
    empty = torch.empty(1, 0, 3)
    return (torch.bitwise_not(empty.bool().to(device)),
            torch.tensor(torch.log2(empty.half().to(device)).element_size()))


def _bool_exp2(device):
    """`exp2` of `[True, False]` (the defect: `[1., 1.]`)."""
    return torch.exp2(torch.tensor([True, False]).to(device))


def _var_correction(device):
    """`var()` of a 2x3 ramp of squares (no dim, no correction)."""
    return (torch.arange(6.0).view(2, 3) ** 2).to(device).var()


def _vector_norm(device):
    """`vector_norm` of a 2x3 ramp, ord 3, dim 1, and the ramp after it (the defect: cubed)."""
    x = (torch.arange(6.0).view(2, 3) - 2).to(device)
    return torch.linalg.vector_norm(x, 3, 1), x


def _empty_reduction(device):
    """`sum` over the empty dimension of a 0x3 tensor, after a ramp of 64 values written
    (the defect: three of them)."""
    (torch.arange(64.0) - 7).to(device).mul(3)
    return torch.sum(torch.empty(0, 3).to(device), 0)


def _cdist(device):
    """`cdist` of two 2x3 ramps, p = 1 (the defect: a [2, 3] result)."""
    x = torch.arange(6.0).view(2, 3)
    return torch.cdist(x.to(device), (x * x).to(device), p=1)


def _empty_broadcast(device):
    """`sub` of an empty float32 0x1x3 and 0x10x3 (the defect: 'The size of tensor a (0) must
    match')."""
    return torch.sub(torch.ones(0, 1, 3).to(device), torch.ones(0, 10, 3).to(device))


def _nan_reductions(device):
    """Whether `amax` of `[1, nan, 3]` is NaN, and its `argmax` (the defect: False and 2; the CPU:
    True and 1)."""
    x = torch.tensor([1.0, float("nan"), 3.0]).to(device)
    return torch.isnan(torch.amax(x)), torch.argmax(x)


def _nan_sort(device):
    """`sort`'s indices of `[0, 1, nan]`, and where `log_softmax` of `[0, nan]` is NaN (the defect:
    `[2, 0, 1]` and `[False, True]`; the CPU: `[0, 1, 2]` and `[True, True]`)."""
    nan = float("nan")
    return (torch.sort(torch.tensor([0.0, 1.0, nan]).to(device)).indices,
            torch.isnan(torch.log_softmax(torch.tensor([0.0, nan]).to(device), 0)))


DEFECTS: Tuple[Defect, ...] = (
    Defect("float_times_bool", "#17", "microsoft/DirectML#686, #737",
           "float * bool returns a bool tensor (values lost, silently)",
           probe_float_times_bool, ("mul",), found=CATALOGUE,
           rules=("_bool_times_other",)),
    Defect("bool_minmax", "none", NO_REPORT, "max()/min() of a bool tensor return int32 (values right)",
           case_probe(_bool_minmax), ("bool_minmax",), found=MEASURED, rules=("_as_int32",)),
    Defect("empty_unary", "none", NO_REPORT,
           "log2/log10 of empty float16 give float32, sinc of empty integers their dtype, pow (square) "
           "with an empty int64 or bool result int32, bitwise_not of empty bool shape [0]; out=/in place "
           "get that tensor back (silent)", case_probe(_empty_unary), ("empty_unary",), found=MEASURED,
           rules=("_dml_empty",)),
    Defect("bool_exp2", "none", NO_REPORT,
           "exp2 of a bool tensor, pow of a number to a bool exponent (ldexp's composite) give 1 "
           "everywhere (silent)", case_probe(_bool_exp2), ("bool_exp2",), found=MEASURED,
           rules=("_bool_exponent",)),
    Defect("var_correction", "none", NO_REPORT,
           "var()/std_mean() over every dimension without a correction divide by n, not n - 1; "
           "dim=[] gives inf, keepdim a 0-dim result (silent)", case_probe(_var_correction),
           ("var_correction",), found=MEASURED, rules=("_no_dim_no_correction",)),
    Defect("vector_norm", "none", NO_REPORT,
           "linalg_vector_norm/norm with an ord other than 0, 1, 2 overwrite the input with abs(x)**ord; "
           "float16 powers and sums in float16 (dist(p=4) saturates at 15.99), dtype= ignored; keepdim "
           "over every dimension gives 0-dim (silent)", case_probe(_vector_norm), ("vector_norm",),
           found=MEASURED, rules=("_norm_case",)),
    Defect("cdist", "none", NO_REPORT,
           "_cdist_forward (cdist with p != 2) of inputs that are not 3-D: a 2-D pair read as a batch of "
           "rows of scalars (shape [P, M]) or 'The size of tensor a must match' (silent or refused); 3-D inputs "
           "whose result has no elements (an empty batch) refused",
           case_probe(_cdist), ("cdist",), found=MEASURED, rules=("_cdist_not_3d", "_cdist_empty_3d")),
    # found by conformance over every OpInfo sample (issue 40, docs/conformance.md)
    Defect("empty_reduction", "none", NO_REPORT,
           "sum over an empty dimension, prod/mean/norm/logsumexp of an empty input return device memory "
           "never written (silent)", case_probe(_empty_reduction), ("empty_reduction",), found=MEASURED,
           rules=("_empty_reduced", "_empty_summed")),
    Defect("empty_broadcast", "none", NO_REPORT,
           "sub/rsub of float32 (isclose, diff), bitwise_xor, in-place add_/sub_/mul_/div_/pow_/bitwise_or_ ... "
           "with an operand of no elements raise 'The size of tensor a (0) must match' where the result's "
           "last dimension is past 1 (the operand broadcast as [0])", case_probe(_empty_broadcast),
           ("empty_broadcast",), found=MEASURED, rules=("_flattened_empty",)),
    Defect("nan_reductions", "none", NO_REPORT,
           "amax/max/min (all and dim) skip NaN (a slice of NaN only: -inf/inf), argmax/argmin and max/min's "
           "indices take a NaN only in first place, logsumexp of -inf only or with +inf gives NaN, vector_norm "
           "ord inf/-inf skips NaN (silent)",
           case_probe(_nan_reductions), ("nan_reductions",), found=MEASURED, rules=("_nan_blind", "_dml_vector_norm")),
    Defect("nan_sort", "none", NO_REPORT,
           "sort/argsort/msort/topk of a float tensor holding NaN place NaN among the values (a merge sort "
           "whose comparisons with NaN are false; the CPU: NaN largest, after +inf); log_softmax of a slice "
           "holding NaN or +inf gives values at its other positions where the CPU has NaN (silent)",
           case_probe(_nan_sort), ("nan_sort",), found=MEASURED, rules=("_nan_sorted", "_nan_log_softmax")),
)
