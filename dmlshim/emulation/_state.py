"""Configuration, per-op records, and the per-call policy of the emulated device."""
import contextlib
import dataclasses
import os
import sys
import threading
import warnings
from typing import Optional, Tuple

import torch

from . import _backend, fused_rnn, gpu_numerics, localized, opaque, routing, rules
from .rules import Rule, default_rules

UNKNOWN_OPS = ("native", "cpu_fallback", "error")
_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


@dataclasses.dataclass(frozen=True)
class Config:
    rules: Tuple[Rule, ...]
    localized_errors: Optional[str] = None   # canonical code page, e.g. "cp936"
    has_float64_support: bool = False
    warn_always: bool = False
    unknown_ops: str = "native"
    numerics: str = "cpu"                   # "gpu": GPU-like rounding (gpu_numerics.py)


# The emulator's own rules at import; install() adds those the patch modules declare beside
# their fixes (rules.declared_rules), so importing the emulator loads no fix.
config = INITIAL = Config(rules=tuple(default_rules(declared=False)))
opaque.set_rule(config.rules)
_generation = 0          # bumps on configure() and reset_records(): per-op caches recompute
_warned = False          # torch-directml warns once per *process* (note B)
_lock = threading.Lock()

# op name -> [reached, native, cpu_fallback, failed, quirk]
_records = {}
_FIELDS = ("reached", "native", "cpu_fallback", "failed", "quirk")
_REACHED, _NATIVE, _CPU_FALLBACK, _FAILED, _QUIRK = range(5)

_RUN = _backend.RUN  # policy verdict: compute the op normally


def set_config(new):
    global config, _generation
    with _lock:
        config = new
        rules.float64_supported = new.has_float64_support
        opaque.set_rule(new.rules)
        _generation += 1


def records():
    """``{op name: {"reached", "native", "cpu_fallback", "failed", "quirk"}}`` counts."""
    return {name: dict(zip(_FIELDS, counts)) for name, counts in sorted(_records.items()) if counts[0]}


def reset_records():
    global _generation
    with _lock:
        _records.clear()
        _generation += 1  # cached per-op policies hold the old count lists


@contextlib.contextmanager
def unrecorded():
    """Calls inside leave the per-op records and the once-per-process fallback warning
    as they were (dmlshim's probes at ``activate()``)."""
    global _warned
    saved, warned = {name: list(counts) for name, counts in _records.items()}, _warned
    try:
        yield
    finally:
        with _lock:
            for name, counts in _records.items():         # in place: cached policies hold them
                counts[:] = saved.get(name, [0] * len(_FIELDS))
            _warned = warned


class _OpPolicy:
    """Per-op decisions that do not depend on the arguments, cached."""

    __slots__ = ("generation", "route", "reported", "rules", "counts", "kernel")

    def __init__(self, info):
        self.generation = _generation
        self.route, self.reported = _effective_route(info.name)
        self.rules = tuple(r.bind(r, info.op) if r.bind else r for r in config.rules
                           if r.matches_op(info.op, info.name, info.metadata))
        self.counts = _records.setdefault(info.name, [0, 0, 0, 0, 0])
        # A GPU-like kernel replacing the CPU's (numerics="gpu"), or None.
        self.kernel = gpu_numerics.kernel_for(info.name, info.op) if config.numerics == "gpu" else None

    def failed(self):
        """Count a call whose kernel raised (called by the backend)."""
        self.counts[_FAILED] += 1


def _effective_route(name):
    route, reported = routing.lookup(name)
    if name in fused_rnn.OPS:
        # a default rule fails them (rules.fused_rnn_rules); without it, a healthy device
        route = routing.DML_KERNEL
    elif route == routing.UNKNOWN:
        route = {"native": routing.DML_KERNEL, "cpu_fallback": routing.CPU_FALLBACK,
                 "error": routing.NO_CPU_KERNEL}[config.unknown_ops]
    elif route in (routing.COMPOSITE_IMPLICIT, routing.COMPOSITE_EXPLICIT):
        # torch 2.4.1 decomposed it before DirectML; its leaves ran natively there.
        route = routing.DML_KERNEL
    elif route == routing.NO_CPU_KERNEL and routing.has_cpu_kernel(name):
        # torch-directml's CPU fallback failed on 2.4.1 only for want of a CPU kernel
        # (row #34); a later torch that has one (_scaled_mm on 2.13) runs it there.
        route = routing.CPU_FALLBACK
    return route, reported


def policy(info, args, kwargs):
    """Decide one call: ``_RUN``, a replacement result, or raise as DirectML would."""
    p = info.cache
    if p is None or p.generation != _generation:
        p = info.cache = _OpPolicy(info)
    counts = p.counts
    counts[_REACHED] += 1
    for rule in p.rules:
        if rule.when is None or rule.when(*args, **kwargs):
            return _apply(rule, counts, args, kwargs)
    route = p.route
    if route == routing.DML_KERNEL:
        counts[_NATIVE] += 1
        return _RUN
    _warn_fallback(p.reported)
    if route == routing.CPU_FALLBACK:
        counts[_CPU_FALLBACK] += 1
        return _RUN
    counts[_FAILED] += 1
    raise routing.no_cpu_kernel_error(p.reported)


def python_call(name, args):
    """Apply the rules named ``name`` to a Python-level call of the device module
    (``"privateuseone.device"``: torch_directml's ``device()``, failure_modes.md #46)."""
    for rule in config.rules:
        if isinstance(rule.op, (str, tuple)) and rule.matches_op(None, name, False) \
                and (rule.when is None or rule.when(*args)):
            _apply(rule, _records.setdefault(name, [1, 0, 0, 0, 0]), args, {})


_backend.python_call = python_call


def _apply(rule, counts, args, kwargs):
    if rule.replace is not None:
        counts[_QUIRK] += 1
        return rule.apply(args, kwargs)
    counts[_FAILED] += 1
    try:
        rule.apply(args, kwargs)
    except Exception as exc:
        if config.localized_errors is None:
            raise
        translated = localized.localize(exc, config.localized_errors)
        if translated is exc:
            raise
        raise translated from None
    raise AssertionError(f"rule {rule!r} neither raised nor replaced")  # pragma: no cover


def _warn_fallback(name):
    # TORCH_WARN_ONCE in dml_cpu_fallback: one static guard for all ops, unless
    # torch.set_warn_always(True) (failure_modes.md note B).
    global _warned
    if _warned and not (config.warn_always or torch.is_warn_always_enabled()):
        return
    _warned = True
    warnings.warn(routing.fallback_warning(name), UserWarning, stacklevel=_caller_level())


rules.warn_fallback = _warn_fallback


def _caller_level():
    # Attribute the warning to the first frame outside the emulator.
    level, frame = 1, sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE_DIR):
        level += 1
        frame = frame.f_back
    return level


def rearm_fallback_warning():
    """Let the next CPU fallback warn again, as in a fresh process."""
    global _warned
    _warned = False
