"""facexlib's device defaults never pick DirectML.

facexlib (0.3.0) builds its models with device defaults that know only CUDA:
``init_detection_model(..., device='cuda')`` and ``init_parsing_model(..., device='cuda')``
(``detection/__init__.py``, ``parsing/__init__.py``), and ``device=None`` meaning
"cuda if available else cpu" in ``RetinaFace.__init__`` and ``FaceRestoreHelper.__init__``.
facexlib 0.2.5 also fixes a module-level ``device`` in ``detection/retinaface.py:14``.
On a DirectML machine without CUDA the helpers crash ("Torch not compiled with CUDA
enabled") or the models silently stay on the CPU.

Fix: a call that does not pass ``device`` gets ``dmlshim.select_device()`` (CUDA >
DirectML > ... > CPU, ``DMLSHIM_DEVICE`` overrides), evaluated at call time; an explicit
``device`` is never changed. The module-level ``device`` of 0.2.5 is replaced at install
and restored at uninstall (only while it still holds our value).
"""
from __future__ import annotations

import inspect
import sys

import torch

from .. import devices
from ..patches._wrap import Context, PatchSet
from ..patches._patch import Patch

PATCH = Patch("facexlib", "facexlib's device defaults know only CUDA: calls without device= get "
                          "select_device()", imports=("facexlib",))

_patches = PatchSet(__name__)

# Every alias is listed: facexlib re-exports with ``from .x import *`` and
# face_restoration_helper binds the init_* helpers by name at its import.
_DEFAULTS = (
    ("facexlib.detection", "init_detection_model"),
    ("facexlib.parsing", "init_parsing_model"),
    ("facexlib", "init_detection_model"),
    ("facexlib.utils.face_restoration_helper", "init_detection_model"),
    ("facexlib.utils.face_restoration_helper", "init_parsing_model"),
    ("facexlib.detection.retinaface", "RetinaFace.__init__"),
    ("facexlib.utils.face_restoration_helper", "FaceRestoreHelper.__init__"),
)

_RETINAFACE = "facexlib.detection.retinaface"
_module_device = None   # (our device, the one we replaced) for facexlib 0.2.5


def default_device(wrapped, instance, args, kwargs):
    """wrapt wrapper: a call that leaves ``device`` unset (or None) gets
    ``dmlshim.select_device()``; an explicit device is kept."""
    signature = inspect.signature(wrapped)
    if "device" in signature.parameters and \
            signature.bind_partial(*args, **kwargs).arguments.get("device") is None:
        kwargs = {**kwargs, "device": devices.select_device()}
    return wrapped(*args, **kwargs)


def install(ctx: Context) -> None:
    global _module_device
    for module, attr in _DEFAULTS:
        if _has(module, attr):
            _patches.wrap(ctx, module, attr, default_device)
    retinaface = sys.modules.get(_RETINAFACE)
    if isinstance(getattr(retinaface, "device", None), torch.device):     # facexlib 0.2.5
        _module_device = (devices.select_device(), retinaface.device)
        retinaface.device = _module_device[0]


def uninstall() -> None:
    global _module_device
    _patches.restore()
    retinaface = sys.modules.get(_RETINAFACE)
    if _module_device is not None and getattr(retinaface, "device", None) is _module_device[0]:
        retinaface.device = _module_device[1]
    _module_device = None


def _has(module: str, attr: str) -> bool:
    """False only when ``module`` is imported and lacks ``attr`` (another facexlib
    version); a module not imported yet is wrapped lazily on its import."""
    obj = sys.modules.get(module)
    if obj is None:
        return True
    for part in attr.split("."):
        obj = getattr(obj, part, None)
    return obj is not None

