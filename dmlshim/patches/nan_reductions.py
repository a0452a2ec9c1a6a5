"""``amax``/``max``/``min``/``argmax``/``argmin``, ``logsumexp`` and the inf-norms skip NaN on the
real torch-directml 0.2.5 binary (``laws.nan``: a slice with a NaN gives the max of the rest,
its index, or NaN for ``logsumexp`` of -inf only; measured by hand after OpInfo's ``masked.*``
samples).  The fix stays on the device and reads nothing: the kernel's result, then per reduced
slice whether it holds a NaN (``isnan`` reduced by the kernel's own ``amax``) and where its first
NaN is (``argmax`` of that mask), and ``where`` puts NaN, that index, or ``logsumexp``'s -inf/inf
(the NaN-skipping max's) in their places.  It costs every floating call of these ops three to
five more device kernels, no transfer.  No public report (docs/conformance.md).
"""
from __future__ import annotations

import torch

from ..laws.nan import INDICES, OPS, nan_blind, reduced
from . import _select
from .dispatcher import Done, below

_aten = torch.ops.aten
_NAN = float("nan")


def _with_nan(op, keyset, args, kwargs):
    if not nan_blind(op, args, kwargs):
        return None
    result = _select.pass_on(op, keyset, args, kwargs, after=_with_nan)
    self = args[0]
    dims, keepdim = reduced(op, args, kwargs)
    nan = torch.isnan(self).to(self.dtype)
    # the kernels themselves (below BackendSelect): their NaN-free inputs need no fix
    if dims is None:
        first, found = (_aten.argmax.default.redispatch(below(keyset), nan, None, keepdim),
                        _aten.amax.default.redispatch(below(keyset), nan, list(range(self.dim())), keepdim) > 0)
    else:
        found = _aten.amax.default.redispatch(below(keyset), nan, dims, keepdim) > 0
        first = (_aten.argmax.default.redispatch(below(keyset), nan, dims[0], keepdim)
                 if op in INDICES else None)
    if op in (_aten.argmax.default, _aten.argmin.default):
        return Done(torch.where(found, first, result))
    if op in (_aten.max.dim, _aten.min.dim):
        values, indices = result
        return Done((torch.where(found, _NAN, values), torch.where(found, first, indices)))
    if op is _aten.logsumexp.default:          # -inf only, or +inf: the NaN-skipping max itself
        top = _aten.amax.default.redispatch(below(keyset), self, dims, keepdim)
        result = torch.where(torch.isinf(top), top.to(result.dtype), result)
    return Done(torch.where(found, _NAN, result))


_kernels = _select.Kernels({op: _with_nan for op in OPS})
install, uninstall = _kernels.install, _kernels.uninstall
