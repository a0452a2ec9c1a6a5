"""``Tensor.new(...)`` refused on the device (failure_modes.md #11; DirectML#400, #415).

torch 2.0 (torch-directml <= 0.2.0) refuses the legacy constructor on ``PrivateUse1``
tensors; torch 2.4.1 accepts it (:mod:`dmlshim.emulation.legacy_new`).  So this patch
passes every call through and acts only when that refusal is raised: ``x.new()``,
``x.new(size...)`` and ``x.new(sequence)`` are built on a CPU tensor of ``x``'s dtype
and moved to the device; ``x.new(tensor)`` is an alias, as torch makes it;
``x.new(storage)`` is not rescued.  Action ``coerce``.

On torch-directml 0.2.5 (the real binary) ``x.new()`` and ``x.new(size)`` work but land
on ``privateuseone`` without ``x``'s index (torch's legacy constructor asks ``empty`` for
``Device(PrivateUse1)`` and the kernel keeps it), so ``x.new(2) + x`` raises "Expected
all tensors to be on the same device"; such a result is made again with
``x.new_empty`` (its values are uninitialized either way).  Action ``coerce``.

Each form, and why not sdnext's fix: docs/fixes.md ("Tensor.new: the evidence")."""
from __future__ import annotations

import torch

from ._wrap import Context, PatchSet
from ._patch import FALLBACK_MODES, Patch

PATCH = Patch("legacy_new", "Tensor.new(...) refused on PrivateUse1 by torch 2.0 (torch-directml <= 0.2.0; "
                            "failure_modes.md #11, DirectML#400, #415): rebuild each legacy form on the device; "
                            "passes through where torch accepts it (2.4.1)", modes=FALLBACK_MODES)

_patches = PatchSet(__name__)
_REFUSAL = ("new(): expected key in", "new(): expected DispatchKey")   # torch 2.0 / 1.x texts


def _is_refusal(exc: BaseException) -> bool:
    return isinstance(exc, RuntimeError) and str(exc).startswith(_REFUSAL)


def _new(func, args, kwargs):
    try:
        result = func(*args, **kwargs)
        if _lost_index(args[0], result):
            return "coerce", args[0].new_empty(result.shape)
        return "pass", result
    except RuntimeError as exc:
        if not _is_refusal(exc):
            raise
        refusal = exc
    result = legacy_new(func, args[0], args[1:], kwargs)
    if result is None:
        raise refusal
    return "coerce", result


def _lost_index(base: torch.Tensor, result: torch.Tensor) -> bool:
    # only a size form, on the device, without the index base has (defect new_device_index)
    return (result.device.type == "privateuseone" == base.device.type
            and result.device.index is None and base.device.index is not None)


def legacy_new(func, base: torch.Tensor, args: tuple, kwargs: dict):
    """What ``base.new(*args, **kwargs)`` returns on the CPU, on ``base``'s device;
    None for a form this cannot rebuild (a storage).  ``func`` is the original
    ``Tensor.new``.

    Raises:
        TypeError: ``base.new(tensor)`` with a tensor of another dtype or device
            (torch's own check), or arguments torch's parser refuses.
    """
    if any(isinstance(a, (torch.UntypedStorage, torch.TypedStorage)) for a in args):
        return None
    if len(args) == 1 and isinstance(args[0], torch.Tensor) and not kwargs:
        other = args[0]
        if other.dtype != base.dtype or other.device != base.device:
            raise TypeError(f"new(): expected a tensor of dtype {base.dtype} on {base.device} "
                            f"(got {other.dtype} on {other.device})")
        return torch.ops.aten.alias(other)
    kwargs = dict(kwargs)
    device = torch.device(kwargs.pop("device", None) or base.device)
    if device.type != base.device.type:
        raise TypeError(f"new(): legacy constructor expects device type {base.device.type} "
                        f"but device type {device.type} was passed")
    return func(torch.empty(0, dtype=base.dtype), *args, **kwargs).to(device)


def install(ctx: Context) -> None:
    _patches.intercept(ctx, torch.Tensor, "new", _new, op="Tensor.new")


def uninstall() -> None:
    _patches.restore()
