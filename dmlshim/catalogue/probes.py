"""How a probe compares the device with the CPU.

A probe is a tiny call on ``device`` compared with the CPU.  :func:`compare` and
:func:`all_of` serve the hand-written probes (an exception propagates: the runner,
``dmlshim.probing``, turns it into ``Verdict(True, "Error: ...")``); :func:`case_probe`
makes a probe of a *case*, the user-level pattern of a report run on either device.
Results are compared within a GPU's rounding (a real device does not round as the CPU
does); dtypes and shapes must match exactly.  Probes look at behaviour, not at how it is
produced, so a defect injected by a user's own ``emulation.Rule`` is seen too.
"""
from __future__ import annotations

from typing import Callable

import torch

from .. import fallback
from ..patches._select import standing_aside
from .defect import Verdict

_CPU = torch.device("cpu")


def compare(got: torch.Tensor, want: torch.Tensor, rtol: float = 1e-3, atol: float = 1e-4) -> Verdict:
    """A device result against the CPU's: dtype and shape exactly, values within ``rtol``/``atol``."""
    got = got.cpu()
    if got.dtype != want.dtype or got.shape != want.shape:
        return Verdict(True, f"{_kind(got)}, CPU gives {_kind(want)}")
    if want.is_floating_point():
        diff = (got.double() - want.double()).abs().max().item() if want.numel() else 0.0
        ok = torch.allclose(got, want, rtol=rtol, atol=atol)
        return Verdict(not ok, f"max |Δ| {diff:.3g}" if diff else "equal")
    return Verdict(not torch.equal(got, want), "equal" if torch.equal(got, want) else "values differ")


def _kind(t: torch.Tensor) -> str:
    return f"{str(t.dtype).replace('torch.', '')}{list(t.shape)}"


def all_of(*verdicts: Verdict) -> Verdict:
    """Broken if any is: their broken figures joined, else the first figure."""
    broken = [v.figure for v in verdicts if v.broken]
    return Verdict(True, "; ".join(broken)) if broken else Verdict(False, verdicts[0].figure)


def differ(got, want) -> Verdict:
    """Compare a device result (tensor or tuple of tensors) with the CPU's."""
    if isinstance(want, torch.Tensor):
        got, want = (got,), (want,)
    for g, w in zip(got, want):
        g = g.cpu()
        if g.shape != w.shape:
            return Verdict(True, f"shape {list(g.shape)}, CPU {list(w.shape)}")
        if not torch.equal(g, w):
            if not w.is_floating_point():
                return Verdict(True, f"values {g.tolist()}, CPU {w.tolist()}")
            delta = (g.double() - w.double()).abs().max().item()
            # a GPU's rounding is not a defect (DESIGN.md, Parity)
            if not torch.allclose(g, w, rtol=1e-4, atol=1e-5):
                return Verdict(True, f"max |Δ| {delta:.3g}")
    return Verdict(False, "equal")


def case_probe(case: Callable[[torch.device], object]) -> Callable[[torch.device], Verdict]:
    """``case(device)`` on the device and on the CPU, compared; an error is a defect.

    dmlshim's fixes stand aside while it runs (``fallback.guard()``,
    ``patches._select.standing_aside``): a probe sees the raw device even after
    ``activate()``.  The probe keeps its case as ``probe.case``."""
    def probe(device: torch.device) -> Verdict:
        with fallback.guard(), standing_aside(), torch.inference_mode(False), torch.enable_grad():
            want = case(_CPU)
            try:
                got = case(device)
            except Exception as exc:             # the DirectML failure itself
                return Verdict(True, f"{type(exc).__name__}: {exc}".splitlines()[0][:200])
        return differ(got, want)
    probe.__name__ = probe.__qualname__ = f"probe_{case.__name__.lstrip('_')}"
    probe.__doc__ = case.__doc__
    probe.case = case
    return probe
