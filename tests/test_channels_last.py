"""``memory_format=torch.channels_last`` on the device (patches/channels_last.py): refused raw,
with the shim the CPU's values, strides, dtype and answers, on the device.  The tests without
the marker run on the real device too."""
import pytest
import torch
import torch.nn.functional as F

import dmlshim
from dmlshim import emulation, patches, probing
from dmlshim.emulation import rules

CPU = torch.device("cpu")
CL, CL3 = torch.channels_last, torch.channels_last_3d


def _ramp(*shape, dtype=torch.float32):
    return torch.arange(torch.Size(shape).numel(), dtype=dtype).view(shape)


# name -> case(device): a tensor in a channels-last format, made as users do
CASES = {
    "to": lambda d: _ramp(2, 3, 4, 5).to(d).to(memory_format=CL),
    "to the device": lambda d: _ramp(2, 3, 4, 5).to(d, memory_format=CL),
    "to the device, float16": lambda d: _ramp(2, 3, 4, 5).to(d, torch.float16, memory_format=CL),
    "int64": lambda d: _ramp(2, 3, 4, 5, dtype=torch.int64).to(d).to(memory_format=CL),
    "clone": lambda d: _ramp(2, 3, 4, 5).to(d).clone(memory_format=CL),
    "contiguous": lambda d: _ramp(2, 3, 4, 5).to(d).contiguous(memory_format=CL),
    "empty_like": lambda d: torch.empty_like(_ramp(2, 3, 4, 5).to(d), memory_format=CL).fill_(7),
    "zeros_like": lambda d: torch.zeros_like(_ramp(2, 3, 4, 5).to(d), memory_format=CL),
    "torch.empty": lambda d: torch.empty(2, 3, 4, 5, device=d, memory_format=CL).fill_(7),
    "channels_last_3d": lambda d: _ramp(1, 2, 3, 4, 5).to(d).to(memory_format=CL3),
    "Module.to": lambda d: torch.nn.Conv2d(2, 3, 3).requires_grad_(False).to(d).to(memory_format=CL).weight,
    "Module.to the device": lambda d: torch.nn.Conv2d(2, 3, 3).requires_grad_(False).to(d, memory_format=CL).weight,
    "a CPU channels-last tensor moved": lambda d: _ramp(2, 3, 4, 5).to(memory_format=CL).to(d),
}


def _layout(t):
    return t.dtype, t.shape, t.stride(), t.is_contiguous(), t.is_contiguous(memory_format=CL)


def test_refused_raw(dml_device, shim_off):
    x = _ramp(2, 3, 4, 5).to(dml_device)
    for call in (lambda: x.to(memory_format=CL), lambda: _ramp(2, 3, 4, 5).to(dml_device, memory_format=CL),
                 lambda: x.clone(memory_format=CL), lambda: torch.empty_like(x, memory_format=CL),
                 lambda: torch.empty(2, 3, 4, 5, device=dml_device, memory_format=CL)):
        with pytest.raises(RuntimeError, match="must be Contiguous for DML tensors"):
            call()


@pytest.mark.parametrize("name", sorted(CASES))
def test_with_the_shim_equals_cpu(dml_device, shim_off, name, assert_parity):
    dmlshim.activate(fallback="known")
    assert probing.last().status["channels_last"] == probing.DETECTED
    assert "channels_last" in patches.installed()
    torch.manual_seed(0)
    got = CASES[name](dml_device)
    torch.manual_seed(0)
    want = CASES[name](CPU)
    assert got.device.type == dml_device.type
    assert _layout(got) == _layout(want)
    assert_parity(got, want)


@pytest.mark.parametrize("fmt", [torch.contiguous_format, CL])
def test_a_copy_to_the_cpu_in_a_format_has_its_strides(dml_device, shim_off, fmt, assert_same):
    x = _ramp(2, 3, 4, 5).to(memory_format=CL)
    y = x.to(dml_device)                       # strides the device keeps (no memory_format named)
    expected = x.to(CPU, memory_format=fmt).stride()
    if fmt is torch.contiguous_format:
        assert y.to(CPU, memory_format=fmt).stride() != expected      # raw: the source's strides
    dmlshim.activate(fallback="known")
    got = y.to(CPU, memory_format=fmt)
    assert got.stride() == expected
    assert_same(got, x)


def test_torch_errors_and_no_host_read(dml_device, shim_off, host_reads):
    dmlshim.activate(fallback="known")
    for case in CASES.values():
        case(dml_device)
    assert host_reads() == {}
    x = _ramp(3, 4, 5).to(dml_device)
    for call in (lambda: x.to(memory_format=CL), lambda: x.clone(memory_format=CL),
                 lambda: torch.empty(3, 4, 5, device=dml_device, memory_format=CL)):
        with pytest.raises(RuntimeError, match="required rank 4 tensor to use channels_last format"):
            call()


def test_gradient_through_the_format(dml_device, shim_off, assert_parity):
    dmlshim.activate(fallback="known")

    def grad(d):
        x = _ramp(1, 2, 3, 3).to(d).requires_grad_()
        (x.to(memory_format=CL) * torch.arange(18.0).view(1, 2, 3, 3).to(d)).sum().backward()
        return x.grad

    assert_parity(grad(dml_device), grad(CPU))


def test_a_channels_last_block_equals_cpu(dml_device, shim_off, assert_parity):
    """Conv, batch norm, ReLU, nearest 2x and a 1x1 conv, the model and the input in
    channels-last format, as ``model.to(memory_format=torch.channels_last)`` users run them."""
    dmlshim.activate(fallback="known")
    torch.manual_seed(0)
    block = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                                torch.nn.Upsample(scale_factor=2), torch.nn.Conv2d(8, 2, 1)).eval()
    x = torch.randn(2, 3, 6, 5)
    want = block.to(memory_format=CL)(x.to(memory_format=CL))
    with torch.no_grad():
        got = block.to(dml_device, memory_format=CL)(x.to(dml_device, memory_format=CL))
    assert block[0].weight.stride() == (27, 1, 9, 3)
    assert_parity(got, want.detach())


@pytest.mark.emulated_only(reason="removes the channels_last rules with emulation.configure()")
def test_rule_off_probe_passes_and_no_fix(dml_device, shim_off):
    emulation.configure(rules=[r for r in rules.default_rules() if "memory_format" not in r.source])
    assert torch.empty(1, 2, 1, 1, device=dml_device, memory_format=CL).stride() == (2, 1, 2, 2)
    dmlshim.activate(fallback="known")
    assert probing.last().status["channels_last"] == probing.NOT_DETECTED
    assert "channels_last" not in patches.installed()
