"""``nn.PReLU(num_parameters=C)`` on a 3-D or larger input fails on torch-directml 0.2.5.

A 4-D or 5-D input aborts the process: ``Check failed: rank <= DML_TENSOR_DIMENSION_COUNT_MAX``
(dml_tensor_desc.cc; microsoft/DirectML#271 for GPEN, #445; failure_modes.md #29); a
3-D one raises "The size of tensor a (C) must match the size of tensor b (N)" (the real
binary).  Real-ESRGAN's SRVGGNetCompact (realesr-general-x4v3, realesr-animevideov3),
GPEN and RIFE call it.  One parameter, or a 2-D input, takes another route and is left
alone.  An empty input raises "cannot reshape tensor of 0 elements into shape [1, 0, -1]"
with any weight (the real binary, OpInfo's ``prelu`` sample 1; not modelled by the
emulator), and so do element-wise ops of such tensors: it is computed on the CPU (an empty
round trip), autograd through the copies.  Otherwise fixed on the device: ``aten::prelu`` as ``relu(x) - w * (-x).clamp_min(0)``
(clamp_min's gradient at 0 is 1: the input's gradient at 0 is ``w``, as the CPU's), at the
target's Autograd and backend keys (as ``dispatcher.COMPOSITES``): autograd differentiates
the elementwise ops.  Never probed (an abort cannot be caught): a static defect.  Docs: docs/defects.md.
"""
from __future__ import annotations

import time

import torch

from .. import trace
from . import _select
from ._patch import Patch

PATCH = Patch("prelu", "PReLU(C) on a >= 3-D input aborts the process (DirectML#271, #445; #29): "
                       "relu(x) - w * (-x).clamp_min(0), on the device")

_prelu = torch.ops.aten.prelu.default


def _channel_weights(x, weight) -> bool:
    """A call that reaches DirectML's failing route: one weight per channel of a >= 3-D
    input (and arguments aten::prelu accepts; anything else gets its own error)."""
    return (weight.numel() > 1 and x.dim() >= 3 and weight.dim() == 1 and x.shape[1] == weight.numel()
            and x.dtype == weight.dtype and x.device == weight.device)


def _empty(x, weight) -> bool:
    """An empty input with one weight, or one per channel (what aten::prelu accepts)."""
    return (x.numel() == 0 and x.dtype == weight.dtype and x.device == weight.device
            and (weight.numel() == 1 or (x.dim() >= 2 and x.shape[1] == weight.numel())))


def _kernel(target: str):
    def kernel(x, weight):
        if x.device.type == target and (_channel_weights(x, weight) or _empty(x, weight)) \
                and not _select.aside():
            start = time.perf_counter()
            if x.numel() == 0:      # element-wise ops of empty tensors fail there too: the CPU's
                result = _prelu(x.cpu(), weight.cpu()).to(x.device)
            else:
                w = weight.view(1, -1, *[1] * (x.dim() - 2))
                result = torch.relu(x) - w * (-x).clamp_min(0)
            seconds = time.perf_counter() - start       # computed another way: substitute work
            trace.record("aten::prelu", "coerce", seconds, args=(x, weight), substitute=seconds)
            return result
        return _prelu.decompose(x, weight)
    return kernel


_kernels = _select.CompositeKernels("prelu", _kernel)
install, uninstall = _kernels.install, _kernels.uninstall
