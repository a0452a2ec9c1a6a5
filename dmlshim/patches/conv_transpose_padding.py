"""Transposed convolutions with an ``output_padding`` are silently wrong on the real
torch-directml 0.2.5 binary: the forward leaves the last ``output_padding`` positions of
each spatial dimension at zero (the bias too), and ``convolution_backward`` zeroes the last
``output_padding`` positions of the input's gradient and gives another weight gradient (the
bias gradient is right).  Measured with OpInfo's ``conv_transpose1d``/``2d`` samples (stride 2,
padding 2, output_padding 1) and on ramps; without an ``output_padding`` both are right.

Fixed on the device: the transposed convolution without padding or ``output_padding`` (the
whole output), cropped by ``padding`` and zero-extended by ``output_padding`` as PyTorch's
output is, the bias added; its backward from the gradient placed in that whole output
(zeros where the crop cut), the bias gradient the gradient's sum.  Autograd records
``convolution`` with the caller's arguments, so both overloads hold a fix.  No public report.
"""
from __future__ import annotations

import torch

from . import _gate, _select
from .dispatcher import Done
from ._patch import Patch

PATCH = Patch("conv_transpose_padding", "transposed convolutions with an output_padding leave its last "
                                        "positions zero, their backward wrong (measured on the real 0.2.5 "
                                        "binary): without padding, cropped and extended, on the device")

_aten = torch.ops.aten
_FORWARD = ("input", "weight", "bias", "stride", "padding", "dilation", "transposed", "output_padding", "groups")
_BACKWARD = ("grad_output", "input", "weight", "bias_sizes", "stride", "padding", "dilation", "transposed",
             "output_padding", "groups", "output_mask")


def _bound(names, args, kwargs):
    return {**dict(zip(names, args)), **kwargs}


def _each(values, n):
    values = [int(v) for v in values]
    return values * n if len(values) == 1 else values


def padded(a) -> bool:
    """A 1-D or 2-D transposed convolution with an ``output_padding`` (the bound arguments
    ``a``). A 3-D one is refused ("input must be 4-dimensional"): ``refused``'s retry runs it
    on the CPU as it is."""
    return (bool(a["transposed"]) and any(int(p) for p in a["output_padding"])
            and 3 <= a["input"].dim() <= 4)


def _geometry(a):
    """Per spatial dimension: padding, output_padding and the whole output's size
    ``(in - 1) * stride + dilation * (kernel - 1) + 1``."""
    n = a["input"].dim() - 2
    stride, padding, dilation, extra = (_each(a[k], n) for k in ("stride", "padding", "dilation", "output_padding"))
    whole = [(int(i) - 1) * s + d * (int(k) - 1) + 1
             for i, k, s, d in zip(a["input"].shape[2:], a["weight"].shape[2:], stride, dilation)]
    return n, stride, dilation, padding, extra, whole


@_gate.watching(_gate.Watch(set_bool=True))
def _forward(op, keyset, args, kwargs):
    a = _bound(_FORWARD, args, kwargs)
    if not padded(a):
        return None
    n, stride, dilation, padding, extra, whole = _geometry(a)
    if any(w + e - 2 * p <= 0 for w, e, p in zip(whole, extra, padding)):
        return None                                     # the device's (or torch's) error
    result = _aten.convolution.default(a["input"], a["weight"], None, stride, [0] * n, dilation, True,
                                       [0] * n, a["groups"])
    pads = []
    for dim, (w, e, p) in enumerate(zip(whole, extra, padding)):
        end = min(w, w + e - p)                         # PyTorch's output: [p, w + e - p) of the whole
        result = result.narrow(dim + 2, p, end - p)
        pads = [0, w + e - p - end] + pads
    if any(pads):
        result = _aten.constant_pad_nd.default(result, pads, 0)
    if a["bias"] is not None:
        return Done(result + a["bias"].view(1, -1, *([1] * n)))
    return Done(result.contiguous())


def _backward(op, keyset, args, kwargs):
    a = _bound(_BACKWARD, args, kwargs)
    if not padded(a):
        return None
    n, stride, dilation, padding, extra, whole = _geometry(a)
    grad, pads = a["grad_output"], []
    for dim, (w, p) in enumerate(zip(whole, padding)):
        keep = min(w - p, grad.shape[dim + 2])          # the output's [0, keep) is the whole's [p, p + keep)
        if keep <= 0:
            return None
        grad = grad.narrow(dim + 2, 0, keep)
        pads = [p, w - p - keep] + pads
    if any(pads):
        grad = _aten.constant_pad_nd.default(grad, pads, 0)
    mask = list(a["output_mask"])
    grad_input, grad_weight, _ = _aten.convolution_backward.default(
        grad, a["input"], a["weight"], None, stride, [0] * n, dilation, True, [0] * n, a["groups"],
        [mask[0], mask[1], False])
    grad_bias = a["grad_output"].sum([0, *range(2, n + 2)]) if mask[2] else None
    return Done((grad_input, grad_weight, grad_bias))


_kernels = _select.Kernels(__name__, {_aten.convolution.default: _forward, _aten.convolution_backward.default: _backward})
install, uninstall = _kernels.install, _kernels.uninstall
