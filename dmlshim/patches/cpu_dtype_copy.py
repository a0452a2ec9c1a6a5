"""A copy from the device to the CPU that also changes the dtype keeps the source's dtype.

On the real torch-directml 0.2.5 binary ``x.to("cpu", torch.uint8)``, ``x.to(device="cpu",
dtype=...)``, ``x.type(torch.IntTensor)`` and ``aten._to_copy(x, dtype=, device=cpu)`` give a
CPU tensor of ``x``'s dtype, its values unconverted; device to device and CPU to device with a
dtype are right.  The fix, a hook of the dispatcher net's ``_to_copy`` kernel: the copy to the
CPU in the source's dtype (the call again without ``dtype=``, so the other hooks see it:
channels_last's format), then the CPU's own cast.  One defect in one module: its catalogue
row, its emulator rule and its fix (docs/internals.md, "Adding a defect").
"""
from __future__ import annotations

import torch

from ..catalogue.defect import MEASURED, Defect
from ..catalogue.probes import case_probe
from . import _gate, _select, dispatcher
from ._patch import Patch
from .dispatcher import Done

SOURCE = "failure_modes.md #24; Comfy-Org/ComfyUI#3539 (PR#6300); measured on the real 0.2.5 binary"
SUMMARY = ("a copy from the device to the CPU that changes the dtype keeps the source's: "
           "`x.to('cpu', torch.uint8)`, `x.type(torch.IntTensor)` stay float32, values unconverted "
           "(silent; then 'TypeError: Cannot handle this data type')")

PATCH = Patch("cpu_dtype_copy", f"{SUMMARY}: copied over in its own dtype, cast on the CPU ({SOURCE})",
              # both hook the net's _to_copy: this one's copy over, without the dtype, reaches
              # channels_last's hook for a memory_format= as any other call does
              before=("channels_last",))


# ---------------------------------------------------------------- the defect

def _cpu_dtype_copy(device):
    """An f32[4] of fractions (one negative) copied from the device to the CPU as int32 in one
    `.to("cpu", torch.int32)`"""
    return torch.tensor([0.5, 1.75, -2.5, 300.25]).to(device).to("cpu", torch.int32)


DEFECTS = (Defect("cpu_dtype_copy", "#24", SOURCE, SUMMARY, case_probe(_cpu_dtype_copy),
                  ("cpu_dtype_copy", "dispatcher:_to_copy"), found=MEASURED,
                  rules=("_to_cpu_with_a_dtype", "_in_its_own_dtype"), topic="memory"),)


def _to_cpu_with_a_dtype(self, *_, dtype=None, device=None, **__):
    """The emulator's rule: a copy of a device tensor to the CPU that also changes the dtype."""
    return (dtype is not None and device is not None and torch.device(device).type == "cpu"
            and self.device.type == "privateuseone" and dtype != self.dtype)


def _in_its_own_dtype(self, *_, **__):
    """What the real binary gives: the source's dtype, values unconverted, the source's strides
    (whatever the format: a format and a dtype lose both)."""
    from ..emulation import _backend
    return _backend.host(self).to(self.dtype, copy=True)


def emulated_rules():
    """The emulator's rule of the defect (before the channels-last copy's own, which it takes)."""
    from ..emulation.rules import Rule
    return (Rule("_to_copy", when=_to_cpu_with_a_dtype, replace=_in_its_own_dtype, source=SOURCE),)


# ---------------------------------------------------------------- the fix

# what the CPU cast takes from the call; the copy over takes the rest, less pin_memory and
# non_blocking
_CAST = ("layout", "memory_format", "pin_memory")
_aten = torch.ops.aten


def _to_copy_to(target: str):
    """The net's ``_to_copy`` hook for ``target`` (the device type): a copy of a ``target``
    tensor to the CPU with another ``dtype=`` becomes the copy over in its own dtype, then
    ``_to_copy`` on the CPU to the dtype (with the call's layout, memory format and pinning)."""
    @_gate.watching(_gate.Watch(device_arg=True))
    def fix(op, args, kwargs):
        dtype, device = kwargs.get("dtype"), kwargs.get("device")
        if dtype is None or device is None or _select.aside():
            return None
        self = args[0]
        if self.device.type != target or dtype == self.dtype or torch.device(device).type != "cpu":
            return None
        # blocking: the cast reads it at once (a non_blocking copy freed so corrupts the heap
        # on the real 0.2.5 binary: malloc() aborts, measured)
        over = {k: v for k, v in kwargs.items() if k not in ("dtype", "pin_memory", "non_blocking")}
        copied = op(self, *args[1:], **over)       # through the net again: the other hooks see it
        cast = {k: kwargs[k] for k in _CAST if k in kwargs}
        return Done(_aten._to_copy.default(copied, dtype=dtype, **cast))
    return fix


_hook = dispatcher.Hook(__name__, "_to_copy", _to_copy_to)
install, uninstall = _hook.install, _hook.uninstall
