"""``linalg_vector_norm`` and ``norm`` (their ``out=`` kernels, which the functional calls,
``torch.norm``, ``F.normalize`` and ``torch.dist`` reach) are silently wrong on the real
torch-directml 0.2.5 binary in three ways, measured with OpInfo's samples:

* an ``ord`` other than 0, 1 and 2 **overwrites the input** with ``|x| ** ord`` (``|x|`` for
  ``inf``/``-inf``): the norm is right, but ``x / x.norm(0.5, dim, keepdim=True)``
  (``F.normalize(p=0.5)``) divides the powered values, and autograd's saved input is gone;
* that power is taken, and summed, in float16 for a float16 input, where the CPU
  accumulates in float32: ``torch.dist(a, b, 4)`` saturates at ``65504 ** (1/4) = 15.99``,
  larger powers give ``inf``; and ``dtype=torch.float32`` is ignored (a float16 result);
* ``keepdim=True`` over every dimension (``dim`` None or empty) gives a 0-dim result;
* ``out=`` with such a finite ``ord`` is left as it was: the kernel returns a new tensor
  (the functional overload returns that one, so only ``out=`` calls see it).

``ord`` 0, 1 and 2 leave the input alone and are right, float16 too (their own reductions),
as is ``dtype=`` with them; so is a list of every dimension.  The fix stays on the device: a
copy of the input for the kernel to overwrite, in float32 for float16 (the result cast back,
as the CPU's), its result written into ``out``, and every dimension named.  The functional overloads hold the same fix (the
emulator gives them kernels of their own); on the real binary they reach the ``out=`` one.
No public report.
"""
from __future__ import annotations

import torch

from ..laws.norms import every_dim_kept, norm_arguments, norm_differs, overwrites
from . import _opmath, _select
from .dispatcher import Done
from ._patch import Patch

PATCH = Patch("vector_norm", "linalg_vector_norm/norm with an ord other than 0, 1, 2 overwrite the input with "
                             "abs(x)**ord, in float16 for float16 (saturated, dtype= ignored); keepdim over every "
                             "dimension gives 0-dim (measured on the real 0.2.5 binary): a copy for the kernel, "
                             "float32 for float16, every dimension named, on the device")

_aten = torch.ops.aten
OUT = {_aten.linalg_vector_norm.default: _aten.linalg_vector_norm.out, _aten.norm.ScalarOpt_dim: _aten.norm.out}


def _shape(self, dim, keepdim) -> list:
    """The result's shape (``dim`` None or empty: every dimension)."""
    # a 0-dim tensor takes dim 0 or -1, as one of a single dimension (no modulo by zero)
    dims = {d % max(self.dim(), 1) for d in dim} if dim else set(range(self.dim()))
    return [1 if i in dims else size for i, size in enumerate(self.shape) if keepdim or i not in dims]


def _into_out(op, keyset, args, kwargs):
    """The ``out=`` overloads: every dimension named; for an overwriting ``ord``, the kernel on a
    copy of the input (float32 for float16, or the ``dtype`` asked for), its result (the kernel
    returns a new tensor, ``out`` left as it was) cast into ``out``."""
    if not norm_differs(args, kwargs):
        return None
    self, ord, dim, keepdim, dtype = norm_arguments(args, kwargs)
    out = kwargs["out"]
    if every_dim_kept(self, dim, keepdim):
        dim = list(range(self.dim()))
    if not overwrites(ord):
        return (self, ord, dim, keepdim), {k: v for k, v in kwargs.items() if k not in ("ord", "p", "dim", "keepdim")}
    compute = dtype or self.dtype
    if ord not in (float("inf"), float("-inf")):      # a max of |x|: exact in any dtype
        compute = _opmath.dtype(compute)
    x = self.to(compute, copy=True)                      # the kernel overwrites its input
    extra = {"dtype": None} if op is _aten.linalg_vector_norm.out else {}
    into = torch.empty(_shape(self, dim, keepdim), dtype=compute, device=self.device)
    _select.grow_out(out, _select.itself(op, keyset, x, ord, dim, keepdim, **extra, out=into))  # not into: its result
    return Done(out)


def _functional(op, keyset, args, kwargs):
    """The functional overloads (the emulator's own kernels; the real binary's reach their
    ``out=`` one): that one, fixed, into a new tensor of the result's shape."""
    if not norm_differs(args, kwargs):
        return None
    self, ord, dim, keepdim, dtype = norm_arguments(args, kwargs)
    out = torch.empty(_shape(self, dim, keepdim), dtype=dtype or self.dtype, device=self.device)
    extra = {"dtype": dtype} if op is _aten.linalg_vector_norm.default else {}
    return Done(OUT[op](self, ord, dim, keepdim, **extra, out=out))


_kernels = _select.Kernels(__name__, {**{op: _into_out for op in OUT.values()}, **{op: _functional for op in OUT}})
install, uninstall = _kernels.install, _kernels.uninstall
