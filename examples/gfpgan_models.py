"""Random-weight GFPGAN model files, built offline with the libraries' own classes.

GFPGAN's weights come from GitHub releases at run time, which tests and CI cannot
reach. :func:`build` writes the three files a real run downloads, from the very classes
that load them, with seeded random weights:

====================================  ===================================================
file (in the returned folder)         class, as ``GFPGANer`` / facexlib construct it
====================================  ===================================================
``GFPGANv1Clean.pth``                 ``GFPGANv1Clean(out_size=512, channel_multiplier=2,
                                      ...)`` under ``params_ema`` (87M parameters, 350 MB)
``gfpgan/weights/detection_Resnet50_Final.pth``  facexlib ``RetinaFace('resnet50')``
``gfpgan/weights/parsing_parsenet.pth``          facexlib ``ParseNet(512, 512, 19)``
====================================  ===================================================

``build(arch=...)`` picks GFPGANer's architecture (``ARCHS``): ``clean`` (GFPGAN v1.2,
v1.3, v1.4: the file above) or ``RestoreFormer`` (``RestoreFormer()``, file
``RestoreFormer.pth``). ``original`` (``GFPGANv1``) and ``bilinear`` (``GFPGANBilinear``,
which in gfpgan 1.3.8 builds ``ResUpBlock`` from gfpganv1_arch) are left out: they call
basicsr's compiled CUDA op ``fused_act``, which a DirectML machine cannot build
(``NameError: name 'fused_act_ext' is not defined`` on the CPU too).
:func:`realesrgan_file` adds a background upsampler's weights (``BG_UPSAMPLERS``):
``realesrgan``, the ``RRDBNet`` x2 that GFPGAN's ``inference_gfpgan.py`` uses
(RealESRGAN_x2plus, 23 blocks, 16.7M parameters) at ``size="real"``, or the same class
with 1 block and 16 features at ``size="small"``; ``realesrgan-general``, Real-ESRGAN's
``SRVGGNetCompact`` x4 with ``PReLU(64)`` activations (realesr-general-x4v3, 32 convs) or
2 convs of 16 features. float16 convolutions on a CPU (and so on the emulated device) are
about ten times slower than float32, and the real RRDBNet takes minutes per image there.

:func:`restorer` then builds a ``GFPGANer`` through its real loader: ``torch.load`` +
strict ``load_state_dict`` of the GFPGAN file, and facexlib's ``init_detection_model`` /
``init_parsing_model``, which find their files in ``./gfpgan/weights`` (GFPGANer passes
``model_rootpath='gfpgan/weights'``, relative to the working folder; :func:`restorer`
runs the constructor inside the cache folder).

**The weights are random**: the restored faces are noise. The point is running the
real detect -> align -> restore -> paste-back code, e.g. to compare a device with the CPU.

StyleGAN2's noise strengths (``StyleConv.weight``) start at zero, which would make the
random noise invisible; :func:`strengthen_noise` sets them to 0.1 as trained models have
non-zero ones, so a seed (and where the noise is drawn) shows in the output.

A random RetinaFace finds no face (no score passes GFPGANer's 0.97 threshold), so the
detector's three 1x1 output heads are set so that detection always happens and is
decided by the real network:

* class head: bias +-5 so that only the 512-pixel anchor of the stride-32 level scores
  "face" (softmax ~0.99995 > 0.97);
* box head: width/height bias doubling that anchor to 1024 pixels: boxes whose centres
  are less than ~440 pixels apart overlap with IoU > 0.4, so NMS keeps one face in the
  bundled 256x256 photo (and about one per 440-pixel area in larger images);
* landmark head: bias = the FFHQ 5-point template GFPGAN aligns to (eyes, nose, mouth
  corners), scaled to an eye distance of ~48 pixels around the anchor centre;
* all three heads keep their random weights scaled by 1e-3 (class) / 1e-4 (boxes,
  landmarks): the backbone's features still move the scores and landmarks, so *which*
  face wins and where its landmarks land depend on every layer of the real forward.

Usage::

    from gfpgan_models import build, restorer
    folder = build()                      # cached under ~/.cache/dmlshim/gfpgan
    gfpganer = restorer(folder, device)   # a real gfpgan.GFPGANer
"""
import contextlib
import hashlib
import os
from pathlib import Path

import torch

GFPGAN_FILE = "GFPGANv1Clean.pth"
# GFPGANer(arch=...) -> the weight file build() writes for it
ARCH_FILES = {"clean": GFPGAN_FILE, "RestoreFormer": "RestoreFormer.pth"}
ARCHS = tuple(ARCH_FILES)
ARCH_LABELS = {"clean": "v1.4 (clean)", "RestoreFormer": "RestoreFormer"}
# GFPGANer archs that call basicsr's compiled CUDA ops (basicsr/ops/fused_act)
CUDA_OP_ARCHS = ("original", "bilinear")
REALESRGAN_FILE = "RealESRGAN_x2plus.pth"
REALESRGAN_GENERAL_FILE = "realesr-general-x4v3.pth"
DETECTION_FILE = "gfpgan/weights/detection_Resnet50_Final.pth"
PARSING_FILE = "gfpgan/weights/parsing_parsenet.pth"

# GFPGANer's face template (facexlib FaceRestoreHelper, 512x512 crop): left eye, right
# eye, nose, left and right mouth corner, in pixels.
FFHQ_TEMPLATE = ((192.98138, 239.94708), (318.90277, 240.1936), (256.63416, 314.01935),
                 (201.26117, 371.41043), (313.08905, 371.15118))
EYE_DISTANCE = 48.0          # pixels, about the astronaut's in examples/data/astronaut.jpg
FACE_LOGIT = 5.0             # class-head bias: +5 face / -5 background on the chosen anchor
CLASS_WEIGHT_SCALE = 1e-3
REGRESSION_WEIGHT_SCALE = 1e-4
BOX_GROWTH = 3.4657359     # box-head w/h bias: exp(3.4657 * variance 0.2) = 2, 1024-pixel boxes


def default_cache_dir():
    """``$DMLSHIM_CACHE/gfpgan``, else ``~/.cache/dmlshim/gfpgan``."""
    root = os.environ.get("DMLSHIM_CACHE") or Path.home() / ".cache" / "dmlshim"
    return Path(root) / "gfpgan"


def check_arch(arch):
    """Raise ValueError naming the allowed architectures unless ``arch`` is one."""
    if arch not in ARCH_FILES:
        hint = (f" ('{arch}' needs basicsr's compiled CUDA ops, see the README)"
                if arch in CUDA_OP_ARCHS else "")
        raise ValueError(f"GFPGAN arch {arch!r}: allowed values are {', '.join(ARCHS)}{hint}")


def build(cache_dir=None, *, seed=0, arch="clean"):
    """Write the random-weight files for ``arch`` (once per seed) and return their folder.

    Args:
        cache_dir: parent folder; default :func:`default_cache_dir`.
        seed: ``torch.manual_seed`` for the random initialisation.
        arch: one of ``ARCHS`` (GFPGANer's ``arch``).
    Returns:
        ``pathlib.Path`` of ``<cache_dir>/seed<seed>-<recipe>``; ``recipe`` hashes this
        file, so editing how the weights are made never reuses stale files.
    Raises:
        ValueError: an unknown ``arch``.
    """
    check_arch(arch)
    recipe = hashlib.sha1(Path(__file__).read_bytes()).hexdigest()[:8]
    folder = Path(cache_dir or default_cache_dir()) / f"seed{seed}-{recipe}"
    makers = {ARCH_FILES[arch]: lambda: {"params_ema": gfpgan_net(arch=arch).state_dict()},
              DETECTION_FILE: _detection_state, PARSING_FILE: _parsing_state}
    _write(folder, makers, seed)
    return folder


# RRDBNet x2 arguments: "real" = RealESRGAN_x2plus as inference_gfpgan.py builds it
RRDB_SIZES = {"real": {"num_feat": 64, "num_block": 23, "num_grow_ch": 32},
              "small": {"num_feat": 16, "num_block": 1, "num_grow_ch": 8}}


# SRVGGNetCompact arguments: "real" = realesr-general-x4v3 as Real-ESRGAN's
# inference_realesrgan.py builds it
SRVGG_SIZES = {"real": {"num_feat": 64, "num_conv": 32}, "small": {"num_feat": 16, "num_conv": 2}}


def realesrgan_file(folder, *, size="small", seed=0, kind="realesrgan"):
    """Write ``<release file>-<size>.pth`` of background upsampler ``kind`` (a key of
    ``BG_UPSAMPLERS``; random weights under ``params_ema``, as the release files) into
    ``folder`` once; return its path."""
    make, _, release = BG_UPSAMPLERS[kind]
    name = release.replace(".pth", f"-{size}.pth")
    _write(Path(folder), {name: lambda: {"params_ema": make(size).state_dict()}}, seed)
    return Path(folder) / name


def realesrgan_net(size="small"):
    """basicsr's ``RRDBNet`` x2 (``size``: a key of ``RRDB_SIZES``), random weights from
    the current seed, initialised by basicsr's own code."""
    from basicsr.archs.rrdbnet_arch import RRDBNet

    if size not in RRDB_SIZES:
        raise ValueError(f"RRDBNet size {size!r}: allowed values are {', '.join(RRDB_SIZES)}")
    return RRDBNet(num_in_ch=3, num_out_ch=3, scale=2, **RRDB_SIZES[size]).eval()


def srvgg_net(size="small"):
    """Real-ESRGAN's ``SRVGGNetCompact`` x4 with ``PReLU(num_feat)`` activations (``size``:
    a key of ``SRVGG_SIZES``), random weights from the current seed."""
    from realesrgan.archs.srvgg_arch import SRVGGNetCompact

    if size not in SRVGG_SIZES:
        raise ValueError(f"SRVGGNetCompact size {size!r}: allowed values are {', '.join(SRVGG_SIZES)}")
    return SRVGGNetCompact(num_in_ch=3, num_out_ch=3, upscale=4, act_type="prelu", **SRVGG_SIZES[size]).eval()


# --bg-upsampler -> (network maker, its scale, release file name)
BG_UPSAMPLERS = {"realesrgan": (realesrgan_net, 2, REALESRGAN_FILE),
                 "realesrgan-general": (srvgg_net, 4, REALESRGAN_GENERAL_FILE)}


def _write(folder, makers, seed):
    """Write each ``name: make()`` state into ``folder`` unless present (atomically)."""
    for name, make in makers.items():
        path = folder / name
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(seed)
                state = make()
            tmp = path.with_suffix(".tmp")
            torch.save(state, tmp)
            os.replace(tmp, path)        # a crash never leaves a half-written file behind


def restorer(folder, device, *, upscale=2, arch="clean", bg_upsampler=None):
    """``gfpgan.GFPGANer`` for the files in ``folder`` (from :func:`build`) on ``device``.

    ``bg_upsampler``: e.g. :func:`background_upsampler`'s RealESRGANer, or None.
    """
    from gfpgan import GFPGANer

    check_arch(arch)
    with working_folder(folder):
        gfpganer = GFPGANer(model_path=str(Path(folder, ARCH_FILES[arch]).resolve()),
                            upscale=upscale, arch=arch, channel_multiplier=2,
                            bg_upsampler=bg_upsampler, device=device)
    return gfpganer


def background_upsampler(device, *, half, folder=None, model_path=None, size="small", tile=400,
                         kind="realesrgan"):
    """``realesrgan.RealESRGANer`` as inference_gfpgan.py builds it (``tile`` pixels per
    tile, 0 = no tiling; ``tile_pad`` 10, ``pre_pad`` 0; ``half``: model and input in
    float16), on ``device``, for ``kind``: ``realesrgan`` (RRDBNet x2) or
    ``realesrgan-general`` (SRVGGNetCompact x4).

    Weights: ``model_path`` (the release .pth or its URL; ``size`` must then be "real"),
    else random ones of ``size`` written into ``folder``.
    """
    from realesrgan import RealESRGANer

    make, scale, _ = BG_UPSAMPLERS[kind]
    path = model_path or str(realesrgan_file(folder, size=size, kind=kind))
    upsampler = RealESRGANer(scale=scale, model_path=path, model=make(size), tile=tile,
                             tile_pad=10, pre_pad=0, half=half, device=device)
    if half:
        upsampler.pre_process = _pad_in_float32(upsampler)
    return upsampler


def _pad_in_float32(upsampler):
    """``pre_process`` that pads the input in float32 and then casts it to float16.

    RealESRGANer always reflection-pads its float16 input, and torch 2.4.1's CPU has no
    float16 ``reflection_pad2d`` ("not implemented for 'Half'"), so the CPU, and the
    emulated device, which computes with the CPU's kernels, fail where DirectML has a
    native kernel (routing table: DML_KERNEL). Padding only copies values, so padding
    before the cast gives the very same float16 tensor.
    """
    original = upsampler.pre_process

    def pre_process(img):
        upsampler.half = False
        try:
            original(img)
        finally:
            upsampler.half = True
        upsampler.img = upsampler.img.half()
    return pre_process


@contextlib.contextmanager
def working_folder(folder):
    """Run the body with ``folder`` as the working folder (``contextlib.chdir`` is 3.11+)."""
    previous = os.getcwd()
    os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(previous)


def gfpgan_net(out_size=512, arch="clean"):
    """The network ``GFPGANer(arch=arch, channel_multiplier=2)`` builds (gfpgan/utils.py),
    random weights from the current seed, StyleGAN2 noise strengths 0.1."""
    if arch == "RestoreFormer":
        from gfpgan.archs.restoreformer_arch import RestoreFormer
        return RestoreFormer().eval()
    from gfpgan.archs.gfpganv1_clean_arch import GFPGANv1Clean
    net = GFPGANv1Clean(out_size=out_size, num_style_feat=512, channel_multiplier=2,
                        decoder_load_path=None, fix_decoder=False, num_mlp=8,
                        input_is_latent=True, different_w=True, narrow=1, sft_half=True)
    return strengthen_noise(net).eval()


def strengthen_noise(net, strength=0.1):
    """Set every StyleGAN2 noise strength (``StyleConv.weight``, zero at init) of ``net``."""
    with torch.no_grad():
        for module in net.modules():
            if type(module).__name__ == "StyleConv":
                module.weight.fill_(strength)
    return net


def _detection_state():
    from facexlib.detection.retinaface import RetinaFace

    net = RetinaFace(network_name="resnet50", half=False, device="cpu")
    with torch.no_grad():
        for level, heads in enumerate(zip(net.ClassHead, net.BboxHead, net.LandmarkHead)):
            cls, box, landmark = (head.conv1x1 for head in heads)
            cls.weight.mul_(CLASS_WEIGHT_SCALE)
            box.weight.mul_(REGRESSION_WEIGHT_SCALE)
            landmark.weight.mul_(REGRESSION_WEIGHT_SCALE)
            box.bias.view(-1, 4).copy_(torch.tensor([0.0, 0.0, BOX_GROWTH, BOX_GROWTH]))
            # channels are (anchor, class) and (anchor, point, xy); anchor 1 = min_size 512
            cls.bias.view(-1, 2).copy_(torch.tensor([FACE_LOGIT, -FACE_LOGIT]))
            landmark.bias.zero_()
            if level == len(net.ClassHead) - 1:
                cls.bias.view(-1, 2)[1] = torch.tensor([-FACE_LOGIT, FACE_LOGIT])
                landmark.bias.view(-1, 10)[1] = _landmark_offsets(net.cfg)
    return net.state_dict()


def _landmark_offsets(cfg):
    """Landmark-head outputs that decode to the face template around an anchor centre.

    facexlib's ``decode_landm``: point = centre + output * variance[0] * anchor size.
    """
    anchor = cfg["min_sizes"][-1][-1]
    scale = EYE_DISTANCE / (FFHQ_TEMPLATE[1][0] - FFHQ_TEMPLATE[0][0])
    centre = 256.0      # the template's crop is 512 pixels wide
    offsets = [(coordinate - centre) * scale / (cfg["variance"][0] * anchor)
               for point in FFHQ_TEMPLATE for coordinate in point]
    return torch.tensor(offsets)


def _parsing_state():
    from facexlib.parsing.parsenet import ParseNet

    return ParseNet(in_size=512, out_size=512, parsing_ch=19).state_dict()
