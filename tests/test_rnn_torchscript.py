"""RNNs however reached: TorchScript, torch.ops.aten, the fused cells (failure_modes.md
#1, #2, #49), and ScriptModule.to(dml) (#48).  Each case both ways: without dmlshim it
fails as on DirectML; with it, it equals the CPU (exactly on the emulator where both
sides run the same kernels, within the ``device`` profile where they do not)."""
import copy
import io
from typing import Tuple

import pytest
import torch
from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence

import dmlshim
from dmlshim.patches import rnn as rnn_patch

CHUNK = 512                                   # samples per chunk, as silero-vad streams
# A scripted stream against the eager CPU reference: other kernels on other shapes (the
# TorchScript graph, the device's RNN route), equal bit for bit only where MKL happens to
# round alike. Under MKL's portable path (MKL_CBWR=COMPATIBLE) they differ by up to 52 ULP,
# and the scripted model on the CPU differs from the eager one by as much: "device" profile.
SCRIPTED = "device"
pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit.:DeprecationWarning")   # torch 2.13


class StreamingVAD(nn.Module):
    """silero-vad style: chunk -> features -> LSTMCell state (h, c) carried, then an LSTM
    and a GRU with carried state -> speech probability."""

    def __init__(self):
        super().__init__()
        self.features = nn.Linear(128, 16)
        self.cell = nn.LSTMCell(16, 16)
        self.lstm = nn.LSTM(16, 12, batch_first=True)
        self.gru = nn.GRU(12, 8, batch_first=True)
        self.head = nn.Linear(8, 1)

    def forward(self, chunk: Tensor, h: Tensor, c: Tensor, lh: Tensor, lc: Tensor,
                gh: Tensor) -> Tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
        frames = chunk.view(chunk.shape[0], 4, 128)                 # (B, 4, 128)
        feat = torch.relu(self.features(frames)).mean(1)             # (B, 16)
        h, c = self.cell(feat, (h, c))
        y, (lh, lc) = self.lstm(h.unsqueeze(1), (lh, lc))
        z, gh = self.gru(y, gh)
        return torch.sigmoid(self.head(z[:, -1])), h, c, lh, lc, gh


def _state(batch=1):
    return (torch.zeros(batch, 16), torch.zeros(batch, 16), torch.zeros(1, batch, 12),
            torch.zeros(1, batch, 12), torch.zeros(1, batch, 8))


def _stream(model, audio, device):
    """Run ``model`` over ``audio`` (B, n * CHUNK) chunk by chunk, state carried;
    returns the probabilities and the final state, on the CPU."""
    state = tuple(s.to(device) for s in _state(audio.shape[0]))
    probs = []
    for chunk in audio.split(CHUNK, dim=1):
        prob, *state = model(chunk.to(device), *state)
        probs.append(prob)
    return [t.cpu() for t in (torch.cat(probs, 1), *state)]


@pytest.fixture
def vad():
    torch.manual_seed(0)
    model = StreamingVAD().eval()
    audio = torch.randn(2, 6 * CHUNK)
    return model, audio, _stream(model, audio, "cpu")


def _scripted(model, dml_device, how):
    """``model`` as TorchScript on ``dml_device``: scripted after the move, scripted then
    moved, saved and loaded with ``map_location``, or loaded then moved."""
    if how == "script":
        return torch.jit.script(copy.deepcopy(model).to(dml_device))
    if how == "script.to":
        return torch.jit.script(copy.deepcopy(model)).to(dml_device)
    buf = io.BytesIO()
    torch.jit.save(torch.jit.script(model), buf)
    buf.seek(0)
    if how == "load(map_location)":
        return torch.jit.load(buf, map_location=dml_device)
    return torch.jit.load(buf).to(dml_device)


def test_torchscript_stream_without_shim_fails_like_directml(dml_device, vad):
    """(Raw, torch.jit.load(map_location=dml) fails before: tests/test_load.py.)"""
    dmlshim.deactivate()
    model, audio, _ = vad
    # the TorchScript interpreter re-raises the NotImplementedError as a RuntimeError: the
    # emulator's, a Python one, keeps its name in the text; the real binary's, from C++, not
    with pytest.raises(RuntimeError, match=r"(NotImplementedError: )?Could not run 'aten::_thnn_fused_lstm_cell'"):
        _stream(_scripted(model, dml_device, "script"), audio, dml_device)


@pytest.mark.parametrize("how", ["script", "script.to", "load(map_location)", "load.to"])
def test_torchscript_stream_equals_cpu(shim, dml_device, vad, how, assert_parity):
    model, audio, expected = vad
    scripted = _scripted(model, dml_device, how)
    assert_parity(_stream(scripted, audio, dml_device), expected, profile=SCRIPTED)
    rows = {r["op"] for r in dmlshim.report().rows}
    assert {"aten::lstm_cell", "aten::lstm.input", "aten::gru.input"} <= rows


def test_torchscript_stream_in_inference_mode(shim, dml_device, vad, assert_parity):
    model, audio, _ = vad
    scripted = _scripted(model, dml_device, "load(map_location)")
    with torch.inference_mode():
        got = _stream(scripted, audio, dml_device)
        # the reference in inference_mode too: the CPU's LSTM takes another path without
        # autograd (oneDNN), a few ULP away from the one with it
        expected = _stream(model, audio, "cpu")
    assert_parity(got, expected, profile=SCRIPTED)


def test_torchscript_weights_are_copied_once(shim, dml_device, vad):
    model, audio, _ = vad
    scripted = _scripted(model, dml_device, "load(map_location)")
    cell_bytes = sum(p.numel() * 4 for p in model.cell.parameters())
    d2h = []
    for chunk in audio[:1].split(CHUNK, dim=1)[:3]:
        scripted(chunk.to(dml_device), *(s.to(dml_device) for s in _state()))
        d2h.append({r["op"]: r for r in dmlshim.report().rows}["aten::lstm_cell"]["d2h"])
    inputs = (16 + 16 + 16) * 4                     # feat, h, c of batch 1
    assert d2h[0] == cell_bytes + inputs            # the first call copies the weights ...
    assert d2h[1] - d2h[0] == d2h[2] - d2h[1] == inputs   # ... later calls only the inputs
    n_tensors, _ = rnn_patch.cache.size()
    assert n_tensors == 4 + 4 + 4                   # cell, lstm, gru: 4 weights each


def test_torchscript_cache_refreshed_when_a_weight_changes(shim, dml_device, vad, assert_parity):
    model, audio, _ = vad
    scripted = _scripted(model, dml_device, "script")
    _stream(scripted, audio, dml_device)
    with torch.no_grad():
        model.cell.weight_hh.mul_(0.5)
        scripted.cell.weight_hh.mul_(0.5)           # in place: the version counter moves
    assert_parity(_stream(scripted, audio, dml_device), _stream(model, audio, "cpu"), profile=SCRIPTED)


def test_torchscript_backward_equals_cpu(shim, dml_device, vad, assert_parity):
    model, audio, _ = vad
    model.train()
    scripted = _scripted(model, dml_device, "script")
    x = audio[:, :CHUNK]
    xc, xd = x.clone().requires_grad_(), x.to(dml_device).requires_grad_()
    model(xc, *_state(2))[0].sum().backward()
    scripted(xd, *(s.to(dml_device) for s in _state(2)))[0].sum().backward()
    assert_parity(xd.grad.cpu(), xc.grad)
    for (name, pc), pd in zip(model.named_parameters(), scripted.parameters()):
        assert pd.grad is not None and pd.grad.device == dml_device, name
        assert_parity(pd.grad.cpu(), pc.grad)


# --- torch.ops.aten, reached without the Python modules --------------------------------

def _lstm_args(packed: bool, kind: str):
    torch.manual_seed(1)
    rnn = getattr(nn, kind)(3, 4, num_layers=2, bidirectional=True)
    h = torch.randn(4, 2, 4)
    hx = [h, torch.randn_like(h)] if kind == "LSTM" else h
    flags = (True, 2, 0.0, False, True)             # has_biases, layers, dropout, train, bidir
    x = torch.randn(5, 2, 3)
    if packed:
        p = pack_padded_sequence(x, torch.tensor([5, 3]))
        return getattr(torch.ops.aten, kind.lower()).data, (p.data, p.batch_sizes, hx,
                                                             rnn._flat_weights, *flags)
    return getattr(torch.ops.aten, kind.lower()).input, (x, hx, rnn._flat_weights, *flags, False)


def _to(obj, device):
    if isinstance(obj, (list, tuple)):
        return type(obj)(_to(x, device) for x in obj)
    # batch_sizes of a PackedSequence stays on the CPU
    return obj.to(device) if isinstance(obj, Tensor) and obj.dtype != torch.int64 else obj


CASES = [("LSTM", False), ("LSTM", True), ("GRU", False), ("GRU", True)]


@pytest.mark.parametrize("kind, packed", CASES)
def test_aten_rnn_without_shim_fails_like_directml(dml_device, kind, packed):
    dmlshim.deactivate()
    op, args = _lstm_args(packed, kind)
    with pytest.raises(NotImplementedError, match=f"_thnn_fused_{kind.lower()}_cell"):
        op(*_to(args, dml_device))


@pytest.mark.parametrize("kind, packed", CASES)
def test_aten_rnn_equals_cpu(shim, dml_device, kind, packed, assert_parity):
    op, args = _lstm_args(packed, kind)
    expected = op(*args)
    got = op(*_to(args, dml_device))
    assert all(g.device == dml_device for g in got)
    assert_parity([g.cpu() for g in got], expected)


@pytest.mark.parametrize("kind", ["LSTMCell", "GRUCell"])
def test_aten_cells_both_ways(dml_device, kind, assert_parity):
    torch.manual_seed(2)
    cell = getattr(nn, kind)(3, 5)
    x, h = torch.randn(4, 3), torch.randn(4, 5)
    hx = [h, torch.randn_like(h)] if kind == "LSTMCell" else h
    op = torch.ops.aten.lstm_cell if kind == "LSTMCell" else torch.ops.aten.gru_cell
    args = (x, hx, cell.weight_ih, cell.weight_hh, cell.bias_ih, cell.bias_hh)
    expected = op(*args)
    dmlshim.deactivate()
    with pytest.raises(NotImplementedError, match="_thnn_fused_"):
        op(*_to(args, dml_device))
    dmlshim.activate(fallback="known", trace=0)
    try:
        got = op(*_to(args, dml_device))
    finally:
        dmlshim.deactivate()
    assert_parity(got, expected)


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_fused_cells_both_ways(dml_device, kind, assert_parity):
    """The fused cells have no CPU kernel at all: dmlshim computes them from CPU ops;
    they match the CPU cell to float rounding (the bias is added after the matmul)."""
    torch.manual_seed(3)
    cell = getattr(nn, "LSTMCell" if kind == "lstm" else "GRUCell")(3, 5)
    x, h, c = torch.randn(4, 3), torch.randn(4, 5), torch.randn(4, 5)
    fused = getattr(torch.ops.aten, f"_thnn_fused_{kind}_cell")
    args = (x @ cell.weight_ih.T, h @ cell.weight_hh.T, c if kind == "lstm" else h,
            cell.bias_ih, cell.bias_hh)
    dev_args = _to(args, dml_device)
    dmlshim.deactivate()
    with pytest.raises(NotImplementedError, match=f"_thnn_fused_{kind}_cell"):
        fused(*dev_args)
    dmlshim.activate(fallback="known", trace=0)
    try:
        xd = dev_args[0].detach().requires_grad_()
        got = fused(xd, *dev_args[1:])
        got[0].sum().backward()
    finally:
        dmlshim.deactivate()
    expected = cell(x, (h, c))[0] if kind == "lstm" else cell(x, h)
    assert got[0].device == dml_device and xd.grad.device == dml_device
    assert got[-1].shape == (4, 5 * (4 if kind == "lstm" else 5))     # the workspace
    assert_parity(got[0], expected, profile="device")


# --- ScriptModule.to(dml) (failure_modes.md #48) -------------------------------------

def test_loaded_scriptmodule_to_device_without_shim_asserts(dml_device, vad):
    dmlshim.deactivate()
    with pytest.raises(AssertionError):
        _scripted(vad[0], dml_device, "load.to")


class _LSTMOnly(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(3, 4)

    def forward(self, x: Tensor) -> Tensor:
        return self.lstm(x)[0]


def test_scripted_rnn_to_device_both_ways(dml_device, assert_parity):
    """torch.jit.script(m).to(dml): the scripted LSTM's _flat_weights stay on the CPU
    (no RNNBase._apply hook in TorchScript), so its forward fails on the device."""
    torch.manual_seed(4)
    model, x = _LSTMOnly(), torch.randn(5, 2, 3)
    dmlshim.deactivate()
    scripted = torch.jit.script(copy.deepcopy(model)).to(dml_device)
    assert scripted.lstm._flat_weights[0].device.type == "cpu"
    with pytest.raises(RuntimeError, match="not at the same device"):
        scripted(x.to(dml_device))
    dmlshim.activate(fallback="known", trace=0)
    try:
        scripted = torch.jit.script(copy.deepcopy(model)).to(dml_device)
        assert scripted.lstm._flat_weights[0] is scripted.lstm.weight_ih_l0
        got = scripted(x.to(dml_device))
    finally:
        dmlshim.deactivate()
    assert_parity(got.cpu(), model(x))


def test_loaded_scriptmodule_moves_to_device_and_back(shim, dml_device, vad, assert_parity):
    model, audio, expected = vad
    loaded = _scripted(model, dml_device, "load.to")
    assert {p.device for p in loaded.parameters()} == {dml_device}
    assert all(isinstance(p, nn.Parameter) for p in loaded.parameters())
    assert loaded.lstm._flat_weights[0] is loaded.lstm.weight_ih_l0
    back = loaded.cpu()
    assert {p.device.type for p in back.parameters()} == {"cpu"}
    # TorchScript's executor against the eager model: other CPU kernels, whose sums
    # depend on the CPU (101 ULP apart on an AVX-512 Xeon, equal on AMD EPYC)
    assert_parity(_stream(back, audio, "cpu"), expected, profile="device")


def test_other_moves_of_a_loaded_scriptmodule_are_untouched(shim, vad):
    buf = io.BytesIO()
    torch.jit.save(torch.jit.script(vad[0]), buf)
    buf.seek(0)
    loaded = torch.jit.load(buf).double()          # CPU to CPU: torch's own .data = path
    assert not any(isinstance(p, nn.Parameter) for p in loaded.parameters())
    assert {p.dtype for p in loaded.parameters()} == {torch.float64}


@pytest.mark.parametrize("kind, kwargs", [(nn.RNN, {}), (nn.RNN, {"nonlinearity": "relu"}),
                                          (nn.RNNCell, {})])
def test_plain_rnn_needs_no_fix(dml_device, kind, kwargs, assert_parity):
    """rnn_tanh/rnn_relu decompose into linear + tanh/relu, which DirectML runs: no
    dmlshim kernel, no error (emulation/rules.py notes).  Never exact: the decomposed
    device path and the CPU's RNN kernel sum in other orders, which depend on the CPU
    (1-2 ULP apart on an AVX-512 Xeon), as in test_rnn_tanh_runs_and_equals_cpu."""
    dmlshim.deactivate()
    torch.manual_seed(5)
    module, x = kind(3, 4, **kwargs), torch.randn(5, 3)
    got = copy.deepcopy(module).to(dml_device)(x.to(dml_device))
    assert_parity(got, module(x), profile="device")
