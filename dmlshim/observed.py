"""Defects seen on the real torch-directml 0.2.5 binary (issue 25), as data.

Measured with the real binary under ``dmlshim realdml run`` (float32), each against the
CPU; the evidence, and which public report each matches: docs/defects.md ("Upsampling",
"PReLU").  The probes reuse :func:`dmlshim.reported._probe` (fixes stand aside, the CPU's
answer compared within a GPU's rounding).  ``prelu_channels`` aborts the process, so it is
static: the abort is a check in torch-directml's host code (``dml_tensor_desc.cc``), the
same on every adapter, so a probe in a child process could only confirm it, at the price of
a second torch-directml start.
"""
from __future__ import annotations

from typing import Tuple

import torch
import torch.nn.functional as F

from .defects import Defect
from .reported import _probe


def _bilinear(device):
    """Bilinear 2x of a 3x5 ramp (DirectML#482), after align_corners=True on the same shape."""
    x = torch.arange(15.0).view(1, 1, 3, 5).to(device)
    corners = F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=True)
    return corners, F.interpolate(x, scale_factor=2, mode="bilinear")


def _nearest(device):
    """Nearest 1.7x of a 17-pixel row by scale, then the same shape by size."""
    x = torch.arange(17.0).view(1, 1, 1, 17).to(device)
    return (F.interpolate(x, scale_factor=(1.0, 1.7), mode="nearest"),
            F.interpolate(x, size=(1, 28), mode="nearest"))


def _repeat_5d(device):
    """A 5-D `repeat` (FunASR's CTC prefix scorer)."""
    x = torch.arange(12.0).view(1, 2, 1, 2, 3).to(device)
    return x.repeat(2, 1, 3, 1, 1)


def _storage_scatter(device):
    """`diagonal_scatter` of a 3x3 zero matrix and a row of ones."""
    return torch.diagonal_scatter(torch.zeros(3, 3).to(device), torch.ones(3).to(device))


def _conv_refused(device):
    """A 1x1x1 `conv3d` of a 1x1x2x2x2 ramp."""
    x = torch.arange(8.0).view(1, 1, 2, 2, 2).to(device)
    return F.conv3d(x, torch.full((1, 1, 1, 1, 1), 2.0).to(device))


def _avg_pool_refused(device):
    """`avg_pool2d` of a 4x4 ramp with `divisor_override=2`."""
    x = torch.arange(16.0).view(1, 1, 4, 4).to(device)
    return F.avg_pool2d(x, 2, divisor_override=2)


def _zero_size_refused(device):
    """`mm` of a 0x2 and a 2x3 matrix."""
    return torch.mm(torch.ones(0, 2).to(device), torch.ones(2, 3).to(device))


def _int_math_refused(device):
    """`log2` of an int64 ramp."""
    return torch.log2(torch.arange(1, 5).to(device))


def _scatter_partial(device):
    """`scatter_add` into a 3x2 zero matrix from a 2x2 index (dim 1)."""
    index = torch.tensor([[0, 1], [1, 0]]).to(device)
    return torch.zeros(3, 2).to(device).scatter_add(1, index, torch.ones(2, 2).to(device))


def _fallback_out(device):
    """`torch.eye(3)` made on the device."""
    return torch.eye(3, device=device)


def _max_pool_ceil(device):
    """`max_pool2d` of a 1x1x3x6 ramp, kernel 3, stride 2, `ceil_mode=True`."""
    return torch.nn.functional.max_pool2d(torch.arange(18.0).view(1, 1, 3, 6).to(device), 3, 2,
                                          ceil_mode=True)


def _adaptive_pool(device):
    """`adaptive_avg_pool1d` of an 8-value ramp of squares to 3."""
    return F.adaptive_avg_pool1d((torch.arange(8.0) ** 2).view(1, 1, 8).to(device), 3)


def _masked_select(device):
    """`masked_select` of `arange(3)` under a 2x3 mask."""
    mask = torch.tensor([[True, False, True], [False, True, True]])
    return torch.masked_select(torch.arange(3.0).to(device), mask.to(device))


def _pad_negative(device):
    """`F.pad(x, (-1, 1), "replicate")` of a 6-value ramp."""
    return F.pad(torch.arange(6.0).view(1, 1, 6).to(device), (-1, 1), mode="replicate")


def _pad_zero(device):
    """`F.pad(x, (0, 0))` of a 2x3 ramp (nothing to pad)."""
    return F.pad(torch.arange(1.0, 7.0).view(2, 3).to(device), (0, 0))


def _copy_to_cpu(device):
    """A device row copied into a slice of a CPU tensor, and into an int64 one (its dtype kept)."""
    out, ints = torch.zeros(2, 3), torch.zeros(3, dtype=torch.int64)
    out[1].copy_(torch.arange(1.0, 4.0).to(device))
    ints.copy_(torch.arange(1.0, 4.0).to(device))
    return out, ints


def _out_resize(device):
    """`torch.mul` of a 2x3 ramp into an empty `out=`, and whether a float times a bool into a
    bool `out=` is refused (the CPU: a 2x3 result, and "result type Float can't be cast")."""
    x = torch.arange(6.0).view(2, 3).to(device)
    out = torch.mul(x, 2, out=torch.empty(0, device=device))
    try:
        torch.mul(x, x > 2, out=torch.empty(2, 3, dtype=torch.bool, device=device))
    except RuntimeError:
        return out, torch.tensor(True)
    return out, torch.tensor(False)


def _batched_tril_triu(device):
    """`triu` and `tril` of a 1x3x4 ramp (the defect: `[0, 3]` dropped, and kept)."""
    x = torch.arange(1.0, 13.0).view(1, 3, 4).to(device)
    return x.triu(), x.tril()


def _scatter_repeated(device):
    """`scatter_add` into 10s of `[1, 2, 3]` at `[0, 1, 1]` (the CPU: `[11, 15, 10]`)."""
    index = torch.tensor([0, 1, 1]).to(device)
    return torch.full((3,), 10.0).to(device).scatter_add(0, index, torch.arange(1.0, 4.0).to(device))


def _channels_last(device):
    """A 1x2x2x3 ramp moved to the device in channels-last format, and its strides."""
    x = torch.arange(12.0).view(1, 2, 2, 3).to(device).to(memory_format=torch.channels_last)
    return x, torch.tensor(x.stride())


def _combinations(device):
    """`torch.combinations` of a 3-value ramp, r = 2."""
    return torch.combinations(torch.arange(3.0).to(device), 2)


def _int_broadcast(device):
    """`floor_divide` of a 2x3 int64 ramp by a row of 3."""
    return torch.floor_divide((torch.arange(1, 7) * 10).view(2, 3).to(device), torch.tensor([1, 2, 3]).to(device))


def _int_range(device):
    """`x + 1` and `x.clone()` of int64 `[2**24 + 1, 2**40 + 5]` (the defect: `[2**24, 6]` and
    `[2**24 + 1, 5]`)."""
    x = torch.tensor([2 ** 24 + 1, 2 ** 40 + 5]).to(device)
    return x + 1, x.clone()


# NEW (issue 40): the empty_reduction and pad_value probes
def _empty_reduction(device):
    """`sum` over the empty dimension of a 0x3 tensor, after a ramp of 64 values written
    (the defect: three of them)."""
    (torch.arange(64.0) - 7).to(device).mul(3)
    return torch.sum(torch.empty(0, 3).to(device), 0)



def _pad_value(device):
    """`constant_pad_nd` of a 1x3 ramp by (1, 1) with 0, then with 2.0 (the defect: 0 both
    times). Value 0 first: the fix pads with 0 only, so the operator the probe leaves behind
    agrees with it."""
    x = (torch.arange(3.0).view(1, 3) + 10).to(device)
    return torch.constant_pad_nd(x, (1, 1), 0.0), torch.constant_pad_nd(x, (1, 1), 2.0)


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


def _var_correction(device):
    """`var()` of a 2x3 ramp of squares (no dim, no correction)."""
    return (torch.arange(6.0).view(2, 3) ** 2).to(device).var()


def _dropout_backward(device):
    """`native_dropout_backward` (dropout's gradient) of a 2x3 ramp under a mask, scale 2, as
    float32 (the defect's bool compared by value)."""
    mask = torch.tensor([[True, False, True], [False, True, True]])
    return torch.ops.aten.native_dropout_backward((torch.arange(6.0).view(2, 3) - 2.5).to(device),
                                                  mask.to(device), 2.0).to(torch.float32)


def _int_addmm(device):
    """`addmm` of 2x2 int64 ramps with `alpha=1.5, beta=0.5` (the CPU: 1 and 0)."""
    m = torch.arange(4).view(2, 2).to(device)
    return torch.addmm(m, m, m, alpha=1.5, beta=0.5)


def _vector_norm(device):
    """`vector_norm` of a 2x3 ramp, ord 3, dim 1, and the ramp after it (the defect: cubed)."""
    x = (torch.arange(6.0).view(2, 3) - 2).to(device)
    return torch.linalg.vector_norm(x, 3, 1), x


def _cdist(device):
    """`cdist` of two 2x3 ramps, p = 1 (the defect: a [2, 3] result)."""
    x = torch.arange(6.0).view(2, 3)
    return torch.cdist(x.to(device), (x * x).to(device), p=1)


def _conv_transpose_padding(device):
    """`conv_transpose1d` of a 1x1x4 ramp, stride 2, `output_padding=1` (its last value: bias)."""
    x = torch.arange(1.0, 5.0).view(1, 1, 4).to(device)
    return F.conv_transpose1d(x, torch.ones(1, 1, 3).to(device), torch.tensor([0.5]).to(device),
                              stride=2, output_padding=1)


def _batch_norm_stats(device):
    """`native_batch_norm`'s saved statistics in eval mode and of one channel in training."""
    x, stats = torch.arange(6.0).view(3, 1, 2).to(device), torch.ones(1).to(device)
    aten = torch.ops.aten
    return (*aten.native_batch_norm(x, None, None, stats, stats, False, 0.1, 1e-5)[1:],
            *aten.native_batch_norm(x, None, None, None, None, True, 0.1, 1e-5)[1:])


def _softplus_beta(device):
    """`softplus` of a ramp with `beta=3, threshold=0.2` (OpInfo's)."""
    return F.softplus(torch.linspace(-1, 1, 21).to(device), beta=3, threshold=0.2)


def _avg_pool_ceil(device):
    """`avg_pool1d` of a 9-value ramp, kernel 3, stride 3, padding 1, `ceil_mode=True`."""
    return F.avg_pool1d(torch.arange(1.0, 10.0).view(1, 1, 9).to(device), 3, 3, 1, ceil_mode=True)


def _offset_views(device):
    """In-place writes through views of an offset view (`x[1:].t()`, `x[1:][0:2]`) and through
    a `split` chunk, read back from the base; and a view taken before its base changes."""
    x = torch.arange(12.0).view(3, 4).to(device)
    x[1:].t()[0].mul_(-1)
    x[1:][0:1].add_(10)
    x.split(1)[2].zero_()
    view = x[1:].t()
    x.add_(0.5)
    return x, view.clone()


_REFUSED = "the real 0.2.5 binary (no public report)"
OBSERVED: Tuple[Defect, ...] = (
    Defect("upsample_bilinear", "#21", "microsoft/DirectML#482; the real 0.2.5 binary",
           "bilinear interpolate: align_corners=False without the half-pixel offset; a shape's "
           "first align_corners sticks (silent)", _probe(_bilinear), ("upsample_bilinear",)),
    Defect("upsample_nearest", "#60", "the real 0.2.5 binary (no public report)",
           "nearest interpolate at a non-integer scale: some pixels from the one before; a "
           "shape's first scale sticks (silent)", _probe(_nearest), ("upsample_nearest",)),
    Defect("repeat_5d", "#61", "Comfy-Org/ComfyUI#5860; the real 0.2.5 binary",
           "Tensor.repeat with more than 4 dimensions: 'the dimesion of at::Tensor must be 4 "
           "or lower, but got 5'", _probe(_repeat_5d), ("repeat",)),
    Defect("offset_views", "#62", "the real 0.2.5 binary (no public report)",
           "a view of a view with an offset (`x[1:].t()`, `x[1:][0:2]`, `x[2][0:4]`) and split's "
           "chunks are copies: writes through them are lost (silent)", _probe(_offset_views),
           ("offset_views",)),
    # static: probing it would abort the process
    Defect("prelu_channels", "#29", "microsoft/DirectML#271, #445; the real 0.2.5 binary",
           "nn.PReLU(C) on a 4-D/5-D input aborts the process ('rank <= "
           "DML_TENSOR_DIMENSION_COUNT_MAX'); 3-D raises", None, ("prelu",)),
    # refused calls (patches/refused.py): each raises on the device where the CPU computes
    Defect("storage_scatter", "none", _REFUSED,
           "diagonal/select/slice/as_strided_scatter: 'self.has_storage() INTERNAL ASSERT "
           "FAILED'", _probe(_storage_scatter), ("refused:storage_scatter",)),
    Defect("conv_refused", "none", _REFUSED,
           "convolution of a 5-D input ('input must be 4-dimensional'), of integers, and some "
           "transposed grouped dilated ones (E_INVALIDARG)", _probe(_conv_refused),
           ("refused:conv_refused",)),
    Defect("avg_pool_refused", "none", _REFUSED,
           "avg_pool2d/3d with divisor_override ('Divisor override isn't supported for "
           "DirectML.') or of integers (E_INVALIDARG)", _probe(_avg_pool_refused),
           ("refused:avg_pool_refused",)),
    Defect("zero_size_refused", "none", _REFUSED,
           "mm/addmm with a zero-size operand, index_select of a 0-dim tensor, gather with an "
           "empty index, repeat/tile with an empty result (E_INVALIDARG), adaptive_avg_pool2d of "
           "an empty batch", _probe(_zero_size_refused),
           ("refused:zero_size_refused",)),
    Defect("int_math_refused", "none", _REFUSED,
           "log10/log2/isnan/isinf (E_INVALIDARG) and sinc (CreateOperator) of integer or bool "
           "tensors", _probe(_int_math_refused), ("refused:int_math_refused",)),
    Defect("scatter_partial", "none", _REFUSED,
           "scatter/scatter_add with an index smaller than self outside dim: 'DirectML scatter "
           "doesn't allow partially modified dimensions'", _probe(_scatter_partial),
           ("refused:scatter_partial",)),
    Defect("fallback_out", "none", _REFUSED,
           "eye, kthvalue, median/nanmedian(dim), linalg.lstsq return shape [0]: the CPU fallback "
           "does not grow their empty out= (silent)", _probe(_fallback_out), ("fallback_out",)),
    Defect("adaptive_pool", "none", _REFUSED,
           "adaptive_avg_pool (and interpolate 'area') off DirectML's window grid (stride = in // "
           "out, kernel = in - (out-1)*stride) or upsampling (silent)", _probe(_adaptive_pool),
           ("adaptive_pool",)),
    Defect("masked_select_broadcast", "none", _REFUSED,
           "masked_select with an input that broadcasts to the mask: too few values (silent)",
           _probe(_masked_select), ("masked_select",)),
    Defect("pad_negative", "none", _REFUSED,
           "replicate pad with a negative begin pad: the last value everywhere (silent); constant "
           "pad with mixed signs refused", _probe(_pad_negative), ("pad_negative",)),
    Defect("pad_zero", "#63", _REFUSED,
           "F.pad/constant_pad_nd with every pad 0: a tensor never written (zeros or stale values; "
           "silent)", _probe(_pad_zero), ("pad_zero",)),
    Defect("copy_to_cpu", "#64", _REFUSED,
           "copy_ from the device into a CPU tensor gives it new storage in the source's dtype: "
           "a CPU view or slice written so, and every alias, keeps its values (silent)",
           _probe(_copy_to_cpu), ("copy_to_cpu",)),
    Defect("out_resize", "#65", _REFUSED,
           "an out= tensor of the wrong size is not resized: an empty one stays empty, another "
           "stays as it was (silent), is refused, or the process aborts (mm, cat, sort, fft ...); "
           "an out= dtype the result cannot be cast to is not refused", _probe(_out_resize),
           ("out_resize",)),
    # static: probing it would end the process
    Defect("flip_dims", "none", _REFUSED,
           "flip with a negative dim (x.flip(-1)) or of a 0-dim tensor ends the process (signal 11)",
           None, ("flip_dims",)),
    Defect("bmm_cpu_operand", "none", _REFUSED,
           "bmm/baddbmm (and matmul of 3-D tensors) with a CPU operand end the process (terminate: "
           "c10::Error from DMLTensor.cpp:30)", None, ("bmm_cpu_operand",)),
    Defect("batched_tril_triu", "none", _REFUSED,
           "tril/triu of 3-D and 4-D inputs keep the wrong diagonals (silent; a 1x3x4 triu() drops "
           "[0, 3]); of 5-D refused (E_INVALIDARG)", _probe(_batched_tril_triu), ("batched_tril_triu",)),
    Defect("scatter_repeated", "none", _REFUSED,
           "scatter_add and scatter(reduce=) with an index repeated along dim write the place once: "
           "self plus the last value (silent); an index longer than self along dim refused "
           "(E_INVALIDARG)", _probe(_scatter_repeated), ("scatter_repeated",)),
    Defect("channels_last", "none", _REFUSED,
           "memory_format=channels_last (or channels_last_3d) for a device tensor: 'memory_format' "
           "argument is must be Contiguous for DML tensors' (to, clone, empty, empty_like, Module.to)",
           _probe(_channels_last), ("channels_last", "dispatcher:_to_copy")),
    Defect("combinations", "none", _REFUSED,
           "torch.combinations: 'The size of tensor a (n) must match the size of tensor b (0)', "
           "CreateOperator for one element (its C++ composite only)", _probe(_combinations),
           ("combinations",)),
    Defect("int_broadcast", "none", _REFUSED,
           "binary ops of operands of different ranks, one of them cast (integer div/remainder/"
           "floor_divide/atan2/pow; add, mul, lt ... of mixed dtypes): the smaller one read as its "
           "first value (silent)", _probe(_int_broadcast), ("int_broadcast", "dispatcher:rsub")),
    Defect("int_range", "none", _REFUSED,
           "integer add/sub/mul with a number, neg, pow, floor_divide/remainder and mm compute in "
           "float32: wrong past 2**24, saturated past int32 (one-byte dtypes past theirs); int64 clone, "
           "sub, maximum, clamp, sort read values past int32 by their low 32 bits (silent)",
           _probe(_int_range), ("int_range", "dispatcher:rsub")),
    Defect("bool_minmax", "none", _REFUSED, "max()/min() of a bool tensor return int32 (values right)",
           _probe(_bool_minmax), ("bool_minmax",)),
    Defect("empty_unary", "none", _REFUSED,
           "log2/log10 of empty float16 give float32, sinc of empty integers their dtype, pow (square) "
           "with an empty int64 or bool result int32, bitwise_not of empty bool shape [0]; out=/in place "
           "get that tensor back (silent)", _probe(_empty_unary), ("empty_unary",)),
    Defect("bool_exp2", "none", _REFUSED,
           "exp2 of a bool tensor, pow of a number to a bool exponent (ldexp's composite) give 1 "
           "everywhere (silent)", _probe(_bool_exp2), ("bool_exp2",)),
    Defect("int_pow_zero", "none", _REFUSED,
           "integer pow of a zero base to a negative exponent gives the int32 maximum (the CPU: 0; "
           "silent)", _probe(_int_pow_zero), ("int_pow_zero",)),
    Defect("linspace_int", "none", _REFUSED,
           "linspace of an integer dtype truncates the step (silent); of bool with a negative start "
           "'value cannot be converted to type uint8_t'", _probe(_linspace_int), ("linspace_int",)),
    Defect("arange_float32", "none", _REFUSED,
           "arange's length computed in float32: arange(2**24, 2**24 + 5) has 4 values, past 2**31 "
           "none, fractional steps one more or fewer (silent)", _probe(_arange_float32), ("arange_float32",)),
    Defect("unique_bytes", "none", _REFUSED,
           "unique of bool/uint8/int8 drops the zeros (silent); of an input of 2 or more dimensions "
           "aborts the process", _probe(_unique_bytes), ("unique_bytes",)),
    Defect("var_correction", "none", _REFUSED,
           "var()/std_mean() over every dimension without a correction divide by n, not n - 1; "
           "dim=[] gives inf, keepdim a 0-dim result (silent)", _probe(_var_correction), ("var_correction",)),
    Defect("dropout_backward", "none", _REFUSED,
           "native_dropout_backward (dropout's gradient) returns bool: the gradient truncated, != 0, "
           "and the mask; the scale lost (silent)", _probe(_dropout_backward), ("dropout_backward",)),
    Defect("int_addmm", "none", _REFUSED,
           "addmm/baddbmm of integer tensors with a fractional alpha or beta scale by the float "
           "values (the CPU truncates them first; silent)", _probe(_int_addmm), ("int_addmm",)),
    Defect("vector_norm", "none", _REFUSED,
           "linalg_vector_norm/norm with an ord other than 0, 1, 2 overwrite the input with abs(x)**ord; "
           "float16 powers and sums in float16 (dist(p=4) saturates at 15.99), dtype= ignored; keepdim "
           "over every dimension gives 0-dim (silent)", _probe(_vector_norm), ("vector_norm",)),
    Defect("cdist", "none", _REFUSED,
           "_cdist_forward (cdist with p != 2) of inputs that are not 3-D: a 2-D pair read as a batch of "
           "rows of scalars (shape [P, M]) or 'The size of tensor a must match' (silent or refused)",
           _probe(_cdist), ("cdist",)),
    Defect("conv_transpose_padding", "none", _REFUSED,
           "transposed convolution with an output_padding: its last output_padding positions zero, the "
           "bias too; the backward's input gradient zero there, the weight gradient wrong (silent)",
           _probe(_conv_transpose_padding), ("conv_transpose_padding",)),
    Defect("batch_norm_stats", "none", _REFUSED,
           "native_batch_norm in eval mode returns the running statistics as save_mean/save_invstd (the "
           "CPU: empty), one channel in training 0-dim ones; its backward 0-dim weight/bias gradients "
           "for one channel (autograd refuses them)", _probe(_batch_norm_stats), ("batch_norm_stats",)),
    Defect("softplus_beta", "none", _REFUSED,
           "softplus with beta != 1 takes the linear branch where x > threshold, not x * beta > "
           "threshold (silent), beta < 1 refused (E_INVALIDARG); softplus_backward has no linear branch "
           "(silent, NaN where exp overflows)", _probe(_softplus_beta),
           ("softplus_beta",)),
    Defect("avg_pool_ceil", "none", _REFUSED,
           "avg_pool with ceil_mode=True and count_include_pad=True divides a last window past the "
           "padded input by the whole kernel (silent)", _probe(_avg_pool_ceil), ("avg_pool_ceil",)),
    Defect("max_pool_ceil", "none", _REFUSED,
           "max_pool2d with ceil_mode=True: floor mode's shape, other indices, gradients elsewhere "
           "(silent)", _probe(_max_pool_ceil), ("max_pool_ceil",)),
    # NEW (issue 40, conformance over every OpInfo sample): static, probing would end the process
    Defect("sort_scalar", "none", _REFUSED,
           "sort of a 0-dim tensor gives 0 (silent); of a 0-dim or empty tensor its out= kernel returns "
           "invalid tensors, which end the process when read (signal 11)", None, ("sort_scalar",)),
    Defect("pad_value", "none", _REFUSED,
           "constant_pad_nd (F.pad 'constant') keeps the pad value of its first call per input shape, pads "
           "and dtype (silent); an empty input refused (CreateOperator)", _probe(_pad_value), ("pad_value",)),
    Defect("empty_reduction", "none", _REFUSED,
           "sum over an empty dimension, prod/mean/norm/logsumexp of an empty input return device memory "
           "never written (silent)", _probe(_empty_reduction), ("empty_reduction",)),
)
