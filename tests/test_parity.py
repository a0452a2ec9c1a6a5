"""dmlshim.parity: figures and tolerance profiles (no device needed)."""
import math

import numpy as np
import pytest
import torch

from dmlshim import parity


def test_equal_tensors_have_zero_figures():
    x = torch.randn(5, 7)
    figures = parity.compare(x, x.clone())
    assert (figures.max_abs, figures.max_rel, figures.max_ulp, figures.mismatched) == (0, 0, 0, 0)
    assert figures.ok and "max abs 0" in str(figures)


def test_one_ulp_apart_fails_exact_passes_device():
    x = torch.tensor([1.0, 2.0, -3.0])
    y = torch.nextafter(x, torch.full_like(x, math.inf))      # one ULP up
    figures = parity.compare(y, x)
    assert figures.max_ulp == pytest.approx(1.0) and figures.mismatched == 1.0
    with pytest.raises(AssertionError, match="not within the 'exact' profile: max abs"):
        parity.assert_close(y, x, "exact")
    assert parity.assert_close(y, x, "device").ok


def test_device_profile_uses_pytorchs_cuda_vs_cpu_tolerance():
    x = torch.full((4,), 10.0)
    assert parity.compare(x + 0.010, x, "device").ok          # within 1e-3 + 1e-3 * 10
    assert not parity.compare(x + 0.012, x, "device").ok
    assert parity.profile("device").tolerance(torch.float16) == (1e-2, 1e-2)
    assert parity.profile("device").tolerance(torch.int64) == (0, 0)   # integers: exact


def test_dtype_shape_and_integer_mismatches_fail_every_profile():
    x = torch.arange(6.0)
    for name in parity.PROFILES:
        assert not parity.compare(x.double(), x, name).ok
        assert not parity.compare(x.reshape(2, 3), x, name).ok
        assert not parity.compare(torch.tensor([1, 2]), torch.tensor([1, 3]), name).ok
        # float x bool returned bool on DirectML (#17): a bool result never passes
        assert not parity.compare(x.bool(), x, name).ok


def test_nan_in_same_place_is_equal_inf_difference_is_not():
    x = torch.tensor([float("nan"), 1.0])
    assert parity.compare(x.clone(), x).ok
    assert not parity.compare(torch.tensor([1.0, 1.0]), x, "device").ok


def test_sequences_and_bad_profile():
    a, b = torch.ones(2), torch.ones(3)
    assert parity.assert_close((a, b), (a.clone(), b.clone())).ok
    with pytest.raises(AssertionError, match=r"\[1\] not within"):
        parity.assert_close([a, b + 1], [a, b])
    with pytest.raises(ValueError, match="tolerance profile 'close': allowed values are exact, device"):
        parity.profile("close")


def test_default_profile_follows_the_device():
    assert parity.default_profile("cpu").name == "exact"
    assert parity.default_profile("cuda:0").name == "device"


def test_images_max_pixel_and_psnr():
    img = np.random.default_rng(0).integers(0, 256, (32, 32, 3), dtype=np.uint8)
    same = parity.compare_images(img, img.copy())
    assert same.max_pixel == 0 and same.psnr_db == math.inf and same.within("exact")
    off_by_one = img.astype(np.int16)
    off_by_one[0, 0, 0] += 1 if img[0, 0, 0] < 255 else -1
    close = parity.compare_images(off_by_one.astype(np.uint8), img)
    assert close.max_pixel == 1 and close.psnr_db > 60
    assert close.within("device") and not close.within("exact")
    noisy = parity.compare_images(255 - img, img)            # a wrong image
    assert noisy.psnr_db < 20 and not noisy.within("device")
    with pytest.raises(ValueError, match="image shapes differ"):
        parity.compare_images(img[:8], img)


def test_transcripts_tokens_and_timestamps():
    ts = [[100, 200], [200, 350]]
    same = parity.compare_transcripts("天 气", "天 气", ts, ts)
    assert same.text_equal and same.token_edits == 0 and same.within("exact")
    shifted = parity.compare_transcripts("天 气", "天 气", [[100, 260], [260, 350]], ts)
    assert shifted.timestamp_max_ms == 60 and shifted.within("device")
    assert not shifted.within("exact")
    moved_more = parity.compare_transcripts("天 气", "天 气", [[100, 270], [270, 350]], ts)
    assert not moved_more.within("device")
    word = parity.compare_transcripts("天 汽", "天 气", ts, ts)
    assert word.token_edits == 1 and not word.within("device")
    fewer = parity.compare_transcripts("天", "天 气", ts[:1], ts)
    assert fewer.timestamp_max_ms == math.inf and not fewer.within("device")
    assert parity.compare_transcripts("天气好", "天气坏").token_edits == 1   # characters
