"""Calls the real torch-directml 0.2.5 binary refuses, run on the CPU however they are reached.

Measured with OpInfo's samples under ``realdml run``: the overloads of :data:`GROUPS`
raise for some inputs where the CPU computes an answer (one ``Defect`` per group in
``dmlshim.catalogue``, switched on by its probe; the cases: docs/defects.md, "Seen on the
real binary: refused calls").  ``fallback="auto"`` retries such a call when it comes
through a Python entry point, but a reference bound before ``activate()`` (OpInfo's), a
C++ composite (``F.linear`` -> ``addmm``, ``one_hot`` -> ``scatter_``) or TorchScript
reaches the kernel without one.  So each overload gets a BackendSelect kernel
(``_select.py``): the device first and, on a DirectML-class error
(:func:`dmlshim.errors.classify`), the same call on the CPU, its result back on the
device.  A try, not a test of the inputs: the conditions are only partly known (some
transposed convolutions fail, others with the same dtype do not), and a try costs nothing
where the device works.  The ``*_scatter`` ops always fail (torch's composite clones
through the storage an opaque DirectML tensor lacks), so they go to the CPU without one.
``gather`` and ``repeat`` share their overloads with the ``gather`` and ``repeat`` patches
(``_select``'s chain: those fixes first, the retry last).
"""
from __future__ import annotations

from typing import Dict, List, Tuple

import torch

from .. import errors, fallback, trace
from . import _gate, _select
from .dispatcher import Done, below
from ._patch import Patch

PATCH = Patch("refused", "calls the real 0.2.5 binary refuses (3-D and integer convolution, avg_pool's "
                         "divisor_override, zero-size mm/addmm, integer log2/isnan/sinc, partial scatter, "
                         "the *_scatter ops): retried on the CPU at BackendSelect, however reached",
              # its retry answers every call it holds, so the fixes that share its overloads go first
              # (_select sorts each chain by the declared order)
              after=("gather", "repeat", "adaptive_pool", "int_range", "int_addmm", "conv_transpose_padding",
                     "avg_pool_ceil"))

_aten = torch.ops.aten
_CATCH = (RuntimeError, NotImplementedError)


def _on_cpu(op, keyset, args, kwargs):
    """Always on the CPU: the device call cannot succeed (``storage_scatter``)."""
    return _select.on_cpu(op, args, kwargs)


@_gate.watching(_gate.Watch(catch=True))
def _retry(op, keyset, args, kwargs):
    """The device first; a DirectML-class error runs the call on the CPU (the CPU's own
    error, if it has one, is what the caller sees, as without DirectML)."""
    try:
        with trace.own():                       # the call as it is: the op's own time
            return Done(op.redispatch(below(keyset), *args, **kwargs), record=False)
    except _CATCH as exc:
        if errors.classify(exc) != errors.RETRY:
            raise
        failed = exc                            # past the except: its frames not held by the CPU run
    first = op._schema.arguments[0].alias_info
    # in place (an out= overload writes its out): on a copy, written back
    on_cpu = _select.in_place_on_cpu if first is not None and first.is_write else _select.on_cpu
    return fallback.cpu_retry(failed, lambda: on_cpu(op, args, kwargs))


GROUPS: Dict[str, Tuple[torch._ops.OpOverload, ...]] = {
    "storage_scatter": (_aten.diagonal_scatter.default, _aten.select_scatter.default,
                        _aten.slice_scatter.default, _aten.as_strided_scatter.default),
    "conv_refused": (_aten.convolution.default,),
    "avg_pool_refused": (_aten.avg_pool2d.default, _aten.avg_pool3d.default),
    "zero_size_refused": (_aten.mm.default, _aten.addmm.default, _aten.index_select.default,
                          _aten._adaptive_avg_pool2d.default, _aten.gather.default,
                          _aten.repeat.default),
    "int_math_refused": (_aten.log10.default, _aten.log2.default, _aten.isnan.default,
                         _aten.isinf.default, _aten.sinc.default),
    "scatter_partial": (_aten.scatter.src, _aten.scatter.value, _aten.scatter.reduce,
                        _aten.scatter.value_reduce, _aten.scatter_.src, _aten.scatter_.value,
                        _aten.scatter_.reduce, _aten.scatter_.value_reduce,
                        _aten.scatter_add.default, _aten.scatter_add_.default, _aten.scatter.src_out,
                        _aten.scatter.value_out, _aten.scatter.reduce_out, _aten.scatter.value_reduce_out,
                        _aten.scatter_add.out),
}
_FIX = {"storage_scatter": _on_cpu}


def fix_name(group: str) -> str:
    """The name a ``Defect`` gives to switch ``group`` on (``"refused:conv_refused"``)."""
    return "refused:" + group


# made here, not at install: _select.tables() lists every group's overloads, on or off
_by_group = {group: _select.Kernels(__name__, {op: _FIX.get(group, _retry) for op in ops})
             for group, ops in GROUPS.items()}
_kernels: List[_select.Kernels] = []
_groups: List[str] = []


def install(ctx) -> None:
    """A BackendSelect kernel per overload of each group whose defect is on."""
    if _kernels:
        return
    for group, kernels in _by_group.items():
        if ctx.enabled(fix_name(group)):
            kernels.install(ctx)
            _kernels.append(kernels)
            _groups.append(group)


def uninstall() -> None:
    while _kernels:
        _kernels.pop().uninstall()
    _groups.clear()


def installed() -> List[str]:
    """The groups whose kernels are registered now."""
    return list(_groups)
