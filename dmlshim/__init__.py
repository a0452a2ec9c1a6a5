"""dmlshim: make real PyTorch models run on DirectML with the CPU's outputs (dmlshim.parity).

Public API::

    dmlshim.activate(target=None, *, trace=None, fallback=None)
    dmlshim.deactivate()
    dmlshim.is_active() -> bool
    dmlshim.report() -> dmlshim.trace.Report     # print it for a table
    dmlshim.select_device() -> torch.device
    dmlshim.DirectMLError                        # readable DirectML failures (dmlshim.errors)
"""
from __future__ import annotations

import threading
import warnings
from typing import Callable, Optional

from . import _torch_compat
from . import config as _config
from . import devices as _devices
from . import patches as _patches
from . import probing as _probing
from . import trace as _trace
from ._version import __version__
from .devices import select_device
from .trace import report

__all__ = ["activate", "deactivate", "is_active", "report", "select_device", "DirectMLError"]

_lock = threading.RLock()
_ctx: Optional[_patches.Context] = None
_cfg: Optional[_config.Config] = None
_stop_waiting: Optional[Callable[[], None]] = None     # cancels the wait for a device


def activate(target: Optional[str] = None, *, trace=None, fallback: Optional[str] = None) -> None:
    """Install dmlshim's patches for tensors on device type ``target``.

    Args:
        target: device type to act on; default ``"privateuseone"`` (DirectML).
        trace: ``0``/``False`` off, ``1``/``True`` one log line per intercepted call on
            logger ``dmlshim``, or a file path (JSON Lines).  Default: ``DMLSHIM_TRACE``.
        fallback: ``"auto"`` (default), ``"known"`` or ``"off"``.  Default:
            ``DMLSHIM_FALLBACK``.

    The target device is probed first (``dmlshim.probing``, ``DMLSHIM_PROBE``): only the
    fixes of defects it shows, plus the static ones (bf16, complex), are installed.
    With no device present nothing is installed that a call passes through (only
    basicsr's module alias, ``Patch.anywhere``); a device that appears later
    (``dmlshim.emulation.install()``) is probed then and gets its fixes.  The
    environment (``DMLSHIM_TRACE``, ``DMLSHIM_FALLBACK``, ``DMLSHIM_DEVICE`` /
    ``INFERENCE_DEVICE``, ``DMLSHIM_PROBE``) is read now, at call time.  A private torch
    API this torch lacks is logged once as a WARNING with what it costs
    (``dmlshim._torch_compat``).  Calling again
    while active does nothing (with a warning when the settings differ).

    Raises:
        ValueError: a bad argument or environment value; the message names the variable
            and the allowed values.
    """
    global _ctx, _cfg, _stop_waiting
    cfg = _config.from_env(target, trace=trace, fallback=fallback)
    with _lock:
        if _ctx is not None:
            if cfg != _cfg:
                warnings.warn(f"dmlshim.activate(): already active with {_cfg}; ignoring {cfg}. "
                              "Call dmlshim.deactivate() first to change settings.", RuntimeWarning,
                              stacklevel=2)
            return
        _torch_compat.warn_missing()        # a private torch API this torch lacks: a WARNING, once
        detection = _probing.detect(cfg.target, cfg.probe)
        _trace.start(cfg.trace)
        _ctx = _patches.Context(target=cfg.target, fallback=cfg.fallback, bf16=cfg.bf16, gate=cfg.gate,
                                fixes=detection.fixes, gated=_probing.gated(detection.defects),
                                present=_present(detection))
        _cfg = cfg
        _patches.install_all(_ctx)
        if not _ctx.present:
            _stop_waiting = _devices.when_added(_device_added)


def _present(detection) -> bool:
    """A target device was found, or ``DMLSHIM_PROBE=off`` asked for every fix anyway."""
    return detection.device is not None or detection.fixes is None


def _device_added() -> None:
    """A device appeared after an ``activate()`` that found none: probe it and install
    what it needs, as that ``activate()`` would have (``devices.when_added``)."""
    global _stop_waiting
    with _lock:
        ctx = _ctx
        if ctx is None or ctx.present:
            return
        detection = _probing.detect(ctx.target, _cfg.probe)
        if not _present(detection):
            return                                   # not a device of the target type
        ctx.fixes, ctx.present = detection.fixes, True
        _stop_waiting()
        _stop_waiting = None
        _patches.install_all(ctx)


def deactivate() -> None:
    """Remove every patch: each patched attribute is the original object again (only
    attributes that still hold dmlshim's wrapper are touched; the rest warn).  Stats
    are kept; tracing stops."""
    global _ctx, _cfg, _stop_waiting
    with _lock:
        if _ctx is None:
            return
        if _stop_waiting is not None:
            _stop_waiting()
            _stop_waiting = None
        _ctx.active = False
        _patches.uninstall_all()
        _trace.stop()
        _ctx = _cfg = None


def is_active() -> bool:
    """True between ``activate()`` and ``deactivate()``."""
    return _ctx is not None


def settings() -> Optional[_config.Config]:
    """The ``Config`` of the active ``activate()`` call, or None."""
    return _cfg


def __getattr__(name: str):
    if name == "DirectMLError":          # owned by dmlshim.errors; imported on first use
        from .errors import DirectMLError
        return DirectMLError
    raise AttributeError(f"module 'dmlshim' has no attribute {name!r}")
