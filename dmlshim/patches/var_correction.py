"""``var``/``std_mean`` over every dimension are silently wrong on the real torch-directml 0.2.5
binary when the call names no dimension or no correction.

Measured (``var.correction`` and ``std_mean.correction`` are DirectML kernels; ``std`` and
``var_mean`` go to its CPU fallback and are right): ``x.var()`` and ``torch.std_mean(x)``
(``dim=None``, ``correction=None``) divide by ``n``, not ``n - 1`` (a 5x5x5 input: 27.57 for
27.80); ``dim=[]`` with ``correction=1`` gives ``inf``; ``keepdim=True`` without ``dim`` a 0-dim
result; a 0-dim input no tensor at all.  ``dim=None`` with an explicit ``correction`` and a
list of every dimension are right, so the fix names them and stays on the device (a 0-dim
input runs on the CPU).  ``var(out=)`` divides by ``n`` whatever the correction: the functional
``var``, copied into ``out``.  No public report (OpInfo's ``var`` and ``std_mean`` samples).
"""
from __future__ import annotations

import torch

from .. import fallback
from . import _select
from .dispatcher import Done
from ._patch import Patch

PATCH = Patch("var_correction", "var()/std_mean() over every dimension without a correction divide by n "
                                "(measured on the real 0.2.5 binary): every dimension and the correction "
                                "named, on the device")

_aten = torch.ops.aten
OPS = (_aten.var.correction, _aten.std_mean.correction)


def _every_dim(op, keyset, args, kwargs):
    self = args[0]
    kwargs = dict(kwargs)
    dim = args[1] if len(args) > 1 else kwargs.pop("dim", None)
    if dim is not None and len(dim) > 0 and kwargs.get("correction") is not None:
        return None
    if self.dim() == 0:
        return _select.on_cpu(op, args, kwargs)
    if dim is None or len(dim) == 0:
        dim = list(range(self.dim()))
    correction = kwargs.get("correction")
    return (self, dim), {**kwargs, "correction": 1 if correction is None else correction}


def _through_functional(op, keyset, args, kwargs):
    """``var(out=)``: its kernel divides by ``n`` whatever the correction (measured): the
    functional ``var`` (fixed above), copied into ``out``."""
    kwargs = dict(kwargs)
    out = kwargs.pop("out")
    return Done(fallback.write_out(out, _aten.var.correction(*args, **kwargs)))


_kernels = _select.Kernels(__name__, {**{op: _every_dim for op in OPS},
                            _aten.var.correction_out: _through_functional})
install, uninstall = _kernels.install, _kernels.uninstall
