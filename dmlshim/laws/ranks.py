"""torch-directml 0.2.5 describes most ops' tensors with at most 5 dimensions (a few: 4).

Past that, many ops end the process ('[F dml_tensor_desc.cc:80] Check failed: rank <=
DML_TENSOR_DIMENSION_COUNT_MAX', SIGABRT; microsoft/DirectML#537 in the field), measured on
the real binary (docs/conformance.md; ``benchmarks/rank_sweep.py``, its results in
``benchmarks/results/rank_sweep-realdml.json``): the reductions, scans, sorts, ``cat``,
``where``, ``gather``, ``index_select``, ``flip``, ``layer_norm``, and a binary op whose
operands broadcast there.  ``cumsum``, ``index_select`` and ``native_layer_norm`` refuse 5
already (they raise).  Same-shape elementwise ops, ``softmax``, ``permute`` and a
contiguous copy of a permuted tensor are right.  The fix (``patches/rank_limit.py``) and the
emulator (``emulation/rules_refused.py``) both read this module.
"""
from __future__ import annotations

from typing import Iterable

import torch

RANK_MAX = 5            # the most dimensions the aborting ops' tensor descriptions hold

_aten = torch.ops.aten
# reductions over a list of dimensions (keepdim, dtype): collapsed to (kept, reduced), on the device
REDUCTIONS = (_aten.sum.dim_IntList, _aten.mean.dim, _aten.amax.default)
# ops along one dimension: collapsed to (before, along, after), on the device
ALONG_ONE = (_aten.cumsum.default, _aten.sort.default, _aten.sort.stable,
             _aten.topk.default, _aten.argmax.default, _aten.argmin.default, _aten.max.dim, _aten.min.dim,
             _aten.index_select.default, _aten.gather.default, _aten.flip.default, _aten.cat.default)
WHERE = (_aten.where.self,)
LAYER_NORM = (_aten.native_layer_norm.default,)
# binary ops whose operands broadcast past RANK_MAX: the operands expanded first, on the device
BINARY = (_aten.add.Tensor, _aten.sub.Tensor, _aten.mul.Tensor, _aten.div.Tensor, _aten.eq.Tensor,
          _aten.ne.Tensor, _aten.lt.Tensor, _aten.le.Tensor, _aten.gt.Tensor, _aten.ge.Tensor,
          _aten.maximum.default, _aten.minimum.default)
# kernels that refuse 5 dimensions already (E_INVALIDARG: 'Unknown error -2147024809' on Linux;
# native_layer_norm with a weight: CreateOperator), right at 4 (measured by hand on the real binary)
REFUSE_FIVE = (_aten.cumsum.default, _aten.index_select.default, _aten.native_layer_norm.default)
# the rest measured to end the process past RANK_MAX: on the CPU.  Not their partners: amin, std,
# var_mean, cumprod, logcumsumexp are right at 6 to 8 (and amax, var, std_mean, cumsum are not)
ON_CPU = (_aten.sum.default, _aten.prod.dim_int, _aten.prod.default, _aten.logsumexp.default,
          _aten.any.dim, _aten.any.default, _aten.all.dim, _aten.all.default, _aten.var.correction,
          _aten.std_mean.correction, _aten.linalg_vector_norm.default, _aten.scatter.src, _aten.scatter.value,
          _aten.scatter.reduce, _aten.scatter.value_reduce, _aten.scatter_add.default, _aten.scatter_reduce.two)
# constant_pad_nd: 6 dimensions end the process, 7 and 8 raise 'inputs rank not in [0,6]: 7'
PAD = (_aten.constant_pad_nd.default,)
# in place: on a CPU copy of self, copied back
IN_PLACE_ON_CPU = (_aten.scatter_.src, _aten.scatter_.value, _aten.scatter_.reduce, _aten.scatter_.value_reduce,
                   _aten.scatter_add_.default, _aten.scatter_reduce_.two)
ABORTING = REDUCTIONS + ALONG_ONE + WHERE + LAYER_NORM + ON_CPU + IN_PLACE_ON_CPU


def _tensors(args: Iterable):
    for a in args:
        if isinstance(a, torch.Tensor):
            yield a
        elif isinstance(a, (list, tuple)):
            yield from (t for t in a if isinstance(t, torch.Tensor))


def limit(op) -> int:
    """The most dimensions ``op``'s kernel takes: 4 for :data:`REFUSE_FIVE`, else
    :data:`RANK_MAX`."""
    return 4 if op in REFUSE_FIVE else RANK_MAX


def past_the_limit(args, most: int = RANK_MAX) -> bool:
    """Whether a tensor argument (lists included) has more than ``most`` dimensions."""
    return any(t.dim() > most for t in _tensors(args))


def broadcast_past_the_limit(a, b) -> bool:
    """Two tensor operands of different shapes whose broadcast has more than :data:`RANK_MAX`
    dimensions (a 0-dim operand is a number to the kernel: it does not count)."""
    return (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.dim() > 0 and b.dim() > 0
            and a.shape != b.shape and max(a.dim(), b.dim()) > RANK_MAX)


def expanded(args: tuple) -> tuple:
    """``args`` with its two tensor operands expanded to their broadcast shape where they
    broadcast past :data:`RANK_MAX` (views, no copy: right at any rank), else ``args``."""
    a, b = args[0], args[1]
    if not broadcast_past_the_limit(a, b):
        return args
    shape = torch.broadcast_shapes(a.shape, b.shape)
    return (a.expand(shape), b.expand(shape), *args[2:])


# a binary op of a one-element tensor of more than RANK_MAX dimensions (a keepdim reduction of
# every dimension) ends the process even with same shapes: 'Check failed: broadcast_sizes.size()
# >= sizes.size()' (measured on the real binary: (1,) * 6 and 7; (1,) * 5 and (1, 1, 1, 1, 1, 2)
# are right); unary ops do the same (exp measured; not fixed)
ONE_ELEMENT_ABORT = "[F dml_tensor_desc.cc:76] Check failed: broadcast_sizes.size() >= sizes.size()"


def one_element_past_the_limit(a, b) -> bool:
    """A tensor operand of one element and more than :data:`RANK_MAX` dimensions."""
    return any(isinstance(t, torch.Tensor) and t.dim() > RANK_MAX and t.numel() == 1 for t in (a, b))


# copy_ into a destination of more than RANK_MAX dimensions that is a permutation of a contiguous
# tensor (a permute's or transpose's view) writes the source's values in the destination's
# memory order, its strides ignored (measured on the real binary, silent: 18 to 40 of 48 values
# wrong at 6 to 8 dimensions, 5 right; benchmarks/rank_sweep.py's copy_into_*)
def memory_order(t: torch.Tensor):
    """The permutation that lays ``t`` out in its memory order (strides descending)."""
    return sorted(range(t.dim()), key=lambda i: (-t.stride(i), -t.size(i)))


def copied_in_memory_order(dst: torch.Tensor) -> bool:
    """Whether ``dst.copy_(src)`` is such a call: past the limit, not contiguous, a permutation of
    a contiguous tensor (a destination with gaps is not measured)."""
    return (dst.dim() > RANK_MAX and not dst.is_contiguous()
            and dst.permute(memory_order(dst)).is_contiguous())
