"""torch-directml 0.2.5's publicly reported defects (failure_modes.md #41-#47) as data.

Each :class:`~dmlshim.defects.Defect` carries a probe: the user-level pattern of its
report, run tiny on the device and compared with the CPU (milliseconds, no state left
behind).  Probes look at behaviour, not at how it is produced, so a defect injected by a
user's own ``emulation.Rule`` is seen too.  dmlshim's fixes stand aside while a probe
runs (``fallback.guard()``, ``patches._select.standing_aside``): a probe sees the raw
device even after ``activate()``.
Docs: docs/reported-defects.md.
"""
from __future__ import annotations

import io
from typing import Callable, Tuple

import torch
import torch.nn.functional as F

from . import fallback
from .defects import Defect, Verdict
from .patches._select import standing_aside

_CPU = torch.device("cpu")


def _differ(got, want) -> Verdict:
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


def _probe(case: Callable[[torch.device], object]) -> Callable[[torch.device], Verdict]:
    """``case(device)`` on the device and on the CPU, compared; an error is a defect."""
    def probe(device: torch.device) -> Verdict:
        with fallback.guard(), standing_aside(), torch.inference_mode(False), torch.enable_grad():
            want = case(_CPU)
            try:
                got = case(device)
            except Exception as exc:             # the DirectML failure itself
                return Verdict(True, f"{type(exc).__name__}: {exc}".splitlines()[0][:200])
        return _differ(got, want)
    probe.__name__ = probe.__qualname__ = f"probe_{case.__name__.lstrip('_')}"
    probe.__doc__ = case.__doc__
    return probe


def _inference_mode(device):
    """nn.Linear moved to the device, called inside inference_mode (DirectML#602)."""
    weight = torch.arange(6.0).view(2, 3).to(device)       # a normal tensor, as a module's
    with torch.inference_mode():
        return F.linear(torch.ones(4, 3).to(device), weight)


def _pad_order(device):
    """Real-ESRGAN x2's pad of an odd width: F.pad(img, (0, 1, 0, 0), 'reflect')."""
    return F.pad(torch.arange(12.0).view(1, 1, 3, 4).to(device), (0, 1, 0, 0), "reflect")


def _gather(device):
    """FCPE's local decoder: gather (dim=-1) a window from an expanded (stride-0) cent table."""
    cents = torch.arange(8.0).to(device)[None, None, :].expand(2, 3, -1)
    peaks = torch.tensor([[[1], [2], [4]], [[0], [3], [6]]]).to(device)
    window = (torch.arange(3).to(device) + peaks - 1).clamp_(0, 7)
    return torch.gather(cents, -1, window)


def _cross_entropy_none(device):
    """The gradient of cross_entropy(reduction='none') under a manual weighted sum
    (DirectML#740): the kernels ``(loss * w).sum().backward()`` runs, in its order, called
    on this thread.  ``backward()`` itself would start autograd's device thread, whose CPU
    work keeps a second OpenMP team alive: libgomp then throttles the main team's spinning,
    and a small CPU ``F.conv1d`` took 46 us instead of 4 us for the rest of the process
    (2 cores, measured; benchmarks/shim_overhead.py)."""
    aten = torch.ops.aten
    logits = torch.tensor([[2.0, 0.5, -1.0], [0.0, 1.0, 3.0]]).to(device)
    target, weights = torch.tensor([0, 2]).to(device), torch.tensor([1.0, 0.5]).to(device)
    log_probs = aten._log_softmax(logits, 1, False)
    _, total_weight = aten.nll_loss_forward(log_probs, target, None, 0, -100)
    grad_loss = torch.ones((), device=device).expand(2) * weights       # sum's, then mul's
    grad_log_probs = aten.nll_loss_backward(grad_loss, log_probs, target, None, 0, -100, total_weight)
    return aten._log_softmax_backward_data(grad_log_probs, log_probs, 1, logits.dtype)


def _layer_norm_strided(device):
    """layer_norm of a permuted input and of x[::2] (DirectML#588)."""
    x = torch.linspace(-3.0, 5.0, 64).view(4, 4, 4).to(device)
    return F.layer_norm(x.permute(0, 2, 1), [4]), F.layer_norm(x[::2], [4])


def _load(device):
    """torch.load(f, map_location=<the device>) of a saved state dict."""
    # torch restores storages on the device: where tensors have none (torch-directml's
    # OpaqueTensorImpl) that can only fail, and may kill the process (SIGSEGV), so it
    # is not tried; this raises "Cannot access storage of OpaqueTensorImpl" there
    torch.empty(0, device=device).untyped_storage()
    buffer = io.BytesIO()
    torch.save({"w": torch.arange(4.0)}, buffer)
    buffer.seek(0)
    return torch.load(buffer, map_location=str(device))["w"]


def _unique_counts(device):
    """torch.unique(x, return_counts=True) (DirectML#410)."""
    return torch.unique(torch.tensor([3, 1, 3, 2, 3]).to(device), return_counts=True)


REPORTED: Tuple[Defect, ...] = (
    Defect("inference_mode", "#41", "microsoft/DirectML#602, #622, #450; vladmandic/sdnext#3464",
           "a model called inside torch.inference_mode(): 'Cannot set version_counter for "
           "inference tensor'", _probe(_inference_mode), ("inference_mode",)),
    Defect("pad_order", "#42", "microsoft/DirectML#687",
           "F.pad's (left, right, top, bottom) applied as (top, bottom, left, right)",
           _probe(_pad_order), ("pad",)),
    Defect("gather", "#43", "RVC-Project/Retrieval-based-Voice-Conversion-WebUI infer/fcpe.py; the "
           "real 0.2.5 binary", "gather returns wrong values (FCPE pitch decoder): with dim=-1 "
           "gather/scatter/scatter_add read the index as arange, below -1 they are refused",
           _probe(_gather), ("gather",)),
    Defect("cross_entropy_none_grad", "#44", "microsoft/DirectML#739, #740",
           "cross_entropy(reduction='none'): every gradient is 0", _probe(_cross_entropy_none),
           ("losses",)),
    Defect("layer_norm_strided", "#45", "microsoft/DirectML#588",
           "layer_norm on a non-contiguous input: wrong values, or m_device->CreateOperator "
           "error", _probe(_layer_norm_strided), ("layer_norm",)),
    Defect("load_map_location", "#46", "nomadkaraoke/python-audio-separator PR#295; "
           "microsoft/DirectML#466", "torch.load(map_location=<device>): TypeError '>=' between "
           "torch.device and int; past it, no storage on the device (SIGSEGV)", _probe(_load),
           ("load",)),
    Defect("unique_counts", "#47", "microsoft/DirectML#410",
           "unique(return_counts=True): 'Return counts not implemented'",
           _probe(_unique_counts), ("unique",)),
)
