"""dtypes DirectML cannot hold or compute.

* **float64**: most consumer GPUs under DirectML have none: ``RuntimeError: The GPU
  device does not support Double (Float64) operations!`` (DirectML#430, #396, #438,
  #699; failure_modes.md #7).  When ``devices.has_float64_support(device)`` is False:
  - ``Tensor.to(device)`` (and so ``Module.to(device)``) of float64 gives float32,
    with one warning per process;
  - an op asked to compute in float64 (``dtype=torch.float64``, e.g. FunASR
    Paraformer's ``torch.cumsum(alphas, 1, dtype=torch.float64)``) computes in float64
    on the CPU and returns **float32** on the device (action ``cpu``).
* **bfloat16 / complex**: moving such a tensor to DirectML aborts the process
  (``Invalid or unsupported data type``; DirectML#688, #421, #704; failure_modes.md
  #8, #9).  ``Tensor.to(device)`` raises ``TypeError`` before the transfer instead.
  Policy: no silent cast, because a bf16 -> fp16 cast can overflow; convert
  explicitly (``model.float()`` or ``.half()``).
"""
from __future__ import annotations

import warnings

import torch

from .. import devices, fallback
from ._wrap import Context, PatchSet

_patches = PatchSet(__name__)

UNSUPPORTED = frozenset({torch.bfloat16, torch.complex32, torch.complex64, torch.complex128})
_SPECIAL = UNSUPPORTED | {torch.float64}

# ops that take a ``dtype=`` to compute in (torch.* and Tensor.*)
_DTYPE_OPS = ("cumsum", "cumprod", "sum", "nansum", "mean", "prod", "softmax", "log_softmax")

_warned_float64 = False


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


def _to_select(ctx: Context):
    target, special, dtype_type = ctx.target, _SPECIAL, torch.dtype

    def select(self, args, kwargs):
        if self.dtype not in special:
            for a in args:
                if type(a) is dtype_type and a in special:
                    break
            else:
                if not kwargs or kwargs.get("dtype") not in special:
                    return False               # the fast path: nearly every call
        device, dtype = _parse_to((self, *args), kwargs)
        return device is not None and device.type == target and (dtype or self.dtype) in special
    return select


def _to_handle(func, args, kwargs):
    self = args[0]
    device, dtype = _parse_to(args, kwargs)
    dtype = dtype or self.dtype
    if dtype in UNSUPPORTED:
        raise TypeError(
            f"dmlshim: a {str(dtype).replace('torch.', '')} tensor cannot go to {device}: DirectML "
            "aborts the process on this dtype (DirectML#688, #421; failure_modes.md #8, #9). "
            "Convert first, e.g. x.float() / model.float() (or .half()), or keep it on the CPU.")
    if devices.has_float64_support(device):
        return "pass", func(*args, **kwargs)
    global _warned_float64
    if not _warned_float64:
        _warned_float64 = True
        warnings.warn(f"dmlshim: {device} has no float64 (DirectML#430; failure_modes.md #7): "
                      "float64 tensors moved there become float32 (warned once)", RuntimeWarning,
                      stacklevel=5)
    options = {k: kwargs[k] for k in ("non_blocking", "copy", "memory_format") if k in kwargs}
    return "coerce", func(self, device, torch.float32, **options)


def _dtype_select(ctx: Context):
    target, float64, Tensor = ctx.target, torch.float64, torch.Tensor

    def select(instance, args, kwargs):
        if not kwargs or kwargs.get("dtype") is not float64:
            for a in args:
                if a is float64:
                    break
            else:
                return False                   # the fast path: no float64 requested
        x = instance if isinstance(instance, Tensor) else (args[0] if args else kwargs.get("input"))
        return (isinstance(x, Tensor) and not x.is_cpu and x.device.type == target
                and not devices.has_float64_support(x.device))
    return select


def _dtype_handle(func, args, kwargs):
    return "cpu", fallback.run_on_cpu(func, args, kwargs, dtype_map={torch.float64: torch.float32})


def install(ctx: Context) -> None:
    _patches.intercept(ctx, torch.Tensor, "to", _to_handle, select=_to_select(ctx))
    select = _dtype_select(ctx)
    for name in _DTYPE_OPS:
        for owner in (torch, torch.Tensor):
            if hasattr(owner, name):
                _patches.intercept(ctx, owner, name, _dtype_handle, select=select)


def uninstall() -> None:
    _patches.restore()
