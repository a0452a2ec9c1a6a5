"""``ScriptModule.to(dml)``: TorchScript modules move to the device (failure_modes.md #48).

``Module._apply`` changes a parameter in place (``.data =``) only when
``torch._has_compatible_shallow_copy_type`` holds, and that counts PrivateUse1 as no
"dense" backend (c10 ``TensorImpl::has_compatible_shallow_copy_type``, torch 2.4.1 and
2.13 alike).  So a move to or from DirectML takes the branch that builds a new
``nn.Parameter`` and asserts the old one is one: a module from ``torch.jit.load``
holds plain tensors (``AssertionError: param must be a Parameter``).  A scripted RNN
also keeps its ``_flat_weights`` list pointing at the old tensors (eager ``RNNBase._apply``
rebuilds it; a ScriptModule has no such hook), so its forward then fails with "Input and
parameter tensors are not at the same device".  The wrapper around
``RecursiveScriptModule._apply`` fixes both, only for moves to or from the target device.
See docs/rnn.md.
"""
from __future__ import annotations

import torch
from torch.nn import Parameter

from .. import _torch_compat
from ._wrap import Context, PatchSet
from ._patch import Patch

PATCH = Patch("jit", "ScriptModule.to(dml) asserts 'param must be a Parameter' (PrivateUse1 is no dense "
                     "backend for Module._apply; failure_modes.md #48): loaded plain tensors become "
                     "Parameters, scripted RNNs' _flat_weights are refreshed")

_patches = PatchSet(__name__)


def _crosses(t: torch.Tensor, fn, target: str) -> bool:
    """Would ``fn`` move ``t`` to or from ``target`` along ``_apply``'s new-Parameter
    branch?  Decided on an empty tensor like ``t`` (no copy of its data)."""
    with torch.no_grad():
        probe = fn(t.new_empty(0))
    return (target in (t.device.type, probe.device.type)
            and not _torch_compat.has_compatible_shallow_copy_type(t, probe))


def _as_parameters(module, fn, target: str) -> None:
    """Plain-tensor parameters of ``module`` (a loaded ScriptModule) that ``fn`` moves
    across the target device become ``nn.Parameter`` s of the same data, as a scripted
    module's are, so ``Module._apply`` accepts them."""
    for key, t in module._parameters.items():
        if t is not None and not isinstance(t, Parameter) and _crosses(t, fn, target):
            module._parameters[key] = Parameter(t, t.requires_grad)


def _refresh_flat_weights(module) -> None:
    """A scripted ``nn.LSTM``/``nn.GRU``/``nn.RNN``: ``_flat_weights`` rebuilt from its
    parameters, as eager ``RNNBase._init_flat_weights`` does after ``_apply``."""
    if not module._c.hasattr("_flat_weights_names"):
        return
    names = module._flat_weights_names
    fresh = [getattr(module, n) if hasattr(module, n) else None for n in names]
    if any(a is not b for a, b in zip(module._flat_weights, fresh)):
        module._c.setattr("_flat_weights", fresh)


def install(ctx: Context) -> None:
    def apply(wrapped, instance, args, kwargs):
        fn = args[0] if args else kwargs["fn"]
        _as_parameters(instance, fn, ctx.target)
        result = wrapped(*args, **kwargs)
        _refresh_flat_weights(instance)
        return result

    _patches.wrap(ctx, torch.jit.RecursiveScriptModule, "_apply", apply)


def uninstall() -> None:
    _patches.restore()
