"""CPU kernels for torch's fused LSTM/GRU cells, so a *healthy* emulated device runs them.

On a PrivateUse1 tensor torch's LSTM/GRU cells call ``_thnn_fused_lstm_cell`` /
``_thnn_fused_gru_cell`` (and their backward ops), which only CUDA implements:
torch-directml 0.2.5 fails there (failure_modes.md #1, #2, #34).  That failure is a
default :class:`~dmlshim.emulation.rules.Rule` (``rules.fused_rnn_rule``); with the rule
off (``configure(rules=[])``) the ops run on these kernels, registered for the CPU key
(the CPU itself never calls fused cells), with CUDA's formulas
(``aten/src/ATen/native/cuda/RNN.cu``): gates ``i, f, g, o`` (LSTM) and ``r, z, n`` (GRU).
"""
import torch

OPS = ("_thnn_fused_lstm_cell", "_thnn_fused_lstm_cell_backward_impl",
       "_thnn_fused_gru_cell", "_thnn_fused_gru_cell_backward")
_library = None


def _add(*ts):
    out = ts[0]
    for t in ts[1:]:
        if t is not None:
            out = out + t
    return out


def lstm_cell(input_gates, hidden_gates, cx, input_bias=None, hidden_bias=None):
    gates = _add(input_gates, hidden_gates, input_bias, hidden_bias)
    i, f, g, o = gates.chunk(4, 1)
    i, f, g, o = i.sigmoid(), f.sigmoid(), g.tanh(), o.sigmoid()
    cy = f * cx + i * g
    return o * cy.tanh(), cy, torch.cat([i, f, g, o], 1)


def lstm_cell_backward(grad_hy, grad_cy, cx, cy, workspace, has_bias):
    i, f, g, o = workspace.chunk(4, 1)
    tanh_cy = cy.tanh()
    grad_hy = torch.zeros_like(cy) if grad_hy is None else grad_hy
    gcx = grad_hy * o * (1 - tanh_cy * tanh_cy) + (0 if grad_cy is None else grad_cy)
    grad_gates = torch.cat([gcx * g * (1 - i) * i, gcx * cx * (1 - f) * f,
                            gcx * i * (1 - g * g), grad_hy * tanh_cy * (1 - o) * o], 1)
    return grad_gates, gcx * f, grad_gates.sum(0) if has_bias else None


def gru_cell(input_gates, hidden_gates, hx, input_bias=None, hidden_bias=None):
    ir, ii, in_ = _add(input_gates, input_bias).chunk(3, 1)
    hr, hi, hn = _add(hidden_gates, hidden_bias).chunk(3, 1)
    r, z = (ir + hr).sigmoid(), (ii + hi).sigmoid()
    n = (in_ + r * hn).tanh()
    return n + z * (hx - n), torch.cat([r, z, n, hx, hn], 1)


def gru_cell_backward(grad_hy, workspace, has_bias):
    r, z, n, hx, hn = workspace.chunk(5, 1)
    grad_n = grad_hy * (1 - z) * (1 - n * n)
    grad_r = grad_n * hn * (1 - r) * r
    grad_z = grad_hy * (hx - n) * (1 - z) * z
    grad_input = torch.cat([grad_r, grad_z, grad_n], 1)
    grad_hidden = torch.cat([grad_r, grad_z, grad_n * r], 1)
    sums = (grad_input.sum(0), grad_hidden.sum(0)) if has_bias else (None, None)
    return (grad_input, grad_hidden, grad_hy * z, *sums)


def register() -> None:
    """Register the four kernels for the CPU key (once per process)."""
    global _library
    if _library is not None:
        return
    library = torch.library.Library("aten", "IMPL")
    for name, fn in zip(OPS, (lstm_cell, lstm_cell_backward, gru_cell, gru_cell_backward)):
        library.impl(name, fn, "CPU")
    _library = library
