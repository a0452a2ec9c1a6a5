"""``adaptive_avg_pool`` with uneven windows is silently wrong on the real torch-directml 0.2.5 binary.

PyTorch's output ``j`` of an input of size ``i`` averages ``[floor(j*i/o), ceil((j+1)*i/o))``;
DirectML's averages ``kernel = i - (o-1)*stride`` values at ``stride = i // o`` (measured on
ramps, 8 -> 3 and 6 -> 4; ``F.interpolate(mode="area")`` and ``adaptive_avg_pool1d`` go the
same way), and an upsampling (``i < o``) returns an earlier call's values.  The two agree
exactly where PyTorch's windows are that even grid (8 -> 4, 7 -> 3, 5 -> 2 measured right), so
such a call stays on the device; the others run on the CPU.  No public report (OpInfo's
``adaptive_avg_pool1d``/``2d`` and ``interpolate(area)`` samples; docs/defects.md).
"""
from __future__ import annotations

import torch

from ..laws.pooling import dml_windows_agree
from . import _select
from ._patch import Patch

PATCH = Patch("adaptive_pool", "adaptive_avg_pool with windows off DirectML's grid (stride = in // out; "
                               "upsampling) is silently wrong (measured on the real 0.2.5 binary): on the CPU")

_aten = torch.ops.aten


def _uneven(op, keyset, args, kwargs):
    self, output_size = args[0], args[1]
    sizes = self.shape[-len(output_size):]
    if all(dml_windows_agree(int(i), int(o)) for i, o in zip(sizes, output_size)):
        return None
    return _select.on_cpu(op, args, kwargs)


_kernels = _select.Kernels(__name__, {_aten._adaptive_avg_pool2d.default: _uneven})
install, uninstall = _kernels.install, _kernels.uninstall
