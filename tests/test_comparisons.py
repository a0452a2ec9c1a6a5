"""How the suite compares results (tests/conftest.py): a value the device computed goes
through ``assert_parity`` (the profile the numerics call for), a value no device computes
through ``assert_same`` (bit for bit), a defect's signature through ``assert_differs``.
An exact comparison written any other way passes only on the emulator's CPU numerics:
the scan below fails on it."""
import ast
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from dmlshim import emulation

X = torch.tensor([1.0, 2.0, -3.0])
ONE_ULP_UP = torch.nextafter(X, torch.full_like(X, math.inf))

TESTS = Path(__file__).resolve().parent
# Exact comparisons are the subject of these: dmlshim.parity's own tests, and the
# emulator's GPU-like numerics (deterministic, exact for integers, bit-identical with
# the CPU's numerics).
OWN_SUBJECT = {"test_parity.py", "test_numerics.py"}
HAND_WRITTEN = {"equal", "allclose", "isclose", "assert_close", "assert_allclose", "array_equal",
                "assert_array_equal"}


def _hand_written_comparisons(path):
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
        parity_compare = name == "compare" and getattr(getattr(func, "value", None), "id", None) == "parity"
        if name in HAND_WRITTEN or parity_compare:
            yield f"{path.name}:{node.lineno}: {ast.unparse(func)}(...)"


def test_no_hand_written_comparisons():
    found = [hit for path in sorted(TESTS.glob("test_*.py")) if path.name not in OWN_SUBJECT
             for hit in _hand_written_comparisons(path)]
    assert not found, ("compare through the assert_parity / assert_same / assert_differs "
                       "fixtures (tests/conftest.py):\n  " + "\n  ".join(found))


def test_the_scan_finds_each_form(tmp_path):
    sample = tmp_path / "test_sample.py"
    sample.write_text("torch.equal(a, b)\nassert a.equal(b)\nassert_close(a, b, rtol=0, atol=0)\n"
                      "parity.compare(a, b)\nnp.testing.assert_array_equal(a, b)\n"
                      "parity.compare_images(a, b)\nassert_parity(a, b)\n", encoding="utf-8")
    assert list(_hand_written_comparisons(sample)) == [
        "test_sample.py:1: torch.equal(...)", "test_sample.py:2: a.equal(...)",
        "test_sample.py:3: assert_close(...)", "test_sample.py:4: parity.compare(...)",
        "test_sample.py:5: np.testing.assert_array_equal(...)"]


@pytest.mark.emulated_only(
    reason="switches the emulator's numerics (emulation.configured(numerics=...))")
@pytest.mark.parametrize("numerics", ["cpu", "gpu"])
def test_assert_parity_takes_the_profile_when_called(dml_device, assert_parity, numerics):
    held_to = {"cpu": "exact", "gpu": "device"}[numerics]
    with emulation.configured(numerics=numerics):
        if held_to == "exact":
            with pytest.raises(AssertionError, match="not within the 'exact' profile"):
                assert_parity(ONE_ULP_UP.to(dml_device), X)
        else:
            assert_parity(ONE_ULP_UP.to(dml_device), X)
        assert_parity(ONE_ULP_UP.to(dml_device), X, profile="device")
        with pytest.raises(AssertionError, match=f"not within the '{held_to}' profile"):
            assert_parity((X + 1).to(dml_device), X)


@pytest.mark.emulated_only(
    reason="switches the emulator's numerics (emulation.configured(numerics=...))")
def test_assert_parity_refuses_exact_where_the_numerics_are_not_the_cpus(dml_device, assert_parity):
    with emulation.configured(numerics="gpu"):
        with pytest.raises(ValueError, match=r"profile='exact'\) on privateuseone:0 with the "
                                             r"emulator's 'gpu' numerics: .* the 'device' profile"):
            assert_parity(X.to(dml_device), X, profile="exact")
    with emulation.configured(numerics="cpu"):
        assert_parity(X.to(dml_device), X, profile="exact")


@pytest.mark.emulated_only(
    reason="switches the emulator's numerics (emulation.configured(numerics=...))")
def test_assert_same_is_exact_in_every_numerics(dml_device, assert_same):
    with emulation.configured(numerics="gpu"):
        assert_same(X.to(dml_device), X)
        with pytest.raises(AssertionError, match="not within the 'exact' profile"):
            assert_same(ONE_ULP_UP, X)


def test_assert_differs_wants_more_than_rounding(assert_differs):
    assert_differs(X + 1, X)
    assert_differs(X.bool(), X)                                    # a dtype
    assert_differs((X, X), (X,))                                   # a structure
    with pytest.raises(AssertionError, match="defect did not show: the result is within"):
        assert_differs(ONE_ULP_UP, X, "the defect did not show: ")


def test_results_are_compared_leaf_by_leaf(assert_same):
    assert_same({"a": (X, None, 2, 0.5, "s")}, {"a": [X, None, 2, 0.5, "s"]})
    assert_same(np.arange(4, dtype=np.uint8), np.arange(4, dtype=np.uint8))
    with pytest.raises(AssertionError, match="differ in structure"):
        assert_same((X, X), (X,))
    with pytest.raises(AssertionError, match=r"^\[1\] 2 != 3$"):
        assert_same((X, 2), (X, 3))
    with pytest.raises(AssertionError, match=r"^\[0\] Tensor against int$"):
        assert_same((X, 2), (1, 2))
    with pytest.raises(AssertionError, match="not within the 'exact' profile"):
        assert_same(0.1 + 0.2, 0.3)                                # floats: as float64 tensors
