"""A copy from the device to the CPU that changes the dtype (patches/cpu_dtype_copy.py; defect
``cpu_dtype_copy``, failure_modes.md #24, Comfy-Org/ComfyUI#3539): raw, the CPU result keeps
the source's dtype, values unconverted; with the shim it equals the CPU's own cast, bit for bit.
The tests without the marker run on the real device too."""
import pytest
import torch

import dmlshim
from dmlshim import catalogue, emulation, patches, probing
from dmlshim.emulation import rules
from dmlshim.patches import cpu_dtype_copy, dispatcher

CPU = torch.device("cpu")
CL = torch.channels_last
FRACTIONS = torch.tensor([[0.5, 1.75, -2.5], [300.25, 0.0, -0.75]])
BYTES = torch.tensor([[0.5, 1.75, 2.5], [255.0, 0.0, 17.25]])
INTS = torch.tensor([[1, -2, 3], [40000, 0, -7]])
RAMP = torch.arange(-12.0, 12.0).div(4).view(1, 2, 3, 4)

# name -> (source, copy(t)): t is the source on the device, or on the CPU for the reference
CASES = {
    "uint8": (BYTES, lambda t: t.to("cpu", torch.uint8)),
    "int32, device= dtype=": (FRACTIONS, lambda t: t.to(device="cpu", dtype=torch.int32)),
    "float16": (FRACTIONS, lambda t: t.to("cpu", torch.float16)),
    "bool": (FRACTIONS, lambda t: t.to("cpu", torch.bool)),
    "int64": (FRACTIONS, lambda t: t.to(CPU, torch.int64)),
    "int64 to float32": (INTS, lambda t: t.to("cpu", torch.float32)),
    "type(IntTensor)": (FRACTIONS, lambda t: t.type(torch.IntTensor)),
    "aten._to_copy": (FRACTIONS, lambda t: torch.ops.aten._to_copy(t, dtype=torch.int32, device=CPU)),
    "channels_last, float16": (RAMP, lambda t: t.to("cpu", torch.float16, memory_format=CL)),
    "non_blocking": (FRACTIONS, lambda t: t.to("cpu", torch.int32, non_blocking=True)),
}


def _copies(name, device):
    """(the copy of the device tensor, the CPU's copy)."""
    source, copy = CASES[name]
    return copy(source.to(device)), copy(source.clone())


# raw, a non_blocking copy to the CPU is another defect's (it reads freed memory, and on the real
# 0.2.5 binary corrupts the heap, with or without a dtype; patches/non_blocking_copy.py)
@pytest.mark.parametrize("name", sorted(set(CASES) - {"non_blocking"}))
def test_raw_the_copy_keeps_the_source_dtype(dml_device, shim_off, name, assert_differs):
    got, want = _copies(name, dml_device)
    assert got.device == CPU
    assert got.dtype == CASES[name][0].dtype != want.dtype
    assert_differs(got, want)


@pytest.mark.parametrize("name", sorted(CASES))
def test_with_the_shim_equals_the_cpus_cast(dml_device, shim_off, name, assert_same):
    dmlshim.activate(fallback="known")
    assert probing.last().status["cpu_dtype_copy"] == probing.DETECTED
    assert "cpu_dtype_copy" in patches.installed()
    got, want = _copies(name, dml_device)
    assert got.device == CPU
    assert got.stride() == want.stride()
    assert_same(got, want)                     # copied, then cast on the CPU: bit-identical


def test_its_hook_goes_before_channels_lasts(dml_device, shim_off):
    dmlshim.activate(fallback="known")
    owners = dispatcher.hook_owners("_to_copy")
    assert owners.index("cpu_dtype_copy") < owners.index("channels_last")


def test_the_gradient_is_the_cpus(dml_device, shim_off, assert_same):
    dmlshim.activate(fallback="known")
    weights = torch.arange(6.0).view(2, 3)

    def grad(device):
        x = FRACTIONS.clone().to(device).requires_grad_()      # a leaf of its own, on the CPU too
        y = x.to("cpu", torch.float16)
        assert y.dtype == torch.float16 and y.requires_grad
        (y.float() * weights).sum().backward()
        return x.grad

    got = grad(dml_device)
    assert got.device == dml_device and got.dtype == torch.float32
    assert_same(got.cpu(), grad(CPU))


def test_other_copies_pass_through(dml_device, shim_off, assert_parity, assert_same):
    """Device to device and CPU to device with a dtype, and to the CPU in the same dtype: the
    hook answers None (torch's own kernels run), the results as before."""
    dmlshim.activate(fallback="known")
    fix = cpu_dtype_copy._to_copy_to(dml_device.type)
    op, xd = torch.ops.aten._to_copy.default, FRACTIONS.to(dml_device)
    for args, kwargs in (((xd,), {"dtype": torch.float16, "device": dml_device}),
                         ((xd,), {"dtype": torch.float16}),
                         ((FRACTIONS,), {"dtype": torch.float16, "device": dml_device}),
                         ((FRACTIONS,), {"dtype": torch.int32, "device": CPU}),
                         ((xd,), {"dtype": torch.float32, "device": CPU})):
        assert fix(op, args, kwargs) is None, kwargs
    for got in (xd.to(dml_device, torch.float16), FRACTIONS.to(dml_device, torch.float16)):
        assert got.device == dml_device and got.dtype == torch.float16
        assert_parity(got, FRACTIONS.to(torch.float16))
    assert_same(xd.to("cpu", torch.float32), FRACTIONS)


def test_probes_still_see_the_defect_and_no_host_read_of_its_own(dml_device, shim_off, host_reads):
    dmlshim.activate(fallback="known")
    assert catalogue.by_name("cpu_dtype_copy").probe(dml_device).broken      # the fix stands aside
    xd = FRACTIONS.to(dml_device)
    dmlshim.trace.reset()
    assert xd.to("cpu", torch.int32).dtype == torch.int32
    assert host_reads() == {}                         # the read is the model's, not dmlshim's
    if dispatcher._read_by_model in dispatcher.after_hooks["_to_copy"]:   # counted behind the gate
        assert dmlshim.report().syncs["model"] == {"aten::_to_copy": {"reads": 1, "bytes": xd.numel() * 4}}


@pytest.mark.emulated_only(reason="removes the emulator's rule of the defect with emulation.configure()")
def test_rule_off_probe_passes_and_no_fix(dml_device, shim_off, assert_same):
    emulation.configure(rules=[r for r in rules.default_rules() if r.when is not cpu_dtype_copy._to_cpu_with_a_dtype])
    assert FRACTIONS.to(dml_device).to("cpu", torch.int32).dtype == torch.int32
    dmlshim.activate(fallback="known")
    assert probing.last().status["cpu_dtype_copy"] == probing.NOT_DETECTED
    assert "cpu_dtype_copy" not in patches.installed()
    assert_same(*_copies("int32, device= dtype=", dml_device))


@pytest.mark.emulated_only(reason="calls the emulator's rule directly")
def test_a_format_and_a_dtype_lose_both_raw(dml_device, shim_off):
    """The dtype's rule goes before the format's: the source's dtype and strides."""
    x = RAMP.to(dml_device)
    assert cpu_dtype_copy._to_cpu_with_a_dtype(x, dtype=torch.float16, device=CPU, memory_format=CL)
    got = x.to("cpu", torch.float16, memory_format=CL)
    assert got.dtype == torch.float32 and got.stride() == RAMP.stride()
