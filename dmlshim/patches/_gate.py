"""Where dmlshim's BackendSelect kernels sit: behind a compiled gate, or there themselves.

BackendSelect is in every thread's included key set, so a Python kernel there runs on
every call of its aten overload, on the CPU and CUDA too (about 3 us each; a CPU
``a * b`` took 3.8x as long with ``activate()``).  Where a C++ compiler and ninja exist,
``csrc/gate.cpp`` registers a boxed kernel there instead, which sends only the calls with
a tensor or a ``device=`` of the target device to the Python kernel (registered at the
*trampoline* key, FPGA, that no tensor carries) and every other call straight on: an unboxed
(typed) kernel for the overloads CPU models reach most, a boxed one for the rest.  Without
a compiler (most Windows machines), or with ``DMLSHIM_GATE=python``, the Python kernel
sits at BackendSelect itself, as before.  Both paths run the same Python kernel, so a fix
behaves the same; docs/performance.md has what each costs.

A device call goes to the Python kernel only where one of its fixes may act: each fix
declares what it looks at (:func:`watching`, a :class:`Watch`), the gate holds the union of
its overload's fixes' watches, and a device call that meets none of them is redispatched in
C++ as a CPU call is.  A fix that declares nothing is watched on every device call.  An
overload whose fixes all act on the device's own calls only (:func:`at_backend`: the view
family's) gets its gate at the device's backend key instead, in place of the device's
kernel, which it calls: its CPU calls meet nothing of dmlshim's.
"""
from __future__ import annotations

import contextvars
import logging
import os
import threading
import time
import warnings
from dataclasses import dataclass, fields
from typing import Callable, FrozenSet, Iterable, Optional, Union

import torch

from .. import cpp_build, fallback, islands, ranges
from ..laws import integers

SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "csrc", "gate.cpp")
TRAMPOLINE = "FPGA"
_log = logging.getLogger("dmlshim")


@dataclass(frozen=True)
class Status:
    """Which gate runs, and why.

    ``kind``: ``"compiled"`` | ``"python"``.  ``origin``: ``"prebuilt"`` (shipped in the wheel),
    ``"built on this machine"`` or ``"python"``.  ``reason``: why there is no compiled gate
    ("" where there is one).  ``seconds``: what loading or building it took in this process.
    """

    kind: str
    origin: str
    reason: str = ""
    seconds: float = 0.0


# The one try of this process: (module or None, Status).  A failure is kept too (an
# lru_cache keeps no exception: every register() built again, about 3,500 times an activate).
_tried: list = []
_lock = threading.Lock()
# What the Python gate costs, from docs/performance.md ("A DirectML device present",
# benchmarks/results/device_present-*.json): the WARNING says it.
PYTHON_GATE_COST = "CPU calls take 2.6x to 6.4x as long (+2 to +20 us each) while a DirectML device is present"


def _try():
    """Load or build the gate once per process; the outcome, success or failure, is kept."""
    if not _tried:
        with _lock:
            if not _tried:
                start = time.perf_counter()
                try:
                    ext = cpp_build.build("dmlshim_gate", SOURCE, remember=True)
                    ext.set_special(islands.SPECIAL)   # a call holding one of these is not plain (the front)
                    ranges.keep_in(ext)                 # the spans the gate's laws read (ranged())
                    status = Status("compiled", cpp_build.origin(ext), "", time.perf_counter() - start)
                except Exception as exc:                   # no compiler, or a failed build
                    ext, status = None, Status("python", "python", _reason(exc), time.perf_counter() - start)
                _tried.append((ext, status))
    return _tried[0]


def _reason(exc: BaseException) -> str:
    lines = [line for line in str(exc).strip().splitlines() if line.strip()]
    return (lines[-1] if lines else type(exc).__name__)[:300]


def _extension():
    """The compiled gate's module (loaded or built on the first call of the process).

    Raises:
        RuntimeError: it cannot be had (the reason kept from the one try)."""
    ext, status = _try()
    if ext is None:
        raise RuntimeError(status.reason)
    return ext


def _built() -> bool:
    """Whether this process has the compiled gate (without trying to get it)."""
    return bool(_tried) and _tried[0][0] is not None


def status(mode: str = "auto") -> Status:
    """The gate ``mode`` (``DMLSHIM_GATE``) gives in this process: tries to load or build it
    once (as ``activate()`` does with a device present)."""
    if mode == "python":
        return Status("python", "python", "DMLSHIM_GATE=python")
    return _try()[1]


def describe(mode: str = "auto") -> Status:
    """The gate ``activate()`` gives (or gave) with a device present, without compiling:
    a build that exists is loaded (milliseconds); where only a compile would tell, the
    status is ``kind="not built"`` and ``reason`` says what the first ``activate()`` will do."""
    if mode == "python" or _tried:
        return status(mode)
    name = cpp_build.module_name("dmlshim_gate", SOURCE)
    if cpp_build.exists(name):
        return _try()[1]
    missing = cpp_build.missing_tools()
    if missing:
        return Status("python", "python", f"building gate.cpp needs {' and '.join(missing)}")
    return Status("not built", "", "a compiler is present: the first activate() with a device builds it "
                  "(about 40 s; 'python -m dmlshim gate --rebuild' builds it now)")


def report(mode: Optional[str] = None, in_use: bool = True) -> dict:
    """:func:`describe` as a JSON-ready dict for ``info``, ``gate`` and ``doctor``: ``mode``
    (None: ``DMLSHIM_GATE`` now), ``kind``, ``origin``, ``reason``, ``seconds`` and ``in_use``
    (False: no device present, so ``activate()`` installs no kernel for a gate to run)."""
    from .. import config
    mode = mode or config.parse_gate(os.environ.get("DMLSHIM_GATE", "auto"))
    st = describe(mode)
    return {"mode": mode, "kind": st.kind, "origin": st.origin, "reason": st.reason,
            "seconds": round(st.seconds, 3), "in_use": in_use}


def report_line(r: dict) -> str:
    """One line of :func:`report`."""
    where = {"compiled": f"compiled ({r['origin']})", "python": "Python"}.get(r["kind"], r["kind"])
    why = f": {r['reason']}" if r["reason"] else ""
    idle = "" if r["in_use"] else " [no device present: nothing installed]"
    return f"{where}, DMLSHIM_GATE={r['mode']}{why}{idle}"


def retry() -> Status:
    """Forget this process's try and the recorded failed builds, then try again
    (``python -m dmlshim gate --rebuild``)."""
    with _lock:
        _tried.clear()
        _warned.clear()
    cpp_build.forget_failures("dmlshim_gate")
    return _try()[1]


@dataclass(frozen=True)
class Watch:
    """What a fix looks at on a device call: the call goes to the Python kernel if one of
    these holds (``csrc/gate.cpp``'s ``Scan``), else it is redispatched in C++ unfixed.

    ``dtypes``: a tensor argument (not a Python number) or a ``dtype=`` of one of these.
    ``numbers``: a Python number of one of these (``x * True``: bool; a wrapped number).
    ``ranks``: a tensor of one of these ranks (63: 63 and more; ``masked_fill_rank``'s 5 and
    more, the unbatched pooling's 3).
    ``mixed``: tensors of rank > 0 of different dtypes.  ``empty``: a tensor with no element.
    ``view``: ``self`` a tensor ``offset_views`` anchored (a view with an offset inside
    DirectML's tensor), or a normal (not inference) tensor in inference mode; ``as_strided``
    at an offset of an inference tensor.  (A view at an offset of a normal tensor is made in
    C++ and recorded: :func:`mark_anchored`.)  ``off_target``: a tensor on a device of
    another type, or tensors on two adapters.  ``device_arg``: a ``device=`` argument.
    ``catch``: the call runs in C++ and an error goes to the Python kernel (``refused``'s
    retry; in place and boxed overloads: every call).  ``memory_format``: one other than
    ``preserve_format``.  ``set_bool``: a bool argument that is True (``convolution``'s
    ``transposed``).  ``marked``: a tensor :func:`mark` marked, or a view of one (int_range's
    whole-number floats: a mask's ``sum``).  ``always``: every device call (what a fix that
    declares nothing gets).
    """

    dtypes: FrozenSet[torch.dtype] = frozenset()
    numbers: FrozenSet[torch.dtype] = frozenset()
    ranks: FrozenSet[int] = frozenset()
    mixed: bool = False
    empty: bool = False
    view: bool = False
    off_target: bool = False
    device_arg: bool = False
    catch: bool = False
    memory_format: bool = False
    set_bool: bool = False
    marked: bool = False
    always: bool = False

    def __or__(self, other: "Watch") -> "Watch":
        return Watch(self.dtypes | other.dtypes, self.numbers | other.numbers, self.ranks | other.ranks,
                     **{f.name: getattr(self, f.name) or getattr(other, f.name) for f in fields(self)[3:]})

    def flags(self) -> int:
        """The C++ gate's bits (``csrc/gate.cpp``: kAlways ... kSetBool, in field order)."""
        return sum(1 << i for i, name in enumerate(_FLAGS) if getattr(self, name))


_FLAGS = ("always", "mixed", "empty", "view", "off_target", "device_arg", "catch", "memory_format", "set_bool",
          "marked")
ALWAYS = Watch(always=True)
NOTHING = Watch()
# integer and bool dtypes: what the integer fixes (int_range, int_broadcast ...) look at
INTEGERS: FrozenSet[torch.dtype] = frozenset(
    d for d in (getattr(torch, n) for n in dir(torch)) if isinstance(d, torch.dtype)
    and not (d.is_floating_point or d.is_complex))

WatchOf = Union[Watch, Callable[[torch._ops.OpOverload], Watch]]


def watching(watch: WatchOf):
    """Declare what a fix (or a dispatcher hook) looks at: ``watch``, or ``watch(op)`` for
    the overload it is registered for.  A fix without it is watched on every device call."""
    def mark(fix):
        fix.__dmlshim_watch__ = watch
        return fix
    return mark


def watch_of(fix, op) -> Watch:
    """What ``fix`` declared for ``op`` (:func:`watching`), or :data:`ALWAYS`."""
    watch = getattr(fix, "__dmlshim_watch__", ALWAYS)
    return watch if isinstance(watch, Watch) else watch(op)


# int_range's laws that the compiled gate applies itself (csrc/gate.cpp's Law): a fix declares
# which with ranged()
LAWS = {"sum": 1, "difference": 2, "product": 3, "compare": 4, "unchanged": 5, "out form": 6, "fill": 7}
# the same, as the Python gate tests them on its calls (no dict lookup there)
_SUM, _DIFFERENCE, _PRODUCT, _COMPARE, _UNCHANGED, _OUT_FORM, _FILL = LAWS.values()


def ranged(law_of: Callable[[torch._ops.OpOverload], Optional[str]]):
    """Declare that the compiled gate may take ``fix``'s decision itself for an overload
    ``law_of(op)`` names a law of (:data:`LAWS`; None: not this one), where no other fix of
    the overload watches the call: int_range's, by the value ranges it keeps there too
    (``ranges.keep_in``).  The Python gate applies the same laws in Python (:func:`rule`)."""
    def mark(fix):
        fix.__dmlshim_ranged__ = law_of
        return fix
    return mark


def _union(op, fixes) -> Watch:
    """The union of ``fixes``' watches; ``catch`` on an overload that writes its first
    argument (in place, ``out=``) becomes ``always``: a retry after a partial write is not
    the call's."""
    union = NOTHING
    for fix in fixes:
        union = union | watch_of(fix, op)
    first = op._schema.arguments[0].alias_info if op._schema.arguments else None
    if union.catch and (first is not None and first.is_write or any(a.is_out for a in op._schema.arguments)):
        union = union | ALWAYS
    return union


def _bits(watch: Watch) -> tuple:
    return watch.flags(), sorted(watch.dtypes, key=str), sorted(watch.numbers, key=str), sorted(watch.ranks)


def set_watch(registration, op, fixes: Iterable) -> None:
    """The gate ``registration`` of ``op`` (compiled, or a :class:`PythonGate`) told the union
    of ``fixes``' watches, and the law of the one fix declared :func:`ranged` (if any) with
    the union of the others'."""
    if registration is None:
        return
    fixes = tuple(fixes)
    registration.watch(*_bits(_union(op, fixes)))
    ranged_fixes = [f for f in fixes if getattr(f, "__dmlshim_ranged__", None) is not None]
    law = LAWS.get(ranged_fixes[0].__dmlshim_ranged__(op)) if len(ranged_fixes) == 1 else None
    others = [f for f in fixes if f not in ranged_fixes]
    registration.ranged(law or 0, *_bits(_union(op, others) if law else NOTHING))


# Watch's bits, as the Python gate tests them on every device call (no dict lookup there)
(_ALWAYS, _MIXED, _EMPTY, _VIEW, _OFF_TARGET, _DEVICE_ARG, _CATCH, _FORMAT, _SET_BOOL,
 _MARKED) = (1 << i for i in range(len(_FLAGS)))
# where the Python gate reads what the compiled one keeps in its own tables, on the tensor's
# Python object (torch keeps it with the TensorImpl): offset_views' (anchor, offset) of a
# view (Watch.view), and the mark of a tensor (Watch.marked, mark())
ANCHOR = "_dmlshim_anchor"
MARKED = "_dmlshim_marked"
_PLAIN = (torch.Tensor, torch.nn.Parameter)    # other classes (subclasses, tracers): the fixes


def _slots(op) -> tuple:
    """``(position, name, kind, default)`` of the arguments the gate looks at, from ``op``'s
    schema: tensors, tensor lists, ``dtype=``, ``device=``, ``memory_format=``, bools."""
    slots = []
    for i, a in enumerate(op._schema.arguments):
        kind, t = None, a.type
        inner = t.getElementType() if isinstance(t, (torch.OptionalType, torch.ListType)) else t
        if isinstance(t, torch.ListType) and isinstance(
                inner.getElementType() if isinstance(inner, torch.OptionalType) else inner, torch.TensorType):
            kind = "tensors"
        elif isinstance(inner, torch.TensorType):
            kind = "tensor"
        elif a.name in ("dtype", "device", "memory_format", "storage_offset"):
            kind = a.name
        elif isinstance(inner, torch.BoolType):
            kind = "bool"
        if kind is not None:
            slots.append((i, a.name, kind, a.default_value if a.has_default_value() else None))
    return tuple(slots)


class PythonGate:
    """The compiled gate's decision (``csrc/gate.cpp``'s ``Gate`` and ``Scan``) made in
    Python: the kernel at BackendSelect of one overload where no gate is compiled.  A call
    with a tensor or ``device=`` of the target device goes to ``kernel`` (the fixes) if it
    meets what they watch (:class:`Watch`, told by :meth:`watch`); every other call, the
    CPU's included, runs ``passed(keyset, args, kwargs)``: redispatched below, unfixed.
    ``always``: every call goes to ``kernel``.  A ``catch`` runs the call here and sends it
    there if it fails, as the typed gates do; ``view`` and ``marked`` read what offset_views
    and :func:`mark` keep on the tensor (:data:`ANCHOR`, :data:`MARKED`); int_range's laws
    (:meth:`ranged`) are :func:`rule`'s.  Its CPU calls still pay the Python kernel (about 3 us)."""

    def __init__(self, op, kernel, passed: Optional[Callable], target: str, always: bool):
        self.kernel, self.passed, self.target = kernel, passed, target
        self.backend = getattr(torch._C.DispatchKey, torch._C._dispatch_key_for_device(target))
        self.always = always or passed is None
        self.slots = _slots(op)
        self.has_device = any(kind == "device" for _, _, kind, _ in self.slots)
        self.state = (_ALWAYS, frozenset(), frozenset(), frozenset())   # until watch()
        self.name = op._schema.name                  # aten::add: an out form's functional call
        self.ranging = None                          # (law, the other fixes' state): ranged()

    def watch(self, flags: int, dtypes, numbers, ranks) -> None:
        """What the fixes look at (``Registration.watch``'s arguments): replaced whole, so
        a call reads one state without a lock."""
        self.state = (flags, frozenset(dtypes), frozenset(numbers), frozenset(ranks))

    def destroy(self) -> None:
        """Nothing to undo: the kernel goes with its library."""

    def ranged(self, law: int, flags: int, dtypes, numbers, ranks) -> None:
        """``Registration.ranged``: the law of the fix declared :func:`ranged` (0: none) and
        what the other fixes look at, replaced whole."""
        self.ranging = (law, (flags, frozenset(dtypes), frozenset(numbers), frozenset(ranks))) if law else None

    def __call__(self, keyset, *args, **kwargs):
        if self.always:
            return self.kernel(keyset, *args, **kwargs)
        if keyset.has(self.backend) or self.has_device and self._device_arg(kwargs):
            if self._to_fixes(args, kwargs):
                ranging = self.ranging
                if ranging is not None and not self._to_fixes(args, kwargs, ranging[1]):
                    ruled = self._ruled(ranging[0], keyset, args, kwargs)
                    if ruled is not _TO_THE_FIX:
                        return ruled
                return self.kernel(keyset, *args, **kwargs)
            if self.state[0] & _CATCH:          # never in place or out= (set_watch: always)
                try:
                    return self.passed(keyset, args, kwargs)
                except Exception:                  # the fixes' retry (refused: on the CPU), or their error
                    return self.kernel(keyset, *args, **kwargs)
        return self.passed(keyset, args, kwargs)

    def _device_arg(self, kwargs) -> bool:
        device = kwargs.get("device")
        return device is not None and torch.device(device).type == self.target

    def _ruled(self, law: int, keyset, args, kwargs):
        """The call passed on by ``law`` (``csrc/gate.cpp``'s ``rule``), its result's span
        kept, or :data:`_TO_THE_FIX`."""
        if law == _OUT_FORM:
            return self.passed(keyset, args, kwargs) if _PASSING.get() == self.name else _TO_THE_FIX
        ruling = rule(law, self.target, args, kwargs)
        if ruling is None:
            return _TO_THE_FIX
        token = _PASSING.set(self.name)
        try:
            result = self.passed(keyset, args, kwargs)
        finally:
            _PASSING.reset(token)
        if ruling[0]:
            ranges.remember(result, ruling[1], exact=ruling[2])
        return result

    def _to_fixes(self, args, kwargs, state=None) -> bool:
        """``Scan``: whether a device call meets what the fixes watch (``state``: what
        :meth:`watch` told, else the other fixes' of :meth:`ranged`)."""
        flags, dtypes, numbers, ranks = state or self.state
        if flags & _ALWAYS:
            return True
        tensors, n, offset = [], len(args), None
        for i, name, kind, default in self.slots:
            value = args[i] if i < n else kwargs.get(name, default)
            if value is None:
                continue
            if kind == "tensor":
                tensors.append(value)
            elif kind == "tensors":
                tensors.extend(value)
            elif kind == "dtype":
                if value in dtypes:
                    return True
            elif kind == "device":
                if flags & _DEVICE_ARG:
                    return True
            elif kind == "memory_format":
                if flags & _FORMAT and value != torch.preserve_format:
                    return True
            elif kind == "storage_offset":
                offset = value
            elif value is True and flags & _SET_BOOL:
                return True
        device = dtype = None
        first = True
        for t in tensors:
            if t is None:
                continue
            if first and flags & _VIEW and isinstance(t, torch.Tensor) and (
                    getattr(t, ANCHOR, None) is not None     # a view at an offset: offset_views
                    or not t.is_inference() and torch.is_inference_mode_enabled()    # inference_mode
                    or offset is not None and offset != t.storage_offset()):   # as_strided at one more
                return True
            first = False
            cls = type(t)
            if cls not in _PLAIN:        # a subclass or tracer's tensor; a Python number
                if isinstance(t, torch.Tensor) or fallback.WRAPPED_DTYPES.get(cls) in numbers:
                    return True
                continue
            if t.dtype in dtypes or ranks and min(t.dim(), 63) in ranks:
                return True
            if flags & _MARKED and (getattr(t, MARKED, False) or t._base is not None
                                    and getattr(t._base, MARKED, False)):
                return True
            if flags & _OFF_TARGET:
                if device is None:
                    device = t.device
                elif t.device != device:
                    return True
                if device.type != self.target:
                    return True
            if flags & _EMPTY and t.numel() == 0:
                return True
            if flags & _MIXED and t.dim() > 0:
                if dtype is None:
                    dtype = t.dtype
                elif t.dtype != dtype:
                    return True
        return False


# --------------------------------------------------------------- int_range's laws (ranged)
_TO_THE_FIX = object()        # _ruled: no ruling, the fixes decide
# the operator (aten::add) whose functional call a Python gate is passing on by its law
_PASSING: contextvars.ContextVar = contextvars.ContextVar("dmlshim_gate_passing", default=None)
_BITS32 = 2 ** 31
_INT32 = (-2 ** 31, 2 ** 31 - 1)


def _within(lo: int, hi: int, bound: int) -> bool:
    return -bound < lo and hi < bound


def _integer(value) -> Optional[int]:
    """A Python int (not a bool), as the compiled gate's ``integer`` takes a wrapped number."""
    return value if type(value) is int else None


def rule(law: int, target: str, args, kwargs) -> Optional[tuple]:
    """``csrc/gate.cpp``'s ``rule`` in Python: whether the call passes by int_range's ``law``
    (:data:`LAWS`) with the span its fix would keep, ``(record, (least, greatest), exact)``,
    or None (the fix decides).  ``self`` an int32/int64 tensor of ``target``, not a view
    (nor a subclass), and a Python int where the law takes a number."""
    x = args[0] if args else None
    if type(x) not in _PLAIN or x._base is not None or x.device.type != target:
        return None
    dtype = x.dtype
    if law in (_SUM, _DIFFERENCE, _PRODUCT):
        n = _integer(args[1] if len(args) > 1 else kwargs.get("other"))
        alpha = 1 if law == _PRODUCT else _integer(integers.alpha_of(args, kwargs))
        span = ranges.known_span(x) if dtype in (torch.int32, torch.int64) else None
        bound = integers.FLOAT_EXACT
        if n is None or alpha is None or span is None or not _within(*span, bound) \
                or not _within(n, n, bound) or not _within(alpha, alpha, bound):
            return None
        if law == _PRODUCT:
            lo, hi = sorted((span[0] * n, span[1] * n))
        else:
            shift = (1 if law == _SUM else -1) * alpha * n
            lo, hi = span[0] + shift, span[1] + shift
        return (True, (lo, hi), False) if _within(lo, hi, bound) else None
    if law == _COMPARE:
        n = _integer(args[1] if len(args) > 1 else kwargs.get("other"))
        if n is None or dtype not in (torch.int32, torch.int64):
            return None
        span = ranges.known_span(x) if dtype == torch.int64 else (0, 0)
        return (False, None, False) if span is not None and _within(*span, _BITS32) and _within(n, n, _BITS32) \
            else None
    if law == _UNCHANGED:
        span = ranges.known_span(x) if dtype in (torch.int32, torch.int64) else None
        if dtype == torch.int32:
            return (span is not None, span, False)
        return (True, span, False) if span is not None and _within(*span, _BITS32) else None
    if law == _FILL:
        n = _integer(args[1] if len(args) > 1 else kwargs.get("value"))
        fits = dtype == torch.int64 or dtype == torch.int32 and n is not None and _INT32[0] <= n <= _INT32[1]
        return (True, (n, n), True) if n is not None and fits else None
    return None


def mark_anchored(view: torch.Tensor, anchor: torch.Tensor, offset: int) -> None:
    """Tell the gate that ``view`` holds ``offset`` (elements) of ``anchor`` inside
    DirectML's tensor (``offset_views``): its view ops then go to the Python kernel.
    Nothing without a gate."""
    if _built():
        _extension().mark_anchored(view, anchor, offset)


def mark(t: torch.Tensor) -> None:
    """Mark ``t`` for the gate: an overload watching ``marked`` sends its device calls of ``t``
    or a view of it to the Python kernel.  Kept in the compiled gate's table where this
    process has one, and on the tensor's Python object (:data:`MARKED`), which the Python
    gate reads (``DMLSHIM_GATE=python`` with a compiled gate built)."""
    if _built():
        _extension().mark(t)
    setattr(t, MARKED, True)


def anchored(t: torch.Tensor):
    """``(anchor, offset)`` the gate's ``as_strided`` gave ``t`` when it made it in C++ (or
    :func:`mark_anchored`): the anchor None where it has gone; ``(None, 0)`` for any other."""
    return _extension().anchored(t) if _built() else (None, 0)


def extension(mode: str = "auto"):
    """The compiled gate's module, or None where ``mode`` is ``"python"`` or (``"auto"``)
    it cannot be had (one WARNING a process names the reason and the cost).

    Raises:
        RuntimeError: ``mode="compiled"`` and the build failed or no compiler exists.
    """
    if mode == "python":
        return None
    ext, state = _try()
    if ext is None:
        if mode == "compiled":
            raise RuntimeError(f"DMLSHIM_GATE=compiled: the compiled gate could not be built: {state.reason}")
        _warn_once(state.reason)
    return ext


_warned: list = []


def _warn_once(reason: str) -> None:
    """One WARNING a process: what is missing, what it costs, how to get the fast path."""
    if _warned:
        return
    _warned.append(reason)
    _log.warning("dmlshim: no compiled gate (%s), so dmlshim's fixes run as Python kernels: %s. "
                 "For the fast path install a C++ compiler (MSVC Build Tools on Windows) or a wheel "
                 "with the prebuilt gate, then run 'python -m dmlshim gate --rebuild'; "
                 "DMLSHIM_GATE=python silences this (docs/performance.md)", reason, PYTHON_GATE_COST)


def below() -> torch._C.DispatchKeySet:
    """The keys under BackendSelect, less the trampoline's once the gate is built: what a
    Python kernel here redispatches to (``dispatcher.below``)."""
    every = torch._C._dispatch_keyset_full_after(torch._C.DispatchKey.BackendSelect)
    return _extension().below() if _built() else every


def at_backend(fix):
    """Declare that ``fix`` acts on the device's own calls only, and that a call it passes on
    runs the device's kernel: an overload whose fixes all say so gets its compiled gate at
    the device's backend key (``csrc/gate.cpp``'s backend gate), in place of the device's
    kernel, so its CPU and CUDA calls meet nothing of dmlshim's (the view family's fixes)."""
    fix.__dmlshim_at_backend__ = True
    return fix


def acts_at_backend(fix) -> bool:
    """Whether ``fix`` declared :func:`at_backend`."""
    return getattr(fix, "__dmlshim_at_backend__", False)


def register(library: torch.library.Library, op: torch._ops.OpOverload, kernel, target: str,
             mode: str = "auto", *, always: bool = False, at_backend: bool = False,
             passed: Optional[Callable] = None):
    """Register ``kernel`` (``with_keyset``) for ``op``: behind the compiled gate where
    ``mode`` allows one, else behind a :class:`PythonGate` at BackendSelect, which runs
    ``passed(keyset, args, kwargs)`` for the calls it lets through (None: every call goes to
    ``kernel``).  Returns the registration (``watch()`` it; ``destroy()`` it with ``library``).  ``always``: every call goes to ``kernel`` (an
    op whose CPU arguments may decide, ``_fft_c2r``'s islands).  ``at_backend``: the gate in
    place of the device's kernel at its backend key where the device has a kernel of its
    own for ``op`` (not a backend fallback or a composite), else at BackendSelect."""
    name = op.name().split("::", 1)[1]
    ext = extension(mode)
    with warnings.catch_warnings():
        # torch has BackendSelect kernels of its own for _to_copy and full; ours stand in
        # for them while installed (the gate adds their device's key, as they do)
        warnings.filterwarnings("ignore", "(?s).*Overriding a previously registered kernel")
        if ext is None:
            gate = PythonGate(op, kernel, passed, target, always)
            library.impl(name, gate.__call__, "BackendSelect", with_keyset=True)
            return gate
        library.impl(name, kernel, TRAMPOLINE, with_keyset=True)
    schema = op._schema
    if at_backend and not always:
        registration = ext.backend_gate(schema.name, schema.overload_name, target)
        if registration is not None:
            return registration
    typed = None if always else _typed(ext, schema.name, schema.overload_name, target)
    return typed or ext.gate(schema.name, schema.overload_name, target, always)


def _typed(ext, name: str, overload: str, target: str):
    """The typed (unboxed) gate of a hot overload (``csrc/gate.cpp``'s ``typed_gates``), or
    None: not one of them, or its C++ signature differs in this torch (then the boxed one)."""
    try:
        return ext.typed_gate(name, overload, target)
    except RuntimeError as exc:
        _log.debug("dmlshim: no typed gate for %s.%s (%s)", name, overload, exc)
        return None
