"""``max_pool2d`` with ``ceil_mode=True`` is wrong on the real torch-directml 0.2.5 binary.

Measured with OpInfo's samples: the forward returns floor mode's shape (``[1, 2, 1, 2]``
where the CPU's is ``[1, 2, 1, 3]``), a 1-D pool of the same length picks other indices, and
the backward puts some gradients elsewhere.  ``max_pool1d``/``max_pool2d`` (with or without
indices) reach ``max_pool2d_with_indices``, the DirectML kernel, and autograd its backward;
with ``ceil_mode`` both run on the CPU (always right), the rest stays on the device.
Docs: docs/defects.md.
"""
from __future__ import annotations

import torch

from . import _select
from ._patch import Patch

PATCH = Patch("max_pool_ceil", "max_pool2d with ceil_mode=True gives floor mode's shape, other indices and "
                               "gradients (measured on the real 0.2.5 binary): with ceil_mode on the CPU")

_aten = torch.ops.aten


def _ceil_mode(at: int):
    def fix(op, keyset, args, kwargs):
        ceil = args[at] if len(args) > at else kwargs.get("ceil_mode", False)
        return _select.on_cpu(op, args, kwargs) if ceil else None
    return fix


# max_pool2d_with_indices(self, kernel_size, stride, padding, dilation, ceil_mode);
# its backward(grad_output, self, kernel_size, stride, padding, dilation, ceil_mode, indices)
_kernels = _select.Kernels(__name__, {_aten.max_pool2d_with_indices.default: _ceil_mode(5),
                            _aten.max_pool2d_with_indices_backward.default: _ceil_mode(6)})
install, uninstall = _kernels.install, _kernels.uninstall
