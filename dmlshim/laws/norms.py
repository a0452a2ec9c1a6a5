"""Norms the real torch-directml 0.2.5 binary gets wrong (defects ``vector_norm`` and
``cdist``; measured with OpInfo's samples, no public report).
"""
from __future__ import annotations

import torch


def norm_arguments(args, kwargs) -> tuple:
    """``(self, ord, dim, keepdim, dtype)`` of a ``linalg_vector_norm``/``norm`` call, as the
    overload's schema orders them (``norm``'s ``p`` is ``ord``)."""
    self = args[0]
    ord = args[1] if len(args) > 1 else kwargs.get("ord", kwargs.get("p", 2))
    dim = args[2] if len(args) > 2 else kwargs.get("dim")
    keepdim = args[3] if len(args) > 3 else kwargs.get("keepdim", False)
    return self, ord, dim, keepdim, kwargs.get("dtype")


def overwrites(ord) -> bool:
    """An ``ord`` whose kernel overwrites the input with ``|x| ** ord`` (``|x|`` for +-inf),
    sums it in the input's dtype (float16 saturates at 65504), ignores ``dtype=`` and, with
    ``out=``, returns a new tensor for a finite one (``None``: ``norm``'s default, 2)."""
    return ord is not None and ord not in (0, 1, 2)


def every_dim_kept(self, dim, keepdim) -> bool:
    """``keepdim=True`` over every dimension of a tensor of some: DirectML's result is 0-dim."""
    return bool(keepdim) and (dim is None or len(dim) == 0) and self.dim() > 0


def norm_differs(args, kwargs) -> bool:
    """A ``linalg_vector_norm``/``norm`` call DirectML gets wrong: an overwriting ``ord``, or
    ``keepdim`` over every dimension."""
    self, ord, dim, keepdim, _ = norm_arguments(args, kwargs)
    return isinstance(self, torch.Tensor) and (overwrites(ord) or every_dim_kept(self, dim, keepdim))


def not_3d(x1, x2) -> bool:
    """``cdist``: ``_cdist_forward`` is right only for 3-D inputs (a 2-D pair is read as a batch
    of rows of scalars, other ranks refused).  The failing case: an input that is not 3-D."""
    return isinstance(x1, torch.Tensor) and isinstance(x2, torch.Tensor) and (x1.dim() != 3 or x2.dim() != 3)


def empty_3d(x1, x2) -> bool:
    """``cdist``: 3-D inputs whose result has no elements are refused (an empty batch, also one
    broadcast against a batch of 1: (0, 4, 5) with (1, 3, 5), or no rows: E_INVALIDARG or 'The
    size of tensor a (0) must match'; measured).  Inputs of no columns, (2, 4, 0) with (2, 3, 0),
    are right (zeros)."""
    return (isinstance(x1, torch.Tensor) and isinstance(x2, torch.Tensor) and x1.dim() == 3 and x2.dim() == 3
            and 0 in (x1.size(0), x2.size(0), x1.size(1), x2.size(1)))
