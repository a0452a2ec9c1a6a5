"""What the routing sweep (benchmarks/fidelity_routing.py) found on the real torch-directml
0.2.5 binary and the emulator now models, both ways: torch's ``*_scatter`` composites fail
``has_storage()`` (the device's tensors have no storage, failure_modes.md #46), and DirectML's
scatter refuses an index smaller than the input outside ``dim`` and a source shaped unlike
the index.  Raw each call raises the real binary's message; with ``dmlshim.activate()`` it
equals the CPU.  These run on the real device too (``DMLSHIM_TEST_DEVICE=directml``)."""
import pytest
import torch

import dmlshim
from dmlshim.emulation import opaque, rules, rules_refused

CPU = torch.device("cpu")
INDEX = torch.tensor([[0, 1, 2, 0], [1, 2, 0, 1]])


def _x(device):
    return torch.arange(12.0).view(3, 4).to(device)


CASES = {
    "slice_scatter": (lambda d: torch.slice_scatter(_x(d), torch.ones(1, 4).to(d), 0, 0, 1),
                      opaque.HAS_STORAGE_ASSERT),
    "select_scatter": (lambda d: torch.select_scatter(_x(d), torch.ones(4).to(d), 0, 1),
                       opaque.HAS_STORAGE_ASSERT),
    "diagonal_scatter": (lambda d: torch.diagonal_scatter(_x(d), torch.ones(3).to(d)),
                         opaque.HAS_STORAGE_ASSERT),
    "as_strided_scatter": (lambda d: torch.as_strided_scatter(_x(d), torch.ones(2).to(d), (2,), (1,)),
                           opaque.HAS_STORAGE_ASSERT),
    "scatter_ partial": (lambda d: _x(d).scatter_(0, INDEX[:, :3].to(d), 1.0), rules_refused.SCATTER_MESSAGE),
    "scatter other rows": (lambda d: _x(d).scatter(1, INDEX[:, :3].to(d), torch.ones(2, 3).to(d)),
                           rules_refused.SCATTER_MESSAGE),
    "scatter_add partial": (lambda d: _x(d).scatter_add(0, INDEX[:, :3].to(d), torch.ones(2, 3).to(d)),
                            rules_refused.SCATTER_MESSAGE),
    "scatter source shape": (lambda d: _x(d).scatter(0, INDEX.to(d), torch.ones(3, 5).to(d)),
                             rules.SCATTER_SOURCE),
}
# the same ops where DirectML takes them: a full index, scatter_reduce (a CPU fallback)
WORKING = {
    "scatter_ full": lambda d: _x(d).scatter_(0, INDEX.to(d), 1.0),
    "scatter_reduce partial": lambda d: _x(d).scatter_reduce(0, INDEX[:, :3].to(d), torch.ones(2, 3).to(d), "sum"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_raw_raises_the_real_binarys_message(dml_device, shim_off, name):
    call, message = CASES[name]
    with pytest.raises(RuntimeError) as caught:
        call(dml_device)
    assert str(caught.value).strip() == message.strip()


@pytest.mark.parametrize("name", sorted(WORKING))
def test_raw_takes_the_full_index(dml_device, shim_off, name, assert_parity):
    assert_parity(WORKING[name](dml_device), WORKING[name](CPU))


@pytest.mark.parametrize("name", sorted(CASES))
def test_with_the_shim_equals_cpu(dml_device, shim_off, name, assert_parity):
    dmlshim.activate()
    assert_parity(CASES[name][0](dml_device), CASES[name][0](CPU))
