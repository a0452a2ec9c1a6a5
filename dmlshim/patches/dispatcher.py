"""The dispatcher-level net: DirectML fixes that hold however the aten op is reached.

Two tables, each an aten overload -> function, registered at the BackendSelect key
(a third, ``COMPOSITES``, below, at the backend's Autograd and backend keys):

* ``FIXES`` rewrite the arguments and redispatch, on the device: CPU index tensors
  (``index``, ``_index_put_impl_``), ``rsub`` of a number;
* ``ISLANDS`` run a call that would create a value DirectML cannot hold (complex,
  bfloat16, float64 without FP64) on the CPU as a CPU island (``dmlshim.islands``).

It catches what the Python-level patches cannot see: C++ composites, ``torch.ops.aten``,
TorchScript, ``backward()``.  Why BackendSelect, the alternatives measured and the
price per call: docs/internals.md ("The dispatcher net")."""
from __future__ import annotations

import functools
from typing import Callable, Dict, NamedTuple, Optional, Tuple

import torch

from .. import _torch_compat, devices, fallback, islands, trace
from . import _gate
from ._wrap import Context
from ._patch import Patch

PATCH = Patch("dispatcher", "the dispatcher net: CPU index tensors moved over, and values the device "
                            "cannot hold (complex, bfloat16, float64) made as CPU islands, however "
                            "the op is reached (C++ composites, torch.ops.aten, backward())")

_aten = torch.ops.aten
_BOOL = torch.bool
# A fix at BackendSelect, the net's and the reported-defect fixes' (_select.py) alike:
# fix(op, keyset, args, kwargs) -> None (nothing to fix), the fixed (args, kwargs) to
# redispatch, or Done(result).
Fix = Callable[[torch._ops.OpOverload, torch._C.DispatchKeySet, tuple, dict], object]


# Other patches' fixes of an overload the net holds, asked in turn after the net's own
# (``_to_copy``: when the call makes no island; ``_index_put_impl_``: with its indices on
# the device): fix(op, args, kwargs) -> None or what a Fix returns.  int_range adds
# _index_put_impl_'s, channels_last _to_copy's, while installed (one Python BackendSelect
# kernel per overload: the net's serves them all).  Tuples, replaced whole: a call reads
# them without a lock.
hooks: Dict[str, Tuple[Callable[[torch._ops.OpOverload, tuple, dict], object], ...]] = {
    "_to_copy": (), "_index_put_impl_": ()}
# After-hooks of the net's kernels, told each result of a device call: f(op, args, kwargs,
# result) (int_range: the span of an integer tensor copied over, indexed, of a ``full``).
after_hooks: Dict[str, Tuple[Callable[[torch._ops.OpOverload, tuple, dict, object], None], ...]] = {
    "_to_copy": (), "index": (), "full": ()}


_hook_owner: Dict[Callable, str] = {}      # each hook -> its patch's name (what orders it)


def add_hook(base: str, fix, *, owner: str, after: bool = False) -> None:
    """``fix``, of patch ``owner`` (a module ``__name__`` or registry name), asked by the
    net's kernels of ``base`` (``"mul"``, ``"_to_copy"``), or told their results
    (``after``); the gates of those kernels watch what it declares (``_gate.watching``).
    The first hook that answers wins, so the hooks run in their patches' declared order
    (``patches.rank``), whatever order they are added in; sorted here, not per call."""
    from . import rank
    table = after_hooks if after else hooks
    _hook_owner[fix] = owner.rpartition(".")[2]
    if fix not in table[base]:
        table[base] = tuple(sorted(table[base] + (fix,), key=lambda f: rank(_hook_owner[f])))
    _rewatch(base)


def remove_hook(base: str, fix, *, after: bool = False) -> None:
    table = after_hooks if after else hooks
    table[base] = tuple(f for f in table[base] if f is not fix)
    if not any(fix in fixes for t in (hooks, after_hooks) for fixes in t.values()):
        _hook_owner.pop(fix, None)
    _rewatch(base)


class Hook:
    """``install(ctx)``/``uninstall()`` for one hook of patch ``owner`` (its module's
    ``__name__``) on the net's kernels of ``base``: ``make(target)`` builds the hook for the
    target's device type at install (:func:`add_hook`; ``after``: told each result), as
    ``_select.Kernels`` does for a chain's fixes."""

    def __init__(self, owner: str, base: str, make: Callable[[str], Callable], *, after: bool = False):
        self.owner, self.base, self.make, self.after = owner, base, make, after
        self._hook = None

    def install(self, ctx) -> None:
        if self._hook is None:
            self._hook = self.make(ctx.target)
            add_hook(self.base, self._hook, owner=self.owner, after=self.after)

    def uninstall(self) -> None:
        if self._hook is not None:
            remove_hook(self.base, self._hook, after=self.after)
            self._hook = None


def hook_owners(base: str, *, after: bool = False) -> Tuple[str, ...]:
    """The patches of ``base``'s hooks now, in the order the net's kernels ask them."""
    return tuple(_hook_owner[f] for f in (after_hooks if after else hooks)[base])


def _rewatch(base: str) -> None:
    """The net's gates of ``base`` (and of its in-place form) told what their fix and hooks
    now look at."""
    for op, (registration, fix) in _watched.items():
        name = op._schema.name.split("::", 1)[1]
        if base in (name, name.rstrip("_")):
            bases = {name, name.rstrip("_")}
            _gate.set_watch(registration, op, (fix, *(f for b in bases for f in hooks.get(b, ())),
                                               *(f for b in bases for f in after_hooks.get(b, ()))))


def _hooked(base: str, op, args, kwargs):
    """The first answer of ``base``'s hooks, or None."""
    for fix in hooks[base]:
        fixed = fix(op, args, kwargs)
        if fixed is not None:
            return fixed
    return None


@_gate.watching(_gate.Watch(off_target=True))
def _device_indices(op, keyset, args, kwargs):
    """``index``/``_index_put_impl_`` with CPU index tensors: the indices moved to
    ``self``'s device (``indices`` is a list of optional tensors); then, for
    ``_index_put_impl_``, the first answer of its :data:`hooks`."""
    self, indices = args[0], args[1]
    fixed = None
    if not self.is_cpu and any(i is not None and i.is_cpu for i in indices):
        moved = [i.to(self.device) if i is not None and i.is_cpu else i for i in indices]
        fixed = args, kwargs = (self, moved, *args[2:]), kwargs
    if op is _aten._index_put_impl_.default:
        return _hooked("_index_put_impl_", op, args, kwargs) or fixed
    return fixed


class Done(NamedTuple):
    """What a fix returns when it computed the result itself (no redispatch).  ``record``
    False: the kernel records no "coerce" row (``_select.on_cpu`` records its own "cpu"
    one; inference_mode's views would add a row to every view call)."""
    result: torch.Tensor
    record: bool = True


def answered(op, keyset, fixed) -> "tuple[object, bool]":
    """``(result, recorded)`` of a fix's answer ``fixed``: a :class:`Done`'s result, or the
    fixed call redispatched below BackendSelect (the op's ``own`` time in ``report()``);
    ``recorded``: whether the call gets a "coerce" row."""
    if isinstance(fixed, Done):
        return fixed.result, fixed.record
    with trace.own():
        return op.redispatch(keyset & _BELOW, *fixed[0], **fixed[1]), True


def _number_minus_tensor(op, keyset, args, kwargs):
    """``rsub.Scalar`` (``7 - x``) as ``x * -alpha + 7``, the numbers wrapped on the CPU as
    ``x * 2`` passes them.  The real 0.2.5 binary's ``rsub.Scalar`` wraps the number on the
    device and calls ``sub``/``rsub.Tensor`` with it, which no Python kernel there (the
    reported-defect fixes') can receive: torch's INTERNAL ASSERT "tensor.device().is_cpu()"
    (measured); a CPU-wrapped ``self`` of ``sub`` swaps the operands.  ``1.0 - x`` no longer
    makes a float64 number on the device either (failure_modes.md #7).  A bool ``self`` gets
    torch's own error."""
    self, number = args[0], args[1]
    alpha = kwargs.get("alpha", args[2] if len(args) > 2 else 1)
    if self.dtype is _BOOL:
        _aten.rsub.Scalar(torch.empty(self.shape, dtype=_BOOL, device="meta"), number, alpha=alpha)
    product = _aten.mul.Tensor(*fallback.numbers_as_tensors(_aten.mul.Tensor, (self, -alpha)))
    return Done(_aten.add.Tensor(*fallback.numbers_as_tensors(_aten.add.Tensor, (product, number))))


# aten overload -> fix(op, keyset, args, kwargs) -> fixed (args, kwargs), ``Done(result)``,
# or None when nothing needs fixing.  Arguments are as the dispatcher passes them
# (kwarg-only ones, e.g. out=, in kwargs), a wrapped number already a 0-dim tensor
# (``fix_kernel``).  Called only for calls with a tensor on the target device.  One entry
# per overload the quirk reaches; add future silent quirks here.
FIXES: Dict[torch._ops.OpOverload, Fix] = {
    # failure_modes.md #10, DirectML#442: DirectML's kernels unbox every input as a DML
    # tensor, so CPU index tensors fail ("unbox expects Dml at::Tensor"); CUDA takes them.
    # index_put/index_put_ reach _index_put_impl_, the DML kernel.
    _aten.index.Tensor: _device_indices,
    _aten._index_put_impl_.default: _device_indices,
    # on with the fixes that hold sub/rsub.Tensor (int_broadcast, int_range: "dispatcher:rsub")
    _aten.rsub.Scalar: _number_minus_tensor,
    # Never aten::copy_: a Python BackendSelect kernel that redispatches it breaks every
    # torch-directml copy on the real 0.2.5 binary (garbage values); patches/upload.py.
}


def _always(home, args, kwargs):
    return args, kwargs


@_gate.watching(_gate.Watch(dtypes=islands.NEVER_HELD | {torch.float64}))
def _to_copy_makes(home, args, kwargs):
    """``_to_copy`` to the device of a dtype it cannot hold: complex/bf16 from anywhere,
    float64 cast on the device (a CPU float64 *transfer* is the ``dtypes`` patch's float32
    cast at the Python level; DirectML holds float64 data, it cannot compute on it).  A
    bfloat16 cast bound for the device (``x.bfloat16()``, ``softmax(dtype=)``'s) follows
    DMLSHIM_BF16 (``islands.held_as``): made in its dtype there, a "coerce" row."""
    self, dtype = args[0], kwargs.get("dtype") or args[0].dtype
    if dtype is torch.bfloat16 and islands.bf16_as is not None:
        to = kwargs.get("device") or self.device
        held = islands.held_as(dtype, to if isinstance(to, torch.device) else torch.device(to))
        if held is not dtype:
            op = _aten._to_copy.default
            return Done(trace.call(op.name(), _coerced, op, args, dict(kwargs, dtype=held)))
    if dtype in islands.NEVER_HELD or (dtype is torch.float64 and not self.is_cpu
                                       and not devices.has_float64_support(home)):
        return args, (dict(kwargs, device=torch.device("cpu")) if "device" in kwargs else kwargs)
    return None


def _coerced(func, args, kwargs):
    return "coerce", func(*args, **kwargs)


@_gate.watching(_gate.Watch(dtypes=frozenset({torch.float64})))
def _float64_factory(home, args, kwargs):
    """A float64 factory on a device without float64 (``linalg.pinv``/``matrix_rank`` make
    their tolerance with ``at::full(..., kDouble)``): made on the CPU."""
    if kwargs.get("dtype") is torch.float64 and not devices.has_float64_support(home):
        return args, dict(kwargs, device=torch.device("cpu"))
    return None


def _float64_math(home, args, kwargs):
    """An op that computes in float64 inside, on a device without float64: on the CPU."""
    return None if devices.has_float64_support(home) else (args, kwargs)


def _to_sparse_makes(home, args, kwargs):
    """A sparse result: DirectML has no sparse kernels (SparsePrivateUse1, #30)."""
    return None if args[0].is_cpu else (args, kwargs)


# aten overload -> makes(home, args, kwargs) -> the (args, kwargs) to run on the CPU, a
# ``Done`` (``_to_copy`` of bfloat16 under DMLSHIM_BF16), or None: a call that would create
# a value the device cannot hold runs there as a CPU island (dmlshim.islands;
# failure_modes.md #7, #8, #9), however the op is reached (a Python call, a reference bound
# before activate(), torch.ops.aten, C++ composites).  The only layer of these ops (issue
# 49): the dtypes patch wraps none of their Python entry points (tests/test_layers.py).
# The ``Island`` a kernel here returns is the object its Python caller gets; a C++
# composite whose decomposition goes on computing after it is in ``COMPOSITES`` (run whole
# as an island, so its result keeps the island type too).  Those that always make an island (``_always``) also sit at the
# Autograd key, so their backward goes through the CPU too (``_autograd_island_kernel``).
ISLANDS: Dict[torch._ops.OpOverload, Callable] = {
    _aten._fft_r2c.default: _always, _aten._fft_c2c.default: _always,
    _aten._fft_c2r.default: _always,       # the exit of irfft/hfft: its real result goes home
    _aten.complex.default: _always, _aten.polar.default: _always,
    _aten.linalg_eig.default: _always, _aten._linalg_eigvals.default: _always,
    _aten.view_as_complex.default: _always,   # a copy on the CPU, no longer a view (docs)
    _aten._to_copy.default: _to_copy_makes,
    _aten.full.default: _float64_factory,
    # CompositeExplicitAutograd, so not in COMPOSITES: its tolerance is computed in float64
    _aten.linalg_pinv.atol_rtol_tensor: _float64_math,
    **{getattr(_aten, n).default: _to_sparse_makes
       for n in ("_to_sparse", "_to_sparse_csr", "_to_sparse_csc", "_to_sparse_bsr", "_to_sparse_bsc")},
    _aten._to_sparse.sparse_dim: _to_sparse_makes,
    # torch >= 2.10: scaled matmul with a bfloat16 result
    **({_aten._scaled_mm_v2.default: _always} if hasattr(_aten, "_scaled_mm_v2") else {}),
}
# the torch.fft functions and stft: the island's complex result, or one the decomposition
# made from it after the BackendSelect kernel's ``_fft_*`` (``ifft``'s ``conj``, ``fft2``'s
# second pass, ``stft``'s ``view_as_real``), stays an island or goes home whole
_COMPLEX_COMPOSITES = ("stft", *(f"fft_{n}" for n in (
    "fft", "ifft", "fft2", "ifft2", "fftn", "ifftn", "rfft", "rfft2", "rfftn", "irfft", "irfft2",
    "irfftn", "hfft", "hfft2", "hfftn", "ihfft", "ihfft2", "ihfftn")))


def _no_float64(home, args, kwargs):
    return not devices.has_float64_support(home)


def _unheld_dtype(home, args, kwargs):
    """``softmax``/``log_softmax`` asked for a dtype ``home`` cannot hold (float64 without
    FP64, complex, bfloat16 under DMLSHIM_BF16=cpu; another bf16 policy computes in its dtype
    on the device: ``_to_copy_makes``)."""
    dtype = kwargs.get("dtype", args[2] if len(args) > 2 else None)
    return dtype is not None and not islands.holdable(dtype, home) \
        and (dtype is not torch.bfloat16 or islands.bf16_as is None)


# CompositeImplicitAutograd ops (aten name -> needs(home, args, kwargs)) whose C++
# decomposition makes values the device cannot hold and then computes with them, so no
# BackendSelect kernel can put things right inside: irfft/hfft turn a real input complex
# (the island's real result would stay on the CPU), pinv and matrix_rank compute their
# tolerance in float64.  A kernel at the target's Autograd key (AutogradPrivateUse1; no
# torch-directml kernel there) runs the whole op on the CPU as a CPU island, autograd
# included, when ``needs`` says so, and torch's own decomposition otherwise
# (``OpOverload.decompose``).  The same kernel sits at the backend key (PrivateUse1), which
# inference_mode (no Autograd keys) and calls made below Autograd reach instead of the
# decomposition: a backend kernel outranks CompositeImplicitAutograd there, while the
# Autograd key keeps ours.
COMPOSITES: Dict[str, Callable] = {
    **{n: lambda home, args, kwargs: True for n in _COMPLEX_COMPOSITES},
    "linalg_pinv": _no_float64, "pinverse": _no_float64, "linalg_matrix_rank": _no_float64,
    "float_power": _no_float64, "softmax": _unheld_dtype, "log_softmax": _unheld_dtype,
}


def _composite_overloads():
    for base, needs in COMPOSITES.items():
        packet = getattr(_aten, base)
        for overload in packet.overloads():
            op = getattr(packet, overload)
            if torch._C._dispatch_has_kernel_for_dispatch_key(op.name(), "CompositeImplicitAutograd"):
                yield op, needs


def _composite_kernel(op, needs, target: str, name: str):
    def kernel(*args, **kwargs):
        if not fallback.busy():
            home = fallback.device_of(args, kwargs, target)
            if home is not None and needs(home, args, kwargs):
                return islands.run(op, args, kwargs, home, op=name)
        return op.decompose(*args, **kwargs)
    return kernel


# The fix each entry belongs to, by aten name: ``dmlshim.catalogue`` names it
# ``"dispatcher:<gate>"``, and an entry is registered only while that fix is on, so a
# device without the defect (or no device) pays no Python kernel on CPU calls.  An
# entry whose gate no defect names is always registered.
GATES: Dict[str, str] = {
    "index": "index", "_index_put_impl_": "index",
    "_to_copy": "_to_copy", "_scaled_mm_v2": "bfloat16",
    **{n: "complex" for n in ("_fft_r2c", "_fft_c2c", "_fft_c2r", "complex", "polar", "linalg_eig",
                              "_linalg_eigvals", "view_as_complex", *_COMPLEX_COMPOSITES)},
    **{n: "float64" for n in ("full", "linalg_pinv", "pinverse", "linalg_matrix_rank",
                              "float_power", "softmax", "log_softmax")},
    **{n: "sparse" for n in ("_to_sparse", "_to_sparse_csr", "_to_sparse_csc", "_to_sparse_bsr",
                             "_to_sparse_bsc")},
}


def gate(op) -> str:
    """``"dispatcher:<gate>"`` of an aten overload (``aten.index.Tensor`` -> ``"dispatcher:index"``)."""
    base = op.name().split("::", 1)[1].split(".", 1)[0]
    return "dispatcher:" + GATES.get(base, base)


# ops whose island arguments decide where their results go (the exit of irfft/hfft)
_FROM_ISLANDS = {_aten._fft_c2r.default}
# ops with a BackendSelect kernel of torch's own, which ours stands in for while active
_TORCH_BACKEND_SELECT = {_aten._to_copy.default, _aten.full.default}

KEY = "BackendSelect"
# what a kernel here redispatches to: the keys under BackendSelect, less the compiled
# gate's trampoline key once the gate is built (_gate.below; read at call time)
_BELOW = torch._C._dispatch_keyset_full_after(torch._C.DispatchKey.BackendSelect)
_library = None
_gates: list = []              # the compiled gate's registrations in front of _library's kernels
_watched: dict = {}            # op -> (its gate's registration, its fix): the gates _rewatch tells
_held: set = set()             # the FIXES overloads whose kernel is registered


@functools.lru_cache(maxsize=None)
def backend_key(target: str):
    """The dispatch key of device type ``target`` (``privateuseone`` -> ``PrivateUse1``,
    ``cuda`` -> ``CUDA``), or None if torch knows none."""
    try:
        return getattr(torch._C.DispatchKey, torch._C._dispatch_key_for_device(target))
    except (RuntimeError, AttributeError):
        return None


def at_backend_select(library, op, kernel, target: str, mode: str, *, always: bool = False,
                      at_backend: bool = False):
    """``_gate.register`` (``kernel`` behind the compiled gate, or behind the Python gate at
    BackendSelect, which runs :func:`passed_through` for the calls no fix watches), and the
    redispatch mask refreshed: once the gate is built it leaves the trampoline key out.
    Returns the gate's registration."""
    global _BELOW
    registration = _gate.register(library, op, kernel, target, mode, always=always, at_backend=at_backend,
                                  passed=passed_through(op))
    _BELOW = _gate.below()
    return registration


def passed_through(op):
    """``passed(keyset, args, kwargs)``: what a kernel here does with a call it does not fix
    (``fix_kernel``'s and ``_island_kernel``'s last line): numbers in Tensor slots as
    tensors, the device's key of a ``device=`` added where ours stands in for torch's
    BackendSelect kernel, redispatched below, an argument it writes written back."""
    numbers, written = fallback.numbers_converter(op), _written_back(op)
    stands_in = op in _TORCH_BACKEND_SELECT
    factory = not any(isinstance(a.type, torch.TensorType) for a in op._schema.arguments)
    redispatch = op._handle.redispatch_boxed          # op.redispatch less its Python frame: every CPU call

    def passed(keyset, args, kwargs):
        if numbers is not None:
            args = numbers(args)
        if stands_in:
            keyset = _with_device_key(keyset, kwargs.get("device"), factory)
        result = redispatch(keyset & _BELOW, *args, **kwargs)
        return written(result, args, kwargs) if written else result
    return passed


def below(keyset):
    """The key set of a redispatch to the kernels under BackendSelect."""
    return keyset & _BELOW


# Four kernel makers, not one: each sits at another dispatch key with another contract.
# fix_kernel (BackendSelect): fix a device call's arguments, redispatch below; the one maker
# of every fix, the net's and _select.py's.  _island_kernel (BackendSelect): a call that would
# make a value the device cannot hold runs on the CPU, factories reached by device= too.
# _autograd_island_kernel (Autograd): the island above autograd, so its backward is the CPU's.
# _composite_kernel (Autograd and backend keys of a CompositeImplicitAutograd op): the whole
# op as an island, else torch's decomposition, never a redispatch.  One maker with flags
# would be these four behind a switch, on every call.
def fix_kernel(op, fix: Fix, backend, *, aside: Optional[Callable[[], bool]] = None,
               probes: Optional[list] = None):
    """The BackendSelect kernel of ``op`` for ``fix``, the one maker of the net's (``FIXES``)
    and the reported-defect fixes' (``_select.py``) kernels.  Python numbers in Tensor slots
    become 0-dim tensors first (``fallback.numbers_converter``): the 2.5 of ``x * 2.5``
    reaches a Python kernel as a Python number, which ``redispatch`` refuses, and
    ``x * True``'s fix must see a bool tensor.  A call with a tensor on ``backend`` (a
    dispatch key) then goes to ``fix``; the fixed call, and every other, is redispatched
    below BackendSelect; in ``report()`` the redispatch of a fixed call is the op's ``own``
    time, a fix's ``trace.substitute()`` regions its ``substitute``, the rest (the fix's
    Python) its ``overhead``.  While ``aside()`` returns True, or ``probes[0]`` is not 0 (a
    probe runs: ``_select.standing_aside``), every call passes through unfixed
    (``_select``'s fixes stand aside for probes and the shim's own work; the net fixes the
    shim's own device calls too, a ``cat`` under ``fallback.guard()``)."""
    name = op.name()
    numbers = fallback.numbers_converter(op)
    written = _written_back(op)
    passed = trace.passed_counter(name)       # its calls that get no row: overhead
    base = op._schema.name.split("::", 1)[1]
    told = base in after_hooks                # the few overloads with after-hooks

    def kernel(keyset, *args, **kwargs):
        if numbers is not None:
            args = numbers(args)
        if keyset.has(backend) and (aside is None or not aside()) and not (probes and probes[0]):
            # a handled call, current while the fix runs: its trace.substitute() regions and
            # nested rows count there; passed through, or computed without a row, its checks
            # are overhead (passed)
            call = trace.begin()
            recorded, fixed = False, None
            try:
                fixed = fix(op, keyset, args, kwargs)
                if fixed is not None:
                    result, recorded = answered(op, keyset, fixed)
            finally:
                trace.end(call, name if recorded else None, "coerce", args, kwargs, passed=passed)
            if fixed is None:
                result = op.redispatch(keyset & _BELOW, *args, **kwargs)
            for tell in after_hooks[base] if told else ():
                tell(op, args, kwargs, result)
            return written(result, args, kwargs) if written else result
        result = op.redispatch(keyset & _BELOW, *args, **kwargs)
        return written(result, args, kwargs) if written else result
    return kernel


def _written_back(op) -> Optional[Callable[[object, tuple, dict], object]]:
    """For an overload that writes its arguments and returns them (in place, ``out=``):
    ``written(result, args, kwargs)``, which copies a result that is another tensor of the
    argument's shape into the argument and returns the argument.  The real 0.2.5 binary's
    kernels rebind such an argument to a new tensor (failure_modes.md #65): a C++ caller's
    own variable follows, but a Python kernel between them returns the new tensor and the
    caller's stays unwritten (``scatter_add``'s composite: zeros, measured).  A result of
    another shape is returned as it is: growing a composite's empty ``out`` here ends the
    process (``torch.eye``'s, ``fallback_out``; the ``out_resize`` patch sizes a caller's
    ``out`` before the call).  None for other overloads."""
    arguments = op._schema.arguments
    names = [a.name for a in arguments if a.alias_info is not None and a.alias_info.is_write]
    returns = op._schema.returns
    if not names or len(returns) != len(names) or not all(r.alias_info is not None for r in returns):
        return None
    positions = {a.name: i for i, a in enumerate(arguments)}

    def written(result, args, kwargs):
        targets = [kwargs[n] if n in kwargs else args[positions[n]] for n in names]
        results = result if isinstance(result, (tuple, list)) else (result,)
        if all(r is t for r, t in zip(results, targets)):
            return result
        if not all(isinstance(r, torch.Tensor) and isinstance(t, torch.Tensor) and r.shape == t.shape
                   for r, t in zip(results, targets)):
            return result
        for r, t in zip(results, targets):
            if r is not t:
                t.copy_(r)
        return targets[0] if len(targets) == 1 else tuple(targets)
    return written


def _island_kernel(op, makes, backend, target: str, name: str):
    factory = not any(isinstance(a.type, torch.TensorType) for a in op._schema.arguments)
    stands_in = op in _TORCH_BACKEND_SELECT
    from_islands = op in _FROM_ISLANDS
    base = op._schema.name.split("::", 1)[1]
    hooked, told = base in hooks, base in after_hooks
    busy, numbers = fallback.busy, fallback.numbers_converter(op)

    def kernel(keyset, *args, **kwargs):
        if numbers is not None:
            args = numbers(args)
        device = kwargs.get("device")
        home = None
        if (keyset.has(backend) or device is not None or from_islands) and not busy():
            home = _home(keyset, backend, target, device, from_islands, args, kwargs)
            run = makes(home, args, kwargs) if home is not None else None
            if type(run) is Done:
                return run.result
            if run is not None:
                return islands.run(op, *run, home, op=name)
            fixed = _hooked(base, op, args, kwargs) if hooked and home is not None else None
            if fixed is not None:
                if isinstance(fixed, Done):
                    return fixed.result
                args, kwargs = fixed
        result = op.redispatch(_with_device_key(keyset, device, factory) & _BELOW if stands_in
                               else keyset & _BELOW, *args, **kwargs)
        if home is not None and told:
            for tell in after_hooks[base]:
                tell(op, args, kwargs, result)
        return result
    return kernel


def _at_autograd_too(op, makes) -> bool:
    return makes is _always and op not in _FROM_ISLANDS


def _autograd_island_kernel(op, backend, target: str, name: str):
    """An ``ISLANDS`` creator that always makes an island (``_always``), at the target's
    Autograd key: run as an island call above autograd, so its backward goes through the
    CPU and back (``.to()`` is differentiable).  The BackendSelect kernel alone runs below
    autograd, which then records the op on the device inputs and gets CPU gradients back
    ("invalid gradient ... expected device").  Inside the shim's own CPU work, torch's
    autograd kernel (the same one AutogradOther holds)."""
    key = getattr(torch._C.DispatchKey, "Autograd" + backend.name)
    other = torch._C.DispatchKey.AutogradOther

    def kernel(keyset, *args, **kwargs):
        if not fallback.busy():
            home = fallback.device_of(args, kwargs, target)
            if home is not None:
                return islands.run(op, args, kwargs, home, op=name)
        return op.redispatch(keyset.remove(key).add(other), *args, **kwargs)
    return kernel


@_gate.watching(_gate.Watch(device_arg=True))
def _read_by_model(op, args, kwargs, result) -> None:
    """``_to_copy``'s after-hook: a copy of a device tensor to the CPU outside the shim's own
    work is a device-to-host read the model made (``trace.synced``)."""
    if not args[0].is_cpu and isinstance(result, torch.Tensor) and result.is_cpu:
        trace.synced(op.name(), trace.nbytes(result))


def _scalar_read_kernel(op, backend):
    """``_local_scalar_dense`` (``.item()``, ``bool(t)``, ``int(t)``) of a device tensor: a
    read the model made, counted, and redispatched with the GIL let go (``redispatch_boxed``
    releases it).  torch's argument parser reads a device scalar holding the GIL
    (``torch.arange(t)``: ``PythonArgs::scalar_slow``); torch-directml's ``DmlEventQueue``
    thread may meanwhile free a tensor whose Python object torch preserved, which takes the
    GIL (``PyObjectSlot::maybe_destroy_pyobj``): without this hop the two wait on each other
    (docs/internals.md, "Reading a device scalar, and the GIL").  With the Python gate a CPU ``.item()`` pays its Python too."""
    def kernel(keyset, *args, **kwargs):
        if keyset.has(backend) and not fallback.busy():
            trace.synced(op.name(), args[0].element_size())
        return op.redispatch(keyset & _BELOW, *args, **kwargs)
    return kernel


def _home(keyset, backend, target, device, from_islands, args, kwargs):
    """The device a call's values belong to: its first target-device tensor, a
    ``device=`` of the target type (``_to_copy(cpu_t, device=dml)``, factories), or the
    home of an island argument (``irfft``'s ``_fft_c2r`` inside a C++ composite)."""
    if keyset.has(backend):
        return fallback.device_of(args, kwargs, target)
    if device is not None:
        device = device if isinstance(device, torch.device) else torch.device(device)
        return device if device.type == target else None
    if from_islands:
        for a in args:
            if islands.is_island(a):
                return islands.home(a)
    return None


def _with_device_key(keyset, device, factory: bool):
    """What torch's own BackendSelect kernel (of ``_to_copy``, ``full``; ours replaces it
    while active) adds: the key of the ``device=`` argument (the CPU's for a factory
    without one), so ``x.to(dml)`` and ``torch.full(..., device=dml)`` reach the backend."""
    if device is None and not factory:
        return keyset
    key = _device_keyset(device.type if isinstance(device, torch.device) else
                         torch.device(device).type if device is not None else "cpu")
    return keyset if key is None else keyset | key


@functools.lru_cache(maxsize=None)
def _device_keyset(device_type: str):
    key = backend_key(device_type)
    return None if key is None else torch._C.DispatchKeySet(key)


def install(ctx: Context) -> None:
    global _library
    backend = backend_key(ctx.target)
    if _library is not None or backend is None:
        return
    islands.bf16_policy(ctx.bf16, ctx.target)          # what _to_copy_makes casts bf16 to
    library = torch.library.Library("aten", "IMPL")
    on = lambda op: ctx.enabled(gate(op))               # noqa: E731
    for op, fix in filter(lambda item: on(item[0]), FIXES.items()):
        _gates.append(at_backend_select(library, op, fix_kernel(op, fix, backend), ctx.target, ctx.gate))
        _watched[op] = (_gates[-1], fix)
        _held.add(op)
    for op, makes in filter(lambda item: on(item[0]), ISLANDS.items()):
        name = op.name()
        # torch's own BackendSelect kernels of _to_copy and full: ours stand in for them
        # (_with_device_key; the compiled gate adds the device's key as they do)
        _gates.append(at_backend_select(library, op, _island_kernel(op, makes, backend, ctx.target, name),
                                        ctx.target, ctx.gate, always=op in _FROM_ISLANDS))
        _watched[op] = (_gates[-1], makes)
        if _at_autograd_too(op, makes):              # stands in for torch's autograd kernel
            library.impl(name.split("::", 1)[1], _autograd_island_kernel(op, backend, ctx.target, name),
                         "Autograd" + backend.name, with_keyset=True)
    # the model's own device-to-host reads, counted for report(): .item() with either gate
    # (its kernel also lets go of the GIL: _scalar_read_kernel), .cpu()/.to("cpu") (the
    # _to_copy kernel's after-hook) where the gate keeps CPU calls free of Python
    scalar = _aten._local_scalar_dense.default
    _gates.append(at_backend_select(library, scalar, _scalar_read_kernel(scalar, backend),
                                    ctx.target, ctx.gate))
    if _gate.extension(ctx.gate) is not None:
        add_hook("_to_copy", _read_by_model, owner=__name__, after=True)
    # composites at both keys (COMPOSITES); torch-directml has no kernel of these ops there
    for op, needs in filter(lambda item: on(item[0]), _composite_overloads()):
        name = op.name()
        kernel = _composite_kernel(op, needs, ctx.target, name)
        for key in ("Autograd" + backend.name, backend.name):
            library.impl(name.split("::", 1)[1], kernel, key)
    _library = library
    for base in {op._schema.name.split("::", 1)[1] for op in _watched}:
        _rewatch(base)


def holds(op) -> bool:
    """Whether the net's BackendSelect kernel of ``op`` is registered now."""
    return op in _held


def uninstall() -> None:
    global _library
    _held.clear()
    _watched.clear()
    remove_hook("_to_copy", _read_by_model, after=True)
    while _gates:
        registration = _gates.pop()
        if registration is not None:
            registration.destroy()
    library, _library = _library, None
    if library is not None:
        _torch_compat.destroy_library(library)                             # removes the kernels from the dispatcher


def registered() -> Dict[str, bool]:
    """``{"aten::mul.Tensor": True, ...}``: whether each overload has all of dmlshim's
    kernels now (read from ``torch._C._dispatch_dump``): BackendSelect for ``FIXES`` and
    ``ISLANDS`` (torch's own BackendSelect kernel of ``_to_copy`` does not count), plus
    AutogradPrivateUse1 for the creators that always make islands; AutogradPrivateUse1
    and PrivateUse1 for ``COMPOSITES`` (torch and torch-directml register none there:
    torch's autograd kernels sit at the ``Autograd`` alias)."""
    def has(op, keys):
        lines = torch._C._dispatch_dump(op.name()).splitlines()
        return all(any(line.startswith(key + ":") and "RegisterBackendSelect" not in line
                       for line in lines) for key in keys)
    autograd = "AutogradPrivateUse1"
    return {op.name(): has(op, [KEY]) for op in FIXES} | {
        op.name(): has(op, [KEY, autograd] if _at_autograd_too(op, makes) else [KEY])
        for op, makes in ISLANDS.items()} | {
        op.name(): has(op, [autograd, "PrivateUse1"]) for op, _ in _composite_overloads()}
