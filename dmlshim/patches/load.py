"""``torch.load`` / ``torch.jit.load`` with ``map_location`` naming the device (failure_modes.md #46).

torch restores each storage where ``map_location`` says: ``torch.UntypedStorage(n,
device=dml)`` under ``with torch.privateuseone.device(device):``.  On torch-directml 0.2.5
neither can work.  Its ``device(device_id)`` compares ``device_id >= 0`` and so raises
``TypeError`` on torch's ``torch.device`` (nomadkaraoke/python-audio-separator PR#295;
microsoft/DirectML#466).  Given the index instead, the storage allocation dies with SIGSEGV:
torch-directml's tensors are ``OpaqueTensorImpl`` s, with no storage and no allocator for
one.  ``torch.jit.load`` fails in its C++ loader ("Cannot access storage of OpaqueTensorImpl").

The fix loads on the CPU and moves what was loaded: each CPU tensor once (a memo keeps
one object per original, so a tensor referenced twice stays one object); an ``nn.Module``
or ``ScriptModule`` through ``Module._apply`` (parameters tied across modules stay tied);
dicts and lists in place, tuples and named tuples rebuilt.  Tensors held by other objects
stay on the CPU, and tensors that shared a storage in the file become separate device
tensors, as in torch's own path for storage-less tensors (``torch.save`` of a DirectML
tensor).  ``map_location`` forms that name the device: a string or ``torch.device``; a dict
whose values send some locations there (a file whose storages the dict sends to the device
and to the CPU both is refused with a clear error: the CPU copies cannot be told apart).
A callable ``map_location`` is left alone: it returns storages itself.

``torch.UntypedStorage(n, device=dml)`` (also ``UntypedStorage.to(device=dml)``) raises a
``RuntimeError`` instead of crashing the process, on a device whose tensors have no storage.
Docs: docs/reported-defects.md.
"""
from __future__ import annotations

import functools
from typing import Any, Optional

import torch
from torch.nn import Parameter

from .. import _torch_compat
from ._select import aside
from ._wrap import Context, PatchSet
from ._patch import Patch

PATCH = Patch("load", "torch.load(map_location=dml): TypeError '>=' between torch.device and int "
                      "(audio-separator PR#295, DirectML#466; #46): device() gets the index")

_patches = PatchSet(__name__)


def _device_named(where: Any, target: str) -> Optional[torch.device]:
    """The ``target`` device ``where`` (a ``map_location`` value) names, else None."""
    if isinstance(where, bytes):
        where = where.decode()
    if isinstance(where, str):
        try:
            where = torch.device(where)
        except RuntimeError:
            return None
    return where if isinstance(where, torch.device) and where.type == target else None


class _DictToCPU(dict):
    """A ``map_location`` dict whose entries for the device say ``"cpu"``.  torch looks
    every location up with ``get``: ``devices`` collects where each one was meant to go
    (a device, or None: elsewhere)."""

    def __init__(self, mapping: dict, target: str):
        super().__init__(mapping)
        self.target, self.devices = target, set()

    def get(self, location, default=None):
        where = super().get(location, default)
        device = _device_named(where, self.target)
        self.devices.add(device)
        return "cpu" if device is not None else where


class _Mover:
    """Moves a loaded object's CPU tensors to ``device`` (see the module docstring)."""

    def __init__(self, device: torch.device):
        self.device = device
        self.memo = {}          # id(original) -> (original, moved); originals kept alive

    def __call__(self, obj):
        hit = self.memo.get(id(obj))
        if hit is not None:
            return hit[1]
        if isinstance(obj, (dict, list, torch.nn.Module)):
            self.memo[id(obj)] = (obj, obj)        # moved in place (cycles end here)
        if isinstance(obj, torch.Tensor):
            moved = self._tensor(obj)
        elif isinstance(obj, torch.nn.Module):
            moved = self._module(obj)
        elif isinstance(obj, dict):
            for key, value in obj.items():
                obj[key] = self(value)
            moved = obj
        elif isinstance(obj, list):
            obj[:] = [self(x) for x in obj]
            moved = obj
        elif isinstance(obj, tuple):
            items = [self(x) for x in obj]
            same = all(a is b for a, b in zip(items, obj))
            moved = obj if same else type(obj)(*items) if hasattr(obj, "_fields") else type(obj)(items)
        else:
            moved = obj
        self.memo[id(obj)] = (obj, moved)
        return moved

    def _tensor(self, t: torch.Tensor) -> torch.Tensor:
        if not t.is_cpu:                           # placed elsewhere by a map_location dict
            return t
        moved = t.detach().to(self.device)
        if isinstance(t, Parameter):
            return Parameter(moved, t.requires_grad)
        return moved.requires_grad_() if t.requires_grad else moved

    def _module(self, module: torch.nn.Module) -> torch.nn.Module:
        """``module._apply`` with the memo (RNNs refresh their flat weights, the jit patch
        sees ScriptModules), then each original tensor keeps one moved object: a tensor
        met before (or tied across submodules) is tied again, as on the CPU."""
        slots = [(store, key, t) for m in module.modules() for store in (m._parameters, m._buffers)
                 for key, t in store.items() if t is not None]
        first = {id(t): self.memo[id(t)][1] for _, _, t in slots if id(t) in self.memo}
        module._apply(self)
        for store, key, old in slots:
            moved = first.setdefault(id(old), store[key])
            if store[key] is not moved:
                store[key] = moved
            self.memo[id(old)] = (old, moved)
        return module


def _split(map_location, target: str):
    """``(map_location to pass on, the device to move to or None)``."""
    device = _device_named(map_location, target)
    if device is not None:
        return "cpu", device
    if isinstance(map_location, dict):
        devices = {_device_named(v, target) for v in map_location.values()} - {None}
        if len(devices) > 1:
            raise ValueError(f"dmlshim: map_location={map_location!r} sends storages to "
                             f"several {target} devices; one at a time is supported")
        if devices:
            return _DictToCPU(map_location, target), devices.pop()
    return map_location, None


def _moved(result, device: torch.device, recorded: Optional[_DictToCPU]):
    if recorded is not None:
        if device not in recorded.devices:
            return result                          # nothing was meant for the device
        if None in recorded.devices:
            raise RuntimeError(
                "dmlshim: torch.load's map_location sends some of this file's storages to "
                f"{device} and others to where they were; on DirectML dmlshim loads on the CPU "
                "first and cannot tell them apart. Load with map_location='cpu' and move the "
                "tensors you want (failure_modes.md #46)")
    return _Mover(device)(result)


def _loader(ctx: Context, slot: int):
    """A wrapper for ``torch.load`` (map_location is argument 1) or ``torch.jit.load``."""
    def load(wrapped, instance, args, kwargs):
        if aside():                                # probes see the raw device
            return wrapped(*args, **kwargs)
        where = kwargs.get("map_location", args[slot] if len(args) > slot else None)
        passed, device = _split(where, ctx.target)
        if device is None:
            return wrapped(*args, **kwargs)
        if "map_location" in kwargs or len(args) <= slot:
            kwargs = dict(kwargs, map_location=passed)
        else:
            args = (*args[:slot], passed, *args[slot + 1:])
        recorded = passed if isinstance(passed, _DictToCPU) else None
        return _moved(wrapped(*args, **kwargs), device, recorded)
    return load


@functools.lru_cache(maxsize=None)
def _storage_less(device_type: str) -> bool:
    """Whether ``device_type`` tensors have no storage (torch-directml's OpaqueTensorImpl)."""
    return not _torch_compat.has_storage(torch.empty(0, device=device_type))


def _storage_guard(ctx: Context):
    def make_proxy(replaced):
        new = getattr(replaced, "__func__", replaced)

        def __new__(cls, *args, device=None, **kwargs):
            if device is not None and ctx.active and torch.device(device).type == ctx.target \
                    and _storage_less(ctx.target):
                raise RuntimeError(
                    f"dmlshim: torch.UntypedStorage(..., device={str(device)!r}) would crash the "
                    f"process: {ctx.target} tensors have no storage (torch-directml's "
                    "OpaqueTensorImpl). Move tensors, not storages; torch.load(f, map_location="
                    "<device>) works under dmlshim (failure_modes.md #46)")
            if device is not None:
                kwargs["device"] = device
            return new(cls, *args, **kwargs)
        return __new__
    return make_proxy


def install(ctx: Context) -> None:
    for owner in (torch, torch.serialization):
        _patches.wrap(ctx, owner, "load", _loader(ctx, 1))
    _patches.wrap(ctx, torch.jit, "load", _loader(ctx, 1))
    _patches.replace(torch.UntypedStorage, "__new__", _storage_guard(ctx))


def uninstall() -> None:
    _patches.restore()
    _storage_less.cache_clear()
