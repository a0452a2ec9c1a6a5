"""``gather`` returns wrong values on DirectML (FCPE's pitch decoder).

RVC-Project/Retrieval-based-Voice-Conversion-WebUI ``infer/fcpe.py`` (torch-directml
0.2.5; failure_modes.md #43) decodes on the CPU because DirectML's ``aten::gather`` returns
wrong bins there; its input is an expanded (stride-0) cent table.  The failing pattern is
not published, so a gather whose input or index is not contiguous runs on the CPU (always
right); contiguous ones stay on the device.  Docs: docs/reported-defects.md.
"""
from __future__ import annotations

import torch

from . import _select

_aten = torch.ops.aten


def _strided(op, keyset, args, kwargs):
    self, index = args[0], args[2]
    if self.is_contiguous() and index.is_contiguous():
        return None
    return _select.on_cpu(op, args, kwargs)


_kernels = _select.Kernels({_aten.gather.default: _strided, _aten.gather.out: _strided})
install, uninstall = _kernels.install, _kernels.uninstall
