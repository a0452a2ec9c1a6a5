"""``gather``, ``scatter`` and ``scatter_add`` with a negative ``dim`` are wrong on DirectML.

RVC-Project/Retrieval-based-Voice-Conversion-WebUI ``infer/fcpe.py`` (torch-directml
0.2.5; failure_modes.md #43) decodes on the CPU because DirectML's ``aten::gather`` returns
wrong bins there; it gathers with ``dim=-1``.  On the real 0.2.5 binary ``dim=-1`` is the
fault, whatever the strides: ``gather`` returns ``self``'s own leading elements,
``scatter(dim, index, src)`` and ``scatter_add`` write ``src`` where it lies, as if the index
were ``arange`` along ``dim``; ``dim=-2`` and below are refused (E_INVALIDARG).  The same
calls with the dimension counted from 0 are right, expanded and strided inputs included
(measured; docs/defects.md).  SenseVoice's CTC forced alignment gathers the same way.
The fix counts the dimension from 0, on the device; an out-of-range ``dim`` runs on the CPU,
for torch's own error.  Docs: docs/reported-defects.md.
"""
from __future__ import annotations

import torch

from . import _select
from .dispatcher import Done
from ._patch import Patch

PATCH = Patch("gather", "gather gives wrong values (RVC infer/fcpe.py; #43): strided gathers on the CPU")

_aten = torch.ops.aten
# torch-directml's kernels are gather.out, scatter.src_out, scatter_add.out (dml_registered_ops.txt);
# the functional and in-place overloads reach them through torch's structured wrappers, and
# the out= ones' results are written back (dispatcher.fix_kernel: #65's rebinding).
OVERLOADS = (_aten.gather.default, _aten.gather.out, _aten.scatter.src, _aten.scatter_.src,
             _aten.scatter.src_out, _aten.scatter_add.default, _aten.scatter_add_.default,
             _aten.scatter_add.out)


def _dim_from_zero(op, keyset, args, kwargs):
    self, dim = args[0], args[1]
    if dim >= 0:
        return None
    rank = max(self.dim(), 1)
    if dim < -rank:
        return _select.on_cpu(op, args, kwargs)     # torch's "Dimension out of range"
    # on through the rest of the chain: refused's CPU retry of a partial scatter
    return Done(_select.pass_on(op, keyset, (self, dim + rank, *args[2:]), kwargs, after=_dim_from_zero))


_kernels = _select.Kernels(__name__, {op: _dim_from_zero for op in OVERLOADS})
install, uninstall = _kernels.install, _kernels.uninstall
