"""torch.load / torch.jit.load with map_location naming the device (failure_modes.md #46),
both ways, on the emulated device and on the real torch-directml.

torch-directml's tensors have no storage (OpaqueTensorImpl): raw, torch.load(map_location=
dml) raises TypeError in torch_directml.device() and, past it, would restore storages on
the device and die with SIGSEGV; torch.jit.load(map_location=dml) fails in its loader.
With dmlshim every form that names the device loads on the CPU and moves the result.
"""
import collections
import io
import subprocess
import sys

import pytest
import torch
from torch import nn

import dmlshim
from dmlshim import catalogue, emulation
from dmlshim.emulation import opaque
from dmlshim.patches import load as load_patch

Pair = collections.namedtuple("Pair", "first second")
CPU = torch.device("cpu")


class Tied(nn.Module):
    """An embedding tied to its output head, an LSTM and a buffer."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(7, 4)
        self.head = nn.Linear(4, 7, bias=False)
        self.head.weight = self.emb.weight
        self.lstm = nn.LSTM(4, 5, batch_first=True)
        self.register_buffer("scale", torch.tensor([0.5]))

    def forward(self, ids):
        e = self.emb(ids)
        return self.head(e) * self.scale, self.lstm(e)[0]


@pytest.fixture
def model():
    torch.manual_seed(0)
    return Tied().eval()


def _saved(obj) -> io.BytesIO:
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    buffer.seek(0)
    return buffer


def _run(model, device):
    with torch.no_grad():
        return [t.cpu() for t in model(torch.tensor([[1, 4, 6]]).to(device))]


def _forms(device):
    return {"str": str(device), "torch.device": device, "dict": {"cpu": str(device)}}


@pytest.mark.parametrize("form", ["str", "torch.device", "dict"])
def test_without_shim_load_to_the_device_fails(dml_device, model, form):
    dmlshim.deactivate()
    with pytest.raises(TypeError, match="'>=' not supported"):
        torch.load(_saved(model.state_dict()), map_location=_forms(dml_device)[form])


def test_without_shim_jit_load_to_the_device_fails(dml_device, model):
    dmlshim.deactivate()
    buffer = io.BytesIO()
    torch.jit.save(torch.jit.script(model), buffer)
    buffer.seek(0)
    with pytest.raises(NotImplementedError, match=opaque.STORAGE_MESSAGE):
        torch.jit.load(buffer, map_location=dml_device)


def test_device_tensors_have_no_storage(dml_device, assert_same):
    """As torch-directml's OpaqueTensorImpl: the accessors raise; torch.save and deepcopy
    take torch's paths for storage-less tensors and still work."""
    import copy
    t = torch.arange(4.0).to(dml_device)
    with pytest.raises(RuntimeError, match=opaque.DATA_PTR_MESSAGE):
        t.data_ptr()
    with pytest.raises(NotImplementedError, match=opaque.STORAGE_MESSAGE):
        t.untyped_storage()
    assert not torch._C._has_storage(t) and torch._C._has_storage(t.cpu())
    assert_same(copy.deepcopy(t).cpu(), t.cpu())
    loaded = torch.load(_saved({"t": t}), weights_only=False)["t"]
    assert loaded.device == t.device
    assert_same(loaded.cpu(), t.cpu())


def test_raw_storage_on_the_device_is_fatal(dml_device):
    """torch.UntypedStorage(n, device=dml): SIGSEGV on the real binary (seen in a child
    process); the emulated device raises instead, so a test process survives."""
    if emulation.is_installed():
        with pytest.raises(RuntimeError, match="SIGSEGV"):
            torch.UntypedStorage(8, device=dml_device)
        return
    code = "import torch, torch_directml; torch.UntypedStorage(8, device=torch_directml.device())"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True).returncode == -11


def test_probe_never_touches_a_storage_less_device(dml_device):
    verdict = catalogue.by_name("load_map_location").probe(dml_device)
    assert verdict.broken and opaque.STORAGE_MESSAGE in verdict.figure


# ------------------------------------------------------------------- with dmlshim

@pytest.mark.parametrize("form", ["str", "torch.device", "dict"])
def test_every_form_loads_to_the_device(shim, dml_device, model, assert_parity, assert_same, form):
    state = torch.load(_saved(model.state_dict()), map_location=_forms(dml_device)[form])
    assert type(state) is collections.OrderedDict and hasattr(state, "_metadata")
    assert all(t.device == dml_device for t in state.values())
    for name, t in state.items():
        assert_same(t.cpu(), model.state_dict()[name])                    # data movement
    moved = Tied().to(dml_device)
    moved.load_state_dict(state)
    for got, want in zip(_run(moved.eval(), dml_device), _run(model, CPU)):
        assert_parity(got, want)


def test_a_whole_checkpoint_keeps_its_structure(shim, dml_device, model, assert_parity):
    w = torch.arange(6.0).view(2, 3)
    checkpoint = {"model": model, "pair": (w, w), "named": Pair(w, 3), "nested": [w, {"w": w}],
                  "step": 7, "grad": w.clone().requires_grad_(), "param": nn.Parameter(w.clone())}
    loaded = torch.load(_saved(checkpoint), map_location=dml_device, weights_only=False)
    assert loaded["pair"][0] is loaded["pair"][1] is loaded["nested"][0] is loaded["nested"][1]["w"]
    assert type(loaded["named"]) is Pair and loaded["named"].second == 3 and loaded["step"] == 7
    assert loaded["named"].first is loaded["pair"][0] and loaded["pair"][0].device == dml_device
    assert loaded["grad"].requires_grad and loaded["grad"].is_leaf
    assert isinstance(loaded["param"], nn.Parameter) and loaded["param"].device == dml_device
    moved = loaded["model"]
    assert moved.head.weight is moved.emb.weight                  # still tied
    assert moved.scale.device == dml_device and moved.lstm.weight_ih_l0.device == dml_device
    for got, want in zip(_run(moved, dml_device), _run(model, CPU)):
        assert_parity(got, want)


def test_weights_only_and_file_paths(shim, dml_device, model, tmp_path):
    path = tmp_path / "w.pt"
    torch.save(model.state_dict(), path)
    state = torch.load(path, map_location=str(dml_device), weights_only=True)
    assert all(t.device == dml_device for t in state.values())
    assert torch.serialization.load(path, map_location=dml_device)["scale"].device == dml_device


@pytest.mark.parametrize("how", ["torch.jit.load", "torch.load"])
def test_torchscript_loads_to_the_device(shim, dml_device, model, assert_parity, how):
    buffer = io.BytesIO()
    torch.jit.save(torch.jit.script(model), buffer)
    buffer.seek(0)
    loaded = (torch.jit.load(buffer, map_location=dml_device) if how == "torch.jit.load"
              else torch.load(buffer, map_location=dml_device, weights_only=False))
    for got, want in zip(_run(loaded, dml_device), _run(model, CPU)):
        assert_parity(got, want)


def test_other_map_locations_are_left_alone(shim, dml_device, model):
    buffer = _saved({"w": torch.arange(3.0)})
    assert torch.load(buffer, map_location="cpu")["w"].is_cpu
    buffer.seek(0)
    assert torch.load(buffer, map_location=lambda storage, location: storage)["w"].is_cpu
    buffer.seek(0)
    assert torch.load(buffer, map_location={"cuda:0": str(dml_device)})["w"].is_cpu   # not cpu's


def test_a_dict_that_splits_one_file_is_refused(dml_device):
    """Storages a dict sends to the device and to the CPU both cannot be told apart after a
    CPU load: a clear error, not a half-moved checkpoint.  (torch looks each storage's
    location up with get(); a file with two locations is what this stands for.)"""
    where, device = load_patch._split({"cuda:0": str(dml_device)}, dml_device.type)
    assert device == dml_device and where.get("cuda:0", "cuda:0") == "cpu"
    where.get("cpu", "cpu")
    with pytest.raises(RuntimeError, match="cannot tell them apart"):
        load_patch._moved({"w": torch.ones(1)}, device, where)


def test_storage_on_the_device_is_a_clear_error(shim, dml_device):
    with pytest.raises(RuntimeError, match="no storage"):
        torch.UntypedStorage(8, device=dml_device)
    assert torch.UntypedStorage(8).device == CPU                  # everything else passes
