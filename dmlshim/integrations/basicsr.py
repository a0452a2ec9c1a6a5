"""basicsr 1.4.2 imports a torchvision module that no longer exists.

``basicsr/data/degradations.py:8`` does ``from torchvision.transforms.functional_tensor
import rgb_to_grayscale``; torchvision deprecated that module in 0.15 and removed it in
0.17 (it is ``torchvision.transforms._functional_tensor`` now). torch-directml 0.2.5
pins torchvision 0.19.1 (failure_modes.md #37), so ``import basicsr`` (and with it
``import gfpgan``) fails with ``ModuleNotFoundError`` on every DirectML install.

Fix: when torchvision is imported (the registry installs this module on that import,
before basicsr's own import line runs), register the old name as an alias of the new
module in ``sys.modules`` and as an attribute of ``torchvision.transforms``. Nothing is
done when torchvision still ships the old module. ``uninstall()`` removes the alias
only while it is still ours; modules that already imported it keep their reference.

Limit: ``dmlshim.activate()`` must run before basicsr is first imported, since basicsr
fails inside its own import before any hook could act (torch, torchvision and facexlib
may come in any order).
"""
from __future__ import annotations

import importlib
import importlib.util
import sys
from ..patches._patch import Patch

PATCH = Patch("basicsr", "basicsr 1.4.2 imports torchvision.transforms.functional_tensor, removed in "
                         "torchvision 0.17 (tdml 0.2.5 pins 0.19.1, failure_modes.md #37): alias it",
              imports=("torchvision",), anywhere=True)

OLD = "torchvision.transforms.functional_tensor"
NEW = "torchvision.transforms._functional_tensor"

_alias = None  # the module object we registered under OLD


def install(ctx) -> None:
    global _alias
    if _alias is not None or OLD in sys.modules or importlib.util.find_spec(OLD) is not None:
        return
    _alias = importlib.import_module(NEW)
    sys.modules[OLD] = _alias
    setattr(sys.modules["torchvision.transforms"], "functional_tensor", _alias)


def uninstall() -> None:
    global _alias
    if _alias is None:
        return
    if sys.modules.get(OLD) is _alias:
        del sys.modules[OLD]
    transforms = sys.modules["torchvision.transforms"]
    if getattr(transforms, "functional_tensor", None) is _alias:
        delattr(transforms, "functional_tensor")
    _alias = None
