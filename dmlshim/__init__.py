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
from typing import Optional

from . import config as _config
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


def activate(target: Optional[str] = None, *, trace=None, fallback: Optional[str] = None) -> None:
    """Install dmlshim's patches for tensors on device type ``target``.

    Args:
        target: device type to act on; default ``"privateuseone"`` (DirectML).
        trace: ``0``/``False`` off, ``1``/``True`` one log line per intercepted call on
            logger ``dmlshim``, or a file path (JSON Lines).  Default: ``DMLSHIM_TRACE``.
        fallback: ``"auto"`` (default), ``"known"`` or ``"off"``.  Default:
            ``DMLSHIM_FALLBACK``.

    The target device is probed first (``dmlshim.probing``, ``DMLSHIM_PROBE``): only the
    fixes of defects it shows, plus the static ones (bf16, complex), are installed;
    with no device present, none.  The environment (``DMLSHIM_TRACE``,
    ``DMLSHIM_FALLBACK``, ``DMLSHIM_DEVICE`` / ``INFERENCE_DEVICE``, ``DMLSHIM_PROBE``)
    is read now, at call time.  Calling again while active does
    nothing (with a warning when the settings differ).

    Raises:
        ValueError: a bad argument or environment value; the message names the variable
            and the allowed values.
    """
    global _ctx, _cfg
    cfg = _config.from_env(target, trace=trace, fallback=fallback)
    with _lock:
        if _ctx is not None:
            if cfg != _cfg:
                warnings.warn(f"dmlshim.activate(): already active with {_cfg}; ignoring {cfg}. "
                              "Call dmlshim.deactivate() first to change settings.", RuntimeWarning,
                              stacklevel=2)
            return
        detection = _probing.detect(cfg.target, cfg.probe)
        _trace.start(cfg.trace)
        _ctx = _patches.Context(target=cfg.target, fallback=cfg.fallback, bf16=cfg.bf16,
                                fixes=detection.fixes, gated=_probing.gated(detection.defects))
        _cfg = cfg
        _patches.install_all(_ctx)


def deactivate() -> None:
    """Remove every patch: each patched attribute is the original object again (only
    attributes that still hold dmlshim's wrapper are touched; the rest warn).  Stats
    are kept; tracing stops."""
    global _ctx, _cfg
    with _lock:
        if _ctx is None:
            return
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
