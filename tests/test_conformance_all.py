"""Defects found by conformance over every OpInfo sample (issue 40; docs/conformance.md),
each both ways: without dmlshim the defect shows (the emulator's rule, the real binary),
with it the device equals the CPU. Runs on the real lane too (DMLSHIM_TEST_DEVICE=directml).
"""
import torch

import dmlshim
from dmlshim import patches, probing
from test_defects import shim_off  # noqa: F401  (the fixture: no shim, the default rules after)

CPU = torch.device("cpu")


# ------------------------------------------------------------ sort_scalar (static)
def _sorts(d):
    """sort/argsort/msort of a 0-dim tensor and of empty ones, stable too, an out= pair."""
    x, empty = torch.tensor(1.5).to(d), torch.empty(2, 0).to(d)
    values, indices = torch.empty(0).to(d), torch.empty(0, dtype=torch.int64).to(d)
    torch.sort(torch.tensor(-2.0).to(d), out=(values, indices))
    return (torch.sort(x), torch.sort(x, stable=True, descending=True), torch.argsort(x), torch.msort(x),
            torch.sort(empty, dim=1), torch.argsort(empty), values, indices,
            torch.sort(torch.tensor([3, 1, 2]).to(d)))


def test_sort_of_a_0dim_tensor_gives_0_raw(dml_device, shim_off):
    """Without dmlshim: the 0-dim values come back 0 (never written); argsort is right."""
    values, indices = torch.sort(torch.tensor(1.5).to(dml_device))
    assert values.cpu().item() == 0.0 and indices.cpu().item() == 0
    assert torch.argsort(torch.tensor(1.5).to(dml_device)).cpu().item() == 0


def test_sort_with_the_shim_equals_cpu(dml_device, shim_off, assert_parity):
    """With dmlshim: the CPU's values, and no process end (the out= kernel's invalid returns
    of a 0-dim or empty input are never read)."""
    dmlshim.activate(fallback="known")
    assert probing.last().status["sort_scalar"] == probing.STATIC          # never probed
    assert "sort_scalar" in patches.installed()
    assert_parity(_sorts(dml_device), _sorts(CPU))
