"""The wrapping helper every patch module uses.

* ``PatchSet`` remembers what one patch module wrapped, so its ``uninstall()`` undoes
  exactly that.  ``wrap()`` installs ``wrapt.FunctionWrapper`` objects; ``intercept()``,
  on the hottest entry points, plain functions (one Python call less per call).
* Originals are saved once per attribute, **first save wins** (gevent
  ``monkey/_state.py``): ``original(owner, name)`` is the pristine object even when
  wrappers are stacked.
* Restoring touches an attribute only while it still holds our wrapper; if someone
  replaced it after us we warn and leave theirs (OpenTelemetry's ``unwrap`` shows the
  hazard of blindly stripping the outermost wrapper).  Our wrapper left inside theirs
  goes transparent, because it checks ``ctx.active``.
* An owner given as a module name (``"funasr.models.sanm.attention"``) is wrapped when
  that module is imported (wrapt post-import hooks), so import order does not matter.
  wrapt's hooks cannot be unregistered, so one dispatcher per module name waits in
  wrapt and consults the cancellable callbacks in ``_waiting`` when it fires.
"""
from __future__ import annotations

import functools
import sys
import threading
import warnings
import weakref
from dataclasses import dataclass
from typing import Any, Callable, Dict, FrozenSet, List, NamedTuple, Optional, Tuple

import torch
import wrapt

from .. import _torch_compat, fallback, trace
from . import _identity

_lock = threading.RLock()
_originals: Dict[Tuple[int, str], Any] = {}        # (id(owner), name) -> pristine object
_owners: Dict[int, Any] = {}                        # keeps owners alive while keys use id()
_waiting: Dict[str, List[Callable[[Any], None]]] = {}   # module name -> callbacks
_hooked: set = set()


@dataclass
class Context:
    """What a patch module needs at install time (see ``dmlshim.activate``).

    ``target``: device type the patches act on (``"privateuseone"`` = DirectML).
    ``fallback``: ``"auto" | "known" | "off"``; with ``"off"`` every ``intercept``
    wrapper only observes (action ``pass``, or ``error`` when the call fails).  ``active`` goes False at deactivate,
    which makes any wrapper we could not remove transparent.  ``present``: a device of
    type ``target`` is here (or ``DMLSHIM_PROBE=off``); while False only the registry's
    ``anywhere`` patches are installed (``dmlshim.patches.install_all``).
    """

    target: str = "privateuseone"
    fallback: str = "auto"
    bf16: str = "float32"                      # what bfloat16 becomes (config.Config.bf16, DMLSHIM_BF16)
    gate: str = "auto"                         # the compiled gate (config.Config.gate, DMLSHIM_GATE)
    active: bool = True
    fixes: Optional[FrozenSet[str]] = None     # the fixes switched on; None = all (dmlshim.probing)
    gated: FrozenSet[str] = frozenset()        # the fixes some defect enables
    present: bool = True

    def enabled(self, fix: str) -> bool:
        """Is ``fix`` (a registry patch name, ``"dispatcher:mul"`` ...) on?  A fix named
        by no defect always is."""
        return self.fixes is None or fix not in self.gated or fix in self.fixes

    def on_target(self, x: Any) -> bool:
        """Is ``x`` a tensor on the target device?  (``is_cpu`` first: 5x cheaper.)"""
        return isinstance(x, torch.Tensor) and not x.is_cpu and x.device.type == self.target


class Guard(NamedTuple):
    """Error handling an ``intercept`` wrapper runs inline: with ``fallback="auto"`` or
    ``"known"`` it is auto's (``auto.guard``), so auto needs no second wrapper around
    ours.  The default does nothing: ``memo`` stays empty and ``catch`` matches nothing.

    ``memo``: truthy once some calls of the op go straight to the CPU, then
    ``remembered(args, kwargs)`` says whether this one does and ``cpu(func, args,
    kwargs)`` runs it there.  An exception in ``catch`` raised by the call goes to
    ``failed(func, args, kwargs, exc)``, which returns a result or raises.
    """

    memo: Any = frozenset()
    catch: Tuple[type, ...] = ()
    remembered: Optional[Callable[[tuple, dict], bool]] = None
    cpu: Optional[Callable[[Callable, tuple, dict], Any]] = None
    failed: Optional[Callable[[Callable, tuple, dict, BaseException], Any]] = None


_guard_provider: Optional[Callable[[Any, str, str], Guard]] = None


def provide_guard(provider: Callable[[Any, str, str], Guard]) -> None:
    """Set the ``provider(owner, name, op) -> Guard`` that ``intercept`` wrappers run
    (``auto.guard``).  auto builds on this module, so it hands its guard down when
    imported (``dmlshim.patches`` imports it) instead of being imported here."""
    global _guard_provider
    _guard_provider = provider


def _guard(ctx: Context, owner: Any, name: str, op: str) -> Guard:
    if ctx.fallback == "off" or isinstance(owner, str) or _guard_provider is None:
        return Guard()                      # auto: not in "off" (REGISTRY), torch only
    return _guard_provider(owner, name, op)


def fronted(ctx: Context, replaced: Any, proxy: Callable, device: Optional[tuple] = None) -> Any:
    """``proxy`` behind the compiled gate's front (``csrc/gate.cpp``): a call whose arguments
    are all plain CPU values (CPU tensors, numbers, held dtypes, None; no str or device)
    runs the original at once, under every dmlshim layer (``replaced``'s own original if
    it is a front), decided in C; every other call goes to ``proxy``.  Only for a wrapper
    that passes such calls through unchanged, as ``intercept``'s selects and auto's do.
    ``proxy`` itself without a compiled gate, or with no device present (no gate is built).

    ``device``: ``(watch, guard)`` for a wrapper that passes through a call whose other
    values are tensors of ``ctx.target`` too, unless one of them is of ``watch.dtypes`` or
    (``watch.empty``) empty, or an ``out=`` is given (``out_resize``'s case): such a call runs
    the original as well, under ``guard`` (auto's memo and retry), decided in C.  A front over another front has a device mode only where
    that one has (their watches united).
    """
    from . import _gate
    ext = _gate.extension(ctx.gate) if ctx.present else None
    if ext is None:
        return proxy
    spec = _device_spec(ctx, replaced, device)
    return ext.Front(getattr(replaced, "__dmlshim_fast__", replaced), proxy, spec)


def _device_spec(ctx: Context, replaced: Any, device: Optional[tuple]) -> Optional[tuple]:
    """The front's device mode, ``(target, flags, dtypes, memo, catch, failed)``, or None."""
    if device is None:
        return None
    watch, guard = device
    inner = getattr(replaced, "__dmlshim_device__", ())      # () for no front, None for one without
    if inner is None:
        return None
    flags, dtypes = watch.flags(), set(watch.dtypes)
    memo, catch, failed = guard.memo, guard.catch or None, guard.failed
    if inner:
        _, inner_flags, inner_dtypes, inner_memo, inner_catch, inner_failed = inner
        flags, dtypes = flags | inner_flags, dtypes | set(inner_dtypes)
        if failed is None:
            memo, catch, failed = inner_memo, inner_catch, inner_failed
    return ctx.target, flags, tuple(sorted(dtypes, key=str)), memo, catch, failed


def original(owner: Any, name: str) -> Any:
    """``owner.name`` as it was before dmlshim wrapped it (its current value if never)."""
    owner = _resolve_owner(owner)
    with _lock:
        if (id(owner), name) in _originals:
            return _originals[(id(owner), name)]
    return getattr(owner, name)


def when_imported(module: str, callback: Callable[[Any], None]) -> Callable[[], None]:
    """Call ``callback(module_object)`` once ``module`` is imported (now if it already
    is).  Returns a function that cancels the callback if it has not run yet.

    wrapt keeps a hook until the module's import fires it (then drops it) and cannot
    remove one; so at most one wrapt hook per module name is pending (``_hooked``), and
    it dispatches to whatever callbacks are still waiting when it fires."""
    with _lock:
        _waiting.setdefault(module, []).append(callback)
        register = module not in _hooked
        _hooked.add(module)
    if register:
        wrapt.register_post_import_hook(_dispatch, module)   # fires now if imported

    def cancel() -> None:
        with _lock:
            if callback in _waiting.get(module, ()):
                _waiting[module].remove(callback)
    return cancel


def _dispatch(mod: Any) -> None:
    with _lock:
        _hooked.discard(mod.__name__)       # wrapt has dropped its hook
        callbacks = _waiting.pop(mod.__name__, [])
    for callback in callbacks:
        callback(mod)


def _resolve_owner(owner: Any) -> Any:
    return sys.modules[owner] if isinstance(owner, str) else owner


class PatchSet:
    """The wrappers one patch module installed.

    >>> _patches = PatchSet(__name__)
    >>> def install(ctx):
    ...     _patches.intercept(ctx, torch, "cat", _cat)
    >>> def uninstall():
    ...     _patches.restore()
    """

    def __init__(self, name: str):
        self.name = name
        _sets.add(self)
        self._applied: List[tuple] = []     # (owner, attr, wrapper, replaced, had_own)
        self._keys: set = set()             # (id(owner), attr) of _applied: a constant-time
                                            # "wrapped already?" (auto wraps 2,700 attributes)
        self._cancels: List[Callable[[], None]] = []

    # ---------------------------------------------------------------- low level
    def wrap(self, ctx: Context, owner: Any, name: str, wrapper: Callable, *, front: bool = False,
             device=None) -> None:
        """Replace ``owner.name`` with ``wrapt.FunctionWrapper(current, wrapper)``,
        transparent while ``ctx.active`` is False (a wrapper we could not remove).
        ``front``: behind the compiled front (:func:`fronted`), for a module function whose
        ``wrapper`` passes calls of plain CPU values through; ``device``: a ``_gate.Watch``
        for one that passes by device calls too (``intercept``'s), with no guard.

        ``wrapper(wrapped, instance, args, kwargs)`` is wrapt's signature.  ``owner``
        may be a module name: the wrap then happens when that module is imported.
        ``name`` may be dotted (``"Class.method"``).
        """
        def when_active(wrapped, instance, args, kwargs):
            if not ctx.active:
                return wrapped(*args, **kwargs)
            return wrapper(wrapped, instance, args, kwargs)
        def make_proxy(replaced):
            proxy = wrapt.FunctionWrapper(replaced, when_active)
            return fronted(ctx, replaced, proxy, None if device is None else (device, Guard())) \
                if front else proxy
        self.replace(owner, name, make_proxy)

    def replace(self, owner: Any, name: str, make_proxy: Callable[[Any], Any]) -> None:
        """Set ``owner.name = make_proxy(replaced)``, remembering how to undo it: the
        primitive under ``wrap`` and ``intercept`` (``auto`` uses it for its closures).
        Does nothing if this set wrapped ``owner.name`` already.

        Raises whatever ``setattr`` raises on a read-only attribute (``AttributeError``,
        ``TypeError``); nothing is recorded then.
        """
        if isinstance(owner, str) and owner not in sys.modules:
            self._cancels.append(when_imported(owner, lambda mod: self.replace(mod, name, make_proxy)))
            return
        owner = _resolve_owner(owner)
        parent, attr = wrapt.resolve_path(owner, name)[:2] if "." in name else (owner, name)
        key = (id(parent), attr)
        with _lock:
            if key in self._keys:
                return                      # this patch set already wrapped it
            had_own = attr in getattr(parent, "__dict__", {})
            replaced = parent.__dict__[attr] if had_own else getattr(parent, attr)
            current = getattr(parent, attr)
            proxy = make_proxy(replaced)
            _identity.prime()               # torch's cached tables, before they see a wrapper
            setattr(parent, attr, proxy)
            if key not in _originals:       # first save wins
                _originals[key] = current
                _owners[id(parent)] = parent
            _jit_alias(proxy, replaced)
            _identity.alias(getattr(replaced, "__func__", replaced), proxy)
            self._applied.append((parent, attr, proxy, replaced, had_own))
            self._keys.add(key)

    def intercept(self, ctx: Context, owner: Any, name: str,
                  handler: Callable[[Callable, tuple, dict], Tuple[str, Any]], *,
                  op: Optional[str] = None, select: Optional[Callable[[Any, tuple, dict], bool]] = None,
                  device=None) -> None:
        """Wrap ``owner.name`` so that calls touching ``ctx.target`` tensors go to
        ``handler(func, args, kwargs) -> (action, result)``; all other calls run the
        original at once (fast path).  Failures of either go to auto's retry on the CPU
        (``Guard``) when ``ctx.fallback`` is ``"auto"``/``"known"``.

        ``func`` is the original callable, unbound: for methods ``args[0]`` is ``self``
        (so a handler may replace it); the time of its calls counts as the op's ``own``
        in ``report()`` (``trace.timed``), the rest of the handler's as ``overhead``
        unless it marks ``trace.substitute()`` work.  ``select(instance, args, kwargs)`` decides
        whether a call concerns the target (``instance`` is ``self`` for methods, else
        ignore it); it is the fast path, so keep it cheap: test ``is_cpu`` before
        ``device.type``.  The default looks at ``self``, positional tensors and lists
        of tensors.  ``op`` names the call in stats and traces (default
        ``"torch.cat"``, ``"Tensor.mul_"``, ``"F.conv1d"`` ...).  ``device``: a
        ``_gate.Watch`` (its ``dtypes`` and ``empty``) for a ``select`` that is False for every
        call whose values are plain CPU values and ``ctx.target`` tensors other than those:
        the front (:func:`fronted`) then runs such a call in C too, under the guard.
        """
        if op is None:
            base = owner if isinstance(owner, str) else getattr(owner, "__name__", "?")
            op = f"{base}.{name}".replace("torch.nn.functional.", "F.")
        if select is None:
            select = select_positional(ctx.target)
        if ctx.fallback == "off":           # trace only: observe calls, fix nothing
            handler = _observe
        guard = _guard(ctx, owner, name, op)
        memo, catch, remembered, cpu, failed = guard
        busy = fallback.busy
        call = trace.call

        # Plain functions, not wrapt.FunctionWrappers: for module functions wrapt's call
        # costs 0.1-0.15 us more, and for methods it builds a bound wrapper on every
        # attribute access (0.4-0.8 us against 0.1-0.4 us; benchmarks/shim_overhead.py).
        # The guard's try costs nothing until something raises (Python >= 3.11).
        def make_proxy(replaced):
            if is_method and isinstance(replaced, (staticmethod, classmethod)):
                raise TypeError(f"dmlshim: intercept() wraps instance methods; {name} is a "
                                f"{type(replaced).__name__}: use PatchSet.wrap() (wrapt) for it")
            original = trace.timed(replaced)    # the handler's calls of it: the op's own time
            if is_method:
                def proxy(self, *args, **kwargs):
                    if memo and remembered((self, *args), kwargs):
                        return cpu(replaced, (self, *args), kwargs)
                    try:
                        if not select(self, args, kwargs) or not ctx.active or busy():
                            return replaced(self, *args, **kwargs)        # fast path
                        return call(op, handler, original, (self, *args), kwargs)
                    except catch as exc:
                        return failed(replaced, (self, *args), kwargs, exc)
            else:
                def proxy(*args, **kwargs):
                    if memo and remembered(args, kwargs):
                        return cpu(replaced, args, kwargs)
                    try:
                        if not select(None, args, kwargs) or not ctx.active or busy():
                            return replaced(*args, **kwargs)              # fast path
                        return call(op, handler, original, args, kwargs)
                    except catch as exc:
                        return failed(replaced, args, kwargs, exc)
            functools.update_wrapper(proxy, replaced)
            proxy.__dmlshim_guarded__ = guard.failed is not None   # auto leaves it alone
            return fronted(ctx, replaced, proxy, None if device is None else (device, guard))

        is_method = "." in name or isinstance(owner, type)
        self.replace(owner, name, make_proxy)

    # ---------------------------------------------------------------- undo
    def restore(self) -> None:
        """Undo this set's wrappers (newest first) and cancel pending lazy wraps.

        Warns once (``RuntimeWarning``) naming the attributes someone replaced after
        us: those keep the new value."""
        for cancel in self._cancels:
            cancel()
        self._cancels.clear()
        with _lock:
            applied, self._applied = self._applied, []
            self._keys = set()
        skipped = []
        for parent, attr, proxy, replaced, had_own in reversed(applied):
            current = parent.__dict__.get(attr) if hasattr(parent, "__dict__") else getattr(parent, attr, None)
            if current is not proxy:
                skipped.append(f"{_name(parent)}.{attr}")
                continue
            if had_own:
                setattr(parent, attr, replaced)
            else:
                delattr(parent, attr)       # the attribute was inherited: uncover it again
            _jit_alias(proxy, None)
            _identity.forget(proxy)
        if skipped:
            names = ", ".join(skipped[:5]) + (f" and {len(skipped) - 5} more" if len(skipped) > 5 else "")
            warnings.warn(f"dmlshim: {names} {'was' if len(skipped) == 1 else 'were each'} replaced after "
                          "dmlshim wrapped it; left in place (dmlshim's wrapper inside is now inactive)",
                          RuntimeWarning, stacklevel=3)


_sets: "weakref.WeakSet[PatchSet]" = weakref.WeakSet()     # every PatchSet, for wrapped()


def wrapped() -> Dict[Tuple[str, str], Tuple[str, ...]]:
    """``{("Tensor", "copy_"): the patches whose wrappers hold it now}`` (names sorted; a
    patch's name is its PatchSet's module name less ``dmlshim.patches.``)."""
    held: Dict[Tuple[str, str], set] = {}
    for patch_set in list(_sets):
        for parent, attr, *_ in patch_set._applied:
            held.setdefault((_name(parent), attr), set()).add(patch_set.name.rpartition(".")[2])
    return {key: tuple(sorted(names)) for key, names in held.items()}


def _jit_alias(proxy: Any, replaced: Any) -> None:
    """Let TorchScript see ``proxy`` as the aten op ``replaced`` stands for (else
    ``torch.jit.script`` of code calling e.g. ``torch.cat`` fails), or forget it
    (``replaced=None``).  TorchScript's ``id(function) -> "aten::op"`` table is private:
    where this torch lacks it, nothing is done, and _torch_compat.check() said so at
    activate()."""
    table = _torch_compat.builtin_table()
    if table is None:
        return
    if replaced is None:
        table.pop(id(proxy), None)
        return
    while replaced is not None and id(replaced) not in table:
        replaced = getattr(replaced, "__wrapped__", None)
    if replaced is not None:
        table[id(proxy)] = table[id(replaced)]


def _name(obj: Any) -> str:
    return getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None) or type(obj).__name__


def _observe(func, args, kwargs):
    return "pass", func(*args, **kwargs)


def select_positional(target: str) -> Callable[[Any, tuple, dict], bool]:
    """Default fast-path test: ``self`` (for methods), any positional tensor, or any
    tensor in a positional list/tuple, is on the ``target`` device type."""
    Tensor = torch.Tensor

    def select(instance, args, kwargs):
        if isinstance(instance, Tensor) and not instance.is_cpu and instance.device.type == target:
            return True
        for a in args:
            if isinstance(a, Tensor):
                if not a.is_cpu and a.device.type == target:
                    return True
            elif isinstance(a, (list, tuple)):
                for t in a:
                    if isinstance(t, Tensor) and not t.is_cpu and t.device.type == target:
                        return True
        return False
    return select
