"""The reported-defect fixes' BackendSelect kernels: their table, install and probe gating.

A fix sits at the **BackendSelect** key of each aten overload it names, as the dispatcher
net's do (``dispatcher.py`` explains why BackendSelect), so it holds however the op is
reached (Python, C++ composites, TorchScript, ``backward()``, ``inference_mode``, any
thread).  Its kernel is the net's, ``dispatcher.fix_kernel`` (its docstring says what a
fix returns); here it stands aside, passing every call through unchanged, for the shim's
own work (``fallback.busy()``) and for every call made while :func:`standing_aside`
(probes: they must see the raw device, ``backward()`` included, which runs on autograd's
device thread).
"""
from __future__ import annotations

import contextlib
import threading
import warnings
import weakref
from typing import Dict, Tuple

import torch

from .. import _torch_compat, fallback, trace
from . import _gate
from .dispatcher import Done, Fix, answered, at_backend_select, backend_key, below, fix_kernel


# > 0 while a probe runs: fixes stand aside on every thread (a list: fix_kernel reads it in place)
_probes = [0]
_aside_lock = threading.Lock()


@contextlib.contextmanager
def standing_aside():
    """The reported-defect fixes pass every call through, on every thread, for the block
    (a probe's milliseconds: ``dmlshim.catalogue.probes``)."""
    with _aside_lock:
        _probes[0] += 1
    try:
        yield
    finally:
        with _aside_lock:
            _probes[0] -= 1


def aside() -> bool:
    """Whether the fixes stand aside now (a probe, or the shim's own work)."""
    return _probes[0] > 0 or fallback.busy()


def _busy_too(fix) -> bool:
    return getattr(fix, "__dmlshim_while_busy__", False)


def on_cpu(op, args, kwargs) -> Done:
    """The call run on the CPU, its results back on the device (always right)."""
    name = op.name()
    return Done(trace.call(name, lambda f, a, k: ("cpu", fallback.run_on_cpu(f, a, k, op=name)),
                           op, args, kwargs), record=False)


def in_place_on_cpu(op, args, kwargs) -> Done:
    """``self.op_(...)`` computed on a CPU copy of ``self`` and copied into it.  Not
    :func:`on_cpu`: below BackendSelect the ADInplaceOrView key is excluded, so the CPU copy's
    version counter does not move and ``fallback.run_on_cpu`` cannot see the write."""
    def on_a_copy(self, *rest, **kw):
        self = self.clone()
        op(self, *rest, **kw)
        return self

    name = op.name()
    result = trace.call(name, lambda f, a, k: ("cpu", fallback.run_on_cpu(f, a, k, op=name)),
                        on_a_copy, args, kwargs)
    args[0].copy_(result)
    return Done(args[0], record=False)


def grow_out(out: torch.Tensor, cpu: torch.Tensor) -> None:
    """``out`` grown to ``cpu``'s shape and given its values.  An empty result takes a new
    tensor (``.data``): resizing an empty device tensor to another empty shape looks right
    on the real binary, but the composite's result keeps ``[0]`` and the process ends with
    signal 11 at exit (``eye(0)``)."""
    if cpu.numel() == 0:
        with torch.inference_mode(out.is_inference()):
            out.data = torch.empty(cpu.shape, dtype=out.dtype, device=out.device)
        return
    if out.shape != cpu.shape:
        fallback._resize(out, cpu.shape)
    out.copy_(cpu)


def out_names(op) -> list:
    """The names of ``op``'s ``out=`` arguments, in schema order."""
    return [a.name for a in op._schema.arguments if a.is_out]


_cpu = trace.to_host             # the inputs on the CPU, counted as the shim's reads


def on_cpu_into_outs(op, keyset, args, kwargs) -> Done:
    """An ``out=`` overload's call run on the CPU into CPU outs, the device ``out`` tensors
    then grown to their shapes and given their values (:func:`grow_out`)."""
    names = out_names(op)
    outs = [kwargs[n] for n in names]

    def run(f, a, k):
        with fallback.guard(), trace.substitute():      # the CPU run and its copies
            cpu_outs = {n: torch.empty(0, dtype=o.dtype) for n, o in zip(names, outs)}
            f(*[_cpu(x) for x in a], **{n: _cpu(v) for n, v in k.items() if n not in cpu_outs}, **cpu_outs)
            for out, n in zip(outs, names):
                grow_out(out, cpu_outs[n])
        return "cpu", outs[0] if len(outs) == 1 else tuple(outs)

    return Done(trace.call(op.name(), run, op, args, kwargs), record=False)


# One BackendSelect kernel per overload, shared by every patch module that fixes it (the
# ``refused`` retry and ``gather``'s strided fix both hold ``aten::gather``): a Library per
# overload, destroyed when its last fix is uninstalled.  The first fix that answers (not
# None) wins, so a chain runs in the order its patches declare (``patches.rank``: their
# ``after=``/``before=``), whatever order they install in (lazily, on a device that appears
# later, one reinstalled): a fix that always answers (``refused``'s retry) declares itself
# after those that pass.  Sorted at (un)registration only: a chain is a tuple, replaced
# whole, so a call reads it without a copy or a lock.
_chains: Dict[torch._ops.OpOverload, Tuple[Fix, ...]] = {}
_owners: Dict[torch._ops.OpOverload, Tuple[str, ...]] = {}  # the patch of each fix of _chains[op]
_libraries: Dict[torch._ops.OpOverload, torch.library.Library] = {}
# (its gate asked for at the backend key, its kernel fixes the shim's own calls too)
_placed: Dict[torch._ops.OpOverload, Tuple[bool, bool]] = {}
_gates: Dict[torch._ops.OpOverload, object] = {}          # their compiled gates (_gate.py)


def _run_chain(op, keyset, args, kwargs):
    """The first answer of ``op``'s fixes, or None (the call passes through)."""
    for fix in _chains.get(op, ()):
        fixed = fix(op, keyset, args, kwargs)
        if fixed is not None:
            return fixed
    return None


def pass_on(op, keyset, args, kwargs, *, after: Fix, traced: bool = False):
    """What a call of ``op`` gives from the fixes after ``after`` in its chain, redispatched
    below BackendSelect if none answers: how a fix computes the call it then amends.
    ``traced``: a later fix that answers is recorded as ``fix_kernel`` records it (a caller
    that only watches the call, ``int_range``'s ranges, leaves the report as without it)."""
    chain = _chains.get(op, ())
    for fix in chain[chain.index(after) + 1:] if after in chain else chain:
        call = trace.begin() if traced else None      # a row of its own, as fix_kernel's
        recorded = None
        try:
            fixed = fix(op, keyset, args, kwargs)
            if fixed is not None:
                result, rows = answered(op, keyset, fixed)
                recorded = op.name() if rows else None
        finally:
            if call is not None:
                trace.end(call, recorded, "coerce", args, kwargs)
        if fixed is not None:
            return result
    return itself(op, keyset, *args, **kwargs)


def itself(op, keyset, *args, **kwargs):
    """``op`` itself on the device, below every fix (redispatched past BackendSelect): what a
    fix runs and then amends, its time the handled call's ``own`` (``trace.own``), not
    dmlshim's overhead."""
    with trace.own():
        return op.redispatch(below(keyset), *args, **kwargs)


def register(table: Dict[torch._ops.OpOverload, Fix], target: str, gate: str = "auto", *,
             owner: str = "") -> bool:
    """``table``'s fixes, of patch ``owner``, put in their overloads' chains at the place the
    patches declare (:func:`_in_order`), a BackendSelect kernel registered for an overload
    that had none, behind the compiled gate where ``gate`` allows
    (``dispatcher.at_backend_select``; False: no dispatch key for ``target``)."""
    backend = backend_key(target)
    if backend is None:
        return False
    for op, fix in table.items():
        _owners[op], _chains[op] = _in_order(_owners.get(op, ()) + (owner,), _chains.get(op, ()) + (fix,))
        at_backend = all(_gate.acts_at_backend(f) for f in _chains[op])
        busy_too = any(_busy_too(f) for f in _chains[op])
        # new, or a fix that must see every call, or the shim's own calls, joined
        if _placed.get(op) != (at_backend, busy_too):
            _remove(op)
            library = torch.library.Library("aten", "IMPL")
            # the fixes that also fix the shim's own work stand aside only while a probe runs
            kernel = fix_kernel(op, _run_chain, backend, aside=None if busy_too else aside,
                                probes=_probes if busy_too else None)
            _gates[op] = at_backend_select(library, op, kernel, target, gate, at_backend=at_backend)
            _libraries[op], _placed[op] = library, (at_backend, busy_too)
        _gate.set_watch(_gates[op], op, _chains[op])
    return True


def holds(op) -> bool:
    """Whether ``op`` has a chain of fixes now."""
    return op in _chains


def unregister(table: Dict[torch._ops.OpOverload, Fix], *, owner: str = "") -> None:
    """``table``'s fixes (of patch ``owner``) out of their chains; an overload left without
    one loses its kernel."""
    for op, fix in table.items():
        entries = list(zip(_owners.get(op, ()), _chains.get(op, ())))
        if (owner, fix) in entries:
            entries.remove((owner, fix))
        if entries:
            _owners[op], _chains[op] = (tuple(e) for e in zip(*entries))
            _gate.set_watch(_gates.get(op), op, _chains[op])
            continue
        _chains.pop(op, None)
        _owners.pop(op, None)
        _remove(op)


def _in_order(owners: Tuple[str, ...], fixes: Tuple[Fix, ...]):
    """``(owners, fixes)`` sorted by their patches' declared order (``patches.rank``); a
    stable sort, so one patch's fixes keep the order they came in."""
    from . import rank
    entries = sorted(zip(owners, fixes), key=lambda e: rank(e[0]))
    return tuple(o for o, _ in entries), tuple(f for _, f in entries)


def chains() -> Dict[torch._ops.OpOverload, Tuple[str, ...]]:
    """``{overload: its fixes' patches, in chain order}`` of the kernels registered now."""
    return dict(_owners)


def tables() -> Dict[torch._ops.OpOverload, Tuple[str, ...]]:
    """``{overload: the patches whose Kernels hold it, in chain order}`` of every
    :class:`Kernels` made so far, installed or not (``patches.held`` imports every patch
    module first): each patch's overloads read from its tables, not from what a device's
    probes switched on."""
    held: Dict[torch._ops.OpOverload, Tuple[str, ...]] = {}
    for kernels in list(_made):
        for op in kernels.table:
            if kernels.owner not in held.get(op, ()):
                held[op] = held.get(op, ()) + (kernels.owner,)
    from . import rank
    return {op: tuple(sorted(owners, key=rank)) for op, owners in held.items()}


def _remove(op) -> None:
    """``op``'s gate and kernel gone, if it has them."""
    _placed.pop(op, None)
    registration = _gates.pop(op, None)
    if registration is not None:
        registration.destroy()
    library = _libraries.pop(op, None)
    if library is not None:
        _torch_compat.destroy_library(library)


_made: "weakref.WeakSet[Kernels]" = weakref.WeakSet()     # every Kernels, for tables()


class Kernels:
    """``install(ctx)``/``uninstall()`` for a patch module made of BackendSelect fixes.
    ``owner``: the patch they belong to, its module's ``__name__`` (``"dmlshim.patches.gather"``)
    or its registry name, which places its fixes in each chain (``patches.rank``).
    ``while_busy``: they fix the shim's own device calls too (``fallback.busy()``: a fix's
    own ``cat`` or product), and stand aside only for probes; a chain holding such a fix
    runs whole then."""

    def __init__(self, owner: str, table: Dict[torch._ops.OpOverload, Fix], *, while_busy: bool = False):
        self.owner = owner.rpartition(".")[2]
        self.table = table
        self._installed = False
        _made.add(self)
        for fix in table.values() if while_busy else ():
            fix.__dmlshim_while_busy__ = True

    def install(self, ctx) -> None:
        if not self._installed:
            self._installed = register(self.table, ctx.target, ctx.gate, owner=self.owner)

    def uninstall(self) -> None:
        if self._installed:
            self._installed = False
            unregister(self.table, owner=self.owner)

    def installed(self) -> bool:
        return self._installed


class CompositeKernels:
    """``install(ctx)``/``uninstall()`` for the fix of a CompositeImplicitAutograd op: one
    kernel, ``make(target)``, at the target's Autograd and backend keys (as
    ``dispatcher.COMPOSITES``), where a composite's decomposition would otherwise run."""

    def __init__(self, name: str, make):
        self.name, self.make = name, make
        self._library = None

    def install(self, ctx) -> None:
        backend = backend_key(ctx.target)
        if self._library is not None or backend is None:
            return
        library, kernel = torch.library.Library("aten", "IMPL"), self.make(ctx.target)
        with warnings.catch_warnings():
            # the emulator may hold a kernel there (it models a failure); ours stands in
            warnings.filterwarnings("ignore", "(?s).*Overriding a previously registered kernel")
            for key in ("Autograd" + backend.name, backend.name):
                library.impl(self.name, kernel, key)
        self._library = library

    def uninstall(self) -> None:
        library, self._library = self._library, None
        if library is not None:
            _torch_compat.destroy_library(library)
