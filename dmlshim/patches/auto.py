"""fallback="auto": any torch call that DirectML fails is retried on the CPU.

DirectML's list of failures is open-ended, so this patch puts a thin wrapper on every
Python entry point into a C++ torch op (about 2,700 attributes of ``torch``,
``torch.Tensor``, ``torch.nn.functional`` ...).  A call that raises a DirectML-class
error (:func:`dmlshim.errors.classify`; failure_modes.md Note A) with a tensor on the
target device runs again on the CPU; its input signature is remembered, so later calls
go straight there; one warning per op.  Out of memory and device removed are raised as
:class:`dmlshim.DirectMLError`.  In ``fallback="known"`` the wrappers only translate
errors.  Core patches run the same logic inline (:func:`guard`).

Why wrappers and not a ``TorchFunctionMode``, with the measurements:
docs/auto-fallback.md ("Design notes")."""
from __future__ import annotations

import functools
import gc
import threading
import types
import warnings
from dataclasses import dataclass
from typing import Dict, Optional

import torch

from .. import errors, fallback, islands, trace
from . import _gate, dtypes
from ._wrap import Context, Guard, PatchSet, fronted, provide_guard
from ._patch import Patch

PATCH = Patch("auto", "any torch call DirectML fails (RuntimeError/NotImplementedError, localized "
                      "UnicodeDecodeError, failure_modes.md Note A) is retried on the CPU and "
                      "remembered; 'known' only translates errors to DirectMLError",
              modes=("auto", "known"),
              # it leaves alone what the core patches' intercept wrappers already guard (they run
              # its retry inline; __dmlshim_guarded__) and wraps the rest; channels_last's and
              # int_range's wrappers of the entry points it wraps too go outside its own
              after=("autocast", "broadcast_copy", "copy_to_cpu", "dtypes", "legacy_new"),
              before=("channels_last", "int_range"))

__all__ = ["install", "uninstall", "DirectMLFallbackWarning", "failures", "forget",
           "entry_points", "guard"]

_CATCH = (RuntimeError, NotImplementedError, UnicodeDecodeError)
_NOTHING = _gate.Watch()      # what a device tensor must not be for the front to pass a call
_ALL = "*"                    # memo entry: every signature of the op goes to the CPU
_MAX_SIGNATURES = 256         # per op; past this the whole op is sent to the CPU
_SPECIAL = islands.SPECIAL    # a dtype= among these may make a CPU island (patches/dtypes.py)

# Left alone: device transfers (a CPU retry would move the result back to the
# device), metadata that DirectML cannot fail, torch's own dispatch helpers
# (has_torch_function*, _parse_to used by Module.to), autograd plumbing, and the
# Python object protocol. __getitem__ too: a Python __getitem__ on torch.Tensor fills the
# type's sequence slot, and torch.tensor([zero_dim_tensor]) then calls len() and raises
# TypeError (funasr's beam search: paraformer/search.py append_token), CPU included.
_SKIP = frozenset("""
    _add_docstr has_torch_function has_torch_function_unary has_torch_function_variadic
    _parse_to is_conj is_neg is_same_size is_vulkan_available is_distributed
    to cpu cuda xpu mps ipu hpu numpy pin_memory share_memory_ is_pinned is_shared
    storage untyped_storage data_ptr dim ndimension size stride numel nelement
    element_size storage_offset is_contiguous is_floating_point is_complex is_signed
    is_inference is_set_to get_device has_names is_coalesced dense_dim sparse_dim
    backward register_hook register_post_accumulate_grad_hook retain_grad
    requires_grad_ detach detach_ as_subclass module_load
    __init__ __new__ __repr__ __str__ __format__ __hash__ __len__ __iter__ __reversed__
    __contains__ __bool__ __nonzero__ __int__ __long__ __float__ __complex__ __index__
    __array__ __array_wrap__ __dlpack__ __dlpack_device__ __reduce__ __reduce_ex__
    __setstate__ __getstate__ __deepcopy__ __copy__ __dir__ __sizeof__ __getattribute__
    __getitem__
    __getattr__ __setattr__ __delattr__ __class__ __init_subclass__ __subclasshook__
    __torch_function__ __torch_dispatch__ __eq__ __ne__
""".split())


class DirectMLFallbackWarning(UserWarning):
    """An op failed on DirectML and was run on the CPU instead (once per op)."""


@dataclass
class Failure:
    """What made ``op`` fall back: the first error (text, HRESULT name) and how
    many distinct input signatures (``all_signatures``: every one) go to the CPU."""
    op: str
    error: str
    hresult: Optional[str]
    signatures: int = 0
    all_signatures: bool = False


_lock = threading.Lock()
_ctx: Optional[Context] = None
_patches = PatchSet(__name__)
_memo: Dict[str, set] = {}            # op -> signatures that go straight to the CPU
_failures: Dict[str, Failure] = {}


# ---------------------------------------------------------------------------- coverage

def entry_points():
    """``(owner, attribute, op name)`` for every entry point the patch wraps."""
    vf_names = [n for n in dir(torch._C._VariableFunctions) if _listed(torch, n)]
    builtin = types.BuiltinFunctionType
    out = [(torch, n, f"torch.{n}") for n in vf_names if isinstance(getattr(torch, n, None), builtin)]
    out += [(torch._VF, n, f"torch._VF.{n}") for n in vf_names]     # served by _VF.__getattr__
    for owner, prefix in _modules():
        out += [(owner, n, f"{prefix}.{n}") for n, obj in vars(owner).items()
                if _listed(owner, n) and isinstance(obj, builtin)]
    kinds = (types.MethodDescriptorType, types.WrapperDescriptorType, types.FunctionType)
    out += [(torch.Tensor, n, f"Tensor.{n}") for n in dir(torch.Tensor)
            if _listed(torch.Tensor, n) and isinstance(getattr(torch.Tensor, n, None), kinds)]
    return out


def _modules():
    import torch.nn.functional as F
    return ((F, "F"), (torch._C._nn, "torch._C._nn"), (torch.fft, "torch.fft"),
            (torch.linalg, "torch.linalg"), (torch.special, "torch.special"))


def _listed(owner, name) -> bool:
    """``entry_points()``'s rule on names (it also wants a C function or method)."""
    if name in _SKIP:
        return False
    if owner is torch.Tensor:
        return not name.startswith("_") or name.endswith("__")
    return not name.startswith("__")


# ---------------------------------------------------------------------------- install

def install(ctx: Context) -> None:
    """Wrap every entry point (see module docstring). Idempotent per activation."""
    global _ctx
    with _lock:
        _ctx = ctx
        gc_was_on = gc.isenabled()
        gc.disable()        # 2,700 new closures would trigger full collections: 0.15 s -> 12 ms
        shared: Dict[int, object] = {}      # id(original) -> its wrapper, shared by aliases
        try:
            for owner, name, op in entry_points():
                if getattr(vars(owner).get(name), "__dmlshim_guarded__", False):
                    continue                     # a core patch's wrapper runs our guard inline
                memo = _memo.setdefault(op, set())
                try:
                    # torch._VF keeps wrappers of its own: its op names ("torch._VF.lstm") are
                    # what users see of nn.LSTM & co in warnings and reports
                    _patches.replace(owner, name, functools.partial(
                        _shared_wrapper, shared, op, memo, owner is torch._VF))
                except (AttributeError, TypeError):  # read-only on this torch version
                    continue
        finally:
            if gc_was_on:
                gc.enable()


def uninstall() -> None:
    """Put every original back (only where our wrapper is still in place)."""
    global _ctx
    with _lock:
        _patches.restore()
        _ctx = None


# ---------------------------------------------------------------------------- the wrapper

def _shared_wrapper(shared: dict, op: str, memo: set, group, func):
    """One wrapper per original: ``F.scaled_dot_product_attention is
    torch._C._nn.scaled_dot_product_attention`` stays
    True, as torch's ``func is ...`` checks expect (docs/transparency.md); ``group``
    keeps apart aliases that must not share one."""
    wrapper = shared.get((id(func), group))
    if wrapper is None:
        wrapper = shared[id(func), group] = _make_wrapper(op, func, memo)
    return wrapper


def _make_wrapper(op: str, func, memo: set):
    """The wrapper of ``func`` (unbound for ``Tensor`` methods)."""
    def wrapper(*args, **kwargs):
        if kwargs and kwargs.get("dtype") in _SPECIAL:
            home = _island_home(args, kwargs)
            if home is not None:                # dtype= a dtype the device cannot hold
                return dtypes.run_creator(func, args, kwargs, home, op=op)
        if memo and _remembered(memo, args, kwargs):
            return _cpu(op, func, args, kwargs)
        try:
            return func(*args, **kwargs)
        except _CATCH as exc:
            return _failed(op, func, args, kwargs, exc, memo)

    functools.update_wrapper(wrapper, func)
    # a call of plain CPU values, or with device tensors too (a device call of any dtype but
    # the special ones passes the wrapper's tests): the original, in C, under the same guard
    guard = Guard(memo, _CATCH, None, None, functools.partial(_failed, op, memo=memo))
    return fronted(_ctx, func, wrapper, (_NOTHING, guard))


def guard(owner, name: str, op: str) -> Guard:
    """What ``_make_wrapper``'s wrapper does around a call of ``owner.name``, for a core
    patch's ``PatchSet.intercept`` wrapper to run inline (``install`` then leaves that
    attribute alone): one Python layer per call instead of two on the hottest entry
    points (``torch.cat``, ``Tensor.__mul__`` ...).  Entry points this patch does not
    cover (``Tensor.to``) get ``Guard()``, which does nothing.  Partials, not closures:
    they add no Python frame, so warnings still point at the caller."""
    owners = (torch.Tensor, torch, torch._VF, *(m for m, _ in _modules()))
    if not (any(owner is o for o in owners) and _listed(owner, name)):
        return Guard()
    memo = _memo.setdefault(op, set())
    return Guard(memo, _CATCH, functools.partial(_remembered, memo), functools.partial(_cpu, op),
                 functools.partial(_failed, op, memo=memo))


provide_guard(guard)


def _island_home(args, kwargs):
    ctx = _ctx
    if ctx is None or not ctx.active or fallback.busy():
        return None
    return dtypes.creates(kwargs, args, ctx.target)


def _signature(args, kwargs):
    return tuple((t.dtype, tuple(t.shape)) for t in fallback.tensors_in((args, kwargs)))


def _remembered(memo, args, kwargs) -> bool:
    ctx = _ctx
    if ctx is None or not ctx.active or fallback.busy():
        return False
    if fallback.device_of(args, kwargs, ctx.target) is None:
        return False
    return _ALL in memo or _signature(args, kwargs) in memo


def _cpu(op, func, args, kwargs):
    return trace.call(op, _cpu_handler, func, args, kwargs)


def _cpu_handler(func, args, kwargs):
    return "cpu", fallback.run_on_cpu(func, args, kwargs, op=getattr(func, "__name__", ""))


def _failed(op, func, args, kwargs, exc, memo):
    """Handle ``exc`` raised by ``func(*args, **kwargs)``: retry, translate or re-raise."""
    ctx = _ctx
    if (getattr(exc, "_dmlshim_handled", False) or ctx is None or not ctx.active
            or fallback.busy() or fallback.device_of(args, kwargs, ctx.target) is None):
        raise exc
    kind = errors.classify(exc)
    if kind == errors.OTHER:
        raise exc
    readable = errors.translate(exc, op, args, kwargs)
    if kind == errors.FATAL or ctx.fallback != "auto":
        _raise(readable, exc)
    result = fallback.cpu_retry(exc, lambda: _cpu(op, func, args, kwargs), cause=readable)
    _remember(op, memo, args, kwargs, exc, readable)
    return result


def _raise(readable, exc):
    if readable is None:
        exc._dmlshim_handled = True
        raise exc
    readable._dmlshim_handled = True
    raise readable from exc


def _remember(op, memo, args, kwargs, exc, readable):
    sig = _signature(args, kwargs)
    with _lock:
        failure = _failures.get(op)
        first = failure is None
        if first:
            failure = _failures[op] = Failure(
                op, str(readable or exc).splitlines()[0][:300],
                readable.hresult.name if readable is not None and readable.hresult else None)
        if isinstance(exc, NotImplementedError) or len(memo) >= _MAX_SIGNATURES:
            memo.add(_ALL)
            failure.all_signatures = True
        else:
            memo.add(sig)
        failure.signatures = len(memo - {_ALL})
    if first:
        warnings.warn(
            f"dmlshim: {op} failed on DirectML ({failure.error}); it ran on the CPU and "
            f"{'every later call' if failure.all_signatures else 'later calls with the same input dtypes/shapes'}"
            " will go to the CPU directly (DMLSHIM_FALLBACK=auto)", DirectMLFallbackWarning, stacklevel=4)


# ---------------------------------------------------------------------------- introspection

def failures() -> Dict[str, Failure]:
    """The ops that fell back so far (op name -> :class:`Failure`)."""
    with _lock:
        return dict(_failures)


def forget() -> None:
    """Forget every remembered failure: the next calls try the device again."""
    with _lock:
        for memo in _memo.values():
            memo.clear()
        _failures.clear()
