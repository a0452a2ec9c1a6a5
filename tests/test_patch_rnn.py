"""rnn patch: LSTM/GRU have no DirectML or CPU kernel (DirectML#613, #654, #677; #1, #2).

The shim runs the CPU's own RNN kernel on exact copies of the inputs and weights: its
forward results are the CPU's bit for bit on every device (``assert_same``); gradients
that flow back through device ops are held to the parity profile (``assert_parity``)."""
import copy
import gc

import pytest
import torch
from hypothesis import given, settings, strategies as st
from torch.nn.utils.rnn import pack_padded_sequence

import dmlshim
from dmlshim.patches import rnn as rnn_patch


def _pair(module, device):
    """(cpu module, identical module on device)."""
    return module, copy.deepcopy(module).to(device)


def _to(obj, device):
    if isinstance(obj, torch.Tensor):
        return obj.to(device)
    if isinstance(obj, tuple) and hasattr(obj, "batch_sizes"):       # PackedSequence
        return obj.to(device)
    if isinstance(obj, (tuple, list)):
        return type(obj)(_to(x, device) for x in obj)
    return obj


@pytest.mark.parametrize("kind, fused", [(torch.nn.LSTM, "_thnn_fused_lstm_cell"),
                                         (torch.nn.GRU, "_thnn_fused_gru_cell"),
                                         (torch.nn.LSTMCell, "_thnn_fused_lstm_cell"),
                                         (torch.nn.GRUCell, "_thnn_fused_gru_cell")])
def test_without_shim_fails_like_directml(dml_device, kind, fused):
    dmlshim.deactivate()
    module = kind(4, 3).to(dml_device)
    x = torch.randn(5, 4).to(dml_device)
    with pytest.raises(NotImplementedError, match=fused):
        module(x)


@pytest.mark.parametrize("kind", [torch.nn.LSTM, torch.nn.GRU])
@pytest.mark.parametrize("batch_first, bidirectional, layers, with_hx", [
    (False, False, 1, False), (True, True, 2, True), (False, True, 3, False), (True, False, 2, True)])
def test_full_rnn_equals_cpu(shim, dml_device, kind, batch_first, bidirectional, layers, with_hx, assert_same):
    torch.manual_seed(0)
    cpu, dev = _pair(kind(4, 6, num_layers=layers, bidirectional=bidirectional, batch_first=batch_first),
                     dml_device)
    x = torch.randn(3, 7, 4) if batch_first else torch.randn(7, 3, 4)
    hx = None
    if with_hx:
        h = torch.randn(layers * (2 if bidirectional else 1), 3, 6)
        hx = (h, torch.randn_like(h)) if kind is torch.nn.LSTM else h
    expected = cpu(x, hx)
    got = dev(x.to(dml_device), _to(hx, dml_device))
    assert got[0].device == dml_device
    assert_same(got, expected)


def test_packed_sequence_and_proj_size(shim, dml_device, assert_same):
    torch.manual_seed(0)
    cpu, dev = _pair(torch.nn.LSTM(4, 6, num_layers=2, bidirectional=True, batch_first=True, proj_size=3),
                     dml_device)
    x, lengths = torch.randn(3, 5, 4), torch.tensor([5, 2, 4])
    packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
    expected = cpu(packed)
    got = dev(packed.to(dml_device))
    assert got[0].data.device == dml_device and got[0].batch_sizes.device.type == "cpu"
    assert_same(got, expected)


@pytest.mark.parametrize("kind", [torch.nn.LSTMCell, torch.nn.GRUCell])
def test_cells_equal_cpu(shim, dml_device, kind, assert_same):
    torch.manual_seed(0)
    cpu, dev = _pair(kind(4, 6), dml_device)
    x = torch.randn(3, 4)
    assert_same(dev(x.to(dml_device)), cpu(x))
    assert_same(dev(x[0].to(dml_device)), cpu(x[0]))                 # unbatched


def test_weights_are_copied_once_and_refreshed_when_changed(shim, dml_device, assert_same):
    torch.manual_seed(0)
    cpu, dev = _pair(torch.nn.LSTM(8, 8, bidirectional=True), dml_device)
    x = torch.randn(5, 1, 8)
    weight_bytes = sum(p.numel() * 4 for p in dev.parameters())
    dev(x.to(dml_device))
    first = {r["op"]: r for r in dmlshim.report().rows}["aten::lstm.input"]["d2h"]
    dev(x.to(dml_device))
    second = {r["op"]: r for r in dmlshim.report().rows}["aten::lstm.input"]["d2h"] - first
    assert first - second == weight_bytes                 # the second call moved no weights
    tensors, size = rnn_patch.cache.size()
    assert size >= weight_bytes and "rnn CPU weights" in str(dmlshim.report())

    with torch.no_grad():                                  # in-place change: refreshed
        for p, q in zip(cpu.parameters(), dev.parameters()):
            p.mul_(0.5)
            q.mul_(0.5)
    assert_same(dev(x.to(dml_device)), cpu(x))
    new = copy.deepcopy(cpu)                               # load_state_dict: refreshed
    for p in new.parameters():
        p.data.normal_()
    cpu.load_state_dict(new.state_dict())
    dev.load_state_dict(new.state_dict())
    assert_same(dev(x.to(dml_device)), cpu(x))


def test_cache_does_not_keep_a_deleted_model_alive(shim, dml_device):
    gc.collect()
    before = rnn_patch.cache.size()[0]
    model = torch.nn.GRU(4, 4, num_layers=2).to(dml_device)
    model(torch.randn(3, 1, 4).to(dml_device))
    assert rnn_patch.cache.size()[0] == before + 8
    del model
    gc.collect()
    assert rnn_patch.cache.size()[0] == before


@pytest.mark.parametrize("kind", [torch.nn.LSTM, torch.nn.GRU])
def test_autograd_and_training_steps_equal_cpu(shim, dml_device, kind, assert_parity):
    torch.manual_seed(0)
    cpu, dev = _pair(kind(4, 5, num_layers=2, bidirectional=True), dml_device)
    opt_c = torch.optim.SGD(cpu.parameters(), lr=0.1)
    opt_d = torch.optim.SGD(dev.parameters(), lr=0.1)
    x = torch.randn(6, 2, 4)
    for _ in range(3):                                     # each step changes the weights
        xc = x.clone().requires_grad_()
        xd = x.to(dml_device).requires_grad_()
        loss_c = cpu(xc)[0].square().sum()
        loss_d = dev(xd)[0].square().sum()
        opt_c.zero_grad()
        opt_d.zero_grad()
        loss_c.backward()
        loss_d.backward()
        assert_parity(xd.grad.cpu(), xc.grad)
        for pc, pd in zip(cpu.parameters(), dev.parameters()):
            assert pd.grad.device == dml_device
            assert_parity(pd.grad.cpu(), pc.grad)
        opt_c.step()
        opt_d.step()
    for pc, pd in zip(cpu.parameters(), dev.parameters()):
        assert_parity(pd.detach().cpu(), pc.detach())


@pytest.mark.parametrize("kind", [torch.nn.LSTM, torch.nn.LSTMCell])
def test_frozen_and_shared_weights_get_the_cpu_gradients(shim, dml_device, kind, assert_parity):
    """The weights' cached copies go through one autograd node per call: a frozen weight gets
    no gradient, the others the CPU's; a device tensor passed twice (h as h0 and c0) gets
    the sum of both."""
    torch.manual_seed(0)
    cpu, dev = _pair(kind(4, 4), dml_device)
    for m in (cpu, dev):
        m.weight_ih_l0.requires_grad_(False) if kind is torch.nn.LSTM else m.weight_ih.requires_grad_(False)
    x = torch.randn(3, 2, 4) if kind is torch.nn.LSTM else torch.randn(2, 4)
    h = torch.randn(1, 2, 4) if kind is torch.nn.LSTM else torch.randn(2, 4)
    hc, hd = h.clone().requires_grad_(), h.to(dml_device).requires_grad_()
    out_c = cpu(x, (hc, hc))
    out_d = dev(x.to(dml_device), (hd, hd))
    for out in (out_c, out_d):
        (out[0].square().sum() + (out[1][1] if kind is torch.nn.LSTM else out[1]).sum()).backward()
    assert_parity(hd.grad.cpu(), hc.grad)
    for (name, pc), pd in zip(cpu.named_parameters(), dev.parameters()):
        assert (pd.grad is None) == (pc.grad is None), name
        if pc.grad is not None:
            assert_parity(pd.grad.cpu(), pc.grad)


@settings(max_examples=25, deadline=None)
@given(kind=st.sampled_from(["LSTM", "GRU"]), batch_first=st.booleans(), bidirectional=st.booleans(),
       layers=st.integers(1, 3), steps=st.integers(1, 5), batch=st.integers(1, 3),
       with_hx=st.booleans(), packed=st.booleans(), seed=st.integers(0, 2**16))
def test_property_rnn_equals_cpu(dml_device, kind, batch_first, bidirectional, layers, steps, batch,
                                 with_hx, packed, seed, assert_same):
    dmlshim.deactivate()
    dmlshim.activate(fallback="known", trace=0)
    try:
        torch.manual_seed(seed)
        cpu, dev = _pair(getattr(torch.nn, kind)(3, 4, num_layers=layers, bidirectional=bidirectional,
                                                 batch_first=batch_first), dml_device)
        x = torch.randn((batch, steps, 3) if batch_first else (steps, batch, 3))
        hx = None
        if with_hx:
            h = torch.randn(layers * (2 if bidirectional else 1), batch, 4)
            hx = (h, torch.randn_like(h)) if kind == "LSTM" else h
        inp = x
        if packed:
            lengths = torch.randint(1, steps + 1, (batch,))
            inp = pack_padded_sequence(x, lengths, batch_first=batch_first, enforce_sorted=False)
        assert_same(dev(_to(inp, dml_device), _to(hx, dml_device)), cpu(inp, hx))
    finally:
        dmlshim.deactivate()


def test_empty_batch_equals_cpu(shim, dml_device, assert_same):
    cpu, dev = _pair(torch.nn.GRU(3, 4), dml_device)
    x = torch.randn(2, 0, 3)
    expected = cpu(x)
    assert_same(dev(x.to(dml_device)), expected)


def test_deactivate_frees_the_cache(dml_device):
    dmlshim.deactivate()
    dmlshim.activate(fallback="known", trace=0)
    model = torch.nn.LSTM(4, 4).to(dml_device)
    model(torch.randn(2, 1, 4).to(dml_device))
    assert rnn_patch.cache.size()[0] >= 4
    dmlshim.deactivate()
    assert rnn_patch.cache.size() == (0, 0)


def test_threads_share_the_module_safely(shim, dml_device, assert_parity):
    from concurrent.futures import ThreadPoolExecutor
    torch.manual_seed(0)
    cpu, dev = _pair(torch.nn.LSTM(4, 5, bidirectional=True), dml_device)
    xs = [torch.randn(6, 1, 4) for _ in range(8)]
    with torch.no_grad(), ThreadPoolExecutor(4) as pool:
        outs = list(pool.map(lambda x: dev(x.to(dml_device))[0].cpu(), xs))
        # the reference runs in worker threads too: CPU LSTM numerics differ (~1e-8)
        # between the main thread and worker threads, with or without dmlshim
        expected = list(pool.map(lambda x: cpu(x)[0], xs))
    for out, ref in zip(outs, expected):
        assert_parity(out, ref)


def test_inference_mode_then_training(shim, dml_device, assert_parity, assert_same):
    """Weights cached inside inference_mode must still work with autograd later."""
    torch.manual_seed(0)
    cpu, dev = _pair(torch.nn.LSTM(4, 3), dml_device)
    x = torch.randn(5, 1, 4)
    with torch.inference_mode():
        assert_same(dev(x.to(dml_device)), cpu(x))
    xd, xc = x.to(dml_device).requires_grad_(), x.clone().requires_grad_()
    dev(xd)[0].sum().backward()
    cpu(xc)[0].sum().backward()
    assert_parity(xd.grad.cpu(), xc.grad)
    assert_parity(dev.weight_hh_l0.grad.cpu(), cpu.weight_hh_l0.grad)


@pytest.mark.parametrize("kind", [torch.nn.LSTM, torch.nn.GRU])
@pytest.mark.parametrize("bidirectional, batch_first, packed", [
    (False, False, False), (True, True, False), (True, True, True)])
def test_the_dispatcher_kernel_takes_the_call(default_shim, dml_device, kind, bidirectional,
                                              batch_first, packed, assert_parity):
    """As users get dmlshim (fallback "auto"): aten::lstm/gru itself runs on the CPU, with
    no error and no Python-level retry of torch._VF.  (On the real binary the kernel once
    failed on weights without storage - WeightCache's key - and torch._VF.lstm was retried.)"""
    torch.manual_seed(0)
    cpu, dev = _pair(kind(4, 6, num_layers=2, bidirectional=bidirectional, batch_first=batch_first),
                     dml_device)
    x = torch.randn(3, 5, 4) if batch_first else torch.randn(5, 3, 4)
    if packed:
        x = pack_padded_sequence(x, torch.tensor([5, 2, 4]), batch_first=batch_first,
                                 enforce_sorted=False)
    expected, got = cpu(x), dev(_to(x, dml_device))
    assert_parity(_to(got, "cpu"), expected)
    op = f"aten::{kind.__name__.lower()}.{'data' if packed else 'input'}"
    rows = {r["op"]: r["actions"] for r in dmlshim.report().rows}
    assert rows[op] == {"cpu": 1}
    assert not [name for name in rows if name.startswith("torch._VF")]


@pytest.mark.parametrize("cell, gates", [("_thnn_fused_lstm_cell", 4), ("_thnn_fused_gru_cell", 3)])
def test_fused_cells_in_float16_round_once(shim, dml_device, cell, gates):
    """The fused cells (no CPU kernel to compare with) in opmath, as CUDA's: each float16
    result as close to the float64 result as that result rounded once to float16 (chained
    float16 ops were up to 6x as far)."""
    generator = torch.Generator().manual_seed(0)
    shapes = [(16, gates * 64), (16, gates * 64), (16, 64), (gates * 64,), (gates * 64,)]
    args = [(torch.randn(s, generator=generator) * 3).half() for s in shapes]
    ref = getattr(rnn_patch, cell[len("_thnn"):]).__wrapped__(*[a.double() for a in args])
    got = getattr(torch.ops.aten, cell)(*[a.to(dml_device) for a in args])
    for g, r in zip(got, ref):
        assert g.dtype == torch.float16
        once = (r.half().double() - r).abs().max().item()
        assert (g.cpu().double() - r).abs().max().item() <= once * 1.01
    assert "cpu" in {a for row in dmlshim.report().rows if row["op"] == f"aten::{cell}" for a in row["actions"]}
