"""Separable resampling with index tables: how the upsample fixes compute on the device.

A 2-D bilinear or nearest upsample is one resampling along H and one along W; each reads
one (nearest) or two (linear) source rows per output row.  The table of an axis (source
indices, and the weight of the second row) is computed on the CPU and cached per device
(``table``); the data stay on the device: ``index_select``, sub and a broadcast mul
forward, ``index_put_(accumulate=True)`` backward, each measured right on the real
torch-directml 0.2.5 binary; float16/bfloat16 in float32, rounded once (``_opmath``).
:func:`kernels` makes a fix's BackendSelect kernels; the emulator's DirectML rules
resample with DirectML's tables (``emulation.rules``).
Docs: docs/defects.md ("Upsampling").
"""
from __future__ import annotations

import functools
from typing import NamedTuple, Optional

import torch

from .. import fallback, trace
from . import _opmath, _select
from .dispatcher import Done

_aten = torch.ops.aten


class Table(NamedTuple):
    """The sources of one axis: output position ``j`` reads rows ``first[j]`` and
    ``second[j]`` (int64), the second with ``weight[j]`` (float32; None: nearest)."""
    first: torch.Tensor
    second: Optional[torch.Tensor] = None
    weight: Optional[torch.Tensor] = None


def linear_table(source: torch.Tensor, in_size: int) -> Table:
    """The linear table of float32 source coordinates ``source`` (>= 0) on an axis of
    ``in_size``, as ATen's CPU kernel reads them (UpSampleKernel.cpp
    ``compute_indices_weights_linear``)."""
    first = source.long().clamp_max(in_size - 1)
    second = (first + 1).clamp_max(in_size - 1)
    return Table(first, second, (source - first).clamp(0, 1))


def torch_linear_source(in_size: int, out_size: int, align_corners: bool,
                        scale: Optional[float]) -> torch.Tensor:
    """PyTorch's source coordinates of a linear axis, float32 (ATen UpSample.h
    ``area_pixel_compute_scale``/``area_pixel_compute_source_index``)."""
    out = torch.arange(out_size, dtype=torch.float32)
    if align_corners:
        ratio = torch.tensor(in_size - 1, dtype=torch.float32) / (out_size - 1) if out_size > 1 else 0.0
        return out * ratio
    ratio = (torch.tensor(1.0 / scale, dtype=torch.float32) if scale is not None and scale > 0
             else torch.tensor(in_size, dtype=torch.float32) / out_size)
    return ((out + 0.5) * ratio - 0.5).clamp_min(0)


def torch_nearest_index(in_size: int, out_size: int, scale: Optional[float]) -> torch.Tensor:
    """PyTorch's source index of a nearest axis (int64): the CPU kernel itself on a ramp,
    so its special cases (same size, exactly twice) come along."""
    ramp = torch.arange(in_size, dtype=torch.float32).view(1, 1, 1, in_size)
    return _aten.upsample_nearest2d(ramp, [1, out_size], None, scale).view(-1).long()


@functools.lru_cache(maxsize=256)
def _cached(device: torch.device, kind: str, in_size: int, out_size: int, align_corners,
            scale) -> Table:
    if kind == "nearest":
        table = Table(torch_nearest_index(in_size, out_size, scale))
    else:
        table = linear_table(torch_linear_source(in_size, out_size, align_corners, scale), in_size)
    return Table(*(t if t is None else t.to(device) for t in table))


def table(device, kind: str, in_size: int, out_size: int, align_corners=None, scale=None) -> Table:
    """PyTorch's table of one axis (``kind``: ``"nearest"`` or ``"linear"``) on ``device``,
    computed once per device, sizes, ``align_corners`` and scale."""
    return _cached(device, kind, in_size, out_size, align_corners, scale)


def upsample2d(x: torch.Tensor, tables) -> torch.Tensor:
    """``x`` (N, C, H, W) resampled by ``tables`` = (H's, W's): W first, then H."""
    return resample(resample(x, -1, tables[1]), -2, tables[0])


def upsample2d_backward(grad: torch.Tensor, input_size, tables) -> torch.Tensor:
    """The gradient of :func:`upsample2d`'s input of ``input_size`` (N, C, H, W)."""
    return resample_backward(resample_backward(grad, -2, input_size[2], tables[0]), -1, input_size[3], tables[1])


def resample(x: torch.Tensor, dim: int, t: Table) -> torch.Tensor:
    """``x`` resampled along ``dim`` by table ``t`` (on ``x``'s device)."""
    first = x.index_select(dim, t.first)
    if t.second is None:
        return first
    # a - (a - b) * w: sub and a broadcast mul (a * (1 - w) + b * w adds two same-shape
    # tensors, which the real binary's lavapipe stack gets wrong today)
    return first - (first - x.index_select(dim, t.second)) * _along(t.weight, dim, x)


def resample_backward(grad: torch.Tensor, dim: int, in_size: int, t: Table) -> torch.Tensor:
    """The gradient of :func:`resample`'s input: each output's gradient accumulated into
    the source rows it read (``index_put_(accumulate=True)``; ``index_add`` is a CPU
    fallback on torch-directml)."""
    rows = grad.movedim(dim, 0)
    out = rows.new_zeros((in_size, *rows.shape[1:]))
    if t.second is None:
        return out.index_put_((t.first,), rows, accumulate=True).movedim(0, dim)
    weight = _along(t.weight, 0, rows)
    out.index_put_((t.first,), rows - rows * weight, accumulate=True)
    return out.index_put_((t.second,), rows * weight, accumulate=True).movedim(0, dim)


def _along(weight: torch.Tensor, dim: int, like: torch.Tensor) -> torch.Tensor:
    """``weight`` in ``like``'s dtype, shaped to broadcast along its ``dim``."""
    shape = [1] * like.dim()
    shape[dim] = -1
    return weight.to(like.dtype).view(shape)


def into(out: Optional[torch.Tensor], result: torch.Tensor) -> torch.Tensor:
    """``result``, written into ``out=`` when given (resized as ATen's out= kernels do; the
    real binary grows no tensor in place: ``fallback._resize``)."""
    return result if out is None else fallback.write_out(out, result)


def _arguments(kind, args, backward):
    """(tensor, output_size, input_size, align_corners, (scale_h, scale_w)) of an
    ``upsample_{kind}2d`` call or of its backward (the dispatcher passes them positionally)."""
    args = list(args)
    tensor, output_size = args[0], args[1]
    input_size = args.pop(2) if backward else tensor.shape
    align_corners = args.pop(2) if kind == "linear" else None
    scales = (args[2:] + [None, None])[:2]
    return tensor, output_size, input_size, align_corners, scales


def _fix(kind, backward):
    def fix(op, keyset, args, kwargs):
        tensor, output_size, input_size, align_corners, scales = _arguments(kind, args, backward)
        if (len(input_size) != 4 or not tensor.numel() or 0 in output_size or 0 in input_size
                or (kind == "linear" and not tensor.is_floating_point())):
            return None                               # the device's own kernel, or its error
        tables = tuple(table(tensor.device, kind, input_size[i + 2], output_size[i], align_corners,
                             scales[i]) for i in (0, 1))
        with trace.substitute():                      # the op recomputed on the device
            if kind == "nearest" and not backward:
                result = upsample2d(tensor, tables)          # a gather: no arithmetic
            else:
                # weights and sums in opmath (float32 for float16), rounded once, as ATen's kernels
                wide = _opmath.wide(tensor)
                result = (upsample2d_backward(wide, input_size, tables) if backward
                          else upsample2d(wide, tables)).to(tensor.dtype)
            return Done(into(kwargs.get("grad_input" if backward else "out"), result))
    return fix


def kernels(kind: str, owner: str) -> _select.Kernels:
    """The BackendSelect kernels, of patch ``owner``, that compute ``upsample_{bilinear,nearest}2d``
    (``kind`` ``"linear"`` or ``"nearest"``), its ``out=`` form and its backward with PyTorch's tables."""
    name = "upsample_bilinear2d" if kind == "linear" else "upsample_nearest2d"
    forward, backward = getattr(_aten, name), getattr(_aten, name + "_backward")
    return _select.Kernels(owner, {forward.default: _fix(kind, False), forward.out: _fix(kind, False),
                            backward.default: _fix(kind, True), backward.grad_input: _fix(kind, True)})
