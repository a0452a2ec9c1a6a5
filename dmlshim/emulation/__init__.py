"""An emulated DirectML device for machines without one.

``install()`` turns PyTorch's ``privateuseone`` device into a stand-in for
torch-directml 0.2.5 (torch 2.4.1): tensors are plain ``torch.Tensor`` with
real storage on ``privateuseone:0``; arithmetic runs on the CPU underneath and
is bit-identical to it. Each aten op is routed as torch-directml's real
dispatcher routes it (``dmlshim/data/dml_op_routing_torch241.tsv``): native, CPU
fallback with torch-directml's warning, or ``NotImplementedError``; DirectML's
known quirks are :class:`Rule` objects (see :mod:`.rules`). Tests and
``python -m dmlshim check`` use it to see what would break on a real GPU.
It runs on torch 2.4.1, torch-directml's own torch, where the routing table
is exact, and on newer torch (ops torch 2.4.1 lacked: ``unknown_ops``).

Usage::

    from dmlshim import emulation
    dev = emulation.install()                  # torch.device("privateuseone:0")
    emulation.configure(localized_errors="cp936", has_float64_support=False)
    y = model.to(dev)(x.to(dev))               # fails where DirectML fails
    emulation.records()["cat"]                 # {"reached": 3, "failed": 1, ...}
"""
import contextlib
import dataclasses
import os
import threading
from typing import Iterable, Optional

import torch

from .. import devices
from . import _backend, _state, fused_rnn, gpu_numerics, localized
from .routing import route
from .rules import FatalDirectMLError, Rule, default_rules

__all__ = ["install", "is_installed", "configure", "configured", "Rule", "FatalDirectMLError",
           "default_rules", "has_float64_support", "records", "reset_records", "route",
           "DEVICE", "binding", "numerics"]

DEVICE = _backend.DEVICE
_lock = threading.Lock()
_installed = False


def install() -> torch.device:
    """Install the emulated device (idempotent, process-wide; cannot be undone).

    Returns:
        ``torch.device("privateuseone:0")``.

    The first call also tells ``dmlshim.devices.added()`` that a device appeared: a
    ``dmlshim.activate()`` that found none probes it and installs its fixes then.

    The first call in a process binds the device to torch (:func:`binding`):
    a small C++ extension, compiled on first use (about 30 s with g++ and
    ninja, then cached in ``~/.cache/torch_extensions``), or, on torch >= 2.5
    without a C++ toolchain, torch's Python PrivateUse1 API. Tested on torch
    2.4.1 (torch-directml's pin) and 2.13.

    Raises:
        RuntimeError: another backend already claimed PrivateUse1 in this
            process (e.g. ``import torch_directml`` on Windows), or the
            extension cannot be built (the message names the missing compiler
            or ninja) on a torch without the Python API (torch 2.4.1).
        ValueError: a bad ``DMLSHIM_EMULATION_BINDING`` value.
    """
    global _installed
    with _lock:
        first = not _installed
        if first:
            _backend.register(_state.policy)
            fused_rnn.register()
            _installed = True
            if _state.config is _state.INITIAL:      # the patch modules' rules too (default_rules)
                _state.set_config(dataclasses.replace(_state.config, rules=tuple(default_rules())))
            if os.environ.get("DMLSHIM_EMULATION_NUMERICS"):
                _state.set_config(dataclasses.replace(_state.config, numerics=_numerics(None)))
    if first:
        devices.added()          # an activate() that found no device installs its fixes now
    return _backend.DEVICE


def binding() -> Optional[str]:
    """How the device is bound to torch: ``"compiled"`` (a C++ extension, the default
    on every torch), ``"python"`` (torch's Python PrivateUse1 API: torch >= 2.5
    without a C++ toolchain, or forced by ``DMLSHIM_EMULATION_BINDING``), or ``None``
    before :func:`install`."""
    return _backend.binding.NAME if _backend.binding is not None else None


def is_installed() -> bool:
    """Whether :func:`install` has run in this process."""
    return _installed


def configure(rules: Optional[Iterable[Rule]] = None, localized_errors=None, *,
              extend: bool = False, has_float64_support: Optional[bool] = None,
              warn_always: Optional[bool] = None, unknown_ops: Optional[str] = None,
              numerics: Optional[str] = None) -> None:
    """Set how the emulated device behaves; every ``None`` means DirectML's default.

    Each call sets the whole configuration: ``configure()`` restores defaults.

    Args:
        rules: the quirk rules; ``None`` = :func:`default_rules`.
        localized_errors: a Windows ANSI code page (``"cp936"``, ``936``,
            ``"gbk"``...). HRESULT-text errors then surface as the
            ``UnicodeDecodeError`` Python raises on that Windows (note A of
            failure_modes.md). ``None`` = English text.
        extend: append ``rules`` to the defaults instead of replacing them.
        has_float64_support: ``True`` emulates a GPU with FP64 (float64 math
            runs). Default ``False``, like Intel Arc/UHD (failure_modes.md #7).
        warn_always: ``True`` warns on every CPU-fallback call; default: once
            per process, as torch-directml does (note B), or whenever
            ``torch.set_warn_always(True)``.
        unknown_ops: route for ops of the running torch that torch 2.4.1 did
            not have: ``"native"`` (default), ``"cpu_fallback"`` or ``"error"``.
        numerics: ``"cpu"``: the CPU's own kernels, bit-identical results;
            ``"gpu"``: matmul, convolution, reductions, softmax and norms round
            as a GPU's do (:mod:`.gpu_numerics`; deterministic, within the
            ``device`` parity profile). Default: ``DMLSHIM_EMULATION_NUMERICS``
            when set, else ``"cpu"``.

    Raises:
        ValueError: an unknown code page, ``unknown_ops`` or ``numerics`` value
            (also from ``DMLSHIM_EMULATION_NUMERICS``).
        TypeError: ``rules`` holds something that is not a :class:`Rule`.
    """
    if rules is None:
        rules = default_rules()
    else:
        rules = (default_rules() if extend else []) + list(rules)
    for rule in rules:
        if not isinstance(rule, Rule):
            raise TypeError(f"configure(rules=...) takes Rule objects, got {type(rule).__name__}")
    if unknown_ops is not None and unknown_ops not in _state.UNKNOWN_OPS:
        raise ValueError(f"unknown_ops={unknown_ops!r}; allowed: {', '.join(_state.UNKNOWN_OPS)}")
    numerics = _numerics(numerics)
    _state.set_config(_state.Config(
        rules=tuple(rules),
        localized_errors=None if localized_errors is None else localized.codepage(localized_errors),
        has_float64_support=bool(has_float64_support),
        warn_always=bool(warn_always),
        unknown_ops=unknown_ops or "native",
        numerics=numerics))


def _numerics(value):
    source = "numerics"
    if value is None:
        value = os.environ.get("DMLSHIM_EMULATION_NUMERICS", "").strip().lower() or "cpu"
        source = "DMLSHIM_EMULATION_NUMERICS"
    if value not in gpu_numerics.MODES:
        raise ValueError(f"{source}={value!r}: allowed values are "
                         f"{', '.join(gpu_numerics.MODES)}")
    return value


def numerics() -> str:
    """``"cpu"`` or ``"gpu"``: how the emulated device rounds (:func:`configure`)."""
    return _state.config.numerics


@contextlib.contextmanager
def configured(**kwargs):
    """``with configured(...)``: :func:`configure` for a block, then restore the previous one."""
    previous = _state.config
    configure(**kwargs)
    try:
        yield
    finally:
        _state.set_config(previous)


def has_float64_support() -> bool:
    """Whether the emulated GPU runs float64 math (``configure(has_float64_support=...)``)."""
    return _state.config.has_float64_support


def records() -> dict:
    """Per aten overload that reached the device: counts of calls by outcome.

    Returns:
        ``{"cat": {"reached": n, "native": n, "cpu_fallback": n, "failed": n,
        "quirk": n}, ...}``; ``quirk`` counts silently wrong results (rules
        with ``replace``).
    """
    return _state.records()


def reset_records() -> None:
    """Forget all per-op records."""
    _state.reset_records()
