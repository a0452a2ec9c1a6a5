"""Tensor.copy_ of a source that broadcasts (measured on the real 0.2.5 binary).

There, with ``d`` of shape (3, 4): ``d.copy_(cpu_row)`` writes the row into ``d``'s first 4
elements and leaves the others; ``d.copy_(dev_row)`` fills ``d`` with the row's first value.
A source of ``d``'s rank, a 0-dim one, an expanded one and ``d[1:] = row`` are right.
dmlshim expands the source first (``patches/broadcast_copy.py``; defect ``broadcast_copy``).
"""
import pytest
import torch

import dmlshim

BASE = torch.arange(12.0).reshape(3, 4)
ROW = torch.tensor([1.0, -2.0, 3.0, -4.0])


def _copied(dml_device, src, where=lambda t: t):
    src = ROW.to(dml_device) if isinstance(src, str) else src
    d = BASE.to(dml_device)
    where(d).copy_(src)
    return d.cpu()


def _want(src, where=lambda t: t):
    src = ROW if isinstance(src, str) else src
    d = BASE.clone()
    where(d).copy_(src)
    return d


CASES = {
    "row": (ROW, lambda t: t),
    "device row": ("device", lambda t: t),
    "column": (ROW[:3].reshape(3, 1), lambda t: t),
    "row into a slice": (ROW, lambda t: t[1:]),
    "int row into float": (torch.tensor([1, 2, 3, 4]), lambda t: t),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_without_shim_a_broadcast_upload_fills_only_the_first_elements(dml_device, case,
                                                                       assert_differs):
    dmlshim.deactivate()
    src, where = CASES[case]
    assert_differs(_copied(dml_device, src, where), _want(src, where))


@pytest.mark.parametrize("case", sorted(CASES))
def test_with_shim_a_broadcast_upload_equals_the_cpu(shim, dml_device, case, assert_same):
    src, where = CASES[case]
    assert_same(_copied(dml_device, src, where), _want(src, where))    # data moved, not computed


def test_setitem_of_a_row_is_right_with_or_without_shim(shim, dml_device, assert_same):
    # torch expands the value before its copy_ (indexing's copy_to): right on the device
    dmlshim.deactivate()
    d, want = BASE.to(dml_device), BASE.clone()
    d[1:] = ROW
    want[1:] = ROW
    assert_same(d.cpu(), want)
    assert d.device == dml_device


def test_with_shim_uploads_that_were_right_are_untouched(shim, dml_device, assert_same):
    for src in (ROW.expand(3, 4), torch.tensor(7.0), BASE + 1, ROW[None].to(dml_device)):
        assert_same(_copied(dml_device, src), _want(src.cpu()))
    actions = {r["op"]: r["actions"] for r in dmlshim.report().rows}
    assert "expand" not in actions.get("Tensor.copy_", {})      # passed through unchanged


def test_with_shim_a_source_that_does_not_broadcast_raises_the_cpus_error(shim, dml_device):
    bad = torch.ones(5)
    with pytest.raises(RuntimeError) as cpu:
        BASE.clone().copy_(bad)
    with pytest.raises(RuntimeError) as device:
        BASE.to(dml_device).copy_(bad)
    assert str(device.value) == str(cpu.value)


def test_with_shim_copy_keeps_autograd_and_returns_self(shim, dml_device, assert_same):
    w = ROW.clone().requires_grad_()
    d = torch.zeros(3, 4, device=dml_device)
    out = d.copy_(w)
    assert out is d and out.requires_grad
    out.sum().backward()
    assert_same(w.grad, torch.full((4,), 3.0))
