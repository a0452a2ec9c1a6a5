"""The emulator's rules for the calls the real torch-directml 0.2.5 binary refuses, for
the empty results of its CPU fallback's ``out=`` (``patches/fallback_out.py``) and for
``max_pool2d``'s ``ceil_mode`` (``patches/max_pool_ceil.py``).

Measured with OpInfo's samples under ``realdml run`` (docs/realdml.md); fixed by
``dmlshim.patches.refused`` (its docstring lists the groups), probed by the defects of
``dmlshim.catalogue``.  Each rule raises the real binary's error where the measured
samples failed; E_INVALIDARG is raised with Windows' text ("The parameter is
incorrect."), which the real binary renders as ``Unknown error -2147024809`` on Linux.
The ``*_scatter`` ops' ``has_storage()`` assert (``storage_scatter``) is ``rules.observed_rules``'
(the emulator registers kernels for those composites: ``opaque.STRIDED_CLONES``).
Not modelled: which transposed
convolutions fail (seen for stride 3, groups 2, dilation 4, output_padding 2; the
conditions are not isolated).
"""
from __future__ import annotations

import dataclasses
import functools

import torch

from ..laws import broadcast, integers, norms, pooling, ranks
from ..laws import empty as empty_law
from ..laws import nan as nan_law
from ..laws.empty import empty
from .routing import op_name
from . import _backend
from .fatal import RANK_ABORT, FatalDirectMLError

SOURCE = "measured on the real torch-directml 0.2.5 binary (OpInfo samples), no public report: {}"
DIVISOR_MESSAGE = "Divisor override isn't supported for DirectML."
SCATTER_MESSAGE = ("DirectML scatter doesn't allow partially modified dimensions. Please update the "
                   "dimension so that the indices and input only differ in the provided dimension.")
MIXED_PADS = ("torch-dml currently doesn't support a mix of positive and negative padding values, "
              "must be all positive or all negative.")
CREATE_OPERATOR = "m_device->CreateOperator(&opDesc, IID_PPV_ARGS(&op))"


def _integer(self, *_, **__):
    """An integer or bool tensor (DirectML's kernel takes float16/float32)."""
    return not self.is_floating_point() and not self.is_complex()


def _five_dims(input, *_, **__):
    return input.dim() == 5


def _integer_input(input, *_, **__):
    """Integers: bool has its own rule (rules.default_rules, E_INVALIDARG too)."""
    return _integer(input) and input.dtype != torch.bool


def _divisor_override(self, kernel_size, stride=(), padding=0, ceil_mode=False,
                      count_include_pad=True, divisor_override=None, **_):
    return divisor_override is not None


def _mm_zero_size(self, mat2, **_):
    return self.numel() == 0 or mat2.numel() == 0


def _addmm_zero_size(self, mat1, mat2, *_, **__):
    return mat1.numel() == 0 or mat2.numel() == 0


def _zero_dim(self, *_, **__):
    return self.dim() == 0


def _empty_index(self, dim, index, *_, **__):
    return index.numel() == 0


def _empty_repeat(self, repeats):
    """An empty input or a zero repeat: the result has no elements."""
    return self.numel() == 0 or 0 in [int(r) for r in repeats]


def _empty_batch(self, *_, **__):
    return self.dim() == 4 and self.size(0) == 0


def _empty_batch_message(self, *_, **__):
    return (f"adaptive_avg_pooling2d(): expected input to have non-empty spatial dimensions, but "
            f"input has sizes {list(self.shape)} with dimension 0 being empty")


def _partial(self, dim, index, *_, **__):
    """The index differs from ``self`` in a dimension other than ``dim``; a negative
    ``dim`` is compared as given (``one_hot``'s ``scatter_(-1, ...)`` of a 1-D result fails)."""
    return index.dim() == self.dim() and any(
        index.size(d) != self.size(d) for d in range(self.dim()) if d != dim)


FALLBACK_OUT_OPS = ("eye.out", "eye.m_out", "kthvalue.values", "median.dim_values",
                    "nanmedian.dim_values", "linalg_lstsq.out")


def _outs(kwargs):
    return [v for k, v in kwargs.items() if isinstance(v, torch.Tensor) and k in
            ("out", "values", "indices", "solution", "residuals", "rank", "singular_values")]


def _empty_out(*_, **kwargs):
    """torch's composites pass an empty ``out``; the CPU fallback leaves it so."""
    return any(o.numel() == 0 for o in _outs(kwargs))


def _outs_unchanged(*_, **kwargs):
    outs = _outs(kwargs)
    return outs[0] if len(outs) == 1 else tuple(outs)


def _ceil_mode(self, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False, **_):
    return ceil_mode


def _floor_mode(self, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False,
                out=None, indices=None):
    """The real binary's 2-D answer: ceil_mode ignored (its 1-D indices and the backward are
    wrong in ways not modelled); into ``out``/``indices`` when given (the ``.out`` overload)."""
    result = _backend.run_on_cpu(torch.ops.aten.max_pool2d_with_indices.default,
                                 (self, kernel_size, stride, padding, dilation, False), {})
    if out is None:
        return result
    for into, value in zip((out, indices), result):
        _backend.write_out(into, value)
    return out, indices


def _off_grid(self, output_size):
    sizes = self.shape[-len(output_size):]
    return not all(pooling.dml_windows_agree(int(i), int(o)) for i, o in zip(sizes, output_size))


def _grid(size, out, dtype):
    """DirectML's averaging matrix for one dimension: ``stride = size // out``, ``kernel =
    size - (out-1)*stride`` (measured); an upsampling (stride 0) averages everything."""
    stride = size // out
    kernel = size - (out - 1) * stride
    weights = torch.zeros(out, size, dtype=dtype)
    for j in range(out):
        weights[j, j * stride:j * stride + kernel] = 1.0 / kernel
    return weights


def _dml_adaptive_pool(self, output_size):
    """The real binary's grid (its upsampling returns an earlier call's values: modelled as
    the mean of the input)."""
    def pool(x, output_size):
        h, w = _grid(x.size(-2), output_size[0], x.dtype), _grid(x.size(-1), output_size[1], x.dtype)
        return h @ x @ w.t()
    return _backend.run_on_cpu(torch.ops.aten._adaptive_avg_pool2d.default, (self, output_size), {}, kernel=pool)


def _input_broadcasts(self, mask, *_, **__):
    return torch.broadcast_shapes(self.shape, mask.shape) != self.shape


def _dml_masked_select(self, mask):
    """The first ``self.numel()`` of the broadcast mask's True positions, each read from the
    flat input clamped to its end (measured: ``arange(3)`` under a 2x3 mask gives ``[0, 2, 2]``)."""
    def select(x, m):
        shape = torch.broadcast_shapes(x.shape, m.shape)
        where = m.expand(shape).reshape(-1).nonzero().flatten()[:x.numel()]
        return x.reshape(-1)[where.clamp(max=x.numel() - 1)]
    return _backend.run_on_cpu(torch.ops.aten.masked_select.default, (self, mask), {}, kernel=select)


def _negative_begin(self, padding):
    return any(int(p) < 0 for p in padding[0::2])


def _dml_replication_pad(self, padding):
    """Replication as index maps, one per dimension; a dimension with a negative begin pad
    reads the input's last value everywhere (measured); the others PyTorch's map, output ``j``
    reading input ``clamp(j - begin, 0, size - 1)``."""
    def pad(x, padding):
        for i in range(len(padding) // 2):
            dim, begin, end = x.dim() - 1 - i, int(padding[2 * i]), int(padding[2 * i + 1])
            size = x.size(dim)
            index = (torch.arange(size + begin + end) - begin).clamp(0, size - 1)
            x = x.index_select(dim, index.fill_(size - 1) if begin < 0 else index)
        return x
    op = getattr(torch.ops.aten, f"replication_pad{len(padding) // 2}d").default
    return _backend.run_on_cpu(op, (self, padding), {}, kernel=pad)


def _mixed_signs(self, pad, *_, **__):
    pad = [int(p) for p in pad]
    return min(pad) < 0 < max(pad)


def _r_positive(self, r=2, with_replacement=False):
    return r >= 1


def _combinations_message(self, r=2, with_replacement=False):
    if self.numel() == 1:
        return CREATE_OPERATOR
    return f"The size of tensor a ({self.numel()}) must match the size of tensor b (0) at non-singleton dimension 1"


def _ranks_differ(self, other, *_, **kwargs):
    return "out" not in kwargs and broadcast.ranks_differ(self, other)


def _ranks_and_dtypes_differ(self, other, *_, **kwargs):
    return "out" not in kwargs and broadcast.ranks_differ(self, other, integer_op=False)


@functools.lru_cache(maxsize=None)       # one function per op: rules compare equal across calls
def _first_value_of_the_smaller(op):
    """The real binary's answer: the operand of fewer dimensions read as its first value."""
    def replace(self, other, *args, **kwargs):
        def first(t, rank):
            return t.reshape(-1)[:1].expand(t.shape) if t.dim() < rank else t
        rank = max(self.dim(), other.dim())
        return _backend.run_on_cpu(op, (self, other) + args, kwargs,
                                   kernel=lambda a, b, *r, **k: op(first(a, rank), first(b, rank), *r, **k))
    return replace


def _int_broadcast_overloads():
    return [(op.name().split("::", 1)[1], op,
             _ranks_differ if op in broadcast.INTEGER_OPS else _ranks_and_dtypes_differ) for op in broadcast.OPS]


def _int_range_ops():
    return tuple(op.name().split("::", 1)[1] for op in integers.RULES)


def _bool_input(self, *rest, **kwargs):
    """max()/min() (no dim, no other) of a bool tensor."""
    return self.dtype == torch.bool and not rest and not kwargs


@functools.lru_cache(maxsize=None)
def _as_int32(op):
    """The real binary's answer to max()/min() of a bool tensor: the values, as int32."""
    def replace(self):
        return _backend.run_on_cpu(op, (self,), {}, kernel=lambda x: op(x).to(torch.int32))
    return replace


def _no_dim_no_correction(self, dim=None, *, correction=None, keepdim=False):
    """``var``/``std_mean`` over every dimension (``dim`` None or empty), no correction given."""
    return (dim is None or len(dim) == 0) and correction is None and self.dim() > 0


@functools.lru_cache(maxsize=None)
def _population(op):
    """The real binary's answer: the variance divided by n (correction 0)."""
    def replace(self, dim=None, *, correction=None, keepdim=False):
        return _backend.run_on_cpu(op, (self, None), {"correction": 0, "keepdim": keepdim}, kernel=op)
    return replace


def _dml_dropout_backward(grad, mask, scale):
    """The real binary's answer: float x bool ``mul``'s (the gradient truncated, ``!= 0``),
    and the mask; bool, the scale lost (measured)."""
    return _backend.run_on_cpu(torch.ops.aten.native_dropout_backward.default, (grad, mask, scale), {},
                               kernel=lambda g, m, s: (g.trunc() != 0) & m)


def _overload(name):
    packet, _, overload = name.partition(".")
    return getattr(getattr(torch.ops.aten, packet), overload or "default")


@functools.lru_cache(maxsize=None)
def _empty_differs(op):
    """An empty input (no ``out=``) whose answer the real binary gives another dtype or shape."""
    name = op.name().split("::", 1)[1].split(".")[0]

    def when(*args, **kw):
        if kw or not empty(args):
            return False
        x = args[0] if isinstance(args[0], torch.Tensor) else args[1]
        if name in ("log2", "log10"):
            return x.dtype == torch.float16
        if name == "sinc":
            return not (x.is_floating_point() or x.is_complex())
        if name == "pow":
            return torch.result_type(args[0], args[1]) == torch.int64
        return x.dtype == torch.bool and x.dim() != 1             # bitwise_not
    return when


@functools.lru_cache(maxsize=None)
def _dml_empty(op):
    """The real binary's answer to an empty input: float16 log2/log10 float32, integer sinc the
    input's dtype, an int64 pow int32, bool bitwise_not shape [0] (measured)."""
    name = op.name().split("::", 1)[1].split(".")[0]

    def replace(*args):
        def kernel(*a):
            result = op(*a)
            if name in ("log2", "log10"):
                return result.to(torch.float32)
            if name == "sinc":
                return result.to(a[0].dtype)
            if name == "pow":
                return result.to(torch.int32)
            return result.reshape(0)
        return _backend.run_on_cpu(op, args, {}, kernel=kernel)
    return replace


def _bool_exponent(*args, **kw):
    return not kw and integers.bool_exponent(integers.EXP2[0] if len(args) == 1 else None, args)


@functools.lru_cache(maxsize=None)
def _exponent_zero(op):
    """The real binary's answer to a bool exponent: read as 0 (ones)."""
    def replace(*args):
        def kernel(*a):
            return op(*a[:-1], torch.zeros_like(a[-1]))
        return _backend.run_on_cpu(op, args, {}, kernel=kernel)
    return replace


def _zero_to_negative(base, exponent, **kw):
    return (not kw and integers.zero_to_negative(base, exponent)
            and torch.result_type(base, exponent) in (torch.int32, torch.int64))


@functools.lru_cache(maxsize=None)
def _int32_max_for_zero(op):
    """The real binary's answer: 0 to a negative power is the int32 maximum (inf, saturated)."""
    def replace(base, exponent):
        def kernel(b, e):
            zero = (b == 0) & (e < 0) if isinstance(b, torch.Tensor) else torch.full_like(e, b == 0, dtype=torch.bool) & (e < 0)
            return op(b, e).masked_fill(zero, 2147483647)
        return _backend.run_on_cpu(op, (base, exponent), {}, kernel=kernel)
    return replace


def _integral_linspace(*_, out=None, **__):
    return out is not None and not (out.is_floating_point() or out.is_complex())


def _dml_linspace(start, end, steps, *, out):
    """The real binary's answer: the step truncated to the integer type, from the start only
    (``start + trunc((end - start) / (steps - 1)) * i``); bool refused for a value outside
    uint8 (measured)."""
    if out.dtype == torch.bool:
        if not all(0 <= float(v) <= 255 for v in (start, end)):
            raise RuntimeError("value cannot be converted to type uint8_t without overflow")
        value = torch.linspace(float(start), float(end), steps, dtype=torch.bool)
    else:
        step = int((float(end) - float(start)) / (steps - 1)) if steps > 1 else 0
        value = (int(float(start)) + step * torch.arange(steps)).to(out.dtype)
    out.resize_(value.shape).copy_(value)
    return out


def _arange_differs(start, end, step=1, *, out):
    return integers.arange_differs(start, end, step, out.dtype)


def _dml_arange(start, end, step=1, *, out):
    """The real binary's answer: the length from float32 (``laws.integers.float32_length``),
    the values as the CPU's from ``start``."""
    value = (float(start) + float(step) * torch.arange(integers.float32_length(start, end, step), dtype=torch.float64))
    out.resize_(value.shape).copy_(value.to(out.dtype))
    return out


def _unique_of_bytes(self, sorted=True, return_inverse=False, return_counts=False):
    return self.dtype in integers.BYTES and self.dim() < 2 and not (return_inverse or return_counts)


def _dml_unique(self, sorted=True, return_inverse=False, return_counts=False):
    """The real binary's answer: the values without the zeros (measured)."""
    def kernel(x, *a):
        values, inverse, counts = torch.ops.aten._unique2.default(x, *a)
        return values[values != 0], inverse, counts
    return _backend.run_on_cpu(torch.ops.aten._unique2.default, (self, sorted, return_inverse, return_counts), {},
                               kernel=kernel)


def _fractional_scalars(self, *_, alpha=1, beta=1):
    return integers.fractional(self, alpha, beta)


@functools.lru_cache(maxsize=None)
def _float_scalars(op):
    """The real binary's answer: ``beta * self + alpha * (mat1 @ mat2)`` with the float scalars,
    cast back (in place: into ``self``)."""
    def replace(self, mat1, mat2, *, beta=1, alpha=1):
        def scaled(s, m1, m2):
            value = (beta * s.double() + alpha * torch.matmul(m1, m2).double()).to(s.dtype)
            return s.copy_(value) if op._schema.is_mutable else value
        return _backend.run_on_cpu(op, (self, mat1, mat2), {"beta": beta, "alpha": alpha}, kernel=lambda *a, **k: scaled(*a))
    return replace


def _norm_case(self, *args, **kwargs):
    return norms.norm_differs((self,) + args, kwargs)


def _dml_vector_norm(self, *args, **kwargs):
    """The real binary's answer: for an ``ord`` other than 0, 1, 2 the input overwritten with
    ``|x| ** ord`` (``|x|`` for +-inf), the result in the input's dtype (``dtype=`` ignored), a
    float16 sum saturated at 65504 (``inf`` where a power overflows); ``keepdim`` over every
    dimension 0-dim.  The ``out=`` overloads return a new tensor for a finite such ``ord``,
    ``out`` left as it was; into ``out`` otherwise (measured)."""
    _, ord, dim, keepdim, dtype = norms.norm_arguments((self,) + args, kwargs)
    ord = 2 if ord is None else ord
    out = kwargs.get("out")

    def kernel(x):
        value = torch.linalg.vector_norm(x, ord, dim, keepdim, dtype=dtype)
        if ord in (float("inf"), float("-inf")) and x.is_floating_point():   # nan_reductions: NaN skipped
            blind = torch.where(torch.isnan(x), -ord, x.abs())
            dims = list(range(x.dim())) if dim is None or dim == [] else ([dim] if isinstance(dim, int) else list(dim))
            value = (blind.amax(dims, keepdim) if ord > 0 else blind.amin(dims, keepdim)).to(value.dtype)
        if norms.overwrites(ord):
            value = value.to(x.dtype)
            powered = x.abs() if ord in (float("inf"), float("-inf")) else x.abs().pow(ord)
            if x.dtype == torch.float16 and ord not in (float("inf"), float("-inf")):
                total = powered.float().sum(dim if dim is not None else [], keepdim)
                saturated = torch.where(total.isfinite(), total.clamp(max=65504.0), total).pow(1.0 / ord)
                value = torch.where(total > 65504.0, saturated.to(x.dtype), value)
            x.copy_(powered)
        return value.reshape(()) if norms.every_dim_kept(x, dim, keepdim) else value

    value = _backend.run_on_cpu(torch.ops.aten.linalg_vector_norm.default, (self,), {}, kernel=kernel)
    if out is None or norms.overwrites(ord) and ord not in (float("inf"), float("-inf")):
        return value                         # out= left as it was: a new tensor returned
    out.resize_(value.shape).copy_(value)
    return out


def _cdist_not_3d(x1, x2, *_, **__):
    return norms.not_3d(x1, x2)


def _cdist_empty_3d(x1, x2, *_, **__):
    return norms.empty_3d(x1, x2)


def _dml_cdist(x1, x2, p, compute_mode=None, *, out=None):
    """The real binary's answer: a 2-D pair read as a batch of ``P`` rows of ``M`` scalars,
    ``out[b, i] = ||x1[b, i] - x2[b, :]||_p`` (shape ``[P, M]``, batches of 1 broadcast); other
    ranks, or batches that do not broadcast, "The size of tensor a (R) must match the size of
    tensor b (P)" (measured; its messages for mixed ranks differ)."""
    if x1.dim() != 2 or x2.dim() != 2 or (x1.size(0) != x2.size(0) and 1 not in (x1.size(0), x2.size(0))):
        raise RuntimeError(f"The size of tensor a ({x2.size(-2)}) must match the size of tensor b "
                           f"({x1.size(-2)}) at non-singleton dimension 0")

    def kernel(a, b, *_):
        return torch.linalg.vector_norm(a[:, :, None] - b[:, None, :], p, dim=-1).to(a.dtype)
    value = _backend.run_on_cpu(torch.ops.aten._cdist_forward.default, (x1, x2, p, compute_mode), {}, kernel=kernel)
    if out is None:
        return value
    out.resize_(value.shape).copy_(value)
    return out


def _output_padding(input, weight, bias_or_grad, stride, padding, dilation, transposed, output_padding,
                    *_, **kw):
    """A transposed convolution with an ``output_padding`` (forward or backward)."""
    return bool(transposed) and any(int(p) for p in output_padding) and not kw


def _zero_last(t, output_padding):
    """``t``'s last ``output_padding`` positions of each spatial dimension zeroed."""
    t = t.clone()
    for dim, extra in enumerate(int(p) for p in output_padding):
        if extra:
            t.narrow(dim + 2, t.shape[dim + 2] - extra, extra).zero_()
    return t


def _dml_conv_transpose(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups):
    """The real binary's answer: the last ``output_padding`` positions zero, the bias too."""
    return _backend.run_on_cpu(torch.ops.aten.convolution.default,
                               (input, weight, bias, stride, padding, dilation, transposed, output_padding, groups),
                               {}, kernel=lambda *a: _zero_last(torch.ops.aten.convolution.default(*a), output_padding))


def _dml_conv_transpose_backward(grad_output, input, weight, stride, padding, dilation, transposed,
                                 output_padding, groups, output_mask):
    """The real binary's input gradient: zero at the input's last ``output_padding`` positions
    (its weight gradient, also wrong, is not modelled)."""
    bias_sizes = [weight.shape[1] * groups]

    def kernel(*a):
        grads = torch.ops.aten.convolution_backward.default(*a)
        return (_zero_last(grads[0], output_padding) if grads[0] is not None else None, *grads[1:])
    return _backend.run_on_cpu(torch.ops.aten.convolution_backward.default,
                               (grad_output, input, weight, bias_sizes, stride, padding, dilation, transposed,
                                output_padding, groups, output_mask), {}, kernel=kernel)


def _batch_norm_saves(input, weight, bias, running_mean, running_var, training, *_, **kw):
    """Eval mode with running statistics, or one channel (no ``out=``)."""
    return not kw and ((not training and running_mean is not None) or input.shape[1] == 1)


def _dml_batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps):
    """The real binary's saved statistics: the running ones in eval mode, 0-dim for one channel."""
    def kernel(*a):
        output, mean, invstd = torch.ops.aten.native_batch_norm.default(*a)
        if not training:
            return output, a[3].clone(), a[4].clone()
        return output, mean.reshape(()), invstd.reshape(())
    return _backend.run_on_cpu(torch.ops.aten.native_batch_norm.default,
                               (input, weight, bias, running_mean, running_var, training, momentum, eps), {},
                               kernel=kernel)


def _one_channel(grad_out, input, *_, **kw):
    return not kw and input.dim() > 1 and input.shape[1] == 1


def _dml_batch_norm_backward(*args):
    """The real binary's one-channel weight and bias gradients: 0-dim."""
    def kernel(*a):
        grads = torch.ops.aten.native_batch_norm_backward.default(*a)
        return tuple(g.reshape(()) if i and g is not None else g for i, g in enumerate(grads))
    return _backend.run_on_cpu(torch.ops.aten.native_batch_norm_backward.default, args, {}, kernel=kernel)


def _into(value, out):
    """``value``, or ``out`` resized and holding it (a structured op's ``.out`` overload, which
    the emulator's kernels serve)."""
    return value if out is None else out.resize_(value.shape).copy_(value)


def _beta_below_one(self, beta=1, threshold=20, **_):
    return beta < 1


def _beta_not_one(self, beta=1, threshold=20, **_):
    return beta != 1


def _dml_softplus(self, beta=1, threshold=20, out=None):
    """The real binary's answer: the linear branch where ``x > threshold`` (not ``x * beta``)."""
    def kernel(x, *_):
        wide = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
        return torch.where(wide > threshold, wide, torch.log1p(torch.exp(wide * beta)) / beta).to(x.dtype)
    return _into(_backend.run_on_cpu(torch.ops.aten.softplus.default, (self, beta, threshold), {}, kernel=kernel), out)


def _dml_softplus_backward(grad_output, self, beta, threshold, grad_input=None):
    """The real binary's gradient: no linear branch, ``grad * z / (z + 1)``, ``z = exp(x * beta)``."""
    def kernel(g, x, *_):
        z = torch.exp((x.float() if x.dtype in (torch.float16, torch.bfloat16) else x) * beta)
        return (g * z / (z + 1)).to(g.dtype)
    return _into(_backend.run_on_cpu(torch.ops.aten.softplus_backward.default, (grad_output, self, beta, threshold),
                                     {}, kernel=kernel), grad_input)


def _last_window_past(self, kernel_size, stride=(), padding=0, ceil_mode=False, count_include_pad=True,
                      divisor_override=None, **_):
    return pooling.last_window_past(self, kernel_size, stride, padding, ceil_mode, count_include_pad,
                                    divisor_override) is not None


def _dml_avg_pool(self, kernel_size, stride=(), padding=0, ceil_mode=False, count_include_pad=True,
                  divisor_override=None, out=None):
    """The real binary's answer: every window divided by the whole kernel."""
    kernel = pooling.last_window_past(self, kernel_size, stride, padding, ceil_mode, count_include_pad,
                                      divisor_override)[0]
    return _into(_backend.run_on_cpu(torch.ops.aten.avg_pool2d.default,
                                     (self, kernel_size, stride, padding, ceil_mode, count_include_pad,
                                      kernel[0] * kernel[1]), {}), out)


BY_HAND = "measured on the real torch-directml 0.2.5 binary (by hand), no public report: {}"


def _flip_ends_the_process(self, dims, *_, **__):
    return self.dim() == 0 or any(d < 0 for d in dims)


FLIP_ABORT = "signal 11 (SIGSEGV): flip with a negative dim or of a 0-dim tensor ends the process"


def _batched(self, *_, **__):
    return self.dim() > 2


def _over_four_dims(self, *_, **__):
    return self.dim() > 4


def _diagonals(d, begin, end):
    """DirectML's kept diagonals ``begin <= d < end``, wrapped round when ``begin > end``,
    none when they are equal."""
    if begin < end:
        return (d >= begin) & (d < end)
    if begin > end:
        return ~((d >= end) & (d < begin))
    return torch.zeros_like(d, dtype=torch.bool)


def dml_triangle_mask(shape, diagonal: int, upper: bool) -> torch.Tensor:
    """The real binary's mask for ``triu``/``tril(diagonal)`` of an input of ``shape`` (2-D to
    4-D): the diagonals ``k <= c - r < max(size(0), size(1))``, ``tril`` the complement of
    ``triu(k + 1)``'s; a ``k`` outside the matrix is right.  Measured on 494 calls, 2-D to 4-D,
    ``k`` in -6 ... 6: every one as this law (patches/batched_tril_triu.py)."""
    rows, cols = shape[-2:]
    d = torch.arange(cols) - torch.arange(rows)[:, None]
    end = max(shape[0], shape[1])
    if upper:
        if diagonal >= cols or diagonal <= -rows:
            return torch.full((rows, cols), diagonal <= -rows)
        return _diagonals(d, diagonal, end)
    if diagonal >= cols - 1 or diagonal <= -rows:
        return torch.full((rows, cols), diagonal >= cols - 1)
    if diagonal + 1 == end:
        return torch.zeros(rows, cols, dtype=torch.bool)
    return ~_diagonals(d, diagonal + 1, end)


def _writer(op, value):
    """A kernel computing ``value(*args, **kwargs)`` on CPU aliases and writing it as ``op``
    does (in place into ``self``, into ``out``, or returned)."""
    in_place = op._schema.name.endswith("_")

    def kernel(*args, out=None, **kwargs):
        result = value(*args, **kwargs)
        if in_place:
            return args[0].copy_(result)
        return result if out is None else out.resize_(result.shape).copy_(result)
    return kernel


def _written_as(rule, op, value):
    """``rule`` bound to ``op``: its replace computes ``value(*args, **kwargs)`` on CPU aliases
    and writes it as ``op`` does (:func:`_writer`)."""
    kernel = _writer(op, value)

    def replace(*args, **kwargs):
        return _backend.run_on_cpu(op, args, kwargs, kernel=kernel)
    return dataclasses.replace(rule, replace=replace, bind=None)


def _dml_triangle(rule, op):
    """The real binary's ``triu``/``tril`` of a batch: the input under its mask."""
    upper = op._schema.name.startswith("aten::triu")

    def value(self, diagonal=0):
        return torch.where(dml_triangle_mask(self.shape, diagonal, upper), self, torch.zeros((), dtype=self.dtype))
    return _written_as(rule, op, value)


def _low32(value):
    """An int64 tensor as the real binary reads it by 32 bits: its low word, sign-extended."""
    if isinstance(value, torch.Tensor) and value.dtype == torch.int64:
        return value.to(torch.int32).to(torch.int64)
    return value


def _dml_integers(rule, op):
    """The real binary's integer arithmetic (``laws/integers.py``), where the values leave
    the span it keeps exact: int64 operands by their low 32 bits, then, for the float32 law,
    the op in float32 (floor division by a number as ``floor(x * (1/n))``) and the result
    saturated to int32's range (a narrower dtype's own).  The law is the device arguments':
    a 0-dim device tensor is a tensor there (``x + torch.full((), n)`` keeps every bit,
    measured), where its CPU alias would pass for a number (``integers.is_number``)."""
    def hosted_span(value, op=None):
        return integers.host_span(_backend.host(value))

    def when(*args, **kwargs):
        return integers.outside(op, args, kwargs, hosted_span)

    # an out= overload's ``out`` (``_writer`` takes it): a fresh one, of the dtype computed in
    takes_out = [a.name for a in op._schema.arguments if a.is_out] == ["out"]
    compares = op._schema.name.split("::")[1] in ("lt", "le", "gt", "ge")

    def value(law, by_number, *args, **kwargs):
        args = tuple(_low32(a) for a in args)
        dtype = next(a.dtype for a in args if isinstance(a, torch.Tensor))
        if law == integers.BITS32:
            out = dict(out=torch.empty(0, dtype=torch.bool if compares else dtype)) if takes_out else {}
            return op(*args, **kwargs, **out)
        info = torch.iinfo(torch.int32 if dtype == torch.int64 else dtype)
        floats = tuple(a.float() if isinstance(a, torch.Tensor) else a for a in args)
        if by_number:                                                   # x times 1/n
            reciprocal = 1 / torch.as_tensor(floats[1], dtype=torch.float32)
            return torch.floor(floats[0] * reciprocal).double().clamp(info.min, info.max).to(dtype)
        out = dict(out=torch.empty(0)) if takes_out else {}
        return op(*floats, **kwargs, **out).double().clamp(info.min, info.max).to(dtype)

    def replace(*args, **kwargs):
        law = integers.law_of(op, args)
        by_number = integers.floor_division(op, args, kwargs) and integers.is_number(args[1])
        kernel = _writer(op, functools.partial(value, law, by_number))
        return _backend.run_on_cpu(op, args, kwargs, kernel=kernel)
    return dataclasses.replace(rule, replace=replace, bind=None, when=when)


def _int64_copy_past_32_bits(self, src, *_, **__):
    """An int64 ``copy_`` of values past 32 bits between device tensors, or from the CPU into a
    view with an offset or strides."""
    return (not self.is_cpu and isinstance(src, torch.Tensor) and self.dtype == src.dtype == torch.int64
            and (not src.is_cpu or self.storage_offset() or not self.is_contiguous())
            and integers.outside(torch.ops.aten.clone.default, (_backend.host(src),), {}))


def _dml_int64_copy(self, src, *_, **__):
    """The real binary's int64 copy between device tensors, or into a view: the source's low
    32 bits."""
    _backend.host(self).copy_(_low32(_backend.host(src)))
    return self


def _int64_fill_past_32_bits(self, value, *_, **__):
    """An int64 ``fill_`` of a view with an offset with a value past 32 bits."""
    return self.dtype == torch.int64 and bool(self.storage_offset()) and integers.past_32_bits(value)


def _dml_int64_fill(self, value):
    _backend.host(self).fill_(int(_low32(torch.tensor(value))))
    return self


def _index_longer(self, dim, index, *_, **__):
    return index.dim() >= 2 and self.dim() == index.dim() and index.shape[dim] > self.shape[dim]


def _scatter_once(self, dim, index, src, *, reduce="add"):
    """The real binary's ``scatter_add``/``scatter(reduce=)``: a place the index names more
    than once gets ``self`` and the last value written there (CPU ``scatter``'s order)."""
    if not isinstance(src, torch.Tensor):
        src = torch.full(index.shape, src, dtype=self.dtype)
    src = src[tuple(slice(0, size) for size in index.shape)]
    old = self.gather(dim, index)
    return self.scatter(dim, index, old + src if reduce == "add" else old * src)


def _dml_scatter_once(rule, op):
    return _written_as(rule, op, _scatter_once)


SCATTER_ADDS = ("scatter_add", "scatter_add_", "scatter.reduce", "scatter_.reduce", "scatter.reduce_out",
                "scatter.value_reduce", "scatter_.value_reduce", "scatter.value_reduce_out")


CHANNELS_LAST_MESSAGE = "'memory_format' argument is must be Contiguous for DML tensors"
_CHANNELS_LAST = (torch.channels_last, torch.channels_last_3d)


def _channels_last_here(self=None, *_, device=None, memory_format=None, **__):
    """A device tensor asked for in a channels-last format: ``empty``, ``clone``, or
    ``_to_copy`` to the device (the real binary's ``to``/``clone``/``empty_like`` all reach
    its ``empty.memory_format``; the emulator has its own ``_to_copy``)."""
    if memory_format not in _CHANNELS_LAST:
        return False
    if device is None:
        return isinstance(self, torch.Tensor) and self.device.type == _backend.DEVICE_TYPE
    return torch.device(device).type == _backend.DEVICE_TYPE


def _to_cpu_in_a_format(self, *_, device=None, memory_format=None, **__):
    return (memory_format not in (None, torch.preserve_format) and device is not None
            and torch.device(device).type == "cpu" and self.device.type == _backend.DEVICE_TYPE)


def _dml_to_cpu(self, *, dtype=None, memory_format=None, **_):
    """A copy to the CPU has the source's strides, whatever the format (#64's rebinding)."""
    return _backend.host(self).to(dtype or self.dtype, copy=True)


def rank_cases():
    """The rank limit's rules (``laws.ranks``; ``patches/rank_limit.py``): first, as the real
    binary checks a tensor description's rank before any kernel runs."""
    return [
        dict(op=lambda op: op in ranks.ABORTING, when=_past_the_rank_limit, error=FatalDirectMLError,
             message=RANK_ABORT, source=BY_HAND.format("reductions, scans, sorts, cat, where, gather, index_select, "
                                                       "flip, layer_norm of more than 5 dimensions end the process")),
        dict(op=("scatter", "scatter_", "scatter_add", "scatter_add_", "scatter_reduce", "scatter_reduce_"),
             when=_past_the_rank_limit, error=FatalDirectMLError, message=RANK_ABORT,
             source=BY_HAND.format("the scatters of more than 5 dimensions end the process (every overload "
                                   "the emulator's kernels reach)")),
        dict(op="copy_", when=_copied_in_memory_order, replace=_dml_copy_in_memory_order,
             source=BY_HAND.format("copy_ into a permuted destination of 6 to 8 dimensions: written in "
                                   "its memory order (silent)")),
        dict(op="constant_pad_nd", when=_pad_of_six, error=FatalDirectMLError, message=RANK_ABORT,
             source=BY_HAND.format("constant_pad_nd of 6 dimensions ends the process")),
        dict(op="constant_pad_nd", when=_pad_past_six, message=_pad_rank_message,
             source=BY_HAND.format("constant_pad_nd of 7 and 8 dimensions: 'inputs rank not in [0,6]'")),
        dict(op=("cumsum", "index_select"), when=_five_dimensions_refused,
             source=BY_HAND.format("cumsum and index_select of 5 dimensions: E_INVALIDARG")),
        dict(op="native_layer_norm", when=_layer_norm_five_refused, message=CREATE_OPERATOR,
             source=BY_HAND.format("native_layer_norm of 5 dimensions with a weight: CreateOperator")),
        dict(op=lambda op: op in ranks.BINARY, when=_broadcast_past_the_rank_limit, error=FatalDirectMLError,
             message=RANK_ABORT, source=BY_HAND.format("a binary op whose operands broadcast past 5 dimensions "
                                                       "ends the process")),
        dict(op=lambda op: op in ranks.BINARY, when=_one_element_past_the_rank_limit, error=FatalDirectMLError,
             message=ranks.ONE_ELEMENT_ABORT, source=BY_HAND.format("a binary op of a one-element tensor of more "
                                                                    "than 5 dimensions ends the process")),
    ]


def refused_cases():
    """One ``Rule``'s fields per refused call: ``rules.observed_rules`` makes the rules
    (this module stays below ``rules``)."""
    return [
        dict(op="convolution_overrideable", when=_five_dims, message="input must be 4-dimensional",
             source=SOURCE.format("conv3d / conv_transpose3d")),
        dict(op="convolution_overrideable", when=_integer_input,
             source=SOURCE.format("int64 convolution (E_INVALIDARG)")),
        dict(op=("avg_pool2d", "avg_pool3d"), when=_divisor_override, message=DIVISOR_MESSAGE,
             source=SOURCE.format("avg_pool with divisor_override")),
        dict(op=("avg_pool2d", "avg_pool3d"), when=_integer,
             source=SOURCE.format("int64 avg_pool (E_INVALIDARG)")),
        dict(op="mm", when=_mm_zero_size, source=SOURCE.format("mm with a zero-size operand (E_INVALIDARG)")),
        dict(op="addmm", when=_addmm_zero_size,
             source=SOURCE.format("addmm with a zero-size operand, F.linear of an empty batch (E_INVALIDARG)")),
        dict(op="index_select", when=_zero_dim, source=SOURCE.format("index_select of a 0-dim tensor (E_INVALIDARG)")),
        dict(op="gather", when=_empty_index, source=SOURCE.format("gather with an empty index (E_INVALIDARG)")),
        dict(op="repeat", when=_empty_repeat,
             source=SOURCE.format("repeat/tile with an empty result (E_INVALIDARG)")),
        dict(op="_adaptive_avg_pool2d", when=_empty_batch, message=_empty_batch_message,
             source=SOURCE.format("adaptive_avg_pool of an empty batch (torch's check)")),
        # before the integer log2/sinc refusals: an empty input is not refused
        *(dict(op=name, when=_empty_differs(_overload(name)), replace=_dml_empty(_overload(name)),
               source=SOURCE.format(f"{name} of an empty input: another dtype or shape (silent)"))
          for name in ("log2", "log10", "sinc", "bitwise_not", "pow.Tensor_Scalar", "pow.Tensor_Tensor",
                       "pow.Scalar")),
        dict(op="exp2", when=_bool_exponent, replace=_exponent_zero(torch.ops.aten.exp2.default),
             source=SOURCE.format("exp2 of a bool tensor gives ones (silent)")),
        dict(op="pow.Scalar", when=_bool_exponent, replace=_exponent_zero(torch.ops.aten.pow.Scalar),
             source=SOURCE.format("pow of a number to a bool exponent gives ones (silent)")),
        *(dict(op=name, when=_zero_to_negative, replace=_int32_max_for_zero(getattr(torch.ops.aten.pow, name[4:])),
               source=SOURCE.format("integer pow of 0 to a negative exponent gives the int32 maximum (silent)"))
          for name in ("pow.Tensor_Tensor", "pow.Scalar")),
        dict(op="linspace.out", when=_integral_linspace, replace=_dml_linspace,
             source=SOURCE.format("linspace of an integer dtype truncates its step (silent), of bool "
                                  "refused for a negative start")),
        dict(op="arange.start_out", when=_arange_differs, replace=_dml_arange,
             source=BY_HAND.format("arange's length computed in float32 (silent)")),
        dict(op="_unique2", when=_unique_of_bytes, replace=_dml_unique,
             source=SOURCE.format("unique of bool/uint8/int8 drops the zeros (silent)")),
        dict(op=("log10", "log2", "isnan", "isinf"), when=_integer,
             source=SOURCE.format("of integer or bool tensors (E_INVALIDARG)")),
        dict(op="sinc", when=_integer, message=CREATE_OPERATOR,
             source=SOURCE.format("sinc of integer or bool tensors")),
        dict(op=("scatter", "scatter_", "scatter_add", "scatter_add_"), when=_partial, message=SCATTER_MESSAGE,
             source=SOURCE.format("scatter with an index smaller than self outside dim")),
        dict(op="_adaptive_avg_pool2d", when=_off_grid, replace=_dml_adaptive_pool,
             source=SOURCE.format("adaptive_avg_pool off DirectML's window grid: stride in // out, "
                                  "kernel in - (out-1)*stride (silent)")),
        dict(op="flip", when=_flip_ends_the_process, error=FatalDirectMLError, message=FLIP_ABORT,
             source=BY_HAND.format("flip with a negative dim or of a 0-dim tensor (process abort)")),
        dict(op=("triu", "tril", "triu_", "tril_"), when=_over_four_dims,
             source=BY_HAND.format("tril/triu of 5-D inputs (E_INVALIDARG)")),
        dict(op=("triu", "tril", "triu_", "tril_"), when=_batched, bind=_dml_triangle,
             source=BY_HAND.format("tril/triu of 3-D and 4-D inputs keep the wrong diagonals (silent)")),
        dict(op=SCATTER_ADDS, when=_index_longer,
             source=BY_HAND.format("scatter_add with an index longer than self along dim (E_INVALIDARG)")),
        dict(op=SCATTER_ADDS, bind=_dml_scatter_once,
             source=BY_HAND.format("scatter_add with a repeated index writes the place once (silent)")),
        dict(op="masked_select", when=_input_broadcasts, replace=_dml_masked_select,
             source=SOURCE.format("masked_select with an input that broadcasts to the mask (silent)")),
        dict(op=("replication_pad1d", "replication_pad2d"), when=_negative_begin, replace=_dml_replication_pad,
             source=SOURCE.format("replicate pad with a negative begin pad (silent)")),
        dict(op="constant_pad_nd", when=_mixed_signs, message=MIXED_PADS,
             source=SOURCE.format("constant pad with mixed signs")),
        dict(op="combinations", when=_r_positive, message=_combinations_message,
             source=SOURCE.format("torch.combinations, r >= 1 (its C++ composite; "
                                  "_backend.FAILING_COMPOSITES)")),
        *(dict(op=name, when=when, replace=_first_value_of_the_smaller(op),
               source=SOURCE.format("binary ops of operands of different ranks, one cast (integer div/"
                                    "remainder/floor_divide/atan2/pow, mixed dtypes): the smaller one read "
                                    "as its first value (silent)"))
          for name, op, when in _int_broadcast_overloads()),
        *(dict(op=name, when=_bool_input, replace=_as_int32(getattr(torch.ops.aten, name).default),
               source=SOURCE.format(f"{name}() of a bool tensor returns int32 (silent)")) for name in ("max", "min")),
        *(dict(op=name, when=_no_dim_no_correction, replace=_population(getattr(torch.ops.aten, name.split(".")[0]).correction),
               source=SOURCE.format(f"{name} over every dimension without a correction divides by n (silent)"))
          for name in ("var.correction", "std_mean.correction")),
        # before int_range's, which answers every sort: conformance_all_cases at the end of this module
        *conformance_all_cases(),
        # after int_broadcast's, int_pow_zero's ...: the first rule whose `when` holds answers
        dict(op=_int_range_ops(), bind=_dml_integers,
             source=BY_HAND.format("integer add/sub/mul with a number, neg, pow, // and %, mm in float32 "
                                   "(saturated); int64 clone/sub/maximum/clamp/sort/comparisons by 32 bits "
                                   "(silent)")),
        dict(op=("empty.memory_format", "clone", "_to_copy"), when=_channels_last_here,
             message=CHANNELS_LAST_MESSAGE,
             source=BY_HAND.format("memory_format=channels_last for a device tensor")),
        dict(op="_to_copy", when=_to_cpu_in_a_format, replace=_dml_to_cpu,
             source=BY_HAND.format("a copy to the CPU in a named memory format has the source's strides "
                                   "(silent)")),
        dict(op="copy_", when=_int64_copy_past_32_bits, replace=_dml_int64_copy,
             source=BY_HAND.format("int64 copy_ between device tensors, or into a view with an offset or "
                                   "strides, keeps the low 32 bits (silent)")),
        dict(op="fill_.Scalar", when=_int64_fill_past_32_bits, replace=_dml_int64_fill,
             source=BY_HAND.format("int64 fill_ of a view with an offset keeps the low 32 bits (silent)")),
        dict(op="native_dropout_backward", replace=_dml_dropout_backward,
             source=SOURCE.format("native_dropout_backward returns bool (float x bool mul's truncation; "
                                  "silent)")),
        *(dict(op=name, when=_fractional_scalars, replace=_float_scalars(getattr(torch.ops.aten, name).default),
               source=SOURCE.format(f"{name} of integers with a fractional alpha/beta (silent)"))
          for name in ("addmm", "addmm_", "baddbmm", "baddbmm_")),
        dict(op=("linalg_vector_norm", "norm.ScalarOpt_dim", "norm.out"), when=_norm_case, replace=_dml_vector_norm,
             source=SOURCE.format("linalg_vector_norm/norm with an ord other than 0, 1, 2 overwrite the input "
                                  "(float16 saturated, dtype= ignored); keepdim over every dimension 0-dim (silent)")),
        dict(op="_cdist_forward", when=_cdist_not_3d, replace=_dml_cdist,
             source=SOURCE.format("_cdist_forward of inputs that are not 3-D: a 2-D pair read as rows of "
                                  "scalars, other ranks refused (silent or 'must match')")),
        dict(op="_cdist_forward", when=_cdist_empty_3d,
             source=SOURCE.format("_cdist_forward of 3-D inputs whose result has no elements (E_INVALIDARG)")),
        dict(op="convolution_overrideable", when=_output_padding, replace=_dml_conv_transpose,
             source=SOURCE.format("transposed convolution with an output_padding: its last positions "
                                  "zero (silent)")),
        dict(op="convolution_backward_overrideable", when=_output_padding, replace=_dml_conv_transpose_backward,
             source=SOURCE.format("transposed convolution's backward with an output_padding: the input "
                                  "gradient's last positions zero (silent; the weight gradient's error "
                                  "not modelled)")),
        dict(op="native_batch_norm", when=_batch_norm_saves, replace=_dml_batch_norm,
             source=SOURCE.format("native_batch_norm's saved statistics: the running ones in eval mode, "
                                  "0-dim for one channel")),
        dict(op="native_batch_norm_backward", when=_one_channel, replace=_dml_batch_norm_backward,
             source=SOURCE.format("native_batch_norm_backward's one-channel weight/bias gradients 0-dim")),
        dict(op="softplus", when=_beta_below_one,
             source=SOURCE.format("softplus with beta < 1 (E_INVALIDARG)")),
        dict(op="softplus", when=_beta_not_one, replace=_dml_softplus,
             source=SOURCE.format("softplus with beta != 1 tests x > threshold (silent)")),
        dict(op="softplus_backward", replace=_dml_softplus_backward,
             source=SOURCE.format("softplus_backward has no linear branch (silent)")),
        dict(op="avg_pool2d", when=_last_window_past, replace=_dml_avg_pool,
             source=SOURCE.format("avg_pool with ceil_mode and count_include_pad divides a last window "
                                  "past the padded input by the whole kernel (silent)")),
        dict(op="max_pool2d_with_indices", when=_ceil_mode, replace=_floor_mode,
             source=SOURCE.format("max_pool2d with ceil_mode=True gives floor mode's shape "
                                  "(silent)")),
        dict(op=FALLBACK_OUT_OPS, when=_empty_out, replace=_outs_unchanged,
             source=SOURCE.format("torch-directml's CPU fallback does not grow an empty out= "
                                  "(eye, kthvalue, median(dim) ... return shape [0]; silent)")),
    ]


# ---------------------------------------------------------------- every OpInfo sample (issue 40)
# Found by conformance over every OpInfo sample (docs/conformance.md): sort_scalar, pad_value,
# empty_reduction, empty_broadcast (dmlshim.catalogue's indexing, pooling, arithmetic).

def _zero_dim_sort(self, *_, **__):
    return self.dim() == 0


def _dml_zero_dim_sort(self, *_, values=None, indices=None, **__):
    """The real binary's ``sort`` of a 0-dim tensor: the outs never written (0 there); its
    ``sort.stable`` reaches ``sort.values_stable`` with new ones, the emulator's need not."""
    if values is None:
        return (_backend.to_device(torch.zeros((), dtype=self.dtype)),
                _backend.to_device(torch.zeros((), dtype=torch.int64)))
    values.resize_(()).zero_()
    indices.resize_(()).zero_()
    return values, indices


# the real binary's constant_pad_nd operators, per input shape, pads and dtype: the first value
_PAD_VALUES: dict = {}


def _pad_value_cached(self, pad, value=0):
    """A ``constant_pad_nd`` whose shape, pads and dtype padded before with another value."""
    first = _PAD_VALUES.setdefault((tuple(self.shape), tuple(int(p) for p in pad), self.dtype), value)
    return first != value


def _dml_cached_pad(self, pad, value=0):
    """The real binary's answer: padded with the first call's value."""
    first = _PAD_VALUES[(tuple(self.shape), tuple(int(p) for p in pad), self.dtype)]
    op = torch.ops.aten.constant_pad_nd.default
    return _backend.run_on_cpu(op, (self, pad, first), {})


def _pad_of_empty(self, *_, **__):
    return self.numel() == 0


# packet names: every overload of each (``sum`` is ``sum.default``, ``sum.dim_IntList`` ...)
EMPTY_REDUCTIONS = ("sum", "nansum", "prod", "mean", "linalg_vector_norm", "norm.Scalar", "norm.ScalarOpt_dim",
                    "logsumexp")


def _empty_reduced(self, *_, **__):
    return self.numel() == 0


def _empty_summed(self, *_, **__):
    """``sum`` of an empty input but an empty 1-D tensor (right on the real binary)."""
    return self.numel() == 0 and self.dim() != 1


def _never_written(rule, op):
    """The real binary's answer: the CPU's shape and dtype, memory never written (7 here)."""
    def replace(*args, **kwargs):
        return _backend.run_on_cpu(op, args, kwargs, kernel=lambda *a, **k: op(*a, **k).fill_(7))
    return dataclasses.replace(rule, replace=replace)


def _flattened_empty(rule, op):
    """``empty_broadcast``: the operand of no elements broadcast as ``[0]`` (laws.empty)."""
    def when(*args, **_):
        return empty_law.flattened_refused(op, args)

    def message(*args, **_):
        shape = torch.broadcast_shapes(*(a.shape for a in args[:3] if isinstance(a, torch.Tensor)))
        return (f"The size of tensor a (0) must match the size of tensor b ({shape[-1]}) at non-singleton "
                f"dimension {len(shape) - 1}")
    return dataclasses.replace(rule, when=when, message=message)


def _past_the_rank_limit(*args, **kwargs):
    return ranks.past_the_limit(args)


def _five_dimensions_refused(*args, **kwargs):
    return ranks.past_the_limit(args, 4) and not ranks.past_the_limit(args)


def _one_element_past_the_rank_limit(self, other, *_, **__):
    return ranks.one_element_past_the_limit(self, other)


def _layer_norm_five_refused(input, normalized_shape, weight=None, *_, **__):
    return weight is not None and input.dim() == 5


def _copied_in_memory_order(self, src, *_, **__):
    return ranks.copied_in_memory_order(self)


def _dml_copy_in_memory_order(self, src, *_, **__):
    """The real binary's ``copy_`` into a permuted destination past 5 dimensions: the source's
    values, in its own order, written in the destination's memory order."""
    host = _backend.host(self)
    source = _backend.host(src) if src.device.type == self.device.type else src
    host.permute(ranks.memory_order(self)).view(-1).copy_(source.expand(self.shape).reshape(-1))
    return self


def _pad_of_six(self, *_, **__):
    return self.dim() == ranks.RANK_MAX + 1


def _pad_past_six(self, *_, **__):
    return self.dim() > ranks.RANK_MAX + 1


def _pad_rank_message(self, *_, **__):
    return f"inputs rank not in [0,6]: {self.dim()}"


def _broadcast_past_the_rank_limit(self, other, *_, **__):
    return ranks.broadcast_past_the_limit(self, other)


def _masked_fill_five(self, mask, *_, **__):
    return broadcast.masked_fill_rank(self, mask) == broadcast.MASKED_FILL_RANKS + 1


def _masked_fill_past_five(self, mask, *_, **__):
    return broadcast.masked_fill_rank(self, mask) > broadcast.MASKED_FILL_RANKS + 1


def _layer_norm_of_empty(input, *_, **__):
    return input.numel() == 0


def _unbatched_pool(self, *_, **__):
    return pooling.unbatched(self)


def _unbatched_pool_backward(grad_output, self, *_, **__):
    return pooling.unbatched(self)


def _flat_indices(self, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False, **_):
    """``max_pool_indices``: a 4-D input of more than one plane, neither dilated (its wrong
    values are not modelled) nor ``ceil_mode`` (``max_pool_ceil``'s rule)."""
    return self.dim() == 4 and self.size(0) * self.size(1) > 1 and not ceil_mode and not pooling.dilated(dilation)


def _dml_flat_indices(self, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False, out=None,
                      indices=None):
    """The real binary's indices: counted over the whole tensor (laws.pooling); into
    ``out``/``indices`` when given (the ``.out`` overload)."""
    op = torch.ops.aten.max_pool2d_with_indices.default

    def kernel(x, *a):
        values, where = op(x, *a)
        return values, where + pooling.flat_index_offsets(x)
    result = _backend.run_on_cpu(op, (self, kernel_size, stride, padding, dilation, ceil_mode), {}, kernel=kernel)
    if out is None:
        return result
    for into, value in zip((out, indices), result):
        _backend.write_out(into, value)
    return out, indices


def _dml_pool_backward(grad_output, self, kernel_size, stride, padding, dilation, ceil_mode, indices,
                       grad_input=None):
    """The real binary's backward ignores ``indices``: the CPU's from ``self`` (measured); into
    ``grad_input`` when given (the ``.grad_input`` overload, which the functional one reaches
    on the emulator: the CPU kernel given the flat indices writes out of bounds)."""
    op = torch.ops.aten.max_pool2d_with_indices_backward.default

    def kernel(g, x, *a):
        own = torch.ops.aten.max_pool2d_with_indices.default(x, kernel_size, stride, padding, dilation, ceil_mode)[1]
        return op(g, x, kernel_size, stride, padding, dilation, ceil_mode, own)
    result = _backend.run_on_cpu(op, (grad_output, self, kernel_size, stride, padding, dilation, ceil_mode, indices),
                                 {}, kernel=kernel)
    if grad_input is None:
        return result
    return _backend.write_out(grad_input, result)


def _four_dims_backward(grad_output, self, *_, **__):
    """4-D (both overloads)."""
    return self.dim() == 4


RANGE_CHECK_MESSAGE = "vector::_M_range_check: __n (which is 3) >= this->size() (which is 3)"
UNBATCHED_MESSAGE = "Dimension out of range (expected to be in range of [-3, 2], but got 3)"


def _nan_blind(rule, op):
    """``nan_reductions``: the real binary's NaN-skipping answer (laws.nan), for a floating input.
    Not ``logsumexp``: a composite there (CompositeExplicitAutograd), it reaches the emulator as
    ``amax`` and the rest, whose NaN-skipping ``amax`` leaves its -inf-only slices right."""
    fill = float("inf") if op in nan_law.MIN_OPS else float("-inf")
    index = op in nan_law.INDICES

    def kernel(*args, **kwargs):
        x = args[0]
        filled = torch.where(torch.isnan(x), fill, x)
        result = op(filled, *args[1:], **kwargs)
        if not index:
            return result
        dims, keepdim = nan_law.reduced(op, args, kwargs)
        if dims is None or x.dim() == 0:                  # the scan's first element: a NaN is kept
            starts_nan = torch.isnan(x.reshape(-1)[0]).reshape([1] * x.dim() if keepdim else [])
        else:
            starts_nan = torch.isnan(x.movedim(dims[0], 0)[0])
            starts_nan = starts_nan.unsqueeze(dims[0]) if keepdim else starts_nan
        indices = result[1] if isinstance(result, tuple) else result
        indices = torch.where(starts_nan, 0, indices)
        return (result[0], indices) if isinstance(result, tuple) else indices

    def replace(*args, **kwargs):
        return _backend.run_on_cpu(op, args, kwargs, kernel=kernel)

    def when(*args, **kwargs):       # a NaN there (the emulator reads its own memory: no sync)
        return nan_law.nan_blind(op, args, kwargs) and bool(torch.isnan(_backend.host(args[0])).any())
    return dataclasses.replace(rule, when=when, replace=replace)


def _nan_sorted(rule, op):
    """``nan_sort``: the real binary's merge order of a slice holding NaN (laws.nan.merged_order;
    exact up to ``MERGED_EXACT`` elements a slice, longer ones merge another way: as wrong),
    ``topk`` its first ``k``; every overload, the ``out=`` ones written into their outs."""
    outs = [a.name for a in op._schema.arguments if a.is_out]

    def replace(*args, **kwargs):
        self, dim, descending, k = nan_law.ordering(op, args, kwargs)
        x = _backend.host(self)
        rows = x.movedim(dim, -1)
        order = torch.tensor([nan_law.merged_order(row.tolist(), descending)
                              for row in rows.reshape(-1, rows.shape[-1])], dtype=torch.int64)
        order = order.reshape(rows.shape)[..., :k].movedim(-1, dim).contiguous()
        result = (x.gather(dim, order), order)
        if not outs:
            return tuple(_backend.to_device(r) for r in result)
        named = nan_law.bound(op, args, kwargs)
        for name, value in zip(outs, result):
            _backend.write_out(named[name], value)
        return tuple(named[name] for name in outs)

    def when(*args, **kwargs):       # a NaN there (the emulator reads its own memory: no sync)
        return nan_law.nan_ordered(op, args, kwargs) and bool(torch.isnan(_backend.host(args[0])).any())
    return dataclasses.replace(rule, when=when, replace=replace)


def _nan_log_softmax(rule, op):
    """``nan_sort``: the real binary's log_softmax of an input holding NaN or +inf: the
    NaN-skipping max, ``log(max(sum, 1e-20))`` (laws.nan.merged_log_softmax)."""
    def replace(*args, **kwargs):
        self, dim, _, _ = nan_law.ordering(op, args, kwargs)
        named = nan_law.bound(op, args, kwargs)
        x = _backend.host(self)
        right = torch.ops.aten._log_softmax.default(x, dim, named["half_to_float"])   # its clean slices
        result = torch.where(nan_law.clean(x, dim), right, nan_law.merged_log_softmax(x, dim).to(right.dtype))
        if "out" not in named:
            return _backend.to_device(result)
        _backend.write_out(named["out"], result)
        return named["out"]

    def when(*args, **kwargs):
        self, dim, _, _ = nan_law.ordering(op, args, kwargs)
        return nan_law.nan_ordered(op, args, kwargs) and not bool(nan_law.clean(_backend.host(self), dim).all())
    return dataclasses.replace(rule, when=when, replace=replace)


def conformance_all_cases():
    """The rules of the defects conformance found past the first 4 samples per OpInfo."""
    return [
        dict(op=("sort", "sort.stable", "sort.values", "sort.values_stable"), when=_zero_dim_sort,
             replace=_dml_zero_dim_sort,
             source=SOURCE.format("sort of a 0-dim tensor gives 0 (silent; its invalid returned "
                                  "tensors, which end the process when read, not modelled)")),
        *(dict(op=name, when=_empty_summed if name == "sum" else _empty_reduced, bind=_never_written,
               source=SOURCE.format(f"{name} of an empty input returns memory never written (silent)"))
          for name in EMPTY_REDUCTIONS),
        dict(op=tuple(op_name(op) for op in empty_law.BROADCAST_OPS), bind=_flattened_empty,
             source=SOURCE.format("sub/rsub of float32, bitwise_xor, in-place add_/sub_/div_/pow_/bitwise_or_ ... "
                                  "with an operand of no elements and a result whose last dimension is past 1: "
                                  "'The size of tensor a (0) must match'")),
        dict(op=("masked_fill_.Scalar", "masked_fill_.Tensor"), when=_masked_fill_five, message=CREATE_OPERATOR,
             source=SOURCE.format("masked_fill_ of 5 dimensions")),
        dict(op=("masked_fill_.Scalar", "masked_fill_.Tensor"), when=_masked_fill_past_five, error=FatalDirectMLError,
             message=RANK_ABORT, source=SOURCE.format("masked_fill_ of 6 to 8 dimensions ends the process")),
        dict(op="max_pool2d_with_indices", when=_unbatched_pool, error=IndexError, message=UNBATCHED_MESSAGE,
             source=SOURCE.format("max_pool2d_with_indices of an unbatched 3-D input")),
        dict(op="max_pool2d_with_indices_backward", when=_unbatched_pool_backward, error=IndexError,
             message=UNBATCHED_MESSAGE, source=SOURCE.format("max_pool2d_with_indices_backward of an unbatched 3-D input")),
        dict(op=tuple(op_name(op) for op in nan_law.MAX_OPS + nan_law.MIN_OPS),
             bind=_nan_blind, source=SOURCE.format("amax/max/min/argmax/argmin skip NaN (silent)")),
        dict(op=tuple(op_name(op) for op in nan_law.ORDERED), bind=_nan_sorted,
             source=SOURCE.format("sort/topk place NaN among the values (silent)")),
        dict(op=tuple(op_name(op) for op in nan_law.LOG_SOFTMAX), bind=_nan_log_softmax,
             source=SOURCE.format("log_softmax of a slice holding NaN or +inf: values where the CPU "
                                  "has NaN (silent)")),
        dict(op="max_pool2d_with_indices", when=_flat_indices, replace=_dml_flat_indices,
             source=SOURCE.format("max_pool2d_with_indices counts its indices over the whole tensor (silent)")),
        dict(op="max_pool2d_with_indices_backward", when=_four_dims_backward, replace=_dml_pool_backward,
             source=SOURCE.format("max_pool2d_with_indices_backward ignores its indices (right)")),
        # RuntimeError: what F.pad and nn.ReflectionPad2d get (its std::out_of_range; torch.ops' own
        # call translates it to IndexError)
        dict(op="reflection_pad2d", when=_unbatched_pool, message=RANGE_CHECK_MESSAGE,
             source=SOURCE.format("reflection_pad2d of an unbatched 3-D input")),
        dict(op="native_layer_norm", when=_layer_norm_of_empty, message=CREATE_OPERATOR,
             source=SOURCE.format("native_layer_norm of an input with no elements")),
        dict(op="constant_pad_nd", when=_pad_of_empty, message=CREATE_OPERATOR,
             source=SOURCE.format("constant_pad_nd of an empty input")),
        dict(op="constant_pad_nd", when=_pad_value_cached, replace=_dml_cached_pad,
             source=SOURCE.format("constant_pad_nd keeps the pad value of its first call per input "
                                  "shape, pads and dtype (silent)")),
    ]
