"""A non-blocking copy from the device to the CPU reads memory the device has freed.

On the real torch-directml 0.2.5 binary ``x.to("cpu", non_blocking=True)`` of a device tensor
comes back as zeros or garbage (``-6.4e9``, ``2e26``) and corrupts the process's heap: a later
allocation aborts (``malloc(): unaligned tcache chunk detected``).  ComfyUI turns such copies
off for DirectML.  The fix, a hook of the dispatcher net's ``_to_copy`` kernel: the same copy,
blocking (the call again without ``non_blocking``, so the other hooks see it).  A blocking
copy is what the user gets anyway: DirectML has no pinned-memory stream to overlap it with.
Static (never probed): a probe would corrupt the heap of the process that runs it.  One defect
in one module (docs/internals.md, "Adding a defect").
"""
from __future__ import annotations

import torch

from ..catalogue.defect import MEASURED, Defect
from . import _gate, _select, dispatcher
from ._patch import Patch
from .dispatcher import Done

SOURCE = ("failure_modes.md #56; Comfy-Org/ComfyUI bf3e334d (non-blocking copies off for DirectML); "
          "measured on the real 0.2.5 binary")
SUMMARY = ("`x.to('cpu', non_blocking=True)` of a device tensor gives zeros or garbage and corrupts "
           "the heap (a later allocation aborts: 'malloc(): unaligned tcache chunk detected')")

PATCH = Patch("non_blocking_copy", f"{SUMMARY}: made blocking ({SOURCE})",
              # it makes its call again from the top, without non_blocking, so the other hooks
              # of the net's _to_copy then see it (cpu_dtype_copy's dtype, channels_last's format)
              before=("cpu_dtype_copy", "channels_last"))

def _repro(device):
    """`(x * k).to("cpu", non_blocking=True)` of an f32[3, 4] ramp for k = 1..8, stacked (a race:
    the first copies may be right; run in a child of its own, it may corrupt the heap)."""
    ramp = torch.arange(12.0).view(3, 4)
    return torch.stack([(ramp.to(device) * k).to("cpu", non_blocking=True) for k in range(1, 9)])


# static: probing it would corrupt the heap of the process that probes
DEFECTS = (Defect("non_blocking_copy", "#56", SOURCE, SUMMARY, None,
                  ("non_blocking_copy", "dispatcher:_to_copy"), found=MEASURED,
                  rules=("_non_blocking_to_cpu", "_freed"), repro=_repro, topic="memory"),)


# ---------------------------------------------------------------- the defect, as the emulator has it

def _non_blocking_to_cpu(self, *_, device=None, non_blocking=False, **__):
    """The emulator's rule: a non-blocking copy of a device tensor to the CPU."""
    return (non_blocking and device is not None and torch.device(device).type == "cpu"
            and self.device.type == "privateuseone")


def _freed(self, *_, dtype=None, memory_format=None, **__):
    """What the real binary gives, freed memory read: zeros here (there, zeros or garbage, and a
    corrupted heap the emulator does not model)."""
    return torch.zeros(self.shape, dtype=dtype or self.dtype)


def emulated_rules():
    """The emulator's rule of the defect."""
    from ..emulation.rules import Rule
    return (Rule("_to_copy", when=_non_blocking_to_cpu, replace=_freed, source=SOURCE),)


# ---------------------------------------------------------------- the fix

def _to_copy_to(target: str):
    """The net's ``_to_copy`` hook for ``target`` (the device type): a non-blocking copy of a
    ``target`` tensor to the CPU made again, blocking, from the top (the other hooks see it)."""
    @_gate.watching(_gate.Watch(device_arg=True))
    def fix(op, args, kwargs):
        if not kwargs.get("non_blocking") or kwargs.get("device") is None or _select.aside():
            return None
        self = args[0]
        if self.device.type != target or torch.device(kwargs["device"]).type != "cpu":
            return None
        return Done(op(*args, **{k: v for k, v in kwargs.items() if k != "non_blocking"}))
    return fix


_hook = dispatcher.Hook(__name__, "_to_copy", _to_copy_to)
install, uninstall = _hook.install, _hook.uninstall
