"""torch.autocast("privateuseone"): every op inside fails on the real 0.2.5 binary.

Measured there: ``NotImplementedError: Could not run 'aten::mm' with arguments from the
'AutocastPrivateUse1' backend`` for every op (torch 2.4 has no kernels for that key,
pytorch/pytorch#128598). dmlshim enters such an autocast disabled, with one warning
(``patches/autocast.py``; defect ``autocast``): the block computes as without autocast.
"""
import warnings

import pytest
import torch

import dmlshim
from dmlshim.patches import autocast as autocast_patch

X = torch.tensor([[1.5, -2.0], [0.25, 3.0]])


def _matmul_in_autocast(device, **kwargs):
    x = X.to(device)
    with torch.autocast(device.type, dtype=torch.float16, **kwargs):
        return x @ x


def test_without_shim_every_op_in_autocast_fails(dml_device):
    dmlshim.deactivate()
    with pytest.raises(NotImplementedError, match="AutocastPrivateUse1"):
        _matmul_in_autocast(dml_device)


@pytest.fixture
def fresh_warning(monkeypatch):
    monkeypatch.setattr(autocast_patch, "_warned", False)


def test_with_shim_autocast_runs_disabled_with_one_warning(shim, dml_device, fresh_warning,
                                                           assert_parity):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = _matmul_in_autocast(dml_device)
        again = _matmul_in_autocast(dml_device)
    assert got.dtype is torch.float32 and got.device == dml_device
    assert_parity(got.cpu(), X @ X)
    assert_parity(again.cpu(), X @ X)
    said = [w for w in caught if "torch.autocast('privateuseone')" in str(w.message)]
    assert len(said) == 1 and said[0].category is RuntimeWarning


def test_with_shim_the_decorator_form_and_positional_arguments(shim, dml_device, fresh_warning,
                                                               assert_parity):
    @torch.autocast(dml_device.type)
    def square(x):
        return x @ x

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        assert_parity(square(X.to(dml_device)).cpu(), X @ X)
        with torch.autocast(dml_device.type, torch.float16, True, False):
            assert_parity((X.to(dml_device) @ X.to(dml_device)).cpu(), X @ X)


def test_with_shim_other_autocasts_are_untouched(shim, dml_device, fresh_warning):
    with warnings.catch_warnings():
        warnings.simplefilter("error")                  # no warning from dmlshim
        with torch.autocast("cpu", dtype=torch.bfloat16):
            assert (X @ X).dtype is torch.bfloat16        # the CPU's autocast still works
        got = _matmul_in_autocast(dml_device, enabled=False)
    assert got.dtype is torch.float32

