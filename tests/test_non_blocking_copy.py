"""A non-blocking copy from the device to the CPU (patches/non_blocking_copy.py; defect
``non_blocking_copy``, failure_modes.md #56): raw, it reads freed memory (zeros on the emulator;
zeros or garbage and a corrupted heap on the real 0.2.5 binary); with the shim it is made
blocking and equals the CPU's copy.  The tests without the marker run on the real device too."""
import pytest
import torch

import dmlshim
from dmlshim import catalogue, emulation, patches, probing
from dmlshim.emulation import rules
from dmlshim.patches import dispatcher, non_blocking_copy

CPU = torch.device("cpu")
CL = torch.channels_last
RAMP = torch.arange(-12.0, 12.0).div(4).view(1, 2, 3, 4) + 0.5

# name -> copy(t): t is the source (a product made on its device: a temporary, as a model's)
CASES = {
    "to('cpu')": lambda t: (t * 2).to("cpu", non_blocking=True),
    "to(device=)": lambda t: (t * 2).to(device=CPU, non_blocking=True),
    "to(cpu tensor)": lambda t: (t * 2).to(torch.empty(0), non_blocking=True),
    "aten._to_copy": lambda t: torch.ops.aten._to_copy(t * 2, device=CPU, non_blocking=True),
    "with a dtype": lambda t: (t * 2).to("cpu", torch.float16, non_blocking=True),
    "channels_last": lambda t: (t * 2).to("cpu", non_blocking=True, memory_format=CL),
}


@pytest.mark.emulated_only(reason="the emulator's _to_copy rule: raw, the real 0.2.5 binary's non-blocking "
                                  "copy to the CPU corrupts the heap, ending a later test")
def test_raw_the_copy_reads_freed_memory(dml_device, shim_off, assert_same, assert_differs):
    got = CASES["to('cpu')"](RAMP.to(dml_device))
    assert got.device == CPU
    assert_same(got, torch.zeros_like(RAMP))           # the emulator's freed memory
    assert_differs(got, RAMP * 2)


def test_the_defect_is_static_and_its_fix_on(dml_device, shim_off):
    """Never probed (a probe would corrupt the heap): on with every DirectML device."""
    assert catalogue.by_name("non_blocking_copy").static
    dmlshim.activate(fallback="known")
    assert "non_blocking_copy" in patches.installed()
    assert dispatcher.hook_owners("_to_copy")[:3] == ("non_blocking_copy", "cpu_dtype_copy", "channels_last")


@pytest.mark.parametrize("name", sorted(CASES))
def test_with_the_shim_equals_the_cpus_copy(dml_device, shim_off, name, assert_same):
    dmlshim.activate(fallback="known")
    for _ in range(20):                        # on the real binary a corrupted heap shows within a few
        got, want = CASES[name](RAMP.to(dml_device)), CASES[name](RAMP)
        assert got.device == CPU and got.stride() == want.stride()
        assert_same(got, want)


def test_the_gradient_is_the_cpus(dml_device, shim_off, assert_same):
    dmlshim.activate(fallback="known")

    def grad(device):
        x = RAMP.clone().to(device).requires_grad_()      # a leaf of its own, on the CPU too
        y = (x * 3).to("cpu", non_blocking=True)
        (y * RAMP).sum().backward()
        return x.grad

    got = grad(dml_device)
    assert got.device == dml_device
    assert_same(got.cpu(), grad(CPU))


def test_other_copies_pass_through(dml_device, shim_off, assert_same):
    """To the device, between device tensors, and blocking ones: the hook answers None."""
    dmlshim.activate(fallback="known")
    fix = non_blocking_copy._to_copy_to(dml_device.type)
    op, xd = torch.ops.aten._to_copy.default, RAMP.to(dml_device)
    for args, kwargs in (((RAMP,), {"device": dml_device, "non_blocking": True}),
                         ((xd,), {"device": dml_device, "non_blocking": True}),
                         ((xd,), {"device": CPU}),
                         ((xd,), {"device": CPU, "non_blocking": False}),
                         ((xd,), {"dtype": torch.float16, "non_blocking": True})):
        assert fix(op, args, kwargs) is None, kwargs
    assert_same(RAMP.to(dml_device, non_blocking=True).cpu(), RAMP)


@pytest.mark.emulated_only(reason="removes the emulator's rule of the defect with emulation.configure()")
def test_rule_off_the_copy_is_right_raw(dml_device, shim_off, assert_same):
    emulation.configure(rules=[r for r in rules.default_rules() if r.when is not non_blocking_copy._non_blocking_to_cpu])
    assert_same(CASES["to('cpu')"](RAMP.to(dml_device)), RAMP * 2)
    dmlshim.activate(fallback="known")
    assert probing.last().status["non_blocking_copy"] == probing.STATIC
