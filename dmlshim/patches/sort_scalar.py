"""``sort`` of a 0-dim or empty tensor on the real torch-directml 0.2.5 binary: a 0-dim
tensor's values come back 0 (``sort(tensor(1.5))`` gives ``(0., 0)``: never written;
``argsort`` is right), and its ``sort.values_stable`` kernel returns, for a 0-dim or an
empty input, tensors that are not its outs and not valid: a C++ caller ignores them, but
a Python kernel between them (the dispatcher net's ``out=`` write-back) that reads one
ends the process (signal 11; OpInfo's ``sort``/``argsort`` samples, all of them, measured).
Such calls run on the CPU, before the kernel: nothing to compute.  Static: the probe's
call (the out= kernel) would end the process.  No public report (docs/conformance.md).
"""
from __future__ import annotations

import torch

from . import _select
from ._patch import Patch

PATCH = Patch("sort_scalar", "sort of a 0-dim tensor gives 0, of a 0-dim or empty one returns invalid tensors "
                             "that end the process when read (measured on the real 0.2.5 binary): on the CPU",
              # before int_range's, which answers every int64 sort on the device (the emulator's
              # rules keep the same order)
              before=("int_range",))

_aten = torch.ops.aten
OVERLOADS = (_aten.sort.default, _aten.sort.stable, _aten.sort.values, _aten.sort.values_stable)


def _scalar_or_empty(op, keyset, args, kwargs):
    self = args[0] if args else kwargs["self"]
    if self.dim() and self.numel():
        return None
    return _select.on_cpu(op, args, kwargs)


_kernels = _select.Kernels(__name__, {op: _scalar_or_empty for op in OVERLOADS})
install, uninstall = _kernels.install, _kernels.uninstall
