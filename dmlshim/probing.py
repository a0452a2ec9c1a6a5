"""Probe the target device once, cache the verdicts, decide which fixes go on.

``activate()`` calls :func:`detect`: every probing :class:`~dmlshim.catalogue.Defect` runs
its tiny call on the device (bounded in time, exceptions captured); the verdicts of a
real DirectML adapter are cached in the user's cache directory (``platformdirs``), keyed
by adapter, driver, torch-directml, torch and dmlshim versions.  A real adapter's first
probing runs in child processes (:mod:`dmlshim.probe_child`): some probes end the process on
the real binary.  The emulated device is never cached on disk (its rules are configurable)
and is probed in this process.  ``DMLSHIM_PROBE`` = ``auto`` |
``off`` (every fix on, nothing probed) | ``refresh`` (probe again, rewrite the cache).
Docs: docs/defects.md.
"""
from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import sys
import threading
import time
import warnings
from dataclasses import dataclass, field
from typing import Dict, FrozenSet, List, Optional, Tuple

import torch

from . import _cache, devices, probe_child, trace
from . import catalogue
from .catalogue import Defect, Verdict
from .probe_child import verdict_of


def all_defects() -> Tuple[Defect, ...]:
    """Every known defect: ``dmlshim.catalogue.DEFECTS``, topic by topic."""
    return catalogue.DEFECTS


TIMEOUT = 10.0                         # seconds per probe; a hung call counts as broken
DETECTED, NOT_DETECTED, STATIC, NOT_PROBED = "detected", "not detected", "static", "not probed"
_CACHE_FORMAT = 1


@dataclass(frozen=True)
class Detection:
    """What :func:`detect` found.

    ``device``: the probed device (``"privateuseone:0"``) or None when none is present.
    ``status``: defect name -> ``detected | not detected | static | not probed``.
    ``verdicts``: defect name -> :class:`Verdict` of the probes that ran (or were cached).
    ``fixes``: the fix names switched on, or None = every fix (``DMLSHIM_PROBE=off``).
    ``cache``: ``"none"`` (not cached: emulated, no device, off), ``"cold"`` (probed and
    written), ``"warm"`` (read back) or ``"refresh"``.  ``seconds``: time spent.
    """

    mode: str
    device: Optional[str]
    adapter: Optional[str]
    status: Dict[str, str]
    verdicts: Dict[str, Verdict]
    fixes: Optional[FrozenSet[str]]
    cache: str = "none"
    seconds: float = 0.0
    defects: Tuple[Defect, ...] = field(default=(), repr=False)

    def rows(self) -> List[dict]:
        """One dict per defect: name, row, status, figure, fixes, source."""
        return [{"name": d.name, "row": d.row, "status": self.status[d.name],
                 "figure": self.verdicts[d.name].figure if d.name in self.verdicts else "",
                 "fixes": list(d.fixes), "source": d.source} for d in self.defects]

    def to_dict(self) -> dict:
        return {"mode": self.mode, "device": self.device, "adapter": self.adapter,
                "cache": self.cache, "seconds": self.seconds, "defects": self.rows(),
                "fixes_on": None if self.fixes is None else sorted(self.fixes)}


_last: Optional[Detection] = None


def last() -> Optional[Detection]:
    """The :class:`Detection` of the latest ``activate()``, or None."""
    return _last


trace.last_detection = last             # report() lists the defects (trace sits below us)


def gated(defects=None) -> FrozenSet[str]:
    """Every fix name some defect enables: these go on only when that defect is there."""
    return frozenset(f for d in (defects or all_defects()) for f in d.fixes)


def run_probe(defect: Defect, device: torch.device, timeout: Optional[float] = TIMEOUT) -> Verdict:
    """Run ``defect.probe(device)`` in a worker thread, at most ``timeout`` seconds
    (``None``: in this thread, unbounded).

    An exception is a broken verdict whose figure is the error (``"RuntimeError: The
    parameter is incorrect."``); so is a probe still running at the deadline (the thread
    is left behind: a hung DirectML call cannot be interrupted)."""
    box: list = []
    if timeout is None:
        return verdict_of(defect.probe, device)

    worker = threading.Thread(target=lambda: box.append(verdict_of(defect.probe, device)),
                              name=f"dmlshim-probe-{defect.name}", daemon=True)
    worker.start()
    worker.join(timeout)
    return box[0] if box else Verdict(True, f"timed out after {timeout:g} s")


def target_device(target: str) -> Tuple[Optional[torch.device], Optional[str], bool]:
    """``(device, adapter name, emulated)`` for ``target``, or ``(None, None, False)`` when
    no device of that type is present (then nothing is probed and no fix is needed)."""
    if target == "privateuseone":
        dml = devices._torch_directml()
        if dml is not None:
            if not devices.available("directml"):
                return None, None, False
            index = dml.default_device() if hasattr(dml, "default_device") else 0
            return dml.device(index), str(dml.device_name(index)), False
        emulation = devices._emulation()
        if emulation is not None:
            return emulation.DEVICE, "emulated DirectML (dmlshim.emulation)", True
        return None, None, False
    kind = {"cuda": "cuda", "xpu": "xpu", "mps": "mps"}.get(target)
    if kind is not None and devices.available(kind):
        return torch.device(kind), kind, False
    return None, None, False


def detect(target: str = "privateuseone", mode: str = "auto", *, defects=None,
           timeout: float = TIMEOUT) -> Detection:
    """Probe ``target``'s device (``mode``: ``auto`` | ``off`` | ``refresh``) and decide
    the fixes.  Static defects count on a DirectML device only; with no device present
    no fix is on (there is nothing to fix)."""
    global _last
    start = time.perf_counter()
    defects = tuple(defects if defects is not None else all_defects())
    device, adapter, emulated = target_device(target)
    if mode == "off":
        if device is not None and target == "privateuseone":
            devices.set_float64_broken(device, False)      # not probed: the driver's word
        detection = Detection(mode, _str(device), adapter, {d.name: NOT_PROBED for d in defects}, {},
                              None, defects=defects)
    elif device is None:
        detection = Detection(mode, None, None, {d.name: NOT_PROBED for d in defects}, {},
                              frozenset(), defects=defects)
    else:
        dml = target == "privateuseone"
        key = None if emulated or not dml else cache_key(adapter, devices.reported_float64_support(device))
        verdicts, cache = _probe_all(defects, device, key, mode, emulated, timeout)
        if dml and "float64" in verdicts:       # float64 reported but wrong counts as none
            devices.set_float64_broken(device, verdicts["float64"].broken
                                       and devices.reported_float64_support(device))
        status = {d.name: (STATIC if dml else NOT_DETECTED) if d.static else
                  DETECTED if verdicts[d.name].broken else NOT_DETECTED for d in defects}
        fixes = frozenset(f for d in defects if status[d.name] in (DETECTED, STATIC) for f in d.fixes)
        detection = Detection(mode, str(device), adapter, status, verdicts, fixes, cache,
                              defects=defects)
    _last = detection = _with_seconds(detection, time.perf_counter() - start)
    return detection


def _str(device) -> Optional[str]:
    return None if device is None else str(device)


def _with_seconds(d: Detection, seconds: float) -> Detection:
    return dataclasses.replace(d, seconds=seconds)


def _probe_all(defects, device, key, mode, emulated, timeout):
    probing = [d for d in defects if not d.static]
    if key is not None and mode == "auto":
        cached = read_cache(key)
        if cached is not None and all(d.name in cached for d in probing):
            return {d.name: cached[d.name] for d in probing}, "warm"
    memo = _emulator_state() if emulated else None
    if memo is not None and _memo and _same(_memo[0], memo) and _memo[1].keys() >= {d.name for d in probing}:
        return dict(_memo[1]), "none"
    with _quiet(emulated):
        if key is not None:
            verdicts = _in_children(probing, device, timeout)
        else:   # the emulated device cannot hang: no worker thread (it costs more than the probe)
            verdicts = {d.name: run_probe(d, device, None if emulated else timeout) for d in probing}
    if memo is not None:
        _memo[:] = [memo, dict(verdicts)]
    if key is None:
        return verdicts, "none"
    write_cache(key, verdicts)
    return verdicts, "refresh" if mode == "refresh" else "cold"


def _in_children(defects, device, timeout) -> Dict[str, Verdict]:
    """A real adapter's first probing, in child processes (a probe that ends the process ends
    only its child); in worker threads, with a logged warning, where no child can run."""
    try:
        if not all(d in catalogue.DEFECTS for d in defects):
            raise probe_child.ChildError("a child process knows only dmlshim.catalogue's probes")
        return probe_child.probe_in_children([d.name for d in defects], probe_child.device_spec(device), timeout)
    except probe_child.ChildError as exc:
        trace.logger.warning("dmlshim: probing in this process (worker threads): %s", exc)
    return {d.name: run_probe(d, device, timeout) for d in defects}


# The emulated device's verdicts are reused in this process while its configuration is
# the same object (configure() always makes a new one) and Tensor.new is unchanged
# (emulation.legacy_new.refused()); never written to disk.
_memo: list = []


def _emulator_state():
    from .emulation import _state
    return (_state.config, torch.Tensor.__dict__.get("new"))


def _same(a, b) -> bool:
    return all(x is y for x, y in zip(a, b))


@contextlib.contextmanager
def _quiet(emulated: bool):
    """Probes warn nothing (torch-directml's CPU-fallback warning) and, on the emulated
    device, leave its per-op records and once-per-process warning as they were."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if emulated:
            from .emulation import _state
            with _state.unrecorded():
                yield
        else:
            yield


# ------------------------------------------------------------------------- the cache

def cache_dir() -> str:
    """Where verdicts are cached: ``platformdirs.user_cache_dir("dmlshim")``."""
    return _cache.folder()


def cache_key(adapter: Optional[str], float64: bool) -> dict:
    """What a cached verdict depends on: the adapter, its driver, whether the driver
    reports float64 (a driver setting can switch it), torch-directml's, torch's and
    dmlshim's versions, and the probes themselves (a source checkout changes them without
    a new version)."""
    from ._version import __version__
    dml = sys.modules.get("torch_directml")
    probes = [(d.name, d.summary, d.probe.__doc__) for d in all_defects() if d.probe is not None]
    return {"adapter": adapter, "driver": devices.driver_version(adapter), "float64": float64,
            "torch_directml": getattr(dml, "__version__", None), "torch": torch.__version__,
            "dmlshim": __version__,
            "probes": hashlib.sha256(json.dumps(probes).encode()).hexdigest()[:16]}


def cache_path(key: dict) -> str:
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    return os.path.join(cache_dir(), f"probes-{digest}.json")


def read_cache(key: dict) -> Optional[Dict[str, Verdict]]:
    """The cached verdicts for ``key``, or None.  A file that is unreadable, corrupt
    or written for another key is ignored with a warning (it is probed again)."""
    path = cache_path(key)
    if not os.path.exists(path):
        return None
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        if data.get("format") != _CACHE_FORMAT or data.get("key") != key:
            raise ValueError("written for another device or version")
        return {name: Verdict(bool(v["broken"]), str(v["figure"])) for name, v in data["verdicts"].items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        warnings.warn(f"dmlshim: ignoring the probe cache {path} ({exc}); probing again",
                      RuntimeWarning, stacklevel=2)
        return None


def write_cache(key: dict, verdicts: Dict[str, Verdict]) -> None:
    """Write atomically; a cache that cannot be written only costs the next probe."""
    path = cache_path(key)
    data = {"format": _CACHE_FORMAT, "key": key, "written": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "verdicts": {n: {"broken": v.broken, "figure": v.figure} for n, v in verdicts.items()}}
    try:
        _cache.write_json(path, data)
    except OSError as exc:
        warnings.warn(f"dmlshim: cannot write the probe cache {path}: {exc}", RuntimeWarning, stacklevel=2)
