"""A reduction over an empty input returns device memory it never wrote on the real
torch-directml 0.2.5 binary: ``sum(empty(0, 3), 0)``, ``prod``, ``mean``,
``linalg_vector_norm`` of an empty tensor and ``linalg.vecdot`` over an empty dimension give
stale values (``-1.2159`` where the CPU gives 0, 1 or NaN; measured: OpInfo's
``linalg.norm``/``vecdot`` samples past the first four).  ``sum`` of an empty 1-D tensor
is right.  Such calls run on the CPU, before the kernel: nothing to compute.  No public
report (docs/conformance.md).
"""
from __future__ import annotations

import torch

from . import _gate, _select
from ._patch import Patch

PATCH = Patch("empty_reduction", "sum/prod/mean/norm/logsumexp of an empty input return device memory never "
                                 "written (measured on the real 0.2.5 binary): on the CPU",
              # before the fixes that share its overloads (vector_norm's linalg_vector_norm, norm),
              # so an empty input never reaches their device kernels
              before=("vector_norm",))

_aten = torch.ops.aten
OVERLOADS = (_aten.sum.default, _aten.sum.dim_IntList, _aten.nansum.default, _aten.prod.default,
             _aten.prod.dim_int, _aten.mean.default, _aten.mean.dim, _aten.linalg_vector_norm.default,
             _aten.norm.Scalar, _aten.norm.ScalarOpt_dim, _aten.logsumexp.default)


@_gate.watching(_gate.Watch(empty=True))
def _empty_input(op, keyset, args, kwargs):
    self = args[0] if args else kwargs["self"]
    if self.numel():
        return None
    return _select.on_cpu(op, args, kwargs)


_kernels = _select.Kernels(__name__, {op: _empty_input for op in OVERLOADS})
install, uninstall = _kernels.install, _kernels.uninstall
