"""dtypes DirectML cannot hold: complex, bfloat16, and float64 on most GPUs.

complex / bfloat16 abort the process (DirectML#688, #421, #704; failure_modes.md #8,
#9); float64 fails on most consumer GPUs (DirectML#430, #396, #438, #699; #7), and
counts only where ``devices.has_float64_support(device)`` is False.

One layer per op (issue 49): the aten ops that make such values whatever the Python call
(``torch.fft.*``, ``stft``, ``complex``, ``polar``, ``view_as_complex``, ``linalg.eig``,
``float_power``, ``softmax(dtype=)``, the casts ``cfloat``/``double``/``bfloat16`` that reach
``_to_copy``) are the dispatcher net's alone (``patches/dispatcher.py``: ``ISLANDS``,
``COMPOSITES``).  This patch wraps only the Python calls the net cannot tell apart and
runs them under the CPU-island rule (``dmlshim.islands``): ``Tensor.to``'s transfer policy
(float64 moved to the device becomes float32 with one warning; a complex ``Parameter``
raises ``TypeError``), ``Tensor.type`` (a type name such as ``"torch.DoubleTensor"`` reaches
``_to_copy`` as a cast to the CPU), ``dtype=`` of the reductions and ``view``, and arithmetic
with a Python complex scalar (``x * 1j``).

bfloat16 follows ``DMLSHIM_BF16`` (docs/fun-asr-nano.md; ``islands.held_as``): ``float32``
(default) or ``float16`` casts every bf16 value bound for the device to that dtype there
(one warning); ``cpu`` keeps bf16 as a CPU island.

The full list of creators and transfer rules: docs/internals.md ("dtypes and islands")."""
from __future__ import annotations

import warnings

import torch

from .. import fallback, islands
from . import _gate
from ._wrap import Context, PatchSet
from ._patch import FALLBACK_MODES, Patch

PATCH = Patch("dtypes", "no float64 on most DirectML GPUs (DirectML#430, #396, #438, #699; failure_modes.md "
                        "#7); bf16/complex abort the process (DirectML#688, #421, #704; #8, #9)",
              modes=FALLBACK_MODES)

_patches = PatchSet(__name__)

_SPECIAL = islands.SPECIAL

# ops that take a ``dtype=`` (also positionally) to compute in.  Not softmax/log_softmax:
# the net's COMPOSITES hold those (their ``_to_copy`` to the dtype comes first inside).
_DTYPE_OPS = ("cumsum", "cumprod", "sum", "nansum", "mean", "prod")
# Not here (issue 49): the complex makers (torch.fft.*, torch._VF.stft, complex, polar,
# view_as_complex, linalg.eig/eigvals, float_power) and the casts cfloat/cdouble/double/
# bfloat16: the dispatcher net's ISLANDS/COMPOSITES make those islands however they are
# reached (tests/test_layers.py holds the two layers apart).

_warned_float64 = False
_held = islands.held_as         # bfloat16 -> DMLSHIM_BF16's dtype on the target


def _parse_to(args, kwargs):
    """(device, dtype) a ``Tensor.to(self, ...)`` call asks for (None: unchanged).

    Covers every ``Tensor.to`` overload: ``(device, dtype, non_blocking, copy)``,
    ``(dtype, ...)``, ``(other_tensor, ...)`` and keywords; bools are the flags."""
    device, dtype = kwargs.get("device"), kwargs.get("dtype")
    for a in args[1:]:
        if isinstance(a, torch.dtype):
            dtype = a
        elif isinstance(a, torch.Tensor):
            device, dtype = a.device, a.dtype
        elif isinstance(a, (torch.device, str)) or (isinstance(a, int) and not isinstance(a, bool)):
            device = a
    return (None if device is None else torch.device(device)), dtype


def _requested_dtype(args, kwargs):
    """A dtype asked for positionally or as ``dtype=``, else None."""
    dtype = kwargs.get("dtype") if kwargs else None
    if dtype is None:
        for a in args:
            if type(a) is torch.dtype:
                return a
            if isinstance(a, str) and a.startswith("torch.") and a.endswith("Tensor"):
                return _TYPE_NAMES.get(a[6:])           # Tensor.type("torch.DoubleTensor")
    return dtype


_TYPE_NAMES = {"DoubleTensor": torch.float64, "BFloat16Tensor": torch.bfloat16,
               "ComplexFloatTensor": torch.complex64, "ComplexDoubleTensor": torch.complex128}


# ---------------------------------------------------------------- Tensor.to

def _to_select(ctx: Context):
    special, dtype_type, strided = _SPECIAL, torch.dtype, torch.strided

    def select(self, args, kwargs):
        if self.dtype not in special and self.layout is strided:
            for a in args:
                if type(a) is dtype_type and a in special:
                    break
            else:
                if not kwargs or kwargs.get("dtype") not in special:
                    return False               # the fast path: nearly every call
        device, _ = _parse_to((self, *args), kwargs)
        if device is None:                     # a cast where the tensor is
            return ctx.on_target(self) or islands.is_island(self)
        return device.type == ctx.target
    return select


def _to_handle(func, args, kwargs):
    self = args[0]
    device, dtype = _parse_to(args, kwargs)
    home = device if device is not None else (islands.home(self) or self.device)
    dtype = dtype or self.dtype
    if _held(dtype, home) is not dtype:        # bfloat16 under DMLSHIM_BF16=float32/float16
        options = {k: kwargs[k] for k in ("memory_format", "non_blocking", "copy") if k in kwargs}
        return "coerce", func(self, home, _held(dtype, home), **options)
    if islands.holdable(dtype, home) and (self.layout is torch.strided or home.type != "privateuseone"):
        return "pass", func(*args, **kwargs)
    options = {k: kwargs[k] for k in ("memory_format",) if k in kwargs}
    if device is not None and self.is_cpu and dtype is torch.float64:
        _warn_float64(home)                    # a transfer: weights, buffers, inputs
        options.update((k, kwargs[k]) for k in ("non_blocking", "copy") if k in kwargs)
        return "coerce", func(self, home, torch.float32, **options)
    if isinstance(self, torch.nn.Parameter) and not islands.is_island(self):
        raise TypeError(
            f"dmlshim: a {str(dtype).replace('torch.', '')} parameter cannot go to {home}: DirectML "
            "aborts the process on this dtype (DirectML#688, #421; failure_modes.md #8, #9). "
            "Convert the model first, e.g. model.float() (or .half()).")

    if self.is_cpu and self.dtype is dtype:    # already what it should be: a zero-copy alias
        islands.warn_once("Tensor.to", home)
        return "island", islands.mark(self, home) if not islands.is_island(self) else self

    def cast(t):                               # on the CPU: the island's own copy
        return t.to(dtype, **options)
    return "island", islands.run(cast, (self,), {}, home, op="Tensor.to", traced=False)


def _warn_float64(device):
    global _warned_float64
    if not _warned_float64:
        _warned_float64 = True
        warnings.warn(f"dmlshim: {device} has no float64 (DirectML#430; failure_modes.md #7): "
                      "float64 tensors moved there become float32 (warned once)", RuntimeWarning,
                      stacklevel=5)


# ---------------------------------------------------------------- creators

def _island(func, args, kwargs, home):
    return islands.run(func, args, kwargs, home, traced=False)


def _creator_handle():
    """A call asked for a dtype (``dtype=``, positional, a type name) the device cannot hold."""
    def handle(func, args, kwargs):
        home = fallback.device_of(args, kwargs, _target)
        dtype = _requested_dtype(args[1:] if args else args, kwargs)
        name = getattr(func, "__name__", "")
        if dtype is torch.bfloat16 and name != "view" and _held(dtype, home) is not dtype:
            return "coerce", func(*_swap_dtype(args, dtype, islands.bf16_as),
                                  **_swap_dtype(kwargs, dtype, islands.bf16_as))
        if dtype is not None and not islands.holdable(dtype, home):
            return "island", _island(func, args, kwargs, home)
        return "pass", func(*args, **kwargs)
    return handle


def _swap_dtype(args, old, new):
    """``args`` (a tuple or kwargs dict) with the dtype ``old`` (or its type name) replaced."""
    def swap(a):
        if a is old:
            return new
        if isinstance(a, str) and _TYPE_NAMES.get(a[6:]) is old:   # "torch.BFloat16Tensor"
            return new
        return a
    if isinstance(args, dict):
        return {k: swap(v) for k, v in args.items()}
    return tuple(swap(a) for a in args)


def _dtype_select(ctx: Context):
    special, dtype_type, target = _SPECIAL, torch.dtype, ctx.target

    def select(instance, args, kwargs):
        if not kwargs or kwargs.get("dtype") not in special:
            for a in args:
                if type(a) is dtype_type and a in special:
                    break
            else:
                return False                   # the fast path: no special dtype requested
        return fallback.device_of((instance, args), kwargs, target) is not None
    return select


def _type_select(ctx: Context):
    """``Tensor.type(dtype)`` or ``Tensor.type("torch.DoubleTensor")``."""
    special, target = _SPECIAL, ctx.target

    def select(self, args, kwargs):
        return (_requested_dtype(args, kwargs) in special and not self.is_cpu
                and self.device.type == target)
    return select


def creates(kwargs: dict, args: tuple, target: str):
    """The device whose island a call with ``dtype=`` in ``kwargs`` makes, else None.

    For the ``auto`` patch's wrappers (every entry point): called only when
    ``kwargs["dtype"]`` is a special dtype.  The device is the first target-device
    tensor argument's, or a ``device=`` argument of the target type (factories)."""
    home = fallback.device_of(args, kwargs, target)
    if home is None and kwargs.get("device") is not None:
        device = torch.device(kwargs["device"])
        home = device if device.type == target else None
    if home is None or islands.holdable(kwargs["dtype"], home):
        return None
    return home


def run_creator(func, args, kwargs, home, *, op: str = ""):
    """Run a factory or op asked for ``dtype=`` a special dtype as an island of ``home``."""
    if _held(kwargs.get("dtype"), home) is not kwargs.get("dtype"):     # bf16 -> DMLSHIM_BF16
        return func(*args, **dict(kwargs, dtype=islands.bf16_as))
    if "device" in kwargs:
        kwargs = dict(kwargs, device="cpu")
    return islands.run(func, args, kwargs, home, op=op)


# arithmetic with a Python complex scalar makes a complex tensor (``x * 1j``: Vocos' ISTFT head)
_SCALAR_OPS = ((torch.Tensor, ("__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__",
                               "__truediv__", "__rtruediv__", "__pow__", "__rpow__", "add", "sub",
                               "mul", "multiply", "div", "true_divide", "pow")),
               (torch, ("add", "sub", "mul", "multiply", "div", "true_divide", "pow", "rsub")))


def _complex_scalar_select(ctx: Context):
    target = ctx.target

    def select(instance, args, kwargs):
        for a in args:
            if type(a) is complex:
                break
        else:
            if not kwargs or type(kwargs.get("other")) is not complex:
                return False                   # the fast path
        return fallback.device_of((instance, args), kwargs, target) is not None
    return select


def run_complex_scalar(func, args, kwargs):
    """``func`` with a Python complex operand and a device tensor, as a CPU island."""
    return _island(func, args, kwargs, fallback.device_of(args, kwargs, _target))


def _complex_scalar_handle(func, args, kwargs):
    return "island", run_complex_scalar(func, args, kwargs)


_target = "privateuseone"


def install(ctx: Context) -> None:
    global _target
    _target = ctx.target
    islands.bf16_policy(ctx.bf16, ctx.target)  # the net's install too; one warning per activation
    # these selects are False for a call of plain values and device tensors of held dtypes (a
    # special dtype, a complex number, a str or device is no plain value): the front passes
    # such a call by in C (device=)
    nothing = _gate.Watch()
    _patches.intercept(ctx, torch.Tensor, "to", _to_handle, select=_to_select(ctx), device=nothing)
    dtype_select = _dtype_select(ctx)
    for name in _DTYPE_OPS:
        for owner in (torch, torch.Tensor):
            if hasattr(owner, name):
                _patches.intercept(ctx, owner, name, _creator_handle(), select=dtype_select, device=nothing)
    _patches.intercept(ctx, torch.Tensor, "view", _creator_handle(), select=dtype_select, device=nothing)
    _patches.intercept(ctx, torch.Tensor, "type", _creator_handle(), select=_type_select(ctx),
                       device=nothing)
    scalar_select = _complex_scalar_select(ctx)
    for owner, names in _SCALAR_OPS:
        for name in names:
            _patches.intercept(ctx, owner, name, _complex_scalar_handle, select=scalar_select, device=nothing)


def uninstall() -> None:
    _patches.restore()
