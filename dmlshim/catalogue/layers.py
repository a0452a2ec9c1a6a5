"""nn layers: LSTM/GRU cells, cross_entropy's gradient, layer_norm, PReLU, convolutions,
dropout's gradient, batch_norm's statistics, softplus.

``lstm`` and ``gru`` share one probe (fixed weights, 2 steps; docs/rnn.md).
``prelu_channels`` is static: the abort is a check in torch-directml's host code
(``dml_tensor_desc.cc``), the same on every adapter, so a probe in a child process could
only confirm it, at the price of a second torch-directml start.
"""
from __future__ import annotations

from typing import Tuple

import torch
import torch.nn.functional as F

from .defect import CATALOGUE, MEASURED, NO_REPORT, REPORTED, Defect, Verdict
from .probes import case_probe, compare

TOPIC = "Layers: RNN, losses, normalization, convolution, activations"
_RNN_SOURCE = "microsoft/DirectML#613, #654, #677"


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
    return compare(got, want)


def probe_lstm(device) -> Verdict:
    """`nn.LSTM(3, 4)` on 2 steps, fixed weights"""
    return _rnn_probe(torch.nn.LSTM, device)


def probe_gru(device) -> Verdict:
    """`nn.GRU(3, 4)` on 2 steps, fixed weights"""
    return _rnn_probe(torch.nn.GRU, device)


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


def _empty_layer_norm(device):
    """`native_layer_norm` of an empty 0x1 batch, over [1] (the defect: CreateOperator)."""
    return torch.native_layer_norm(torch.ones(0, 1).to(device), [1], None, None, 1e-5)


def _conv_refused(device):
    """A 1x1x1 `conv3d` of a 1x1x2x2x2 ramp."""
    x = torch.arange(8.0).view(1, 1, 2, 2, 2).to(device)
    return F.conv3d(x, torch.full((1, 1, 1, 1, 1), 2.0).to(device))


def _dropout_backward(device):
    """`native_dropout_backward` (dropout's gradient) of a 2x3 ramp under a mask, scale 2, as
    float32 (the defect's bool compared by value)."""
    mask = torch.tensor([[True, False, True], [False, True, True]])
    return torch.ops.aten.native_dropout_backward((torch.arange(6.0).view(2, 3) - 2.5).to(device),
                                                  mask.to(device), 2.0).to(torch.float32)


def _conv_transpose_padding(device):
    """`conv_transpose1d` of a 1x1x4 ramp, stride 2, `output_padding=1` (its last value: bias)."""
    x = torch.arange(1.0, 5.0).view(1, 1, 4).to(device)
    return F.conv_transpose1d(x, torch.ones(1, 1, 3).to(device), torch.tensor([0.5]).to(device),
                              stride=2, output_padding=1)


def _batch_norm_stats(device):
    """`native_batch_norm`'s saved statistics in eval mode and of one channel in training."""
    x, stats = torch.arange(6.0).view(3, 1, 2).to(device), torch.ones(1).to(device)
    aten = torch.ops.aten
    return (*aten.native_batch_norm(x, None, None, stats, stats, False, 0.1, 1e-5)[1:],
            *aten.native_batch_norm(x, None, None, None, None, True, 0.1, 1e-5)[1:])


def _softplus_beta(device):
    """`softplus` of a ramp with `beta=3, threshold=0.2` (OpInfo's)."""
    return F.softplus(torch.linspace(-1, 1, 21).to(device), beta=3, threshold=0.2)


DEFECTS: Tuple[Defect, ...] = (
    Defect("lstm", "#1", _RNN_SOURCE,
           "nn.LSTM: no kernel for _thnn_fused_lstm_cell (NotImplementedError)",
           probe_lstm, ("rnn",), found=CATALOGUE, rules=("_thnn_fused_lstm_cell",)),
    Defect("gru", "#2", "routing table (_thnn_fused_gru_cell: CPU_FALLBACK_NO_CPU_KERNEL)",
           "nn.GRU: no kernel for _thnn_fused_gru_cell (NotImplementedError)",
           probe_gru, ("rnn",), found=CATALOGUE, rules=("_thnn_fused_gru_cell",)),
    Defect("cross_entropy_none_grad", "#44", "microsoft/DirectML#739, #740",
           "cross_entropy(reduction='none'): every gradient is 0", case_probe(_cross_entropy_none),
           ("losses",), found=REPORTED, rules=("_reduction_none",)),
    Defect("layer_norm_strided", "#45", "microsoft/DirectML#588",
           "layer_norm on a non-contiguous input: wrong values, or m_device->CreateOperator "
           "error", case_probe(_layer_norm_strided), ("layer_norm",), found=REPORTED,
           rules=("_layer_norm_in_memory_order",)),
    # static: probing it would abort the process
    Defect("prelu_channels", "#29", "microsoft/DirectML#271, #445; the real 0.2.5 binary",
           "nn.PReLU(C) on a 4-D/5-D input aborts the process ('rank <= "
           "DML_TENSOR_DIMENSION_COUNT_MAX'); 3-D raises", None, ("prelu",), found=MEASURED,
           rules=("_channel_weights_4d", "_channel_weights_3d")),
    Defect("conv_refused", "none", NO_REPORT,
           "convolution of a 5-D input ('input must be 4-dimensional'), of integers, and some "
           "transposed grouped dilated ones (E_INVALIDARG)", case_probe(_conv_refused),
           ("refused:conv_refused",), found=MEASURED, rules=("_five_dims", "_integer_input")),
    Defect("dropout_backward", "none", NO_REPORT,
           "native_dropout_backward (dropout's gradient) returns bool: the gradient truncated, != 0, "
           "and the mask; the scale lost (silent)", case_probe(_dropout_backward), ("dropout_backward",),
           found=MEASURED, rules=("_dml_dropout_backward",)),
    Defect("conv_transpose_padding", "none", NO_REPORT,
           "transposed convolution with an output_padding: its last output_padding positions zero, the "
           "bias too; the backward's input gradient zero there, the weight gradient wrong (silent)",
           case_probe(_conv_transpose_padding), ("conv_transpose_padding",), found=MEASURED,
           rules=("_output_padding",)),
    Defect("batch_norm_stats", "none", NO_REPORT,
           "native_batch_norm in eval mode returns the running statistics as save_mean/save_invstd (the "
           "CPU: empty), one channel in training 0-dim ones; its backward 0-dim weight/bias gradients "
           "for one channel (autograd refuses them)", case_probe(_batch_norm_stats), ("batch_norm_stats",),
           found=MEASURED, rules=("_batch_norm_saves", "_one_channel")),
    Defect("softplus_beta", "none", NO_REPORT,
           "softplus with beta != 1 takes the linear branch where x > threshold, not x * beta > "
           "threshold (silent), beta < 1 refused (E_INVALIDARG); softplus_backward has no linear branch "
           "(silent, NaN where exp overflows)", case_probe(_softplus_beta),
           ("softplus_beta",), found=MEASURED,
           rules=("_beta_below_one", "_beta_not_one", "_dml_softplus_backward")),
    # found by conformance over every OpInfo sample (issue 40, docs/conformance.md)
    Defect("empty_layer_norm", "none", NO_REPORT,
           "native_layer_norm of an input with no elements refused (CreateOperator)",
           case_probe(_empty_layer_norm), ("empty_layer_norm",), found=MEASURED, rules=("_layer_norm_of_empty",)),
)
