"""Pure-PyTorch stand-ins for torchvision's compiled ops, for machines where they cannot load.

Why this exists: the torchvision wheel that the package registry serves for some torch
versions is a CUDA build. On a machine without the CUDA libraries its ``_C`` extension
fails to load, and ``import torchvision`` then dies inside
``torchvision/_meta_registrations.py`` with ``RuntimeError: operator torchvision::nms does
not exist``. That is our Linux CI here (torch 2.13.0+cpu, torchvision 0.28.0); it is not
what real users have: on Windows with torch-directml (torch 2.4.1, torchvision 0.19.1 CPU
wheel) ``_C`` loads and :func:`apply` does nothing.

:func:`apply` touches nothing unless ``torchvision::nms`` is missing *and* torchvision's
own library fails to load. Only then it:

* defines the two schemas that torchvision registers fake kernels for at import time
  (``torchvision::nms``, ``torchvision::qnms``), so ``import torchvision`` succeeds;
* gives ``nms`` a CPU kernel: the greedy algorithm of torchvision's
  ``ops/cpu/nms_kernel.cpp`` (stable descending sort, suppress while IoU > threshold).
  facexlib's RetinaFace (``py_cpu_nms``) is the only caller in the GFPGAN pipeline;
* lets ``torchvision.ops.nms`` through ``_assert_has_ops`` (``torchvision.ops.boxes``).

Other compiled ops (roi_align, deform_conv2d, ``qnms`` ...) stay unavailable and keep
raising torchvision's own "Couldn't load custom C++ ops" error.

Call :func:`apply` before anything imports torchvision; the examples, tests and
benchmarks here do. It imports nothing itself: the work happens in wrapt post-import
hooks on ``torch`` (which torchvision imports first) and ``torchvision.ops.boxes``, so
tests can still import torch, torchvision and the rest in any order.
"""
import glob
import importlib.util
import os

import wrapt

_library = None  # keeps the torch.library registrations alive


def apply():
    """Define the missing ops once torch is imported, if :func:`needed` (idempotent)."""
    wrapt.register_post_import_hook(_define, "torch")


def needed():
    """True when ``torchvision::nms`` is not registered and torchvision's ``_C`` will not load."""
    import torch

    spec = importlib.util.find_spec("torchvision")
    if spec is None or _registered("nms"):
        return False
    for folder in spec.submodule_search_locations or ():
        for path in glob.glob(os.path.join(folder, "_C.*")):
            try:
                torch.ops.load_library(path)  # what torchvision.extension does itself
            except OSError:
                continue
            if _registered("nms"):
                return False
    return True


def defined():
    """True once this module has defined the ops (only on machines that need it)."""
    return _library is not None


def _define(torch):
    global _library
    if _library is not None or not needed():
        return
    lib = torch.library.Library("torchvision", "DEF")
    lib.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    lib.define("qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    lib.impl("nms", nms, "CPU")
    _library = lib
    wrapt.register_post_import_hook(_allow_boxes_ops, "torchvision.ops.boxes")


def nms(dets, scores, iou_threshold):
    """Non-maximum suppression, as torchvision's CPU kernel computes it.

    dets: float[N, 4] boxes (x1, y1, x2, y2); scores: float[N]; iou_threshold: float.
    Returns int64[K]: indices of the kept boxes, highest score first.
    """
    import torch

    if dets.numel() == 0:
        return torch.empty(0, dtype=torch.long, device=dets.device)
    x1, y1, x2, y2 = dets.unbind(1)
    areas = (x2 - x1) * (y2 - y1)
    order = scores.sort(stable=True, descending=True).indices
    suppressed = torch.zeros(len(order), dtype=torch.bool, device=dets.device)
    keep = []
    for i in order.tolist():
        if suppressed[i]:
            continue
        keep.append(i)
        w = (torch.minimum(x2[i], x2) - torch.maximum(x1[i], x1)).clamp(min=0)
        h = (torch.minimum(y2[i], y2) - torch.maximum(y1[i], y1)).clamp(min=0)
        inter = w * h
        iou = inter / (areas[i] + areas - inter)
        suppressed |= iou.double() > iou_threshold     # C++ compares the float IoU as a double
    return torch.tensor(keep, dtype=torch.long, device=dets.device)


def _registered(name):
    import torch

    try:
        getattr(torch.ops.torchvision, name)
    except (AttributeError, RuntimeError):
        return False
    return True


def _allow_boxes_ops(boxes):
    # boxes.nms calls _assert_has_ops(), which checks that _C loaded; our kernel stands in.
    boxes._assert_has_ops = lambda: None
