"""Ops torch-directml runs through its CPU fallback with an empty ``out=`` return it empty.

Measured on the real 0.2.5 binary with OpInfo's samples: ``torch.eye(3, device=dml)`` has
shape ``[0]``, so do ``kthvalue``, ``median(dim)``, ``nanmedian(dim)`` and ``linalg.lstsq``'s
results.  Their functional overloads are torch's composites, which make an empty ``out`` and
call the ``out=`` overload; torch-directml sends that one to the CPU (its ``dml_cpu_fallback``)
and does not resize the device ``out`` to the CPU's result (it cannot: it refuses to grow
an empty tensor, ``fallback._resize``).  A BackendSelect kernel on each such ``out=``
overload computes the call on the CPU, where torch-directml computes it anyway, grows the
``out`` tensors to the CPU's shapes and copies the values in.  Docs: docs/defects.md.
"""
from __future__ import annotations

import torch

from . import _select
from ._patch import Patch

PATCH = Patch("fallback_out", "eye, kthvalue, median/nanmedian(dim), linalg.lstsq come back empty: torch-"
                              "directml's CPU fallback does not grow their empty out= (measured on the real "
                              "0.2.5 binary): on the CPU, the outs grown to the CPU's shapes")

_aten = torch.ops.aten
OPS = (_aten.eye.out, _aten.eye.m_out, _aten.kthvalue.values, _aten.median.dim_values,
       _aten.nanmedian.dim_values, _aten.linalg_lstsq.out, _aten._linalg_solve_ex.result)
_kernels = _select.Kernels(__name__, {op: _select.on_cpu_into_outs for op in OPS})
install, uninstall = _kernels.install, _kernels.uninstall
