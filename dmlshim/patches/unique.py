"""``unique(return_counts=True)`` is refused by DirectML.

``RuntimeError: Return counts not implemented for unique operator for DirectML.``
(microsoft/DirectML#410, 0.1.13; unknown on 0.2.5, whose ``_unique2`` is a DML kernel;
failure_modes.md #47).  Such a call runs on the CPU, its results come back to the device.
Docs: docs/reported-defects.md.
"""
from __future__ import annotations

import torch

from . import _select
from ._patch import Patch

PATCH = Patch("unique", "unique(return_counts=True) refused (DirectML#410; #47): on the CPU")


def _counts(op, keyset, args, kwargs):
    counts = args[3] if len(args) > 3 else kwargs.get("return_counts", False)
    return _select.on_cpu(op, args, kwargs) if counts else None


_kernels = _select.Kernels(__name__, {torch.ops.aten._unique2.default: _counts})
install, uninstall = _kernels.install, _kernels.uninstall
