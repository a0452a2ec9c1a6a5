"""GPU-like numerics for the emulated device (``configure(numerics="gpu")``).

A real GPU does not round like the CPU: split-K matmuls and convolutions, tree
reductions, softmax and normalizations from their formulas.  With ``numerics="gpu"``
the emulator does the same, deterministically, on the CPU: the ops and dtypes are
those of the default mode; only the rounding differs, within the ``device`` tolerance
profile (:mod:`dmlshim.parity`).  Integer, bool and complex inputs compute as on the
CPU.

Which ops, how each is computed and its error bound: docs/emulation.md
("GPU-like numerics")."""
import functools

import torch

aten = torch.ops.aten


def _floating(t):
    return isinstance(t, torch.Tensor) and t.is_floating_point()


def _split_k(a, b, matmul):
    """``matmul(a, b)`` as two partial products over the even and odd k, added.

    Interleaved, not halves: a CPU GEMM that blocks K may already sum contiguous
    halves separately, and then the result would not change."""
    if a.shape[-1] < 2:
        return matmul(a, b)
    return matmul(a[..., 0::2], b[..., 0::2, :]) + matmul(a[..., 1::2], b[..., 1::2, :])


def _scaled_sum(product, bias, beta, alpha):
    # addmm/baddbmm semantics: beta == 0 ignores bias (even NaN in it).
    out = product if alpha == 1 else product * alpha
    if beta != 0:
        out = out + (bias if beta == 1 else bias * beta)
    return out


def mm(original, a, b):
    if not _floating(a):
        return original(a, b)
    return _split_k(a, b, aten.mm.default)


def bmm(original, a, b):
    if not _floating(a):
        return original(a, b)
    return _split_k(a, b, aten.bmm.default)


def addmm(original, bias, a, b, *, beta=1, alpha=1):
    if not _floating(a):
        return original(bias, a, b, beta=beta, alpha=alpha)
    return _scaled_sum(_split_k(a, b, aten.mm.default), bias, beta, alpha).to(a.dtype)


def baddbmm(original, bias, a, b, *, beta=1, alpha=1):
    if not _floating(a):
        return original(bias, a, b, beta=beta, alpha=alpha)
    return _scaled_sum(_split_k(a, b, aten.bmm.default), bias, beta, alpha).to(a.dtype)


def convolution(original, input, weight, bias, stride, padding, dilation, transposed,
                output_padding, groups):
    """Input channels in two halves, the partial convolutions added (groups == 1)."""
    channels = input.shape[1] if input.dim() > 1 else 1
    if not _floating(input) or groups != 1 or channels < 2:
        return original(input, weight, bias, stride, padding, dilation, transposed,
                        output_padding, groups)
    # Even and odd input channels. Weight layout: (out, in, ...) for a convolution,
    # (in, out, ...) transposed.
    w1, w2 = (weight[0::2], weight[1::2]) if transposed else (weight[:, 0::2], weight[:, 1::2])
    conv = aten.convolution.default
    first = conv(input[:, 0::2], w1, bias, stride, padding, dilation, transposed,
                 output_padding, groups)
    return first + conv(input[:, 1::2], w2, None, stride, padding, dilation, transposed,
                        output_padding, groups)


def _float64_accumulated(reduce):
    """(dim kernel, all-elements kernel) for ``reduce`` (sum or mean) accumulated in
    float64 and rounded once to the result dtype; other inputs go to the CPU op."""
    def floating(self, dtype):
        return _floating(self) and (dtype is None or dtype.is_floating_point)

    def over_dims(original, self, dim, keepdim=False, *, dtype=None):
        if not floating(self, dtype):
            return original(self, dim, keepdim, dtype=dtype)
        dims = dim if dim else list(range(self.dim()))
        return reduce(self, dims, keepdim, dtype=torch.float64).to(dtype or self.dtype)

    def over_all(original, self, *, dtype=None):
        if not floating(self, dtype):
            return original(self, dtype=dtype)
        return reduce(self, dtype=torch.float64).to(dtype or self.dtype)

    return over_dims, over_all


sum_dim, sum_all = _float64_accumulated(torch.sum)
mean_dim, mean_all = _float64_accumulated(torch.mean)


def softmax(original, self, dim, half_to_float):
    if not _floating(self):
        return original(self, dim, half_to_float)
    x = self.float() if half_to_float else self
    e = (x - x.amax(dim, keepdim=True)).exp()
    return e / e.sum(dim, keepdim=True)


def log_softmax(original, self, dim, half_to_float):
    if not _floating(self):
        return original(self, dim, half_to_float)
    x = self.float() if half_to_float else self
    shifted = x - x.amax(dim, keepdim=True)
    return shifted - shifted.exp().sum(dim, keepdim=True).log()


def _normalize(x, dims, eps):
    mean = x.mean(dims, keepdim=True)
    centered = x - mean
    rstd = ((centered * centered).mean(dims, keepdim=True) + eps).rsqrt()
    return centered * rstd, mean, rstd


def layer_norm(original, input, normalized_shape, weight, bias, eps):
    if input.dtype not in (torch.float32, torch.float64):
        return original(input, normalized_shape, weight, bias, eps)
    dims = list(range(input.dim() - len(normalized_shape), input.dim()))
    out, mean, rstd = _normalize(input, dims, eps)
    if weight is not None:
        out = out * weight
    if bias is not None:
        out = out + bias
    return out, mean, rstd


def group_norm(original, input, weight, bias, n, c, hxw, group, eps):
    if input.dtype not in (torch.float32, torch.float64) or input.numel() == 0:
        return original(input, weight, bias, n, c, hxw, group, eps)
    grouped = input.reshape(n, group, -1)
    out, mean, rstd = _normalize(grouped, [-1], eps)
    out = out.reshape(input.shape)
    affine = (1, c) + (1,) * (input.dim() - 2)
    if weight is not None:
        out = out * weight.reshape(affine)
    if bias is not None:
        out = out + bias.reshape(affine)
    return out, mean.reshape(n, group), rstd.reshape(n, group)


# aten overload name -> kernel(original, *cpu_args, **cpu_kwargs); ``original`` is the
# CPU op, for the inputs a GPU-like kernel leaves to it.
KERNELS = {
    "mm": mm,
    "bmm": bmm,
    "addmm": addmm,
    "baddbmm": baddbmm,
    "convolution_overrideable": convolution,
    "sum.dim_IntList": sum_dim,
    "sum": sum_all,
    "mean.dim": mean_dim,
    "mean": mean_all,
    "_softmax": softmax,
    "_log_softmax": log_softmax,
    "native_layer_norm": layer_norm,
    "native_group_norm": group_norm,
}
MODES = ("cpu", "gpu")


def kernel_for(name, op):
    """The GPU-like kernel for an overload, bound to its CPU op; ``None`` if it has none."""
    kernel = KERNELS.get(name)
    if kernel is None:
        return None
    # convolution_overrideable has no CPU kernel of its own: the CPU computes convolution.
    original = aten.convolution.default if name == "convolution_overrideable" else op._op
    return functools.partial(kernel, original)
