"""Lazy modules (``nn.LazyConv2d``, ``nn.LazyLinear``, ``nn.LazyBatchNorm1d`` ...) moved to the
device before their first forward: 'weight should have at least three dimensions' (OpInfo's
``nn.LazyConv*`` module samples, the emulator and the real 0.2.5 binary alike).

As for ``jit`` (this module's sibling): ``Module._apply`` keeps a parameter's class only when
``torch._has_compatible_shallow_copy_type`` holds, and PrivateUse1 is no dense backend, so a
move to the device builds a plain ``nn.Parameter`` (of no elements) in place of the
``UninitializedParameter``; the first forward then sees nothing to materialize.  The wrapper
``_apply`` given to ``LazyModuleMixin`` (which has none: lazy modules reach Module's through
it) puts an uninitialized parameter or buffer of the new device and dtype back where one was,
only for moves to the target device.
"""
from __future__ import annotations

import torch
from torch.nn.modules.lazy import LazyModuleMixin
from torch.nn.parameter import UninitializedBuffer, UninitializedParameter, is_lazy

from ._wrap import Context
from ._patch import Patch

PATCH = Patch("lazy_modules", "a lazy module (nn.LazyConv2d, LazyLinear ...) moved to the device before its first "
                              "forward loses its uninitialized parameters (PrivateUse1 is no dense backend; "
                              "'weight should have at least three dimensions'): put back, of the new device")

_installed = []                 # the Context while installed


def _apply(self, *args, **kwargs):
    """``Module._apply`` (the next class's, past the mixin), an uninitialized parameter or
    buffer put back where the move to the target device made a plain one."""
    lazy = [(table, key, value) for table in (self._parameters, self._buffers)
            for key, value in table.items() if value is not None and is_lazy(value)]
    result = super(LazyModuleMixin, self)._apply(*args, **kwargs)
    if _installed and _installed[0].active:
        target = _installed[0].target
        for table, key, old in lazy:
            new = table.get(key)
            if new is not None and not is_lazy(new) and new.device.type == target:
                make = UninitializedParameter if table is self._parameters else UninitializedBuffer
                table[key] = make(requires_grad=old.requires_grad, device=new.device, dtype=new.dtype)
    return result


def install(ctx: Context) -> None:
    """``LazyModuleMixin._apply`` (the mixin has none: lazy modules get Module's through it)."""
    if not _installed:
        _installed.append(ctx)
        LazyModuleMixin._apply = _apply


def uninstall() -> None:
    if _installed:
        _installed.clear()
        if LazyModuleMixin.__dict__.get("_apply") is _apply:
            del LazyModuleMixin._apply
