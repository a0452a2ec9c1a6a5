"""GFPGAN's RestoreFormer architecture and its Real-ESRGAN background upsampler on the
DirectML device, against the CPU; small random-weight networks built with the
libraries' own classes (examples/gfpgan_models.py).

float16: torch-directml 0.2.5 has no known float16 failure (the routing table is the
same for every dtype; failure_modes.md lists float64 (#7) and bfloat16 (#8), not
float16), so the emulator computes float16 with the CPU's float16 kernels, and
Real-ESRGAN with ``half=True`` runs on the device as on the CPU.
"""
import cv2
import pytest
import torch

import dmlshim
from dmlshim import emulation, parity

import gfpgan_models  # examples/, on sys.path via conftest.py
import gfpgan_restore
from test_gfpgan import PHOTO, gfpgan_lib  # noqa: F401  (the session fixture)


@pytest.fixture(scope="module")
def crop():
    """A 48x48 BGR crop of the bundled photo (uint8): 3 x 3 tiles of 16 pixels."""
    return cv2.imread(str(PHOTO), cv2.IMREAD_COLOR)[96:144, 96:144].copy()


def upscale(device, image, folder, half=True, tile=16, kind="realesrgan"):
    """RealESRGANer (``kind``: small RRDBNet x2 or SRVGGNetCompact x4, tiled) on ``image``:
    the uint8 (2H, 2W, 3) image and the network's assembled output before rounding to 8
    bits, (1, 3, sH, sW) in [0, 1] on the CPU, float16 when ``half``."""
    upsampler = gfpgan_models.background_upsampler(device, half=half, folder=folder, tile=tile, kind=kind)
    assert next(upsampler.model.parameters()).dtype == (torch.float16 if half else torch.float32)
    image = upsampler.enhance(image, outscale=2)[0]
    # clamped: on the CPU in float32, enhance() clamps upsampler.output in place
    return image, upsampler.output.cpu().clamp(0, 1)


@pytest.mark.parametrize("half", [True, False])
def test_realesrgan_tiled_differs_raw_and_matches_cpu_with_the_shim(half, crop, dml_device, gfpgan_lib,
                                                                    tmp_path, profile, capsys,
                                                                    assert_parity):
    """Raw, the tiles of the first column below the top one are lost: RealESRGANer writes each
    into ``output[:, :, y0:y1, x0:x1]``, a slice from 0 of a view with an offset, a copy on
    DirectML (#62).  With the shim the image and the float output equal the CPU's within the
    profile; 3 x 3 tiles ran."""
    ref, ref_out = upscale("cpu", crop, tmp_path, half)
    assert ref.shape == (96, 96, 3) and ref.dtype == crop.dtype and ref.std() > 0
    assert ref_out.shape == (1, 3, 96, 96) and ref_out.std() > 0
    raw, raw_out = upscale(dml_device, crop, tmp_path, half)
    dmlshim.activate()
    try:
        image, out = upscale(dml_device, crop, tmp_path, half)
    finally:
        dmlshim.deactivate()
    assert not parity.compare_images(raw, ref).within(profile)
    lost = raw_out[..., 32:, :32]                  # still output's zeros where the CPU has values
    assert not lost.any() and ref_out[..., 32:, :32].any()
    figures = parity.compare_images(image, ref)
    assert figures.within(profile), figures
    assert_parity(out, ref_out)
    assert "Tile 9/9" in capsys.readouterr().out


def test_realesrgan_odd_width_fails_without_the_shim(crop, dml_device, gfpgan_lib, tmp_path):
    """x2 pads an odd width with F.pad(img, (0, 1, 0, 0), 'reflect'); DirectML pads the
    height instead (DirectML#687, failure_modes.md #42), and pixel_unshuffle refuses it."""
    with pytest.raises(AssertionError):
        upscale(dml_device, crop[:, :47].copy(), tmp_path, half=False, tile=0)


def test_realesrgan_general_prelu_matches_cpu_with_the_shim(crop, dml_device, gfpgan_lib, tmp_path,
                                                            profile, assert_parity):
    """realesr-general-x4v3's SRVGGNetCompact (PReLU(16) here, PReLU(64) in the release) with
    the shim: the image and the float output equal the CPU's within the profile.  float32:
    the 16-bit ops of the real binary's lavapipe stack are wrong today."""
    ref, ref_out = upscale("cpu", crop, tmp_path, half=False, kind="realesrgan-general")
    assert ref.shape == (96, 96, 3) and ref_out.shape == (1, 3, 192, 192) and ref_out.std() > 0
    dmlshim.activate()
    try:
        image, out = upscale(dml_device, crop, tmp_path, half=False, kind="realesrgan-general")
    finally:
        dmlshim.deactivate()
    figures = parity.compare_images(image, ref)
    assert figures.within(profile), figures
    assert_parity(out, ref_out, profile=profile)


@pytest.mark.emulated_only(
    reason="expects emulation.FatalDirectMLError where the real binary aborts the whole process "
           "(tests/test_bf16.py reproduces an abort in a child)")
def test_realesrgan_general_aborts_without_the_shim(crop, dml_device, gfpgan_lib, tmp_path):
    """PReLU(C) on a 4-D input: torch-directml 0.2.5 aborts the process (failure_modes.md
    #29, DirectML#271, #445), which the emulator raises as FatalDirectMLError."""
    with pytest.raises(emulation.FatalDirectMLError, match="DML_TENSOR_DIMENSION_COUNT_MAX"):
        upscale(dml_device, crop, tmp_path, half=False, kind="realesrgan-general")


def small_net():
    """RestoreFormer at 64 pixels (GroupNorm needs 32-channel multiples), seed 0."""
    from gfpgan.archs.restoreformer_arch import RestoreFormer

    torch.manual_seed(0)
    return RestoreFormer(n_embed=64, embed_dim=32, ch=32, ch_mult=(1, 2, 2), num_res_blocks=1,
                         attn_resolutions=(16,), resolution=64, z_channels=32).eval()


def test_restoreformer_matches_cpu(dml_device, gfpgan_lib, assert_parity):
    """RestoreFormer: runs raw, and with the shim, as on the CPU (within the profile)."""
    net = small_net()
    x = torch.rand(1, 3, 64, 64, generator=torch.Generator().manual_seed(1)) * 2 - 1
    with torch.no_grad():
        ref = net(x)[0]
        raw = net.to(dml_device)(x.to(dml_device))[0]
        dmlshim.activate()
        try:
            got = net(x.to(dml_device))[0]
        finally:
            dmlshim.deactivate()
    assert ref.shape == (1, 3, 64, 64) and ref.std() > 0
    assert_parity(raw, ref)
    assert_parity(got, ref)


@pytest.mark.parametrize("arch", ["original", "bilinear"])
def test_arch_needs_basicsr_cuda_ops(arch, gfpgan_lib):
    """GFPGANv1 ('original') and, through gfpganv1_arch's ResUpBlock, GFPGANBilinear call
    basicsr's compiled fused_act: a NameError on any machine without basicsr's CUDA
    extension, the CPU included (the README's text)."""
    from gfpgan.archs.gfpgan_bilinear_arch import GFPGANBilinear
    from gfpgan.archs.gfpganv1_arch import GFPGANv1
    net = (GFPGANv1 if arch == "original" else GFPGANBilinear)(
        out_size=64, num_style_feat=64, channel_multiplier=1, decoder_load_path=None,
        fix_decoder=True, num_mlp=2, input_is_latent=True, different_w=True, narrow=0.25,
        sft_half=True)
    with pytest.raises(NameError, match="name 'fused_act_ext' is not defined"):
        net(torch.zeros(1, 3, 64, 64))
    with pytest.raises(ValueError, match=f"'{arch}' needs basicsr's compiled CUDA ops"):
        gfpgan_models.build(arch=arch)


def test_example_options(capsys):
    args = gfpgan_restore.parse_args(["--arch", "RestoreFormer", "--bg-upsampler", "realesrgan"])
    assert (args.arch, args.bg_upsampler, args.bg_tile, args.bg_half) == (
        "RestoreFormer", "realesrgan", 400, "auto")
    assert gfpgan_restore.parse_args(["--bg-upsampler", "realesrgan-general"]).bg_upsampler == "realesrgan-general"
    for bad in (["--arch", "original"], ["--arch", "bilinear"], ["--bg-tile", "-1"]):
        with pytest.raises(SystemExit):
            gfpgan_restore.parse_args(bad)
    err = capsys.readouterr().err
    assert "invalid choice: 'original'" in err and "invalid choice: 'bilinear'" in err
    assert "--bg-tile must be 0" in err
