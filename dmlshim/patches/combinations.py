"""``torch.combinations`` fails on the real torch-directml 0.2.5 binary.

Its C++ composite (``arange``, ``meshgrid``, a triangular bool mask, ``masked_select``,
``stack``) raises "The size of tensor a (n) must match the size of tensor b (0)" for
``n > 1`` inputs and ``m_device->CreateOperator`` for one element, while each of those steps
called from Python is right (measured; not isolated further).  Fixed on the CPU: the whole
op, at the target's Autograd and backend keys (as ``prelu``), its result back on the device
(autograd through the round trip).  No public report (OpInfo's ``combinations`` samples).
"""
from __future__ import annotations

import torch

from . import _select
from ._patch import Patch

PATCH = Patch("combinations", "torch.combinations' C++ composite fails (measured on the real 0.2.5 binary: "
                              "'The size of tensor a (n) must match ... (0)', CreateOperator): on the CPU")

_combinations = torch.ops.aten.combinations.default


def _kernel(target: str):
    def kernel(self, r=2, with_replacement=False):
        if self.device.type == target and not _select.aside():
            return _select.on_cpu(_combinations, (self, r, with_replacement), {}).result
        return _combinations.decompose(self, r, with_replacement)
    return kernel


_kernels = _select.CompositeKernels("combinations", _kernel)
install, uninstall = _kernels.install, _kernels.uninstall
