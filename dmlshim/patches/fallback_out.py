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

from .. import fallback, trace
from . import _select
from .dispatcher import Done

_aten = torch.ops.aten
OPS = (_aten.eye.out, _aten.eye.m_out, _aten.kthvalue.values, _aten.median.dim_values,
       _aten.nanmedian.dim_values, _aten.linalg_lstsq.out, _aten._linalg_solve_ex.result)


def out_names(op) -> list:
    return [a.name for a in op._schema.arguments if a.is_out]


_cpu = trace.to_host             # the inputs on the CPU, counted as the shim's reads


def _write(out: torch.Tensor, cpu: torch.Tensor) -> None:
    """``out`` grown to ``cpu``'s shape and given its values.  An empty result takes a new
    tensor (``.data``): resizing an empty device tensor to another empty shape looks right
    on the real binary, but the composite's result keeps ``[0]`` and the process ends with
    signal 11 at exit (``eye(0)``)."""
    if cpu.numel() == 0:
        with torch.inference_mode(out.is_inference()):
            out.data = torch.empty(cpu.shape, dtype=out.dtype, device=out.device)
        return
    if out.shape != cpu.shape:
        fallback._resize(out, cpu.shape)
    out.copy_(cpu)


def _on_cpu_into_outs(op, keyset, args, kwargs):
    names = out_names(op)
    outs = [kwargs[n] for n in names]

    def run(f, a, k):
        with fallback.guard():
            cpu_outs = {n: torch.empty(0, dtype=o.dtype) for n, o in zip(names, outs)}
            f(*[_cpu(x) for x in a], **{n: _cpu(v) for n, v in k.items() if n not in cpu_outs}, **cpu_outs)
            for out, n in zip(outs, names):
                _write(out, cpu_outs[n])
        return "cpu", outs[0] if len(outs) == 1 else tuple(outs)

    return Done(trace.call(op.name(), run, op, args, kwargs), record=False)


_kernels = _select.Kernels({op: _on_cpu_into_outs for op in OPS})
install, uninstall = _kernels.install, _kernels.uninstall
