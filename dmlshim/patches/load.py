"""``torch.load(f, map_location="privateuseone:0")`` fails on DirectML.

``TypeError: '>=' not supported between instances of 'torch.device' and 'int'``
(nomadkaraoke/python-audio-separator PR#295; microsoft/DirectML#466; failure_modes.md #46):
torch moves each storage with ``with torch.privateuseone.device(device):`` and
torch-directml's ``device(device_id)`` compares its argument with an int.  The fix gives
that function the device's index instead of a ``torch.device`` (or a device string), so
every ``map_location`` form (string, ``torch.device``, dict, callable) and
``UntypedStorage.to(dml)`` load straight to the device, with no copy through the CPU.
Docs: docs/reported-defects.md.
"""
from __future__ import annotations

import functools

import torch

from ._select import aside
from ._wrap import Context, PatchSet

_patches = PatchSet(__name__)


def _index_of(target: str):
    def to_index(device_id):
        if isinstance(device_id, str):
            device_id = torch.device(device_id)
        if isinstance(device_id, torch.device) and device_id.type == target:
            return device_id.index or 0
        return device_id
    return to_index


def install(ctx: Context) -> None:
    module = getattr(torch, ctx.target, None)
    if module is None or not callable(getattr(module, "device", None)):
        return
    to_index = _index_of(ctx.target)

    def make_proxy(replaced):
        func = replaced.__func__ if isinstance(replaced, staticmethod) else replaced

        @functools.wraps(func)
        def device(device_id=None, *args, **kwargs):
            if ctx.active and not aside():     # probes see the raw device
                device_id = to_index(device_id)
            return func(device_id, *args, **kwargs)
        return device
    _patches.replace(module, "device", make_proxy)


def uninstall() -> None:
    _patches.restore()
