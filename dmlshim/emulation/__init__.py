"""An emulated DirectML device for machines without one.

``install()`` turns PyTorch's ``privateuseone`` device into a stand-in for
torch-directml 0.2.5 (torch 2.4.1): tensors are plain ``torch.Tensor`` with
real storage on ``privateuseone:0``; arithmetic runs on the CPU underneath and
is bit-identical to it. Tests and ``python -m dmlshim check`` use it to see
what would break on real DirectML hardware.
"""
import threading

import torch

from . import _backend

__all__ = ["install", "is_installed"]

_lock = threading.Lock()
_installed = False


def install() -> torch.device:
    """Install the emulated device (idempotent, process-wide).

    Returns:
        ``torch.device("privateuseone:0")``.

    Raises:
        RuntimeError: if another backend already claimed PrivateUse1 in this
            process (e.g. torch_directml was imported).
    """
    global _installed
    with _lock:
        if not _installed:
            _backend.register()
            _installed = True
    return _backend.DEVICE


def is_installed() -> bool:
    """Whether :func:`install` has run in this process."""
    return _installed
