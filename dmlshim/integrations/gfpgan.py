"""GFPGAN (1.3.8) on DirectML: device default, reproducible StyleGAN2 noise, no silent failures.

1. ``GFPGANer(..., device=None)`` gets ``dmlshim.select_device()`` instead of
   "cuda if available else cpu" (``gfpgan/utils.py:37``).
2. StyleGAN2 noise (``new_empty(...).normal_()``, ``archs/stylegan2_clean_arch.py:132``)
   is drawn from the CPU default generator and moved to the device: no device
   ``Generator`` on DirectML (failure_modes.md #35, #39), so one seed gives one image
   on every device (op ``StyleConv.noise``, action ``cpu``).
3. The ``RuntimeError`` that ``GFPGANer.enhance`` swallows (``gfpgan/utils.py:129``) is
   logged on logger ``dmlshim`` and counted (op ``GFPGANer.enhance``, action ``error``).

Details (noise sizes, the ``print`` hook): docs/gfpgan.md ("What dmlshim patches")."""
from __future__ import annotations

import builtins
import math
import sys
import time

import torch

from .. import trace
from ..patches._wrap import Context, PatchSet
from .facexlib import default_device
from ..patches._patch import Patch

PATCH = Patch("gfpgan", "GFPGANer device default; StyleGAN2 noise from the CPU generator (no device "
                        "Generator, failure_modes.md #35); log the RuntimeError GFPGANer.enhance swallows",
              imports=("gfpgan",))

_patches = PatchSet(__name__)

_STYLECONV = ("gfpgan.archs.stylegan2_clean_arch", "gfpgan.archs.stylegan2_bilinear_arch")
_UTILS = "gfpgan.utils"
_print = None           # our module-level print in gfpgan.utils while installed


def install(ctx: Context) -> None:
    global _print
    _patches.wrap(ctx, _UTILS, "GFPGANer.__init__", default_device)
    for module in _STYLECONV:
        _patches.wrap(ctx, module, "StyleConv.forward", _noise_from_cpu(ctx))
    utils = sys.modules.get(_UTILS)
    if utils is not None and "print" not in vars(utils):
        _print = _logging_print(ctx)
        utils.print = _print


def uninstall() -> None:
    global _print
    _patches.restore()
    utils = sys.modules.get(_UTILS)
    if _print is not None and utils is not None and vars(utils).get("print") is _print:
        del utils.print
    _print = None


def noise_size(conv, x: torch.Tensor):
    """``(h, w)`` of ``conv(x, style)`` for a StyleGAN2 ``ModulatedConv2d``: resampled as
    ``F.interpolate(scale_factor=2 | 0.5)`` does (floor), then a stride-1 conv."""
    h, w = x.shape[-2:]
    scale = {"upsample": 2.0, "downsample": 0.5}.get(conv.sample_mode, 1.0)
    h, w = math.floor(h * scale), math.floor(w * scale)
    grow = 2 * conv.padding - conv.kernel_size + 1
    return h + grow, w + grow


def _noise_from_cpu(ctx: Context):
    def wrapper(wrapped, instance, args, kwargs):
        x = args[0] if args else kwargs.get("x")
        noise = args[2] if len(args) > 2 else kwargs.get("noise")
        if noise is not None or not ctx.on_target(x):
            return wrapped(*args, **kwargs)
        start = time.perf_counter()
        h, w = noise_size(instance.modulated_conv, x)
        noise = torch.randn(x.shape[0], 1, h, w, dtype=x.dtype).to(x.device)
        seconds = time.perf_counter() - start       # made on the CPU and copied: substitute work
        trace.record("StyleConv.noise", "cpu", seconds, h2d=trace.nbytes(noise), args=(x,), substitute=seconds)
        style = args[1] if len(args) > 1 else kwargs["style"]
        return wrapped(x, style, noise=noise)
    return wrapper


def _logging_print(ctx: Context):
    def print(*args, **kwargs):  # noqa: A001  (shadows the builtin in gfpgan.utils only)
        error = sys.exc_info()[1]
        if ctx.active and isinstance(error, RuntimeError):
            trace.logger.error("GFPGANer.enhance caught this error and returned the face "
                               "unrestored: %s", error, exc_info=error)
            trace.record("GFPGANer.enhance", "error", 0.0)
        builtins.print(*args, **kwargs)
    return print

