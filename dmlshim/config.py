"""Configuration read from the environment when ``activate()`` runs.

Never at import time and never written back: a user can change the environment
between two ``activate()`` calls.  A bad value raises ``ValueError`` naming the
variable and the allowed values.

Variables
---------
``DMLSHIM_TRACE``     ``0`` (default) | ``1`` (one log line per intercepted call on
                      logger ``dmlshim``) | a file path (JSON Lines, appended).
``DMLSHIM_FALLBACK``  ``auto`` (default) | ``known`` | ``off``.
``DMLSHIM_CODEPAGE``  code page of DirectML's localized error texts (``936``, ``gbk``...);
                      default: the system ANSI code page (see ``dmlshim.errors``).
``DMLSHIM_DEVICE``    ``auto`` (default) | ``directml`` | ``cuda`` | ``xpu`` | ``mps`` |
                      ``cpu`` (optionally with an index, ``cuda:1``).
                      ``INFERENCE_DEVICE`` is honoured as an alias.
``DMLSHIM_BF16``      ``float32`` (default) | ``float16`` | ``cpu``: what a bfloat16 value
                      becomes on DirectML, which cannot hold one (docs/fun-asr-nano.md).
``DMLSHIM_PROBE``     ``auto`` (default: probe the device, cached) | ``off`` (every fix
                      on) | ``refresh`` (probe again); see ``dmlshim.probing``.
``DMLSHIM_GATE``      ``auto`` (default: the compiled gate in front of the fixes' Python
                      kernels where a C++ compiler exists) | ``compiled`` (raise if it
                      cannot be built) | ``python``; see ``dmlshim.patches._gate``.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Mapping, Optional, Union

FALLBACK_MODES = ("auto", "known", "off")
DEVICE_KINDS = ("auto", "directml", "dml", "privateuseone", "cuda", "xpu", "mps", "cpu")
DEFAULT_TARGET = "privateuseone"
PROBE_MODES = ("auto", "off", "refresh")
_WORDS = ("true", "false", "yes", "no", "on", "off")
# bfloat16 on DirectML (failure_modes.md #8): computed as float32 / float16 on the device,
# or kept on the CPU as an island ("cpu": a bf16 Parameter then cannot move)
BF16_POLICIES = ("float32", "float16", "cpu")
GATE_MODES = ("auto", "compiled", "python")


@dataclass(frozen=True)
class Config:
    """The settings of one ``activate()`` call.

    ``trace`` is ``None`` (off), ``"log"`` (logger ``dmlshim``) or a file path.
    """

    target: str = DEFAULT_TARGET
    trace: Optional[str] = None
    fallback: str = "auto"
    device: str = "auto"
    bf16: str = "float32"
    probe: str = "auto"
    gate: str = "auto"


def parse_trace(value: Union[None, bool, int, str, os.PathLike], *, name: str = "trace") -> Optional[str]:
    """``0``/``False``/``""`` -> None, ``1``/``True`` -> ``"log"``, anything else -> a path."""
    if value is None or value == 0 or str(value).strip() in ("", "0"):     # False == 0
        return None
    if value == 1 or str(value).strip() == "1":                           # True == 1
        return "log"
    if not isinstance(value, (str, os.PathLike)) or str(value).strip().lower() in _WORDS:
        # "true"/"on" are far more likely a typo for 1 than a wish for a file named so
        raise ValueError(f"{name}={value!r}: allowed values are 0, 1 or a file path")
    path = os.fspath(value)
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder) or os.path.isdir(path):
        raise ValueError(f"{name}={path!r}: allowed values are 0, 1 or a path to a file in an "
                         f"existing folder ({folder!r} does not exist or the path is a folder)")
    return path


def _one_of(value: str, allowed, name: str) -> str:
    """``value`` lower-cased if it is one of ``allowed``, else a ValueError naming both."""
    choice = str(value).strip().lower()
    if choice not in allowed:
        raise ValueError(f"{name}={value!r}: allowed values are {', '.join(allowed)}")
    return choice


def parse_fallback(value: str, *, name: str = "fallback") -> str:
    return _one_of(value, FALLBACK_MODES, name)


def parse_device(value: str, *, name: str = "DMLSHIM_DEVICE") -> str:
    """Validate a device request such as ``auto``, ``directml``, ``cuda:1``."""
    text = str(value).strip().lower()
    kind, _, index = text.partition(":")
    if kind not in DEVICE_KINDS or (index and (not index.isdigit() or kind == "auto")):
        raise ValueError(f"{name}={value!r}: allowed values are {', '.join(DEVICE_KINDS)}, "
                         "optionally with an index (cuda:1)")
    return text


def parse_bf16(value: str, *, name: str = "DMLSHIM_BF16") -> str:
    """Validate a bfloat16 policy: ``float32``, ``float16`` or ``cpu``."""
    return _one_of(value, BF16_POLICIES, name)


def parse_gate(value: str, *, name: str = "DMLSHIM_GATE") -> str:
    """``auto`` | ``compiled`` | ``python`` (empty: ``auto``)."""
    return _one_of(value.strip() or "auto", GATE_MODES, name)


def parse_probe(value: str, *, name: str = "DMLSHIM_PROBE") -> str:
    """Validate a probing mode: ``auto`` (also for an empty value), ``off`` or ``refresh``."""
    return _one_of(str(value).strip() or "auto", PROBE_MODES, name)


def device_from_env(environ: Mapping[str, str] = os.environ) -> str:
    """``DMLSHIM_DEVICE``, else its alias ``INFERENCE_DEVICE``, else ``auto``."""
    for name in ("DMLSHIM_DEVICE", "INFERENCE_DEVICE"):
        if environ.get(name, "").strip():
            return parse_device(environ[name], name=name)
    return "auto"


def from_env(target: Optional[str] = None, *, trace=None, fallback: Optional[str] = None,
             environ: Mapping[str, str] = os.environ) -> Config:
    """Build the ``Config`` of an ``activate()`` call: arguments win over the environment."""
    target = DEFAULT_TARGET if target is None else str(target)
    if not target or target == "cpu" or ":" in target:
        raise ValueError(f"target={target!r}: allowed values are accelerator device types "
                         "such as 'privateuseone' (DirectML) or 'cuda', without an index")
    if trace is None:
        trace = parse_trace(environ.get("DMLSHIM_TRACE", "0"), name="DMLSHIM_TRACE")
    else:
        trace = parse_trace(trace)
    if fallback is None:
        fallback = parse_fallback(environ.get("DMLSHIM_FALLBACK", "auto") or "auto", name="DMLSHIM_FALLBACK")
    else:
        fallback = parse_fallback(fallback)
    if environ.get("DMLSHIM_CODEPAGE", "").strip():      # validated now, used by dmlshim.errors
        from .errors import parse_codepage
        parse_codepage(environ["DMLSHIM_CODEPAGE"])
    bf16 = parse_bf16(environ.get("DMLSHIM_BF16", "float32") or "float32")
    probe = parse_probe(environ.get("DMLSHIM_PROBE", "auto"))
    gate = parse_gate(environ.get("DMLSHIM_GATE", "auto"))
    return Config(target=target, trace=trace, fallback=fallback, device=device_from_env(environ),
                  bf16=bf16, probe=probe, gate=gate)
