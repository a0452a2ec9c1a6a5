"""float x bool multiplication returns **bool** on DirectML (silent wrong result).

DirectML#686, #737 (torch-directml 0.2.5 / torch 2.4.1; failure_modes.md #17): on
``privateuseone``, ``float_t * bool_t``, ``float_t *= bool_t`` and ``.mul_()`` give a
bool tensor: the float values are lost.  This is the root cause of FunASR's SANM
"conv1d got a bool input" (``inputs = inputs * mask``).

Fix, on the device and without a transfer: cast the bool operand to the dtype the
CPU would compute in (``torch.result_type``; for in-place ops the dtype of ``self``)
before calling the original.  Casting 0/1 is exact, so results equal the CPU's.
A Python complex operand (``x * 1j``, Vocos' ISTFT head) makes a complex result: it
runs as a CPU island (``patches/dtypes.py``).

failure_modes.md and the routing table document this promotion bug for ``mul`` only
(other binary ops: no report), so only the ``mul`` entry points are wrapped;
``_ENTRY_POINTS`` is the one place to extend.
"""
from __future__ import annotations

import torch

from .. import trace
from . import _gate, dtypes
from ._wrap import Context, PatchSet

_patches = PatchSet(__name__)

# (owner, attribute, in-place?)
_ENTRY_POINTS = (
    (torch, "mul", False), (torch, "multiply", False),
    (torch.Tensor, "mul", False), (torch.Tensor, "multiply", False),
    (torch.Tensor, "__mul__", False), (torch.Tensor, "__rmul__", False),
    (torch.Tensor, "mul_", True), (torch.Tensor, "multiply_", True), (torch.Tensor, "__imul__", True),
)


_KEYS = (("input", "self"), ("other",))      # keyword names of operand 0 and 1


def _operands(args, kwargs):
    return tuple(args[i] if len(args) > i else next((kwargs[k] for k in keys if k in kwargs), None)
                 for i, keys in enumerate(_KEYS))


def _replace_operands(args, kwargs, operands):
    """``args``/``kwargs`` with the two operands replaced where they were passed."""
    args, kwargs = list(args), dict(kwargs)
    for i, (keys, value) in enumerate(zip(_KEYS, operands)):
        if len(args) > i:
            args[i] = value
        else:
            kwargs[next(k for k in keys if k in kwargs)] = value
    return tuple(args), kwargs


def _complex_scalar(args, kwargs) -> bool:
    return any(type(x) is complex for x in _operands(args, kwargs))


def _is_bool(x) -> bool:
    return isinstance(x, torch.Tensor) and x.dtype is torch.bool


def _refuse_out(a, b, out) -> None:
    """Raise the CPU's error for an ``out=`` dtype the result cannot be cast to ("result type
    Float can't be cast to the desired output type Bool"), which DirectML does not raise
    (failure_modes.md #65): the same call on the meta device."""
    def meta(t):
        return torch.empty(t.shape, dtype=t.dtype, device="meta") if isinstance(t, torch.Tensor) else t
    torch.ops.aten.mul.out(meta(a), meta(b), out=meta(out))


def coerce_bool_operands(args, kwargs, inplace: bool):
    """Return ``(args, kwargs)`` with the bool tensor operand cast to the computation
    dtype, or None when nothing needs casting (no bool operand, both bool, or an
    in-place op on a bool ``self`` whose result is bool anyway)."""
    a, b = _operands(args, kwargs)
    a_bool, b_bool = _is_bool(a), _is_bool(b)
    if a_bool == b_bool or (inplace and a_bool):
        return None
    dtype = a.dtype if inplace else torch.result_type(a, b)
    if dtype is torch.bool:
        return None
    out = kwargs.get("out")
    if out is not None and not torch.can_cast(dtype, out.dtype):
        _refuse_out(a, b, out)
    with trace.substitute():        # the cast: work done instead of DirectML's bool result
        operands = (a.to(dtype), b) if a_bool else (a, b.to(dtype))
    return _replace_operands(args, kwargs, operands)


def _handler(inplace: bool):
    def handle(func, args, kwargs):
        if not inplace and _complex_scalar(args, kwargs):    # x * 1j: a complex result
            return "island", dtypes.run_complex_scalar(func, args, kwargs)
        fixed = coerce_bool_operands(args, kwargs, inplace)
        if fixed is None:
            return "pass", func(*args, **kwargs)
        return "coerce", func(*fixed[0], **fixed[1])
    return handle


def _select(target: str):
    """Fast path: only calls with a bool tensor operand on the target device matter."""
    Tensor, bool_ = torch.Tensor, torch.bool

    def select(instance, args, kwargs):
        if isinstance(instance, Tensor):
            a, b = instance, (args[0] if args else kwargs.get("other"))
        else:
            a = args[0] if args else kwargs.get("input")
            b = args[1] if len(args) > 1 else kwargs.get("other")
        a_t, b_t = isinstance(a, Tensor), isinstance(b, Tensor)
        if (a_t and a.is_cpu or not a_t) and (b_t and b.is_cpu or not b_t):
            return False                        # all on the CPU
        if not (a_t and a.dtype is bool_ or b_t and b.dtype is bool_
                or type(b) is complex or type(a) is complex):
            return False
        return (a_t and not a.is_cpu and a.device.type == target) or \
               (b_t and not b.is_cpu and b.device.type == target)
    return select


# what a device tensor must not be for the front to pass a call by (_select: a bool operand;
# a complex number is no plain value)
_DEVICE = _gate.Watch(dtypes=frozenset({torch.bool}))


def install(ctx: Context) -> None:
    select = _select(ctx.target)
    for owner, name, inplace in _ENTRY_POINTS:
        _patches.intercept(ctx, owner, name, _handler(inplace), select=select, device=_DEVICE)


def uninstall() -> None:
    _patches.restore()
