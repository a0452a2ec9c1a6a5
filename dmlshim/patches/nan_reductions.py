"""``amax``/``max``/``min``/``argmax``/``argmin``, ``logsumexp`` and the inf-norms skip NaN on the
real torch-directml 0.2.5 binary (``laws.nan``: a slice with a NaN gives the max of the rest,
its index, or NaN for ``logsumexp`` of -inf only; measured by hand after OpInfo's ``masked.*``
samples).  ``amin`` keeps NaN, so the fix stays on the device and reads nothing: ``amax`` and
``max()`` are ``-amin(-x)``, ``min()`` is ``amin``, the inf-norms those of ``|x|`` (one
elementwise pass more, or none); for the indices, the kernel's, then one ``max(dim)`` of the NaN
mask (``isnan``, cast: two passes) gives whether a slice holds a NaN and where its first is, put
in by ``where``; ``logsumexp`` gets ``-amin(-x)`` where that is -inf or +inf.  Measured on
lavapipe (its kernels run on the CPU): ``argmax`` of (4, 32000) 3.2x, ``max(dim)`` 1.7x, the
others 0.4x to 1.5x.  No public report (docs/conformance.md).
"""
from __future__ import annotations

import torch

from ..laws.nan import INDICES, OPS, nan_blind, reduced
from .. import trace
from . import _select
from .dispatcher import Done, below
from ._patch import Patch

PATCH = Patch("nan_reductions", "amax/max/min/argmax/argmin, logsumexp and the inf-norms skip NaN (measured on the "
                                "real 0.2.5 binary): NaN, its first index, or logsumexp's -inf/inf put in by where, "
                                "on the device (three to five more kernels a call, no read)",
              # after int_range, whose argmax/max(dim) indices' span it keeps (its fix passes the call
              # on to this one); before vector_norm, whose fixed norm it amends
              after=("int_range", "empty_reduction"), before=("vector_norm", "bool_minmax"))

_aten = torch.ops.aten
_NAN = float("nan")
_MAX = (_aten.amax.default, _aten.max.default)


def _max(x, dims, keepdim):
    """The CPU's ``amax``: ``-amin(-x)``; the device's ``amin`` keeps NaN."""
    return torch.amin(x.neg(), dims, keepdim).neg()


def _with_nan(op, keyset, args, kwargs):
    if not nan_blind(op, args, kwargs):
        return None
    self = args[0]
    dims, keepdim = reduced(op, args, kwargs)
    if op in _MAX or op is _aten.min.default or op is _aten.linalg_vector_norm.default:
        with trace.substitute():                # the op computed another way on the device
            return Done(_another_way(op, self, dims, keepdim, args, kwargs))
    result = _select.pass_on(op, keyset, args, kwargs, after=_with_nan)    # the op's own kernel
    with trace.substitute():                    # the extra kernels that put the NaN back
        return Done(_nan_back(op, keyset, self, dims, keepdim, result))


def _another_way(op, self, dims, keepdim, args, kwargs):
    if op in _MAX:
        return _max(self, dims, keepdim)
    if op is _aten.min.default:
        return torch.amin(self, dims)
    ord = args[1] if len(args) > 1 else kwargs.get("ord")      # linalg_vector_norm, ord inf or -inf:
    dtype = kwargs.get("dtype")                                 # a max/min of |x|
    size = self.abs()
    norm = _max(size, dims, keepdim) if ord > 0 else torch.amin(size, dims, keepdim)
    return norm if dtype is None else norm.to(dtype)


def _nan_back(op, keyset, self, dims, keepdim, result):
    if op is _aten.logsumexp.default:       # -inf only, or +inf (no NaN): that max itself
        top = _max(self, dims, keepdim)
        return torch.where(torch.isinf(top), top.to(result.dtype), result)
    # indices: where a slice holds a NaN, its first (one max.dim of the NaN mask, below the fixes)
    mask = torch.isnan(self).to(self.dtype)
    if dims is None:
        found, first = _aten.max.dim.redispatch(below(keyset), mask.reshape(-1), 0, False)
        if keepdim:
            found, first = found.reshape([1] * self.dim()), first.reshape([1] * self.dim())
    else:
        found, first = _aten.max.dim.redispatch(below(keyset), mask, dims[0], keepdim)
    found = found > 0
    if op in (_aten.argmax.default, _aten.argmin.default):
        return torch.where(found, first, result)
    values, indices = result
    return torch.where(found, _NAN, values), torch.where(found, first, indices)


_kernels = _select.Kernels(__name__, {op: _with_nan for op in OPS})
install, uninstall = _kernels.install, _kernels.uninstall
