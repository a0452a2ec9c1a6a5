"""An ``out=`` tensor of the wrong size is neither resized nor checked on DirectML.

The CPU resizes an ``out=`` tensor of another shape to the result's (``resize_output``:
an empty one silently, another with a warning), with the strides its kernel chose, and
refuses an ``out=`` dtype the result cannot be cast to.  torch-directml 0.2.5's ``out=``
kernels do neither (the real binary, failure_modes.md #65; no public report): they compute
into a new tensor and return it.  With OpInfo's first float32 sample of each of 307 ops that
take ``out=`` (``benchmarks/out_sweep.py``), an empty ``out`` stays empty in 222 (silent) and
27 abort the process (``mm``, ``bmm``, ``cat``, ``sort``, ``topk``, ``index_select`` ...); a
non-empty one of the wrong size stays as it was in 168 or is refused in 51 ("The size of
tensor a (4) must match ...").  ``torch.mul(float, bool, out=bool)`` writes a bool.

The fix wraps every public function of ``torch``, ``torch.linalg``, ``torch.special``,
``torch.fft``, ``torch._C._nn`` (and its aliases in ``torch.nn.functional``) that has an
``out=`` overload.  A call whose ``out=`` holds a device tensor runs first on the meta device
with ``out``'s geometry, which resizes and checks as the CPU does (its warning, its errors);
each device ``out`` whose sizes or strides differ takes the CPU's; then the call runs on the
device and returns ``out``, written.  Where the meta device cannot run it (no meta kernel, a
data-dependent shape), the call runs on the CPU and its outs are grown and copied back
(``fallback.run_on_cpu``).  Python entry points only: an ``out=`` overload called from C++
or through ``torch.ops.aten`` is not covered.  Docs: docs/defects.md.
"""
from __future__ import annotations

import functools
from typing import Iterable, List

import torch
import torch.nn.functional as F

from .. import _torch_compat, fallback, trace
from . import _gate, _select
from ._wrap import Context, PatchSet
from ._patch import FALLBACK_MODES, Patch

PATCH = Patch("out_resize", "an out= tensor of the wrong size is neither resized nor checked (measured on "
                            "the real 0.2.5 binary; #65): its sizes, strides and checks from the meta "
                            "device, at every torch function that takes out=", modes=FALLBACK_MODES,
              # outside the wrappers of the patches that intercept torch functions, so dtypes still
              # finds torch.fft's builtins; inside auto's wrapper
              after=("dtypes",), before=("auto",))

_patches = PatchSet(__name__)
# namespace -> the prefix of its functions' aten names (torch.linalg.inv is aten::linalg_inv)
NAMESPACES = {torch: "", torch.linalg: "linalg_", torch.special: "special_", torch.fft: "fft_",
              torch._C._nn: ""}


def has_out(packet) -> bool:
    """Whether an aten op packet has an overload with ``out=`` arguments."""
    return any(a.is_out for name in packet.overloads()
               for a in getattr(packet, name)._schema.arguments)


@functools.lru_cache(maxsize=None)
def functions() -> List[tuple]:
    """``(namespace, name)`` of every public function of :data:`NAMESPACES` whose aten op has
    an ``out=`` overload (a function that takes no ``out=`` keyword refuses it as before)."""
    found = []
    for namespace, prefix in NAMESPACES.items():
        # vars(), not dir() + getattr(): torch's lazy attributes would import torch._dynamo,
        # which replaces torch.manual_seed
        for name, value in list(vars(namespace).items()):
            packet = getattr(torch.ops.aten, prefix + name, None) if callable(value) else None
            if (not name.startswith("_") and isinstance(packet, torch._ops.OpOverloadPacket)
                    and has_out(packet)):
                found.append((namespace, name))
    nn = {id(getattr(torch._C._nn, name)) for namespace, name in found if namespace is torch._C._nn}
    found += [(F, name) for name, value in list(vars(F).items())         # F.gelu is _nn.gelu
              if not name.startswith("_") and id(value) in nn]
    return found


def _outs(out) -> Iterable[torch.Tensor]:
    return (out,) if isinstance(out, torch.Tensor) else tuple(out)


def _on_meta(x):
    if not isinstance(x, torch.Tensor):
        return x
    meta = torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device="meta")
    return meta.requires_grad_() if x.requires_grad else meta


def _sized(func, args, kwargs):
    """The CPU's sizes, strides and checks for the device outs, then the call on the device."""
    meta_args, meta_kwargs = _torch_compat.tree_map(_on_meta, args), _torch_compat.tree_map(_on_meta, kwargs)
    if "device" in kwargs:                              # a factory: torch.arange(5, out=o)
        meta_kwargs["device"] = "meta"
    try:
        func(*meta_args, **meta_kwargs)
    except Exception:       # no meta kernel, a data-dependent shape, or an error: the CPU decides
        return "cpu", _on_cpu(func, args, kwargs)
    outs, metas = _outs(kwargs["out"]), _outs(meta_kwargs.pop("out"))
    misfits = [(out, meta) for out, meta in zip(outs, metas)
               if out.shape != meta.shape or out.stride() != meta.stride()]
    for out, meta in misfits:
        fallback._resize(out, meta.shape, _cpu_strides(func, meta_args, meta_kwargs, meta, len(outs)))
    try:
        with trace.own():                               # the call itself, on the device
            result = func(*args, **kwargs)
    except NotImplementedError:                         # torch.empty(out=): no DirectML kernel
        return "cpu", _on_cpu(func, args, kwargs)
    return "resized" if misfits else "pass", _the_outs(result, kwargs["out"])


def _on_cpu(func, args, kwargs):
    """The call on the CPU (a factory's ``device=`` too) into CPU outs of ``out``'s geometry,
    which raises the CPU's error, or gives the device outs their shapes and values: with its
    copies, substitute work (``trace.substitute``)."""
    with trace.substitute():
        outs = _outs(kwargs["out"])
        cpu_outs = [torch.empty_strided(o.shape, o.stride(), dtype=o.dtype) for o in outs]
        cpu_kwargs = {**_torch_compat.tree_map(trace.to_host, {k: v for k, v in kwargs.items() if k != "out"}),
                      "out": cpu_outs[0] if isinstance(kwargs["out"], torch.Tensor) else tuple(cpu_outs)}
        if "device" in kwargs:
            cpu_kwargs["device"] = "cpu"
        with fallback.guard():
            result = func(*_torch_compat.tree_map(trace.to_host, args), **cpu_kwargs)
        for out, cpu in zip(outs, cpu_outs):
            if out.shape != cpu.shape or out.stride() != cpu.stride():
                fallback._resize(out, cpu.shape, cpu.stride())
            out.copy_(cpu)
        return _returned(result, kwargs["out"])


def _returned(result, out):
    """What the CPU returns for ``out``: ``out`` itself, or a ``(values, indices)`` result made
    of the outs, or nothing."""
    if result is None or isinstance(out, torch.Tensor):
        return None if result is None else out
    return type(result)(tuple(out)) if isinstance(result, tuple) else result


def _the_outs(result, out):
    """What the CPU returns, ``out`` itself, holding the result.  DirectML's ``out=`` kernels
    may return another tensor: ``sum``, ``all``, ``norm`` ... with ``out`` written, ``isin``
    with ``out`` unwritten (the real binary); a result that is not its ``out`` is copied in."""
    if result is None:                      # split_with_sizes_copy & co return nothing
        return None
    results = (result,) if isinstance(out, torch.Tensor) else tuple(result)
    for r, o in zip(results, _outs(out)):
        if r is not o:
            o.copy_(r)
    return _returned(result, out)


def _cpu_strides(func, meta_args, meta_kwargs, meta, n_outs: int) -> tuple:
    """The strides the CPU gives a resized ``out``.  Its element-wise kernels (TensorIterator)
    give the inputs' layout, as their result without ``out=`` has; the meta device's ``out=``
    kernels give contiguous strides there (torch 2.4.1 and 2.13, measured)."""
    if n_outs == 1:
        try:
            result = func(*meta_args, **meta_kwargs)
        except Exception:
            return meta.stride()
        if isinstance(result, torch.Tensor) and result.shape == meta.shape:
            return result.stride()
    return meta.stride()


def install(ctx: Context) -> None:
    target = ctx.target

    def on_device(t) -> bool:
        return isinstance(t, torch.Tensor) and not t.is_cpu and t.device.type == target

    def wrapper_of(op: str):
        def wrapper(wrapped, instance, args, kwargs):
            out = kwargs.get("out")
            if out is None or not (on_device(out) or isinstance(out, (tuple, list))
                                   and any(map(on_device, out))) or _select.aside():
                return wrapped(*args, **kwargs)                     # the fast path
            return trace.call(op, _sized, wrapped, args, kwargs)
        return wrapper

    # wrapt wrappers, not intercept()'s: auto's own wrapper stays outside them (a float64
    # factory's island, its retry), and a core patch's intercept() inside keeps its guard
    # the front passes a device call without out= by (in every device mode)
    for namespace, name in functions():
        _patches.wrap(ctx, namespace, name, wrapper_of(f"{namespace.__name__}.{name}"), front=True,
                      device=_gate.Watch())


def uninstall() -> None:
    _patches.restore()
