"""Defects found by conformance over every OpInfo sample (issue 40; docs/conformance.md),
each both ways: without dmlshim the defect shows (the emulator's rule, the real binary),
with it the device equals the CPU. Runs on the real lane too (DMLSHIM_TEST_DEVICE=directml).
"""
import pytest
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


# ------------------------------------------------------------ pad_value (probed)
def _pads(d, n):
    """constant_pad_nd of a 1xn ramp with 1.0 then 2.0 (n: a shape no other test pads), of
    int64 and float16 with two values, an all-negative crop, and an empty input."""
    x = (torch.arange(float(n)).view(1, n) + 10).to(d)
    ints, halves = x.long(), x.half()
    return (torch.constant_pad_nd(x, (1, 2), 1.0), torch.constant_pad_nd(x, (1, 2), 2.0),
            torch.constant_pad_nd(x, (1, 2), 0.0), torch.constant_pad_nd(ints, (0, 1), 4),
            torch.constant_pad_nd(ints, (0, 1), -6), torch.constant_pad_nd(halves, (2, 0), 5.0),
            torch.constant_pad_nd(halves, (2, 0), float("-inf")), torch.constant_pad_nd(x, (-1, 0), 3.0),
            torch.constant_pad_nd(x.view(1, 1, n), (-1, 1, 0, 1), 1.0), torch.constant_pad_nd(x.view(1, 1, n), (-1, 1, 0, 1), 2.0),
            torch.nn.functional.pad(torch.empty(0, 3, n).to(d), (1, 2), value=2.0))


def test_constant_pad_keeps_its_first_value_raw(dml_device, shim_off):
    """Without dmlshim: the second pad of the same shape, pads and dtype gets the first value."""
    x = (torch.arange(5.0).view(1, 5)).to(dml_device)
    torch.constant_pad_nd(x, (2, 1), 1.0)
    assert torch.constant_pad_nd(x, (2, 1), 2.0).cpu()[0, 0].item() == 1.0
    with pytest.raises(RuntimeError, match="CreateOperator"):
        torch.constant_pad_nd(torch.empty(0, 3, 3).to(dml_device), (1, 2), 2.0)


def test_constant_pad_with_the_shim_equals_cpu(dml_device, shim_off, assert_parity):
    dmlshim.activate(fallback="known")
    assert probing.last().status["pad_value"] == probing.DETECTED
    assert "pad_value" in patches.installed()
    assert_parity(_pads(dml_device, 6), _pads(CPU, 6))


# ------------------------------------------------------------ empty_reduction (probed)
def _reductions(d):
    """Reductions of empty inputs, over an empty dimension and whole; a non-empty sum."""
    e, e2 = torch.empty(0).to(d), torch.empty(0, 3).to(d)
    return (torch.sum(e2, 0), torch.prod(e), torch.prod(e2, 1), torch.mean(e), torch.mean(e2, 0),
            torch.linalg.vector_norm(e), torch.linalg.vector_norm(e2, dim=0), torch.nansum(e2, 0),
            torch.logsumexp(e2, 0), torch.linalg.vecdot(torch.empty(0, 1).to(d), torch.empty(0, 1).to(d), dim=0),
            torch.sum(e2.long(), 0), torch.sum(torch.ones(2, 3).to(d), 0))


def test_reduction_of_an_empty_input_is_never_written_raw(dml_device, shim_off, assert_differs):
    """Without dmlshim: a sum over an empty dimension is not the CPU's zeros."""
    (torch.arange(64.0) - 7).to(dml_device).mul(3)
    assert_differs(torch.sum(torch.empty(0, 3).to(dml_device), 0), torch.zeros(3))


def test_reduction_of_an_empty_input_with_the_shim_equals_cpu(dml_device, shim_off, assert_parity):
    dmlshim.activate(fallback="known")
    assert probing.last().status["empty_reduction"] == probing.DETECTED
    assert "empty_reduction" in patches.installed()
    assert_parity(_reductions(dml_device), _reductions(CPU))


# ------------------------------------------------------------ vector_norm's fix on a 0-dim input
def _zero_dim_norms(d):
    x = torch.tensor(-1.5).to(d)
    return (torch.linalg.vector_norm(x, ord=6, dim=0, keepdim=True), torch.linalg.vector_norm(x, ord=4, dim=-1),
            torch.linalg.norm(torch.tensor(2.0).to(d), 4, dim=0), torch.linalg.vector_norm(x, ord=3, dim=[]))


def test_vector_norm_of_a_0dim_tensor_with_the_shim_equals_cpu(dml_device, shim_off, assert_parity):
    """The vector_norm fix counted dim modulo the rank: a 0-dim input with dim=0 raised
    ZeroDivisionError (OpInfo's linalg.vector_norm, norm, normalize samples past the first 4)."""
    dmlshim.activate(fallback="known")
    assert_parity(_zero_dim_norms(dml_device), _zero_dim_norms(CPU))
