"""CPU islands: values whose dtype DirectML cannot hold live on the CPU.

Complex and bfloat16 tensors abort DirectML (failure_modes.md #8, #9; DirectML#421,
#688, #704), most consumer GPUs compute no float64 (#7; DirectML#430), and there are
no sparse kernels (#30).  An op that would create such a value from device tensors
runs on the CPU and its result stays there as an :class:`Island` (a CPU tensor that
remembers its ``home`` device); later ops on an island run on the CPU, and results the
home device can hold go back to it.  Islands are tracked by type, so two ordinary
tensors on different devices still raise as they do on CUDA.

The rule in full: docs/internals.md ("CPU islands")."""
from __future__ import annotations

import os
import sys
import threading
import warnings
from typing import Any, Callable, Optional

import torch

from . import devices, fallback, trace

__all__ = ["Island", "CPUIslandWarning", "is_island", "home", "holdable", "held", "unholdable",
           "mark", "run", "warn_once", "bf16_policy", "held_as"]

# DirectML aborts on these (failure_modes.md #8, #9) whatever the adapter.
NEVER_HELD = frozenset({torch.bfloat16, torch.complex32, torch.complex64, torch.complex128})
SPECIAL = NEVER_HELD | {torch.float64}       # float64 too, on devices without float64 (#7)


# DMLSHIM_BF16 (docs/fun-asr-nano.md): what bfloat16 values bound for the device become
# there, float32 (default) or float16, or None (``cpu``: they stay CPU islands).  Set at
# activation (:func:`bf16_policy`); read by the ``dtypes`` patch (``Tensor.to``, ``dtype=``)
# and the dispatcher net (``_to_copy``, ``softmax(dtype=)``) through :func:`held_as`.
_BF16_AS = {"float32": torch.float32, "float16": torch.float16, "cpu": None}
bf16_as: Optional[torch.dtype] = torch.float32
_bf16_target = "privateuseone"
_warned_bf16 = False


def bf16_policy(policy: str, target: str = "privateuseone") -> None:
    """Take ``DMLSHIM_BF16``'s ``policy`` (``config.parse_bf16``'s value) for devices of type
    ``target``; its warning is given once per activation."""
    global bf16_as, _bf16_target, _warned_bf16
    bf16_as, _bf16_target, _warned_bf16 = _BF16_AS[policy], target, False


def held_as(dtype: Optional[torch.dtype], device: Optional[torch.device]) -> Optional[torch.dtype]:
    """The dtype values of ``dtype`` get on ``device``: bfloat16 -> the DMLSHIM_BF16 choice
    on a target device (one ``RuntimeWarning`` per activation); every other dtype (and
    policy ``cpu``) unchanged."""
    if dtype is torch.bfloat16 and bf16_as is not None and device is not None \
            and device.type == _bf16_target:
        _warn_bf16(device)
        return bf16_as
    return dtype


def _warn_bf16(device) -> None:
    global _warned_bf16
    if not _warned_bf16:
        _warned_bf16 = True
        name = str(bf16_as).replace("torch.", "")
        warnings.warn(f"dmlshim: {device} cannot hold bfloat16 (DirectML#688; failure_modes.md #8): "
                      f"bfloat16 values there are computed as {name} (DMLSHIM_BF16=float32|float16|"
                      "cpu; warned once)", RuntimeWarning, stacklevel=_caller_level())


class CPUIslandWarning(UserWarning):
    """An op made a value DirectML cannot hold; it ran on the CPU (once per op)."""


class Island(torch.Tensor):
    """A CPU tensor standing in for a device tensor of a dtype the device cannot hold.

    ``home(x)`` gives the device it stands in for.  Every op that touches an island
    runs on the CPU; its results of holdable dtypes go to ``home`` (module docstring).
    """

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in _METADATA:                 # shape, dtype, device ...: no copies
            with torch._C.DisableTorchFunctionSubclass():
                return func(*args, **kwargs)
        if _asks_for_cpu(func, args, kwargs):   # x.cpu(), x.to("cpu"): a plain CPU tensor
            with torch._C.DisableTorchFunctionSubclass():
                out = func(*args, **kwargs)
                return _plain(out) if isinstance(out, Island) else out
        origin = _first_island(args, kwargs)
        if origin is None:                    # another subclass brought us here
            with torch._C.DisableTorchFunctionSubclass():
                return func(*args, **kwargs)
        return run(func, args, kwargs, origin._dmlshim_home)


# a set, not a frozenset: dmlshim's wrappers of these join it (patches/_identity.py)
_METADATA = set(getattr(torch.Tensor, n).__get__ for n in (
    "shape", "dtype", "device", "is_cpu", "ndim", "requires_grad", "is_leaf", "layout",
    "names", "is_sparse", "is_quantized", "is_meta", "is_cuda", "grad_fn", "_version")
    if hasattr(torch.Tensor, n)) | set(
    getattr(torch.Tensor, n) for n in ("dim", "size", "numel", "stride", "is_floating_point",
                                       "is_complex", "element_size", "__len__", "__repr__",
                                       "__format__", "data_ptr", "storage_offset", "tolist",
                                       "item", "numpy", "is_contiguous", "__hash__", "backward",
                                       "register_hook", "retain_grad", "requires_grad_",
                                       "__bool__", "__int__", "__float__", "__index__")
    if hasattr(torch.Tensor, n))


def _plain(t: torch.Tensor) -> torch.Tensor:
    """``t`` as a plain ``torch.Tensor``: a zero-copy alias (a sparse one has no storage
    for ``as_subclass``: a detached alias, as :func:`mark` made it)."""
    if t.layout is torch.strided:
        return t.as_subclass(torch.Tensor)
    return torch.Tensor._make_subclass(torch.Tensor, t.detach(), t.requires_grad)


def _asks_for_cpu(func, args, kwargs) -> bool:
    name = getattr(func, "__name__", "")
    if name == "cpu":
        return True
    if name != "to":
        return False
    device = kwargs.get("device")
    for a in args[1:]:
        if isinstance(a, (str, torch.device)):
            device = a
    return device is not None and torch.device(device).type == "cpu"


def is_island(x: Any) -> bool:
    """True for a CPU island (see module docstring)."""
    return isinstance(x, Island)


def home(x: torch.Tensor) -> Optional[torch.device]:
    """The device an island stands in for; None for any other tensor."""
    return getattr(x, "_dmlshim_home", None) if isinstance(x, Island) else None


def unholdable(device: torch.device) -> frozenset:
    """The dtypes ``device`` cannot hold: complex and bfloat16 on DirectML, plus
    float64 where ``devices.has_float64_support(device)`` is False."""
    if device.type != "privateuseone":
        return frozenset()
    return NEVER_HELD if devices.has_float64_support(device) else SPECIAL


def holdable(dtype: torch.dtype, device: torch.device) -> bool:
    """Can ``device`` hold values of ``dtype`` (see :func:`unholdable`)?"""
    return dtype not in unholdable(device)


def held(t: torch.Tensor, device: torch.device) -> bool:
    """Can ``device`` hold ``t``?  Not a dtype of :func:`unholdable`, and on DirectML
    not a sparse layout either (no SparsePrivateUse1 kernels: failure_modes.md #30)."""
    if device.type != "privateuseone":
        return True
    return t.layout is torch.strided and t.dtype not in unholdable(device)


def mark(t: torch.Tensor, device: torch.device) -> Island:
    """``t`` (a CPU tensor) as an island of ``device``; an island already is kept as is
    (an in-place op returns its own ``self``).  Zero-copy; autograd history is kept."""
    if not isinstance(t, Island):
        with torch._C.DisableTorchFunctionSubclass():
            if t.layout is torch.strided:
                t = t.as_subclass(Island)
            else:                                 # sparse: no storage to alias; a new leaf
                t = torch.Tensor._make_subclass(Island, t.detach(), t.requires_grad)
    if getattr(t, "_dmlshim_home", None) is None:
        t._dmlshim_home = torch.device(device)
    return t


def run(func: Callable, args: tuple, kwargs: dict, device: torch.device, *, op: str = "",
        traced: bool = True) -> Any:
    """Run ``func(*args, **kwargs)`` on the CPU under the island rule for ``device``.

    Device tensors are copied to the CPU once (``fallback.run_on_cpu``: in-place and
    ``out=`` writes go back, autograd flows).  Results of a dtype ``device`` cannot
    hold, and results that alias an island argument, become islands; the others go to
    ``device``.  Inside the shim's own CPU work (``fallback.busy()``) nothing moves.
    Counted in ``dmlshim.report()`` under ``op`` with action ``island``; one
    :class:`CPUIslandWarning` per op.  ``traced=False``: the caller records the call.
    """
    device = torch.device(device)
    op = op or _op_name(func)
    if fallback.busy():
        return _run(func, args, kwargs, device, nested=True)
    warn_once(op, device)
    if not traced:
        return _run(func, args, kwargs, device)
    return trace.call(op, lambda f, a, k: ("island", _run(f, a, k, device)), func, args, kwargs)


def _run(func, args, kwargs, device, nested=False):
    island_storages = {_storage(t) for t in trace.tensors_in((args, kwargs)) if isinstance(t, Island)}
    plain_cpu = {id(t) for t in trace.tensors_in((args, kwargs))
                 if t.is_cpu and not isinstance(t, Island)}

    def stays(t: torch.Tensor) -> bool:
        if not held(t, device):
            return True
        return t.numel() > 0 and _storage(t) in island_storages

    with torch._C.DisableTorchFunctionSubclass():
        # nested: inside the shim's own CPU work, which moves its results itself
        out = fallback.run_on_cpu(func, args, kwargs, device=device,
                                  stay=(lambda t: True) if nested else stays)

    def wrap(x):
        if (isinstance(x, torch.Tensor) and x.is_cpu and id(x) not in plain_cpu
                and (isinstance(x, Island) or stays(x))):
            return mark(x, device)
        return x
    return fallback.tree_map(wrap, out)


def _first_island(args, kwargs) -> Optional[Island]:
    for t in trace.tensors_in((args, kwargs)):
        if isinstance(t, Island) and getattr(t, "_dmlshim_home", None) is not None:
            return t
    return None


def _storage(t: torch.Tensor) -> int:
    try:
        with torch._C.DisableTorchFunctionSubclass():
            return t.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError):
        return -1


def _op_name(func) -> str:
    name = getattr(func, "__name__", None) or type(func).__name__
    qual = getattr(func, "__qualname__", "") or ""
    if qual.startswith(("TensorBase.", "Tensor.")) or getattr(func, "__objclass__", None) is not None:
        return f"Tensor.{name}"
    module = (getattr(func, "__module__", None) or "torch").replace("torch.nn.functional", "F")
    return f"{module}.{name}" if module != "torch._C._VariableFunctions" else f"torch.{name}"


_warned: set = set()
_warned_lock = threading.Lock()


def warn_once(op: str, device: torch.device) -> None:
    """The :class:`CPUIslandWarning` of ``op``, once per process."""
    with _warned_lock:
        if op in _warned:
            return
        _warned.add(op)
    warnings.warn(f"dmlshim: {op} makes or reads a value {device} cannot hold (complex, bfloat16"
                  f"{'' if devices.has_float64_support(device) else ', float64'}; failure_modes.md "
                  "#7-#9): it runs on the CPU, results of those dtypes stay there as CPU islands "
                  "and the others go to the device (warned once per op)", CPUIslandWarning,
                  stacklevel=_caller_level())


_SKIP_DIRS = tuple(os.path.dirname(m.__file__) + os.sep for m in (torch, sys.modules[__package__]))


def _caller_level() -> int:
    """``stacklevel`` of the first frame outside dmlshim and torch: the user's line."""
    level, frame = 2, sys._getframe(2)
    while frame is not None and frame.f_code.co_filename.startswith(_SKIP_DIRS):
        level += 1
        frame = frame.f_back
    return level
