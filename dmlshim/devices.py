"""Device selection and device facts.

``select_device()`` picks CUDA > DirectML > XPU > MPS > CPU, unless ``DMLSHIM_DEVICE``
(alias ``INFERENCE_DEVICE``) forces one.  torch-directml is optional: without it,
DirectML counts as available only when the emulated device (``dmlshim.emulation``) is
installed in this process - it then stands in for DirectML (tests, ``check``).
"""
from __future__ import annotations

import importlib
import importlib.metadata
import os
import sys
import threading
from typing import Any, Callable, Dict, List, Optional

import torch

from . import config

ORDER = ("cuda", "directml", "xpu", "mps", "cpu")


_import_failed = False        # one failed `import torch_directml` is enough per process


def _torch_directml() -> Optional[Any]:
    """The ``torch_directml`` module, or None when it is not installed or fails to load
    (its Linux wheel raises at import outside WSL2: failure_modes.md #38)."""
    global _import_failed
    if "torch_directml" in sys.modules:      # first: ``check`` hides it with a None entry
        return sys.modules["torch_directml"]
    if _import_failed:
        return None
    try:
        return importlib.import_module("torch_directml")
    except Exception:
        _import_failed = True
        return None


def torch_directml_version(dml: Any) -> Optional[str]:
    """The installed torch-directml's version (``"0.2.5.dev240914"``), or None without it.
    The module has no ``__version__``: its distribution's metadata is read."""
    if dml is None:
        return None
    version = getattr(dml, "__version__", None)
    if version is None:
        try:
            version = importlib.metadata.version("torch-directml")
        except importlib.metadata.PackageNotFoundError:
            return None
    return version


def available(kind: str) -> bool:
    """Is a device of ``kind`` (``cuda``, ``directml``, ``xpu``, ``mps``, ``cpu``) usable?"""
    if kind == "cpu":
        return True
    if kind == "cuda":
        return torch.cuda.is_available()
    if kind == "directml":
        dml = _torch_directml()
        if dml is None:
            return _emulation() is not None
        try:
            return dml.is_available() and dml.device_count() > 0
        except Exception:
            return False
    if kind == "xpu":
        return hasattr(torch, "xpu") and torch.xpu.is_available()
    if kind == "mps":
        return hasattr(torch.backends, "mps") and torch.backends.mps.is_available()
    raise ValueError(f"unknown device kind {kind!r}: allowed values are {', '.join(ORDER)}")


def _emulation() -> Optional[Any]:
    """``dmlshim.emulation`` when it is installed in this process (never imported here)."""
    emulation = sys.modules.get("dmlshim.emulation")
    return emulation if emulation is not None and emulation.is_installed() else None


_watch_lock = threading.Lock()
_watchers: List[Callable[[], None]] = []


def when_added(callback: Callable[[], None]) -> Callable[[], None]:
    """Call ``callback()`` each time a DirectML device appears in this process (today:
    the first ``dmlshim.emulation.install()``) until the returned function cancels it.
    An ``activate()`` that found no device waits this way: at no cost per torch call."""
    with _watch_lock:
        _watchers.append(callback)

    def cancel() -> None:
        with _watch_lock:
            if callback in _watchers:
                _watchers.remove(callback)
    return cancel


def added() -> None:
    """A DirectML device has appeared: run every ``when_added`` callback."""
    with _watch_lock:
        waiting = list(_watchers)
    for callback in waiting:
        callback()


def _make(kind: str, index: Optional[int]) -> torch.device:
    if kind == "directml":
        dml = _torch_directml()
        if dml is None:                      # the emulated stand-in
            return torch.device("privateuseone", index or 0)
        return dml.device(index or 0)
    return torch.device(kind if index is None else f"{kind}:{index}")


def select_device(request: Optional[str] = None) -> torch.device:
    """The best available device, as a ``torch.device``.

    ``request`` (default: ``DMLSHIM_DEVICE``, then ``INFERENCE_DEVICE``, then
    ``"auto"``) is ``auto`` or one of ``directml`` (aliases ``dml``,
    ``privateuseone``), ``cuda``, ``xpu``, ``mps``, ``cpu``, optionally with an index
    (``cuda:1``).

    Raises:
        ValueError: unknown value, or the requested device is not available here.
    """
    text = config.device_from_env() if request is None else config.parse_device(request, name="device")
    kind, _, index = text.partition(":")
    kind = "directml" if kind in ("dml", "privateuseone") else kind
    if kind == "auto":
        kind = next(k for k in ORDER if available(k))
        return _make(kind, None)
    if not available(kind):
        found = [k for k in ORDER if available(k)]
        raise ValueError(f"device {text!r} was requested (DMLSHIM_DEVICE / INFERENCE_DEVICE) but is "
                         f"not available here; available: {', '.join(found)}")
    return _make(kind, int(index) if index else None)


def has_float64_support(device: Any = None) -> bool:
    """Can ``device`` do float64 math?

    What its driver reports (:func:`reported_float64_support`), unless dmlshim's float64
    probe found float64 results wrong there (:func:`set_float64_broken`): torch-directml
    0.2.5 with FP64 on computes float64 through float32 and refuses float64 in many
    DirectML operators (docs/defects.md), so such a device counts as having none.
    """
    if device is not None and torch.device(device).type != "privateuseone":
        return True
    if _float64_broken and _key(device) in _float64_broken:
        return False
    return reported_float64_support(device)


def reported_float64_support(device: Any = None) -> bool:
    """Does ``device``'s driver report float64?

    torch-directml's ``has_float64_support()`` when it is loaded; else the emulated
    device's setting when ``dmlshim.emulation`` is installed; else True.  Most
    consumer GPUs under DirectML have no float64 (DirectML#430, #396, #438, #699;
    failure_modes.md #7).  Devices that are not DirectML always answer True.
    """
    if device is not None and torch.device(device).type != "privateuseone":
        return True
    dml = sys.modules.get("torch_directml")
    if dml is not None and hasattr(dml, "has_float64_support"):
        try:
            index = torch.device(device).index if device is not None else None
            return bool(dml.has_float64_support(index or 0))
        except TypeError:
            return bool(dml.has_float64_support())
        except Exception:
            pass
    emulation = _emulation()
    if emulation is not None:
        return bool(emulation.has_float64_support())
    return True


# DirectML devices whose float64 results a probe found wrong ("privateuseone:0")
_float64_broken: set = set()


def _key(device: Any) -> str:
    device = torch.device("privateuseone" if device is None else device)
    return f"{device.type}:{device.index or 0}"


def set_float64_broken(device: Any, broken: bool) -> None:
    """Record the float64 probe's verdict for ``device`` (``dmlshim.probing``): a broken
    one makes :func:`has_float64_support` False there."""
    (_float64_broken.add if broken else _float64_broken.discard)(_key(device))


def directml_adapters() -> List[Dict[str, Any]]:
    """``[{"index", "name", "float64"}]`` for every DirectML adapter (the emulated
    device when it stands in; empty without either)."""
    dml = _torch_directml()
    if dml is None:
        if _emulation() is None:
            return []
        name = f"emulated DirectML (dmlshim.emulation, {_emulation().binding()} binding)"
        return [{"index": 0, "name": name, "float64": has_float64_support("privateuseone:0")}]
    if not available("directml"):
        return []
    adapters = []
    for i in range(dml.device_count()):
        try:
            name = dml.device_name(i)
        except Exception:
            name = "?"
        adapters.append({"index": i, "name": name, "float64": has_float64_support(f"privateuseone:{i}")})
    return adapters


_DISPLAY_CLASS = r"SYSTEM\CurrentControlSet\Control\Class\{4d36e968-e325-11ce-bfc1-08002be10318}"


def driver_version(adapter: Optional[str]) -> Optional[str]:
    """The display driver version of the adapter named ``adapter`` (Windows: read from the
    registry's display-adapter class, ``DriverDesc`` -> ``DriverVersion``); None elsewhere
    or when not found."""
    if adapter is None or sys.platform != "win32":
        return None
    try:
        import winreg
        with winreg.OpenKey(winreg.HKEY_LOCAL_MACHINE, _DISPLAY_CLASS) as cls:
            for i in range(winreg.QueryInfoKey(cls)[0]):
                try:
                    with winreg.OpenKey(cls, winreg.EnumKey(cls, i)) as sub:
                        if winreg.QueryValueEx(sub, "DriverDesc")[0].strip() == adapter.strip():
                            return str(winreg.QueryValueEx(sub, "DriverVersion")[0])
                except OSError:                    # "Properties" and other subkeys
                    continue
    except OSError:
        return None
    return None


def info() -> Dict[str, Any]:
    """Versions, availability of every backend, DirectML adapters (for ``python -m dmlshim info``)."""
    dml = _torch_directml()
    return {
        "torch": torch.__version__,
        "torch_directml": torch_directml_version(dml),
        "available": {k: available(k) for k in ORDER},
        "directml_adapters": directml_adapters(),
        "selected": _selected(),
        "env": {k: os.environ[k] for k in ("DMLSHIM_DEVICE", "INFERENCE_DEVICE", "DMLSHIM_TRACE",
                                           "DMLSHIM_FALLBACK", "DMLSHIM_CODEPAGE") if k in os.environ},
    }


def _selected() -> str:
    try:
        return str(select_device())
    except ValueError as exc:
        return f"none: {exc}"
