"""LSTM kept on the device: ``nn.LSTM`` decomposed into ops DirectML runs natively.

The alternative to the shim's strategy (run the LSTM on the CPU, cached weights).
torch-directml 0.2.5 has no kernel for ``aten::_thnn_fused_lstm_cell``
(failure_modes.md #1), but every op used here is ``DML_KERNEL`` in
``dml_op_routing_torch241.tsv``: matmul (mm/bmm), baddbmm, sigmoid, tanh, mul,
addcmul, flip, stack, cat, views. Both directions of a bidirectional layer run in
one batched step, so a step costs 7 kernel launches; T steps cost 7*T launches,
which is what this strategy pays instead of the host<->device copies.
Used by benchmarks/gpu.py; not a patch (its arithmetic order differs from the
fused CPU cell, so results match only to ~1e-6, not bit for bit).
"""
import contextlib

import torch
import torch.nn.functional as F
from torch import nn


def lstm_forward(lstm, input, hx=None):
    """``nn.LSTM`` forward from device-native ops; same shapes and outputs as ``lstm(input, hx)``.

    input: (T, B, I), or (B, T, I) with batch_first, or unbatched (T, I); any float dtype.
    hx: optional (h0, c0), each (layers * directions, B, H).
    Returns (output (T, B, D*H) or batch-first/unbatched like input, (h_n, c_n)).
    Raises NotImplementedError for PackedSequence and proj_size > 0.
    """
    if isinstance(input, nn.utils.rnn.PackedSequence) or lstm.proj_size:
        raise NotImplementedError("lstm_forward: PackedSequence and proj_size are not supported")
    unbatched = input.dim() == 2
    x = input.unsqueeze(1) if unbatched else input.transpose(0, 1) if lstm.batch_first else input
    T, B, H = x.shape[0], x.shape[1], lstm.hidden_size
    D = 2 if lstm.bidirectional else 1
    if hx is None:
        zeros = torch.zeros(lstm.num_layers * D, B, H, dtype=x.dtype, device=x.device)
        hx = (zeros, zeros)
    elif unbatched:
        hx = (hx[0].unsqueeze(1), hx[1].unsqueeze(1))
    h_n, c_n = [], []
    for layer in range(lstm.num_layers):
        x, h, c = _layer(lstm, layer, D, x, hx[0][layer * D:(layer + 1) * D],
                         hx[1][layer * D:(layer + 1) * D])
        h_n.append(h)
        c_n.append(c)
        if layer < lstm.num_layers - 1:
            x = F.dropout(x, lstm.dropout, lstm.training)
    h_n, c_n = torch.cat(h_n), torch.cat(c_n)
    if unbatched:
        return x.squeeze(1), (h_n.squeeze(1), c_n.squeeze(1))
    return (x.transpose(0, 1) if lstm.batch_first else x), (h_n, c_n)


def _layer(lstm, layer, D, x, h, c):
    """One layer, all directions at once. x: (T, B, I); h, c: (D, B, H)."""
    suffixes = [f"_l{layer}", f"_l{layer}_reverse"][:D]
    w_ih = torch.stack([getattr(lstm, "weight_ih" + s) for s in suffixes])  # (D, 4H, I)
    w_hh_t = torch.stack([getattr(lstm, "weight_hh" + s) for s in suffixes]).transpose(1, 2)
    gx = torch.matmul(x.unsqueeze(0), w_ih.transpose(1, 2).unsqueeze(1))  # (D, T, B, 4H)
    if lstm.bias:
        gx = gx + torch.stack([getattr(lstm, "bias_ih" + s) + getattr(lstm, "bias_hh" + s)
                               for s in suffixes]).unsqueeze(1).unsqueeze(1)
    if D == 2:  # the reverse direction reads time backwards
        gx = torch.stack([gx[0], gx[1].flip(0)])
    H = lstm.hidden_size
    outs = []
    for t in range(x.shape[0]):
        gates = torch.baddbmm(gx[:, t], h, w_hh_t)  # (D, B, 4H), gate order i, f, g, o
        ifo = torch.sigmoid(gates)
        c = torch.addcmul(ifo[..., H:2 * H] * c, ifo[..., :H], torch.tanh(gates[..., 2 * H:3 * H]))
        h = ifo[..., 3 * H:] * torch.tanh(c)
        outs.append(h)
    y = torch.stack(outs, 1)  # (D, T, B, H)
    if D == 2:
        y = torch.stack([y[0], y[1].flip(0)])
    return torch.cat(list(y), -1), h, c  # (T, B, D*H)


class DecomposedLSTM(nn.Module):
    """Wraps an ``nn.LSTM`` (sharing its parameters) and runs :func:`lstm_forward`.

    Not an ``nn.LSTM`` subclass, so the shim's rnn patch leaves it on the device.
    """

    def __init__(self, lstm):
        super().__init__()
        self.lstm = lstm

    def forward(self, input, hx=None):
        return lstm_forward(self.lstm, input, hx)


@contextlib.contextmanager
def decomposed_lstms(model):
    """Within the block, every ``nn.LSTM`` submodule of ``model`` runs decomposed.

    Yields the number of LSTMs swapped; the originals are put back on exit.
    """
    swapped = []
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is nn.LSTM:
                setattr(parent, name, DecomposedLSTM(child))
                swapped.append((parent, name, child))
    try:
        yield len(swapped)
    finally:
        for parent, name, child in swapped:
            setattr(parent, name, child)
