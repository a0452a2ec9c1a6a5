"""The emulated DirectML device: PrivateUse1 kernels that run on the CPU.

Every aten op that reaches the PrivateUse1 dispatch key lands in :func:`_kernel`,
which asks the policy (``_state.policy``: routing table and quirk rules) what DirectML
would do, then runs a hand-written kernel (``_HAND_WRITTEN``: allocation, copies,
``resize_``, convolution), re-dispatches a metadata op (views) to the CPU kernel on the
device tensor itself, or runs the op on zero-copy CPU aliases.  Arithmetic is
therefore the CPU's own kernels, bit for bit.  How ops reach :func:`_kernel` depends
on the binding (:func:`select_binding`): :mod:`._compiled` (a C++ boxed fallback; every
torch, the only way on 2.4.1) or :mod:`._python_api` (torch >= 2.5).

Details: docs/emulation.md ("How the device is bound to torch")."""
import functools
import math
import os
import sys

import torch

from . import _compiled, _python_api, opaque, routing
from .fatal import FatalDirectMLError, abort_message
from ..dml_ops import aten_op, view_kernels
from ..fallback import numbers_as_tensors

# Applies the rules to a Python-level call of the device module; _state, which sits
# above this module, passes its own down (python_call(name, args) -> None).
python_call = lambda name, args: None  # noqa: E731

DEVICE_TYPE = "privateuseone"
DEVICE = torch.device(DEVICE_TYPE, 0)
_CPU_KEYSET = torch._C.DispatchKeySet(torch._C.DispatchKey.CPU)
_CPU = torch.device("cpu")
Tensor = torch.Tensor

_libraries = []   # torch.library registrations vanish when these are collected
_ops = {}         # OpOverload -> _OpInfo
_direct = set()   # ops given a direct PrivateUse1 kernel (faster than the boxed fallback)
RUN = object()    # the policy's "compute normally" verdict
policy = None     # set by register(): (info, args, kwargs) -> RUN | result, may raise
binding = None    # set by register(): _python_api or _compiled
# Zero-copy moves between the CPU and the device, the binding's own (set by register()).
to_device = cpu_alias = None


def host(value):
    """The CPU view of a device tensor's memory; a CPU tensor or a non-tensor as it is: rules
    compute the real binary's answer there, without re-entering the device's kernels."""
    return cpu_alias(value) if isinstance(value, torch.Tensor) and not value.is_cpu else value


def write_out(out, value):
    """``value`` written into a kernel's ``out=`` tensor ``out`` (resized first, as ATen's
    ``out=`` kernels do): between the CPU views of their memory, as the real binary writes it
    inside its C++ kernel.  A ``Tensor.copy_`` from Python would reach dmlshim's own entry
    point (``int_range``'s, for int64), which takes it for the model's call and reads the
    source's range: a device read the real binary never makes (GFPGAN's RetinaFace
    ``max_pool2d``: one per forward)."""
    if out.shape != value.shape:
        out.resize_(value.shape)
    host(out).copy_(host(value))
    return out


class _OpInfo:
    """What the kernel needs to know about one aten overload, computed once."""

    __slots__ = ("op", "name", "impl", "metadata", "cache")

    def __init__(self, op):
        self.op = op
        self.name = routing.op_name(op)
        self.impl = None   # a hand-written kernel (_HAND_WRITTEN), set by register()
        returns = op._schema.returns
        is_view = any(r.alias_info is not None and not r.alias_info.is_write for r in returns)
        self.metadata = (is_view or torch.Tag.inplace_view in op.tags
                         or self.name.split(".", 1)[0] in ("set_", "_reshape_alias"))
        self.cache = None  # policy's per-op data (routing, matching rules, failed())


def op_info(op):
    info = _ops.get(op)
    if info is None:
        info = _ops[op] = _OpInfo(op)
    return info


# ---------------------------------------------------------------- arguments

def _to_cpu(x, originals):
    """Device tensors (also inside lists) -> CPU aliases; device args -> cpu."""
    if isinstance(x, Tensor):
        if x.is_cpu or x.device.type != DEVICE_TYPE:
            return x
        alias = cpu_alias(x)
        originals[id(alias)] = x
        return alias
    if isinstance(x, (list, tuple)):
        return type(x)([_to_cpu(y, originals) for y in x])
    if isinstance(x, torch.device) and x.type == DEVICE_TYPE:
        return _CPU
    return x


def _to_dev(x, originals):
    """CPU results -> device: an alias of an argument is that argument.

    DirectML allocates every result itself, so a result of a dtype it cannot hold
    (complex, bfloat16: ``x * 1j``) is the process abort of failure_modes.md #8, #9."""
    if isinstance(x, Tensor):
        original = originals.get(id(x))
        if original is not None:
            return original
        if not x.is_cpu:
            return x
        if x.dtype in _ABORT_DTYPES:
            raise FatalDirectMLError(abort_message(x.dtype))
        return to_device(x)
    if isinstance(x, (list, tuple)):
        return type(x)([_to_dev(y, originals) for y in x])
    return x


_ABORT_DTYPES = frozenset([torch.bfloat16, torch.complex32, torch.complex64, torch.complex128])


def run_on_cpu(op, args, kwargs, kernel=None):
    """Run ``op`` (or ``kernel``, same arguments) on CPU aliases of the device
    arguments; results on the device."""
    originals = {}
    cargs = [_to_cpu(a, originals) for a in args]
    ckwargs = {k: _to_cpu(v, originals) for k, v in kwargs.items()} if kwargs else kwargs
    try:
        # op._op: the C++ callable behind OpOverload.__call__
        out = (kernel or op._op)(*numbers_as_tensors(op, cargs), **ckwargs)
    except RuntimeError as e:
        if "not resizable" not in str(e):
            raise
        _run_into_fresh_outs(op, kwargs, cargs, ckwargs)
        return _outs(op, kwargs)  # out= overloads return their out arguments
    if kwargs:
        _sync_out_metadata(op, kwargs, ckwargs)
    return _to_dev(out, originals)


def _sync_out_metadata(op, kwargs, ckwargs):
    # A CPU kernel may resize an out= alias in place (same or fewer bytes): the
    # device tensor must take the alias's new sizes and strides.
    for name in _out_names(op):
        target, alias = kwargs.get(name), ckwargs.get(name)
        if (isinstance(target, Tensor) and alias is not target
                and (alias.shape != target.shape or alias.stride() != target.stride()
                     or alias.storage_offset())):
            _set_metadata(target, alias.shape, alias.stride(),
                          target.storage_offset() + alias.storage_offset())


def _run_into_fresh_outs(op, kwargs, cargs, ckwargs):
    # An out= argument must grow, but a DLPack storage cannot: compute into
    # fresh CPU outputs, then grow the device outputs and copy back.
    fresh = {name: torch.empty(0, dtype=ckwargs[name].dtype) for name in _out_names(op)
             if isinstance(kwargs.get(name), Tensor) and not kwargs[name].is_cpu}
    op(*cargs, **{**ckwargs, **fresh})
    for name, result in fresh.items():
        target = kwargs[name]
        extent = 1 + sum((n - 1) * st for n, st in zip(result.shape, result.stride()))
        target.resize_((extent if result.numel() else 0,))
        _set_metadata(target, result.shape, result.stride(), target.storage_offset())
        cpu_alias(target).copy_(result)


def _outs(op, kwargs):
    outs = tuple(kwargs[name] for name in _out_names(op))
    return outs[0] if len(outs) == 1 else outs


def _set_metadata(target, shape, stride, offset, storage=None):
    torch.ops.aten.set_.source_Storage_storage_offset.redispatch(
        _CPU_KEYSET, target, opaque.untyped_storage(target) if storage is None else storage,
        offset, shape, stride)


@functools.lru_cache(maxsize=None)
def _out_names(op):
    """Names of the kwarg-only mutable (``out=``) arguments of an overload."""
    return tuple(a.name for a in op._schema.arguments
                 if a.kwarg_only and a.alias_info is not None and a.alias_info.is_write)


# ---------------------------------------------------------------- kernels

def _kernel(info, /, *args, **kwargs):     # "/": an op may have an argument named info
    verdict = policy(info, args, kwargs)
    if verdict is not RUN:
        return verdict
    try:
        if info.cache.kernel is not None:   # numerics="gpu"
            return run_on_cpu(info.op, args, kwargs, info.cache.kernel)
        if info.impl is not None:
            return info.impl(*args, **kwargs)
        if info.metadata:
            return info.op.redispatch(_CPU_KEYSET, *args, **kwargs)
        return run_on_cpu(info.op, args, kwargs)
    except Exception:
        info.cache.failed()
        raise


# CompositeImplicitAutograd ops the real binary fails inside their C++ decomposition only
# (each step called from Python is right there): a kernel at the Autograd and backend keys
# gives a rule (rules_refused.py) a place to fail them.
FAILING_COMPOSITES = ("combinations",)


def _composite_kernel(info):
    """A rule's verdict, else torch's own decomposition (autograd intact)."""
    def kernel(*args, **kwargs):
        verdict = policy(info, args, kwargs)
        return info.op.decompose(*args, **kwargs) if verdict is RUN else verdict
    return kernel


def _register_direct(op):
    """Give ``op`` its own PrivateUse1 kernel, :func:`_kernel` bound to its info."""
    _direct.add(op)
    info = op_info(op)
    _libraries[-1].impl(info.name, functools.partial(_kernel, info), "PrivateUse1")


def _take_op(op):
    """Give an aten op its direct kernel on its first call; whether it now has one."""
    if op not in _direct and op.namespace == "aten":
        try:
            _register_direct(op)
        except RuntimeError:
            pass  # some ops refuse Python kernels; the fallback keeps serving them
    return op in _direct


def _fallback(op, *args, **kwargs):
    # The Python binding's boxed fallback. A direct kernel is called by the
    # dispatcher with less overhead than this fallback.
    _take_op(op)
    return _kernel(op_info(op), *args, **kwargs)


def _take_op_by_name(name, overload):
    # The compiled binding's first-call hook: ("aten::add", "Tensor") -> bool.
    namespace, _, base = name.partition("::")
    if namespace != "aten":
        return False
    try:
        op = getattr(getattr(torch.ops.aten, base), overload or "default")
    except AttributeError:
        return False
    return _take_op(op)


def _empty(size, *, dtype=None, layout=None, device=None, pin_memory=None,
           memory_format=None):
    return to_device(torch.empty(size, dtype=dtype, layout=layout, memory_format=memory_format))


def _empty_strided(size, stride, *, dtype=None, layout=None, device=None, pin_memory=None):
    return to_device(torch.empty_strided(size, stride, dtype=dtype, layout=layout))


def _to_copy(self, *, dtype=None, layout=None, device=None, pin_memory=None,
             non_blocking=False, memory_format=None):
    # x.to(dev), .cpu() and .to(dtype) in one kernel (without it: empty_strided +
    # copy_ -> _copy_from, two Python kernels). Both directions dispatch here.
    to_dml = device is None or _device_type(device) == DEVICE_TYPE
    src = self if self.is_cpu else cpu_alias(self)
    target = _CPU if to_dml else device
    if (layout is None or layout == torch.strided) and not pin_memory:
        # Tensor.to parses its arguments faster than the OpOverload call below.
        out = src.to(target, dtype or src.dtype, non_blocking, copy=True,
                     memory_format=memory_format or torch.preserve_format)
    else:
        out = torch.ops.aten._to_copy.default(
            src, dtype=dtype, layout=layout, device=target, pin_memory=pin_memory,
            non_blocking=non_blocking, memory_format=memory_format)
    return to_device(out) if to_dml else out


def _device_type(device):
    return device.type if isinstance(device, torch.device) else torch.device(device).type


def _copy_from(self, dst, non_blocking=False):
    src = cpu_alias(self) if self.device.type == DEVICE_TYPE else self
    target = cpu_alias(dst) if dst.device.type == DEVICE_TYPE else dst
    target.copy_(src)
    return dst


def _copy_from_and_resize(self, dst):
    dst.resize_(self.shape)
    return _copy_from(self, dst)


def _resize_(self, size, memory_format=None):
    """``resize_`` that can grow a DLPack storage by swapping in a larger one."""
    size = tuple(size)
    numel = math.prod(size)
    needed = (self.storage_offset() + numel) * self.element_size()
    if needed > opaque.untyped_storage(self).nbytes():
        old = cpu_alias(self).reshape(-1) if self.numel() else None
        grown = to_device(torch.empty(self.storage_offset() + numel, dtype=self.dtype))
        if old is not None:
            cpu_alias(grown)[self.storage_offset():self.storage_offset() + old.numel()].copy_(old)
        # keep sizes; resize_ below sets the new ones
        _set_metadata(self, self.shape, self.stride(), self.storage_offset(),
                      opaque.untyped_storage(grown))
    torch.ops.aten.resize_.default.redispatch(_CPU_KEYSET, self, size,
                                              memory_format=memory_format)
    return self


def _convolution(input, weight, bias, stride, padding, dilation, transposed,
                 output_padding, groups):
    return run_on_cpu(torch.ops.aten.convolution.default,
                      (input, weight, bias, stride, padding, dilation, transposed,
                       output_padding, groups), {})


def _convolution_backward(grad_output, input, weight, stride, padding, dilation,
                          transposed, output_padding, groups, output_mask):
    bias_sizes = [weight.shape[1] * groups if transposed else weight.shape[0]]
    return run_on_cpu(torch.ops.aten.convolution_backward.default,
                      (grad_output, input, weight, bias_sizes, stride, padding, dilation,
                       transposed, output_padding, groups, output_mask), {})


# Kernels :func:`_kernel` runs instead of the CPU one, after the policy (routing, rules).
_HAND_WRITTEN = {
    "empty.memory_format": _empty,
    "empty_strided": _empty_strided,
    "_to_copy": _to_copy,
    "_copy_from": _copy_from,
    "_copy_from_and_resize": _copy_from_and_resize,
    "resize_": _resize_,
    "convolution_overrideable": _convolution,
    "convolution_backward_overrideable": _convolution_backward,
}


class _DeviceModule:
    """``torch.privateuseone``: what torch asks of a device module (one device)."""

    @staticmethod
    def is_available():
        return True

    @staticmethod
    def is_initialized():
        return True

    @staticmethod
    def _is_in_bad_fork():
        return False

    @staticmethod
    def device_count():
        return 1

    @staticmethod
    def current_device():
        return 0

    @staticmethod
    def synchronize(device=None):
        pass

    @staticmethod
    def manual_seed_all(seed):
        # Random ops run on the CPU default generator, which torch.manual_seed
        # already seeds; torch_directml does the same (failure_modes.md #35).
        pass

    @staticmethod
    def get_rng_state(device=None):
        # The device's random stream *is* the CPU default generator's, so
        # torch.random.fork_rng() (which saves every accelerator's state) works.
        return torch.get_rng_state()

    @staticmethod
    def set_rng_state(state, device=None):
        torch.set_rng_state(state)

    @staticmethod
    def get_amp_supported_dtype():
        # torch.autocast("privateuseone") is accepted (a fallthrough, csrc/device.cpp); a
        # default rule then fails the ops inside, as the real 0.2.5 binary does.
        return [torch.float16]

    @staticmethod
    def device(device_id=None):
        # torch_directml's device(): used by torch.load(map_location=dev) and
        # Storage.to(dev) with a torch.device, it compares its argument with an int
        # (rule "privateuseone.device", #46); it returns a torch.device, which a
        # ``with`` makes the default device
        python_call("privateuseone.device", (device_id,))
        if isinstance(device_id, (str, torch.device)):         # the rule is off
            device_id = torch.device(device_id).index
        if device_id is not None and not 0 <= device_id < 1:
            raise Exception(f"Invalid device_id argument supplied {device_id}. device_id must "
                            "be in range [0, 1).")
        return torch.device(DEVICE_TYPE, device_id or 0)


# torch-directml's split kernels copy (failure_modes.md #62): a view op with a kernel of
# its own there, where torch has a composite of narrow
_SPLITS = ("split.Tensor", "split_with_sizes")


def _ops_needing_direct_kernels():
    """Overloads that must get a PrivateUse1 kernel to be routed as in torch 2.4.1.

    * Functional/in-place variants of structured ops (``COMPOSITE_NONFUNCTIONAL``
      in the table): otherwise torch reaches them through ``empty`` + the
      ``out=`` overload, which is slower, and a rule on ``mul.Tensor`` would
      see a preallocated float output instead of choosing the result dtype.
    * Ops torch-directml implements (``DML_KERNEL``/``CPU_FALLBACK``) that
      torch 2.13 gives a CompositeExplicitAutograd kernel: otherwise they
      decompose, e.g. ``native_layer_norm`` into batch_norm arithmetic that is
      not bit-identical to the CPU kernel; and ``split``, which copies there.
    * torch-directml's view kernels (``dml_ops.view_kernels``), all direct PrivateUse1
      kernels on the real binary: dmlshim's backend gate stands in for a direct kernel only
      (a first call through the fallback would register one over the gate).  Not the
      CompositeImplicitAutograd ``reshape``: a kernel of its own would end its decomposition
      at the Autograd key.
    """
    has_kernel = torch._C._dispatch_has_kernel_for_dispatch_key
    for name in view_kernels():
        op = aten_op(name)
        if not has_kernel(op.name(), "CompositeImplicitAutograd") and not has_kernel(op.name(), "PrivateUse1"):
            yield op
    for name, (route, delegate) in routing.table().items():
        try:
            op = aten_op(name)
        except AttributeError:
            continue  # not in the running torch
        qualname = op.name()
        if delegate != name:
            wanted = has_kernel(qualname, "CompositeExplicitAutogradNonFunctional")
        else:
            wanted = (route in (routing.DML_KERNEL, routing.CPU_FALLBACK)
                      and has_kernel(qualname, "CompositeExplicitAutograd")
                      and not has_kernel(qualname, "CompositeImplicitAutograd")
                      and (not op_info(op).metadata or name in _SPLITS))
        if wanted and not has_kernel(qualname, "PrivateUse1"):
            yield op


def select_binding():
    """The compiled binding on every torch; the Python API one where it cannot be had (no
    toolchain, and no build of it for this torch in the build cache).

    The compiled binding is the only one torch 2.4.1 (torch-directml's pin) can
    take, so every lane tests the users' path; it is also the faster one on
    torch 2.13 (``benchmarks/emulation_overhead.py``: 64-element add +6.7 µs
    against +9.6 µs). Without a C++ toolchain, torch >= 2.5 falls back to its
    Python PrivateUse1 API. ``DMLSHIM_EMULATION_BINDING=python|compiled`` forces one.

    Raises:
        ValueError: a bad ``DMLSHIM_EMULATION_BINDING`` value, or ``python`` on a
            torch without the Python backend API.
    """
    forced = os.environ.get("DMLSHIM_EMULATION_BINDING", "").strip().lower()
    bindings = {b.NAME: b for b in (_compiled, _python_api)}
    if forced and forced not in bindings:
        raise ValueError(f"DMLSHIM_EMULATION_BINDING={forced!r}: allowed values are "
                         f"{', '.join(bindings)}")
    if forced == _python_api.NAME and not _python_api.available():
        raise ValueError(f"DMLSHIM_EMULATION_BINDING=python: torch {torch.__version__} has no "
                         f"Python PrivateUse1 backend API (torch >= 2.5 has it)")
    if forced:
        return bindings[forced]
    if _compiled.missing() and _python_api.available():
        return _python_api
    return _compiled  # raises a clear error at setup() if it cannot be built


def _refuse_a_claimed_privateuse1() -> None:
    """A second PrivateUse1 backend aborts the process in the dispatcher (seen with
    torch_directml imported): refuse it with an error instead."""
    if torch._C._dispatch_has_kernel_for_dispatch_key("aten::empty.memory_format", "PrivateUse1"):
        owner = "torch_directml" if "torch_directml" in sys.modules else "another backend"
        raise RuntimeError(f"dmlshim.emulation.install(): {owner} already registered PrivateUse1 "
                           "kernels in this process; the emulated device needs a process without "
                           "it (use the real device, or emulate in a fresh process)")


def register(policy_fn):
    """Make ``privateuseone`` the emulated device and register the kernels (once).

    Raises:
        RuntimeError: another backend already has PrivateUse1 kernels (torch_directml
            imported), or the compiled binding cannot be built (no C++ compiler or ninja).
    """
    global policy, binding, to_device, cpu_alias
    _refuse_a_claimed_privateuse1()
    policy = policy_fn
    chosen = select_binding()
    _libraries.extend(chosen.setup(DEVICE_TYPE, _DeviceModule(), _fallback, _take_op_by_name))
    binding = chosen
    to_device, cpu_alias = chosen.to_device, chosen.cpu_alias
    opaque.install(DEVICE_TYPE)
    _libraries.append(torch.library.Library("aten", "IMPL"))
    for name, fn in _HAND_WRITTEN.items():
        op = aten_op(name)
        op_info(op).impl = fn
        _register_direct(op)
    for op in _ops_needing_direct_kernels():
        _register_direct(op)
    for name in FAILING_COMPOSITES:
        op = getattr(torch.ops.aten, name).default
        for key in ("AutogradPrivateUse1", "PrivateUse1"):
            # through the C++ handle: torch < 2.6 refuses a second Python kernel at the same
            # key (torch.library._impls), and dmlshim's fix of the op must stand in for this one
            _libraries[-1].m.impl(name, key, _composite_kernel(op_info(op)), False)
    for name in opaque.STRIDED_CLONES:   # composites the real binary fails (a rule raises)
        packet = getattr(torch.ops.aten, name)
        for overload in packet.overloads():
            _register_direct(getattr(packet, overload))
