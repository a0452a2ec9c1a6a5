"""DirectML defects as data: what goes wrong, how to detect it, which fix it enables.

One :class:`Defect` per row of failure_modes.md that dmlshim fixes.  A defect with a
``probe`` is detected on the user's own device (a tiny call with a known CPU answer);
one without (``static``) is always assumed on a DirectML device, because probing it is
unsafe (bf16 and complex abort the process, rows #8, #9) or untestable (sparse, #30).  Only the fixes of detected or static defects
are installed (docs: "What gets fixed").
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional, Tuple

import torch


@dataclass(frozen=True)
class Verdict:
    """What a probe saw: ``broken`` and the figure that says why (``"max |Δ| 3.6"``,
    ``"RuntimeError: The parameter is incorrect."``, ``"equal"``)."""

    broken: bool
    figure: str


@dataclass(frozen=True)
class Defect:
    """One DirectML defect.

    Attributes:
        name: short identifier, e.g. ``"pad_order"``.
        row: its failure_modes.md row, e.g. ``"#42"``.
        source: public source, e.g. ``"microsoft/DirectML#687"``.
        summary: what a user sees, one line.
        probe: ``probe(device) -> Verdict``: a tiny call on ``device`` compared with the
            CPU.  ``None`` = static (never probed; always assumed present).
        fixes: the fixes this defect enables (patch module names in the registry, or
            the names of dispatcher-net entries).
    """

    name: str
    row: str
    source: str
    summary: str
    probe: Optional[Callable[[torch.device], Verdict]] = None
    fixes: Tuple[str, ...] = ()

    @property
    def static(self) -> bool:
        return self.probe is None


# ------------------------------------------------------------------------- probes
# Each probe is a tiny call on ``device`` compared with the CPU.  An exception is not
# caught here: the runner (dmlshim.probing) turns it into ``Verdict(True, "Error: ...")``.
# Results are compared within a GPU's rounding (a real device does not round as the
# CPU does); dtypes and shapes must match exactly.

def _compare(got: torch.Tensor, want: torch.Tensor, rtol: float = 1e-3, atol: float = 1e-4) -> Verdict:
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


def _all(*verdicts: Verdict) -> Verdict:
    broken = [v.figure for v in verdicts if v.broken]
    return Verdict(True, "; ".join(broken)) if broken else Verdict(False, verdicts[0].figure)


def probe_float_times_bool(device) -> Verdict:
    """`f32[3] * bool[3]`: dtype and values"""
    x, mask = torch.tensor([1.5, -2.0, 3.0]), torch.tensor([True, False, True])
    return _compare(x.to(device) * mask.to(device), x * mask)


def probe_empty_cat(device) -> Verdict:
    """`cat([f32[2,3], f32[0,3]])`"""
    a, empty = torch.arange(6.0).reshape(2, 3), torch.empty(0, 3)
    return _compare(torch.cat([a.to(device), empty.to(device)]), torch.cat([a, empty]))


def _rnn_probe(cls, device) -> Verdict:
    # the user's random stream is untouched (not meta + to_empty: on torch 2.13 that
    # imports sympy, 1.3 s of activate())
    with torch.random.fork_rng(devices=[]):
        rnn = cls(3, 4)
    with torch.no_grad():
        for i, p in enumerate(rnn.parameters()):
            p.copy_(torch.linspace(-0.5, 0.5 + i / 10, p.numel()).reshape(p.shape))
        x = torch.linspace(-1.0, 1.0, 6).reshape(2, 1, 3)
        want = rnn(x)[0]
        got = rnn.to(device)(x.to(device))[0]
    return _compare(got, want)


def probe_lstm(device) -> Verdict:
    """`nn.LSTM(3, 4)` on 2 steps, fixed weights"""
    return _rnn_probe(torch.nn.LSTM, device)


def probe_gru(device) -> Verdict:
    """`nn.GRU(3, 4)` on 2 steps, fixed weights"""
    return _rnn_probe(torch.nn.GRU, device)


def probe_cpu_index(device) -> Verdict:
    """`x[cpu_idx]` and `x[cpu_idx] = v` on a device `x`"""
    x, idx = torch.arange(6.0), torch.tensor([0, 2])
    got = x.to(device)
    read = _compare(got[idx], x[idx])
    got[idx] = torch.tensor([7.0, 9.0], device=device)
    want = x.clone()
    want[idx] = torch.tensor([7.0, 9.0])
    return _all(read, _compare(got, want))


def probe_float64(device) -> Verdict:
    """`f64[2] * 3` to float64 precision, `max()` (dtype), `sqrt()` on the device"""
    # values float32 cannot hold: torch-directml with FP64 computes float64 through
    # float32, returns max()/min() as float32 and refuses sqrt (E_INVALIDARG)
    x = torch.tensor([0.1, 1 / 3], dtype=torch.float64)
    d = x.to(device)
    return _all(_compare(d * 3, x * 3, 1e-12, 0.0), _compare(d.max(), x.max()),
                _compare(d.sqrt(), x.sqrt(), 1e-12, 0.0))


def probe_tensor_new(device) -> Verdict:
    """`x.new([1., 2.])` on a device `x`"""
    x = torch.zeros(1, device=device)
    got = x.new([1.0, 2.0])
    if got.device != x.device:
        return Verdict(True, f"x.new(list) is on {got.device}")
    return _compare(got, torch.zeros(1).new([1.0, 2.0]))


def probe_new_device_index(device) -> Verdict:
    """`x.new(2)` on a device `x`: the device, index included"""
    x = torch.zeros(1, device=device)
    got = x.new(2)
    return Verdict(got.device != x.device, f"x.new(2) is on {got.device}, x on {x.device}")


def probe_broadcast_copy(device) -> Verdict:
    """`d.copy_(row)`: an f32[4] row, from the CPU and on the device, into a device f32[3,4]"""
    base, row = torch.arange(12.0).reshape(3, 4), torch.tensor([1.0, -2.0, 3.0, -4.0])
    want = base.clone().copy_(row)
    verdicts = []
    for src in (row, row.to(device)):
        got = base.to(device)
        got.copy_(src)
        verdicts.append(_compare(got, want))
    return _all(*verdicts)


def probe_autocast(device) -> Verdict:
    """`x @ x` inside `torch.autocast(device.type)`"""
    x = torch.ones(2, 2)
    with torch.autocast(device.type, dtype=torch.float16):
        got = x.to(device) @ x.to(device)
    return _compare(got, x @ x)


# ------------------------------------------------------------------------- the table
_RNN_SOURCE = "microsoft/DirectML#613, #654, #677"

CORE: Tuple[Defect, ...] = (
    Defect("float_times_bool", "#17", "microsoft/DirectML#686, #737",
           "float * bool returns a bool tensor (values lost, silently)",
           probe_float_times_bool, ("mul", "dispatcher:mul", "conv")),
    Defect("empty_cat", "#19, #20", "microsoft/VibeVoice#49; DirectML PR#527",
           "cat/stack with an empty input: 'The parameter is incorrect.'",
           probe_empty_cat, ("cat", "dispatcher:cat")),
    Defect("lstm", "#1", _RNN_SOURCE,
           "nn.LSTM: no kernel for _thnn_fused_lstm_cell (NotImplementedError)",
           probe_lstm, ("rnn",)),
    Defect("gru", "#2", "routing table (_thnn_fused_gru_cell: CPU_FALLBACK_NO_CPU_KERNEL)",
           "nn.GRU: no kernel for _thnn_fused_gru_cell (NotImplementedError)",
           probe_gru, ("rnn",)),
    Defect("cpu_index", "#10", "microsoft/DirectML#442, #397",
           "a CPU index tensor in a DirectML kernel: 'unbox expects Dml at::Tensor'",
           probe_cpu_index, ("dispatcher:index",)),
    Defect("float64", "#7, #25", "microsoft/DirectML#430, #396, #438, #699; DirectML's element-wise "
           "operators take no FLOAT64 (learn.microsoft.com, DML_ELEMENT_WISE_ADD_OPERATOR_DESC)",
           "float64 math: 'The GPU device does not support Double (Float64) operations!'; with "
           "FP64: float32 precision, max() as float32, sqrt refused",
           probe_float64, ("dtypes", "dispatcher:float64", "dispatcher:_to_copy")),
    Defect("tensor_new", "#11", "microsoft/DirectML#400, #415; pytorch/pytorch#95734",
           "Tensor.new(...) refused on PrivateUse1 (torch 2.0, torch-directml <= 0.2.0)",
           probe_tensor_new, ("legacy_new",)),
    Defect("new_device_index", "none (real binary)",
           "measured on the real torch-directml 0.2.5 binary (docs/realdml.md); no public report",
           "x.new() and x.new(size) land on 'privateuseone' without x's index: "
           "'Expected all tensors to be on the same device' when mixed with x",
           probe_new_device_index, ("legacy_new",)),
    Defect("broadcast_copy", "none (real binary)",
           "measured on the real torch-directml 0.2.5 binary (docs/realdml.md); no public report",
           "d.copy_(src) with a src that broadcasts: from the CPU only d's first src.numel() "
           "elements are written, on the device a src of fewer dims fills d with its first value",
           probe_broadcast_copy, ("broadcast_copy",)),
    Defect("autocast", "#36", "the real torch-directml 0.2.5 binary; pytorch/pytorch#128598 (torch 2.4 "
           "has no AutocastPrivateUse1 kernels); #36 expected a silent no-op",
           "inside torch.autocast('privateuseone') every op raises NotImplementedError "
           "('AutocastPrivateUse1' backend)",
           probe_autocast, ("autocast",)),
    # static: probing them would abort the process
    Defect("bfloat16", "#8", "microsoft/DirectML#688",
           "a bfloat16 tensor on the device aborts the process",
           None, ("dtypes", "dispatcher:bfloat16", "dispatcher:_to_copy")),
    Defect("complex", "#9", "microsoft/DirectML#421, #704",
           "a complex tensor on the device aborts the process (torch.stft, fft)",
           None, ("dtypes", "dispatcher:complex", "dispatcher:_to_copy")),
    # static: sparse tensors cannot be held by the emulated device either, so a probe
    # could not be tested both ways; 0.2.5 has no sparse kernels beyond empty and copy
    Defect("sparse", "#30", "microsoft/DirectML#414",
           "no sparse kernels on DirectML (Whisper's sparse alignment_heads buffer)",
           None, ("dtypes", "dispatcher:sparse")),
)
