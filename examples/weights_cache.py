"""Where the converters put what they convert (``realesrgan_weights``, ``retinaface_weights``),
and how: ``$DMLSHIM_CACHE/<name>``, else ``$XDG_CACHE_HOME/dmlshim/<name>``
(``~/.cache/dmlshim/<name>``); a checkpoint written whole or not at all."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

import torch


def cache_dir(name: str) -> Path:
    """The converter ``name``'s folder (not made here)."""
    root = os.environ.get("DMLSHIM_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "dmlshim")
    return Path(root) / name


def save_whole(obj, target: Path) -> Path:
    """``torch.save(obj)`` to ``target`` through a temp file beside it: a failure leaves nothing."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=target.parent, suffix=".part", delete=False) as f:
        try:
            torch.save(obj, f)
        except BaseException:
            f.close()
            os.unlink(f.name)
            raise
    os.replace(f.name, target)
    return target
