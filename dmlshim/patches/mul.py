"""float x bool multiplication returns **bool** on DirectML (silent wrong result).

DirectML#686, #737 (torch-directml 0.2.5 / torch 2.4.1; failure_modes.md #17): on
``privateuseone``, ``float_t * bool_t``, ``float_t *= bool_t`` and ``.mul_()`` give a
bool tensor: the float values are lost.  This is the root cause of FunASR's SANM
"conv1d got a bool input" (``inputs = inputs * mask``).

Fix, on the device and without a transfer: cast the bool operand to the dtype the CPU
would compute in (``torch.result_type``; for in-place ops the dtype of ``self``) and
redispatch.  Casting 0/1 is exact, so results equal the CPU's.  One BackendSelect fix
per ``mul`` overload (``_select``), so it holds however the op is reached: Python,
C++ composites (``ldexp``), ``torch.ops.aten``, ``backward()``.  torch-directml has one
kernel, ``mul.out`` (dml_registered_ops.txt); ``mul.Tensor`` and ``mul_.Tensor`` reach it
through torch's structured wrappers; the emulator has a kernel per overload.  A Python
complex operand (``x * 1j``) is the ``dtypes`` patch's: a CPU island.
"""
from __future__ import annotations

import torch

from .. import fallback, trace
from . import _gate, _select
from ._patch import Patch

PATCH = Patch("mul", "float x bool returns bool on DirectML: the bool operand cast first, at "
                     "BackendSelect (DirectML#686, #737; failure_modes.md #17)")

_aten = torch.ops.aten
_BOOL = torch.bool


def _refuse_out(a, b, out) -> None:
    """Raise the CPU's error for an ``out=`` dtype the result cannot be cast to ("result type
    Float can't be cast to the desired output type Bool"), which DirectML does not raise
    (failure_modes.md #65): the same call on the meta device."""
    def meta(t):
        return torch.empty(t.shape, dtype=t.dtype, device="meta") if isinstance(t, torch.Tensor) else t
    _aten.mul.out(meta(a), meta(b), out=meta(out))


def coerce_bool_operands(args, kwargs, inplace: bool, below=None):
    """Return ``(args, kwargs)`` of a ``mul`` call (the dispatcher passes ``self`` and
    ``other`` positionally) with the bool tensor operand cast to the computation dtype, or
    None when nothing needs casting (no bool operand, both bool, or an in-place op on a
    bool ``self`` whose result is bool anyway).  ``below``: the key set a device operand's
    cast is redispatched with, past every BackendSelect kernel (nothing there concerns a cast
    of 0/1 between dtypes the device holds); a CPU one (``x * True``'s wrapped number) is cast
    as it is."""
    a, b = args[0], args[1]
    a_bool = isinstance(a, torch.Tensor) and a.dtype is _BOOL
    b_bool = isinstance(b, torch.Tensor) and b.dtype is _BOOL
    if a_bool == b_bool or (inplace and a_bool):
        return None
    dtype = a.dtype if inplace else torch.result_type(a, b)
    if dtype is _BOOL:
        return None
    out = kwargs.get("out")
    if out is not None and not torch.can_cast(dtype, out.dtype):
        _refuse_out(a, b, out)
    # the cast: work done instead of DirectML's bool result (trace's substitute)
    cast = a if a_bool else b
    cast = trace.region(True, cast.to, dtype) if below is None or cast.is_cpu else \
        trace.region(True, _aten._to_copy.default.redispatch, below, cast, dtype=dtype)
    operands = (cast, b) if a_bool else (a, cast)
    return (*operands, *args[2:]), kwargs


def _bool_operand(inplace: bool):
    """The fix of one overload: :func:`coerce_bool_operands`, then the cast call made again
    from the top, so the gate and the rest of the chain see it as any other (``rank_limit``'s
    past 5 dimensions, ``int_range``'s spans; a float product passes in C++); an in-place
    ``mul_`` of an empty ``self``: :func:`_empty_inplace`."""
    @_gate.watching(_gate.Watch(dtypes=frozenset({_BOOL}), numbers=frozenset({_BOOL}), empty=inplace))
    def fix(op, keyset, args, kwargs):
        if inplace and args[0].numel() == 0:
            return _empty_inplace(op, args, kwargs)
        fixed = coerce_bool_operands(args, kwargs, inplace, _select.below(keyset))
        return fixed and _select.Done(trace.region(False, op, *fixed[0], **fixed[1]))
    return fix


def _empty_inplace(op, args, kwargs):
    """``mul_`` of an empty ``self``: nothing to write, so ``self`` itself after the CPU's own
    checks on empty CPU stand-ins (shapes, dtypes; ``meta`` lets int64 ``*=`` float pass).
    The real 0.2.5 binary gives an empty tensor copied over strides such as (0, 1, 0) for
    (2, 0, 1), which TensorIterator then refuses as "more than one element of the
    written-to tensor refers to a single memory location" (measured; tests/test_patch_mul.py's
    property test)."""
    stand_in = lambda t: torch.empty(t.shape, dtype=t.dtype) if isinstance(t, torch.Tensor) else t  # noqa: E731
    with fallback.guard():
        op(stand_in(args[0]), stand_in(args[1]), *args[2:], **kwargs)
    return _select.Done(args[0], record=False)


# Also while the shim does its own work (fallback.busy()): its device products are fixed too.
_kernels = _select.Kernels(__name__, {_aten.mul.Tensor: _bool_operand(inplace=False),
                            _aten.mul_.Tensor: _bool_operand(inplace=True),
                            _aten.mul.out: _bool_operand(inplace=False)}, while_busy=True)
install, uninstall = _kernels.install, _kernels.uninstall
