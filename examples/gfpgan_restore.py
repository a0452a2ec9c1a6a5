"""Restore the faces in photos with GFPGAN on a DirectML GPU (AMD, Intel, ...) via dmlshim.

gfpgan's own ``GFPGANer`` does the work (RetinaFace detection -> alignment -> GFPGANv1Clean
-> ParseNet-masked paste-back) on the device dmlshim selects, with dmlshim active. On a
machine without a GPU that is dmlshim's emulated DirectML device, which computes on the
CPU but fails where torch-directml 0.2.5 fails::

    python examples/gfpgan_restore.py                      # bundled photo, random weights
    python examples/gfpgan_restore.py --compare-cpu        # ... and the CPU's result next to it
    python examples/gfpgan_restore.py me.jpg -o out --device directml \\
        --model https://github.com/TencentARC/GFPGAN/releases/download/v1.3.4/GFPGANv1.4.pth

For each input it writes ``<name>_restored.png`` and ``<name>_before_after.png`` (input,
scaled to the output size, next to the result) into the output folder.

Without ``--model`` the three networks get **random weights** (built with gfpgan's and
facexlib's own classes and loaded through GFPGANer's real loader, see gfpgan_models.py):
the run exercises the whole pipeline, and ``--compare-cpu`` proves the device computes
what the CPU computes, but the "restored" face is noise. With ``--model`` (a GFPGANv1.3/
v1.4 ``.pth`` file or its release URL) the weights are real; gfpgan and facexlib then
download the detector and parser weights into ``./gfpgan/weights`` on first use.

``--arch`` picks GFPGANer's architecture: ``clean`` (GFPGAN v1.2/v1.3/v1.4) or
``RestoreFormer`` (``original`` and ``bilinear`` need basicsr's compiled CUDA ops: see
the README).
``--bg-upsampler realesrgan`` upscales the background with Real-ESRGAN, as GFPGAN's
``inference_gfpgan.py`` does: ``RealESRGANer`` with an RRDBNet x2, tiles of ``--bg-tile``
pixels, and ``half=True`` (float16) on a GPU, DirectML included, as that script sets it;
``--bg-half off`` turns it off. ``--bg-upsampler realesrgan-general`` uses Real-ESRGAN's
``SRVGGNetCompact`` x4 (realesr-general-x4v3), whose ``PReLU(64)`` aborts torch-directml
0.2.5 without dmlshim. Random weights use small networks (1 RRDB block; 2 SRVGG convs):
float16 on the CPU, hence on the emulated device, is about ten times slower than float32.

``--compare-cpu`` repeats the run on the CPU with the same seed and prints the parity
figures (max pixel difference, PSNR; dmlshim.parity); the exit status is 1 if they fall
outside the tolerance profile: ``device`` by default, the emulated device included, since
dmlshim computes GFPGAN's bilinear upsampling with other kernels than the CPU's
(``--tolerance exact`` asks for bit equality).
"""
import argparse
import logging
import sys
import time
from pathlib import Path

import torchvision_ops  # noqa: F401  (this repo's CI only: see the module; no-op elsewhere)

torchvision_ops.apply()

import cv2  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

import dmlshim  # noqa: E402
from dmlshim import parity  # noqa: E402

HERE = Path(__file__).resolve().parent
PHOTO = HERE / "data" / "astronaut.jpg"
DEVICES = ("auto", "directml", "cpu", "emulated")
# --bg-upsampler -> its release weights (with --model)
BG_UPSAMPLER_URLS = {
    "realesrgan": "https://github.com/xinntao/Real-ESRGAN/releases/download/v0.2.1/RealESRGAN_x2plus.pth",
    "realesrgan-general": "https://github.com/xinntao/Real-ESRGAN/releases/download/v0.2.5.0/"
                          "realesr-general-x4v3.pth"}
BG_UPSAMPLER_LABELS = {"realesrgan": "Real-ESRGAN x2 (RRDBNet)",
                       "realesrgan-general": "Real-ESRGAN general x4 (SRVGGNetCompact, PReLU)"}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("inputs", nargs="*", type=Path, default=[PHOTO],
                        help=f"images to restore (default: the bundled photo {PHOTO.name})")
    parser.add_argument("-o", "--output", type=Path, default=Path("out/gfpgan"),
                        help="folder for the results (default: %(default)s)")
    parser.add_argument("--model", help="GFPGANv1.3/v1.4 weights: a local .pth or its release URL "
                                        "(default: random weights, built offline)")
    parser.add_argument("--device", choices=DEVICES, default="auto",
                        help="auto = dmlshim.select_device() (CUDA > DirectML > ...), or the emulated "
                             "DirectML device when there is no GPU; emulated = dmlshim's emulated "
                             "DirectML device, computing on the CPU (default: %(default)s)")
    parser.add_argument("--arch", choices=("clean", "RestoreFormer"), default="clean",
                        help="GFPGANer architecture (default: %(default)s = GFPGAN v1.2-v1.4; "
                             "'original' and 'bilinear' need basicsr's CUDA ops, not offered)")
    parser.add_argument("--bg-upsampler", choices=("none", *BG_UPSAMPLER_URLS), default="none",
                        help="background upsampler (default: %(default)s)")
    parser.add_argument("--bg-tile", type=int, default=400,
                        help="Real-ESRGAN tile size in pixels, 0 = no tiling (default: %(default)s)")
    parser.add_argument("--bg-half", choices=("auto", "on", "off"), default="auto",
                        help="Real-ESRGAN in float16: auto = on for a GPU/DirectML device, as "
                             "inference_gfpgan.py does; the CPU comparison uses the same setting")
    parser.add_argument("--upscale", type=int, default=2, help="output scale (default: %(default)s)")
    parser.add_argument("--aligned", action="store_true",
                        help="inputs are already aligned face crops (skips detection and paste-back)")
    parser.add_argument("--seed", type=int, default=0,
                        help="seed of StyleGAN2's noise (default: %(default)s)")
    parser.add_argument("--trace", action="store_true",
                        help="log every call dmlshim intercepts, and its per-op report at exit")
    parser.add_argument("--compare-cpu", action="store_true",
                        help="also run on the CPU and print the parity figures (max pixel "
                             "difference, PSNR); exit 1 outside the tolerance profile")
    parser.add_argument("--tolerance", choices=sorted(parity.PROFILES), default="device",
                        help="parity profile for --compare-cpu (default: %(default)s: dmlshim "
                             "computes bilinear upsampling with other kernels than the CPU's)")
    args = parser.parse_args(argv)
    if args.bg_tile < 0:
        parser.error(f"--bg-tile must be 0 (no tiling) or a positive size, got {args.bg_tile}")
    return args


def pick_device(name):
    """``auto``: dmlshim.select_device(); on a machine with no GPU (and no DMLSHIM_DEVICE
    asking for the CPU), the emulated DirectML device, so the demo shows the shim at work."""
    if name == "cpu":
        return torch.device("cpu")
    if name == "auto":
        device = dmlshim.select_device()
        if device.type != "cpu" or dmlshim.config.device_from_env() != "auto":
            return device
        print("no GPU found: using dmlshim's emulated DirectML device (it computes on the CPU)")
    if name in ("auto", "emulated"):
        from dmlshim import emulation
        return emulation.install()
    return dmlshim.select_device(name)


def load_upsampler(args, device, half):
    """RealESRGANer on ``device`` for ``--bg-upsampler`` (None for ``none``)."""
    if args.bg_upsampler == "none":
        return None
    import gfpgan_models
    kind, tile = args.bg_upsampler, args.bg_tile
    if args.model is None:
        return gfpgan_models.background_upsampler(device, half=half, folder=gfpgan_models.build(),
                                                  tile=tile, kind=kind)
    return gfpgan_models.background_upsampler(device, half=half, model_path=BG_UPSAMPLER_URLS[kind],
                                              size="real", tile=tile, kind=kind)


def load_restorer(args, device, half):
    """A ``gfpgan.GFPGANer`` on ``device``: real weights from ``--model``, else random ones."""
    import gfpgan_models
    upsampler = load_upsampler(args, device, half)
    if args.model is None:
        return gfpgan_models.restorer(gfpgan_models.build(arch=args.arch), device,
                                      upscale=args.upscale, arch=args.arch, bg_upsampler=upsampler)
    from gfpgan import GFPGANer
    return GFPGANer(model_path=args.model, upscale=args.upscale, arch=args.arch,
                    channel_multiplier=2, bg_upsampler=upsampler, device=device)


def restore(restorer, image, *, aligned, seed):
    """The restored image (uint8 HxWx3 BGR) and the number of faces restored."""
    torch.manual_seed(seed)
    _, faces, pasted = restorer.enhance(image, has_aligned=aligned, paste_back=True)
    if aligned:
        return faces[0], len(faces)
    return pasted, len(faces)


def stage_pairs(restorer, cpu_restorer) -> dict:
    """Each stage of the last ``enhance`` on the device beside the CPU's, where the figures of
    the whole image do not tell which stage diverged: the detected landmarks (their largest
    difference, in pixels), the aligned face crops and the restored faces (uint8 images)."""
    device, cpu = restorer.face_helper, cpu_restorer.face_helper
    pairs = {}
    if len(device.all_landmarks_5) == len(cpu.all_landmarks_5) and len(cpu.all_landmarks_5):
        delta = max(float(np.abs(np.asarray(a) - np.asarray(b)).max())
                    for a, b in zip(device.all_landmarks_5, cpu.all_landmarks_5))
        pairs["landmarks"] = (f"max {delta:.3g} px", None)
    for name in ("cropped_faces", "restored_faces"):
        for i, (a, b) in enumerate(zip(getattr(device, name), getattr(cpu, name))):
            pairs[f"{name}[{i}]"] = (a, b)
    return pairs


def before_after(before, after):
    """``before`` scaled to ``after``'s size, side by side with it."""
    h, w = after.shape[:2]
    return np.hstack([cv2.resize(before, (w, h), interpolation=cv2.INTER_LANCZOS4), after])


def main(argv=None):
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.trace else logging.WARNING,
                        format="%(name)s: %(message)s")
    device = pick_device(args.device)
    dmlshim.activate(trace=True if args.trace else None)
    print(f"device: {device}  (dmlshim active, torch {torch.__version__})")
    if args.model is None:
        print("weights: RANDOM (no --model given). The pipeline runs for real, "
              "but the restored faces are noise.")
    half = args.bg_half == "on" or (args.bg_half == "auto" and device.type != "cpu")
    if args.bg_upsampler != "none":
        print(f"background: {BG_UPSAMPLER_LABELS[args.bg_upsampler]}, tile {args.bg_tile or 'off'}, "
              f"{'float16' if half else 'float32'}")
    restorer = load_restorer(args, device, half)
    cpu_restorer = load_restorer(args, torch.device("cpu"), half) if args.compare_cpu else None

    profile = parity.profile(args.tolerance)
    args.output.mkdir(parents=True, exist_ok=True)
    outside = 0
    for path in args.inputs:
        image = cv2.imread(str(path), cv2.IMREAD_COLOR)
        if image is None:
            sys.exit(f"error: cannot read image {path} (missing file or not an image)")
        start = time.perf_counter()
        result, faces = restore(restorer, image, aligned=args.aligned, seed=args.seed)
        seconds = time.perf_counter() - start
        stem = args.output / path.stem
        cv2.imwrite(f"{stem}_restored.png", result)
        cv2.imwrite(f"{stem}_before_after.png", before_after(image, result))
        print(f"{path.name}: {faces} face(s) restored in {seconds:.1f} s -> "
              f"{stem}_restored.png, {stem}_before_after.png")
        if cpu_restorer is not None:
            reference, _ = restore(cpu_restorer, image, aligned=args.aligned, seed=args.seed)
            # each stage before the paste-back to the whole profile; the pasted image to its PSNR
            # only: the inverse warp and its eroded, blurred mask flip a few edge pixels by up to 7
            # levels for landmarks 4e-6 px apart (measured on the real binary; docs/gfpgan.md)
            ok = True
            for stage, (got, expected) in stage_pairs(restorer, cpu_restorer).items():
                if expected is None:
                    print(f"  {stage}: {got}")
                    continue
                stage_figures = parity.compare_images(got, expected)
                ok &= stage_figures.within(profile)
                print(f"  {stage}: {stage_figures} -> {'within' if stage_figures.within(profile) else 'OUTSIDE'}")
            figures = parity.compare_images(result, reference)
            ok &= figures.psnr_db >= profile.min_psnr_db
            outside += not ok
            print(f"{path.name}: vs CPU: {figures} -> {'within' if ok else 'OUTSIDE'} the "
                  f"{profile.name!r} profile (stages max {profile.max_pixel}; the pasted image >= "
                  f"{profile.min_psnr_db:g} dB)")
    return 1 if outside else 0      # with --trace, dmlshim logs its per-op report at exit


if __name__ == "__main__":
    sys.exit(main())
