"""The CPU fallback engine and the re-entrancy guard.

``run_on_cpu`` follows PyTorch's own ``at::native::cpu_fallback`` checklist
(aten/src/ATen/native/CPUFallback.cpp): nested tensor arguments copied to the CPU once,
results back to the first target-device argument's device, mutated (in-place, ``out=``)
arguments written back, CPU-only outputs (``CPU_OUTPUTS``) kept on the CPU, dtypes kept
(``dtype_map``), and views of a temporary copy refused with a clear error.  Copies are
differentiable, so autograd flows back to device tensors.  All of it runs under
``guard()``, so the shim's own calls are never intercepted again.  ``copy_all`` makes such
copies for a caller that knows its arguments (the ``rnn`` patch) in one Python call.

Details: docs/internals.md ("The CPU fallback engine")."""
from __future__ import annotations

import contextlib
import contextvars
import functools
import math
from typing import Any, Callable, Dict, Optional

import torch

from . import trace
from .trace import tensors_in  # noqa: F401  (re-exported: auto uses fallback.tensors_in)

# Outputs an op returns on the CPU on every device (index in its result tuple): they
# stay there after a CPU retry.  PackedSequence.batch_sizes must be a CPU tensor.
CPU_OUTPUTS: Dict[str, tuple] = {"_pack_padded_sequence": (1,)}

_busy: contextvars.ContextVar = contextvars.ContextVar("dmlshim_busy", default=False)


def busy() -> bool:
    """True inside the shim's own work (per thread / per async task)."""
    return _busy.get()


@contextlib.contextmanager
def guard():
    """Calls made inside are never intercepted by dmlshim wrappers."""
    token = _busy.set(True)
    try:
        yield
    finally:
        _busy.reset(token)


def tree_map(fn: Callable[[Any], Any], obj: Any) -> Any:
    """Apply ``fn`` to every leaf of nested lists, tuples (named ones too) and dicts."""
    if isinstance(obj, (list, tuple)):
        items = [tree_map(fn, x) for x in obj]
        if type(obj) is list:
            return items
        if type(obj) is tuple:
            return tuple(items)
        if hasattr(obj, "_fields"):                       # namedtuple, PackedSequence
            return type(obj)(*items)
        return type(obj)(items)
    if isinstance(obj, dict):
        return type(obj)((k, tree_map(fn, v)) for k, v in obj.items())
    return fn(obj)


def device_of(args: Any, kwargs: Optional[dict] = None, target: Optional[str] = None) -> Optional[torch.device]:
    """Device of the first tensor argument on ``target`` (any non-CPU device when
    ``target`` is None); None when every tensor is on the CPU."""
    device = _device_in(args, target)
    return device if device is not None or not kwargs else _device_in(kwargs, target)


def _device_in(obj: Any, target: Optional[str]) -> Optional[torch.device]:
    # The order of tensors_in, without a generator: auto's remembered-failure check
    # runs this on every call of an op that once failed.
    if isinstance(obj, torch.Tensor):
        if obj.is_cpu:
            return None
        device = obj.device
        return device if target is None or device.type == target else None
    if isinstance(obj, (list, tuple)):
        items = obj
    elif isinstance(obj, dict):
        items = obj.values()
    else:
        return None
    for x in items:
        device = _device_in(x, target)
        if device is not None:
            return device
    return None


# ``copy_all``'s key sets: the functionality keys a copy may meet and still skip the
# BackendSelect kernels (dense backends, autograd, and the keys a ``_to_copy`` falls
# through: ADInplaceOrView, autocast), and those it drops before the redispatch
_KS, _DK = torch._C.DispatchKeySet, torch._C.DispatchKey
_DROP = _KS(_DK.BackendSelect) | _KS(_DK.ADInplaceOrView)
for _name in dir(_DK):
    if _name.startswith("Autocast"):
        try:
            _DROP = _DROP | _KS(getattr(_DK, _name))
        except (RuntimeError, TypeError):         # a name some torch has only as an alias
            pass
del _name
_PLAIN = _DROP | _KS(_DK.CPU) | _KS(_DK.AutogradCPU)
_UNDEFINED = _DK.Undefined
_to_copy = torch.ops.aten._to_copy.default
_redispatch = _to_copy._handle.redispatch_boxed
_tensor_keys = torch._C._dispatch_keys
_tls_include, _tls_exclude = torch._C._dispatch_tls_local_include_set, torch._C._dispatch_tls_local_exclude_set


@functools.lru_cache(maxsize=None)
def _route(source: str, target: str):
    """The key set a copy from device type ``source`` to ``target`` adds (the destination's
    backend key, as torch's BackendSelect kernel of ``_to_copy`` adds it), or None where
    :func:`copy_all` takes ``.to()``: a device torch has no key for, or a kernel of
    ``_to_copy`` at either backend's Autograd key (only torch's own is passed through)."""
    try:
        keys = [torch._C._dispatch_key_for_device(t) for t in (source, target)]
    except RuntimeError:
        return None
    if any(torch._C._dispatch_has_kernel_for_dispatch_key(_to_copy.name(), "Autograd" + k) for k in keys):
        return None
    return _KS(getattr(_DK, keys[1]))


def copy_all(tensors: list, device: torch.device) -> int:
    """Each tensor of ``tensors`` (replaced in the list) copied to ``device`` as ``t.to(device)``
    under :func:`guard` copies it, in one Python call for them all; returns the bytes copied.

    Under ``guard()`` dmlshim's ``Tensor.to`` wrapper and its ``_to_copy`` kernel at
    BackendSelect pass a copy through unchanged, with the destination's key added: here the
    key is added and ``_to_copy`` redispatched past BackendSelect at once, with the key set
    the dispatcher would compute (the tensor's keys and this thread's included and excluded
    ones), so autograd (``ToCopyBackward0``), ``no_grad`` and ``inference_mode`` are as with
    ``.to()``.  A tensor with other keys (a subclass, a dispatch mode, a conjugate view, a
    functorch transform) is copied by ``.to()`` itself."""
    include, exclude = _tls_include(), _tls_exclude()
    moved = 0
    for i, t in enumerate(tensors):
        route = _route(t.device.type, device.type)
        keys = (_tensor_keys(t) | include) - exclude
        if route is not None and (keys - _PLAIN).highestPriorityTypeId() == _UNDEFINED:
            tensors[i] = _redispatch((keys | route) - _DROP, t, dtype=t.dtype, device=device)
        else:
            token = _busy.set(True)
            try:
                tensors[i] = t.to(device)
            finally:
                _busy.reset(token)
        moved += t.numel() * t.element_size()
    return moved


def _resize(t: torch.Tensor, shape, stride=None) -> None:
    """``t.resize_(shape)``, or ``t`` given ``shape`` and ``stride``; where the device refuses
    it, ``t`` takes a new tensor of that geometry (``.data``: the same Python object, as
    ``out=`` needs).  The real torch-directml 0.2.5 refuses to grow a tensor: "The size of
    tensor a (0) must match the size of tensor b (3)" (measured on the real binary,
    docs/realdml.md)."""
    if stride is None:
        try:
            t.resize_(shape)
            return
        except RuntimeError:
            if t.is_cpu:
                raise
    elif t.is_cpu:
        t.resize_(shape).as_strided_(shape, stride)
        return
    with torch.inference_mode(t.is_inference()):              # .data takes the same kind
        t.data = (torch.empty(shape, dtype=t.dtype, device=t.device) if stride is None else
                  torch.empty_strided(shape, stride, dtype=t.dtype, device=t.device))
    vars(t).pop("_dmlshim_anchor", None)      # no longer a view (patches/offset_views)


def write_out(out: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
    """``value`` written into the ``out=`` tensor ``out``, given ``value``'s shape first where
    it differs (:func:`_resize`, as ATen's ``out=`` kernels resize); returns ``out``."""
    if out.shape != value.shape:
        _resize(out, value.shape)
    return out.copy_(value)


def cpu_retry(exc: BaseException, on_cpu: Callable[[], Any], *, cause: Optional[BaseException] = None) -> Any:
    """The one CPU retry of a call the device failed with ``exc``, an error the caller has
    classed DirectML's to retry (``errors.classify``): ``on_cpu()``'s result.  If the CPU fails
    too, the problem is not DirectML's (a bad argument): its own error is raised, as the user
    would see it without DirectML, chained to ``cause`` (a readable error) or ``exc``, and
    marked handled, so no wrapper above retries it again.  Its callers: ``auto``'s wrappers of
    every Python entry point (after translating the error, and remembering the signature) and
    ``refused``'s BackendSelect fixes (the calls the real binary refuses, however reached)."""
    try:
        return on_cpu()
    except Exception as cpu_exc:
        cpu_exc._dmlshim_handled = True
        raise cpu_exc from (cause or exc)


def run_on_cpu(func: Callable, args: tuple, kwargs: Optional[dict] = None, *, op: str = "",
               device: Optional[torch.device] = None,
               dtype_map: Optional[Dict[torch.dtype, torch.dtype]] = None,
               stay: Optional[Callable[[torch.Tensor], bool]] = None) -> Any:
    """Call ``func(*args, **kwargs)`` with its tensors on the CPU; return its results
    on ``device`` (default: the first non-CPU tensor argument's device).

    ``stay(result)`` True keeps that CPU result on the CPU (``dmlshim.islands``: a
    dtype the device cannot hold, or a view of a CPU island).  Bytes copied are added
    to the current call's stats (``trace.moved``); its time, copies included, is the
    call's ``substitute`` (``trace.substitute``).

    Raises:
        RuntimeError: the op returned a view of a CPU copy (see module docstring).
    """
    kwargs = kwargs or {}
    if device is None:
        device = device_of(args, kwargs)
    copies: Dict[int, tuple] = {}          # id(original) -> (original, cpu copy, version)
    on_cpu = set()                         # ids of arguments that were CPU tensors already
    h2d = d2h = 0

    def to_cpu(x):
        nonlocal d2h
        if not isinstance(x, torch.Tensor):
            return x
        if x.is_cpu:
            on_cpu.add(id(x))
            return x
        hit = copies.get(id(x))
        if hit is None:
            if torch.is_inference_mode_enabled():
                # a normal tensor, so its version counter shows in-place/out= writes
                with torch.inference_mode(False), torch.no_grad():
                    cpu = x.to("cpu")
            else:
                cpu = x.to("cpu")
            d2h += trace.nbytes(x)
            hit = copies[id(x)] = (x, cpu, cpu._version)
        return hit[1]

    with guard(), trace.substitute():       # the CPU run and its copies: substitute work
        cpu_args = tree_map(to_cpu, args)
        cpu_kwargs = tree_map(to_cpu, kwargs)
        out = func(*cpu_args, **cpu_kwargs)

        written = {}                           # id(cpu copy) -> original device tensor

        def write_back(orig, cpu):
            nonlocal h2d
            if orig.shape != cpu.shape:
                _resize(orig, cpu.shape, cpu.stride())
            orig.copy_(cpu)
            h2d += trace.nbytes(cpu)
            written[id(cpu)] = orig
            return orig

        for orig, cpu, version in copies.values():
            if cpu._version != version:        # mutated in place or as out=
                write_back(orig, cpu)
        copied_storages = {_storage_ptr(cpu) for _, cpu, _ in copies.values()}
        returned = {id(cpu): orig for orig, cpu, _ in copies.values()}

        def back(x):
            nonlocal h2d
            if not isinstance(x, torch.Tensor):
                return x
            if id(x) in written:
                return written[id(x)]
            if id(x) in returned:              # an argument returned: out= written below the
                return write_back(returned[id(x)], x)   # ADInplaceOrView key, its version unmoved
            if id(x) in on_cpu or (stay is not None and x.is_cpu and stay(x)):
                return x                       # a CPU argument returned as is stays put
            if x.numel() and _storage_ptr(x) in copied_storages:
                raise RuntimeError(
                    f"dmlshim: cannot run the view op {op or getattr(func, '__name__', func)} on the "
                    "CPU: its result would alias a temporary CPU copy instead of the device tensor. "
                    "Call it on a .contiguous() clone, or on CPU tensors.")
            if device is None or not x.is_cpu:
                return x
            dtype = dtype_map.get(x.dtype) if dtype_map else None
            h2d += x.numel() * (dtype or x.dtype).itemsize
            return x.to(device) if dtype is None else x.to(device=device, dtype=dtype)

        keep = CPU_OUTPUTS.get(op or getattr(func, "__name__", ""), ()) if isinstance(out, tuple) else ()
        result = tree_map(back, out) if not keep else type(out)(
            x if i in keep else tree_map(back, x) for i, x in enumerate(out))
    trace.moved(h2d=h2d, d2h=d2h)
    return result


_NUMBERS = (bool, int, float, complex)


# A real wrapped number for a 0-dim tensor, where some C++ can set the flag (the emulated
# device's compiled binding sets this); None: _zero_dim_dtypes approximates it.
wrap_number: Optional[Callable[[torch.Tensor], torch.Tensor]] = None


def numbers_as_tensors(op: torch._ops.OpOverload, args) -> list:
    """``args`` of ``op`` with each Python number in a Tensor slot as a 0-dim tensor.

    A wrapped number (the 2.5 of ``x * 2.5``, or a scalar inside a C++ composite)
    reaches a Python kernel as a Python number, which ``op`` and ``redispatch`` refuse
    for a Tensor argument.  A wrapped number never decides the result's dtype within its
    category; a plain 0-dim tensor does when every tensor operand is 0-dim too (0-dim
    float16 + 0.5 would be float32).  So it becomes a real wrapped number (a double, as
    the CPU makes it) where :data:`wrap_number` is set, else a 0-dim tensor of the dtype
    the wrapped number would have given (:func:`_zero_dim_dtypes`)."""
    for a in args:                      # the fast path, without a generator
        if type(a) in _NUMBERS:
            break
    else:
        return args
    slots = _tensor_slots(op)
    for i, a in enumerate(args):        # numbers only in int/bool/Scalar slots (gather's dim)
        if i in slots and type(a) in _NUMBERS:
            break
    else:
        return args
    make = _wrapped_number if wrap_number is not None else _number_tensor
    out = [make(type(a), a, math.copysign(1.0, a.real) if type(a) is not bool else 1.0)
           if i in slots and type(a) in _NUMBERS else a for i, a in enumerate(args)]
    return out if wrap_number is not None else _zero_dim_dtypes(args, out)


def numbers_converter(op: torch._ops.OpOverload) -> Optional[Callable[[tuple], list]]:
    """:func:`numbers_as_tensors` bound to ``op``, its Tensor slots looked up once: what a
    kernel of one op calls on every call (``patches.dispatcher``); None for an op with no
    Tensor slot (``cat``'s is a list).  A call with no number in a Tensor slot costs a test
    per slot (gather's ``dim`` is no Tensor slot)."""
    slots = tuple(sorted(_tensor_slots(op)))
    if not slots:
        return None

    def convert(args):
        for i in slots:
            if i < len(args) and type(args[i]) in _NUMBERS:
                return numbers_as_tensors(op, args)
        return args
    return convert


@functools.lru_cache(maxsize=1024)
def _number_tensor(kind, value, sign) -> torch.Tensor:
    # Cached (torch.tensor costs ~3 us): a wrapped number is only ever read.  The key
    # keeps 1, 1.0 and True apart (kind) and -0.0 apart from 0.0 (sign).
    return torch.tensor(value)


# a Python number's dtype as a wrapped number (what the dispatcher makes of it; _gate reads it too)
WRAPPED_DTYPES = {bool: torch.bool, int: torch.int64, float: torch.float64, complex: torch.complex128}


@functools.lru_cache(maxsize=1024)
def _wrapped_number(kind, value, sign) -> torch.Tensor:
    return wrap_number(torch.tensor(value, dtype=WRAPPED_DTYPES[kind]))


def _zero_dim_dtypes(args, out) -> list:
    """``out`` (``args`` with numbers as 0-dim tensors) with those tensors cast to the
    dtype the first number, wrapped, would give with the first tensor operand, where
    every tensor operand is 0-dim (else a dimensioned operand decides, as on the CPU).
    They go to that operand's device too: a 0-dim CPU float16 operand beside a device
    tensor aborts the real torch-directml 0.2.5 (``dml_util.h:52 Check failed``)."""
    operands = [a for a in args if isinstance(a, torch.Tensor)]
    if not operands or any(t.dim() for t in operands):
        return out
    number = next(a for a, t in zip(args, out) if a is not t)   # numbers_as_tensors converted one
    dtype, device = torch.result_type(operands[0], number), operands[0].device
    return [t.to(device, dtype) if a is not t else t for a, t in zip(args, out)]


@functools.lru_cache(maxsize=None)
def _tensor_slots(op) -> frozenset:
    return frozenset(i for i, a in enumerate(op._schema.arguments) if isinstance(a.type, torch.TensorType))


def _storage_ptr(t: torch.Tensor) -> int:
    try:
        return t.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError):
        return -1
