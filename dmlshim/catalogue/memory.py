"""Tensors, views, copies and devices: Tensor.new, copies that broadcast or rebind a CPU
tensor, views inside inference_mode and of offset views, torch.load onto the device,
out= tensors, channels_last, CPU operands of bmm.

``bmm_cpu_operand`` is static: probing it would end the process.
"""
from __future__ import annotations

import io
from typing import Tuple

import torch
import torch.nn.functional as F

from .defect import CATALOGUE, MEASURED, NO_REPORT, REPORTED, Defect, Verdict
from .probes import all_of, case_probe, compare

TOPIC = "Tensors, views, copies and out="
_MEASURED_BY_HAND = "measured on the real torch-directml 0.2.5 binary (docs/realdml.md); no public report"


def probe_tensor_new(device) -> Verdict:
    """`x.new([1., 2.])` on a device `x`"""
    x = torch.zeros(1, device=device)
    got = x.new([1.0, 2.0])
    if got.device != x.device:
        return Verdict(True, f"x.new(list) is on {got.device}")
    return compare(got, torch.zeros(1).new([1.0, 2.0]))


def probe_new_device_index(device) -> Verdict:
    """`x.new(2)` on a device `x`: the device, index included"""
    x = torch.zeros(1, device=device)
    got = x.new(2)
    return Verdict(got.device != x.device, f"x.new(2) is on {got.device}, x on {x.device}")


def probe_broadcast_copy(device) -> Verdict:
    """`d.copy_(row)`: an f32[4] row, from the CPU and on the device, into a device f32[3,4]"""
    base, row = torch.arange(12.0).reshape(3, 4), torch.tensor([1.0, -2.0, 3.0, -4.0])
    want = base.clone().copy_(row)
    verdicts = []
    for src in (row, row.to(device)):
        got = base.to(device)
        got.copy_(src)
        verdicts.append(compare(got, want))
    return all_of(*verdicts)


def _inference_mode(device):
    """nn.Linear moved to the device, called inside inference_mode (DirectML#602)."""
    weight = torch.arange(6.0).view(2, 3).to(device)       # a normal tensor, as a module's
    with torch.inference_mode():
        return F.linear(torch.ones(4, 3).to(device), weight)


def _load(device):
    """torch.load(f, map_location=<the device>) of a saved state dict."""
    # torch restores storages on the device: where tensors have none (torch-directml's
    # OpaqueTensorImpl) that can only fail, and may kill the process (SIGSEGV), so it
    # is not tried; this raises "Cannot access storage of OpaqueTensorImpl" there
    torch.empty(0, device=device).untyped_storage()
    buffer = io.BytesIO()
    torch.save({"w": torch.arange(4.0)}, buffer)
    buffer.seek(0)
    return torch.load(buffer, map_location=str(device))["w"]


def _offset_views(device):
    """In-place writes through views of an offset view (`x[1:].t()`, `x[1:][0:2]`) and through
    a `split` chunk, read back from the base; and a view taken before its base changes."""
    x = torch.arange(12.0).view(3, 4).to(device)
    x[1:].t()[0].mul_(-1)
    x[1:][0:1].add_(10)
    x.split(1)[2].zero_()
    view = x[1:].t()
    x.add_(0.5)
    return x, view.clone()


def _fallback_out(device):
    """`torch.eye(3)` made on the device."""
    return torch.eye(3, device=device)


def _copy_to_cpu(device):
    """A device row copied into a slice of a CPU tensor, and into an int64 one (its dtype kept)."""
    out, ints = torch.zeros(2, 3), torch.zeros(3, dtype=torch.int64)
    out[1].copy_(torch.arange(1.0, 4.0).to(device))
    ints.copy_(torch.arange(1.0, 4.0).to(device))
    return out, ints


def _out_resize(device):
    """`torch.mul` of a 2x3 ramp into an empty `out=`, and whether a float times a bool into a
    bool `out=` is refused (the CPU: a 2x3 result, and "result type Float can't be cast")."""
    x = torch.arange(6.0).view(2, 3).to(device)
    out = torch.mul(x, 2, out=torch.empty(0, device=device))
    try:
        torch.mul(x, x > 2, out=torch.empty(2, 3, dtype=torch.bool, device=device))
    except RuntimeError:
        return out, torch.tensor(True)
    return out, torch.tensor(False)


def _channels_last(device):
    """A 1x2x2x3 ramp moved to the device in channels-last format, and its strides."""
    x = torch.arange(12.0).view(1, 2, 2, 3).to(device).to(memory_format=torch.channels_last)
    return x, torch.tensor(x.stride())


DEFECTS: Tuple[Defect, ...] = (
    Defect("tensor_new", "#11", "microsoft/DirectML#400, #415; pytorch/pytorch#95734",
           "Tensor.new(...) refused on PrivateUse1 (torch 2.0, torch-directml <= 0.2.0)",
           probe_tensor_new, ("legacy_new",), found=CATALOGUE, rules=("legacy_new:refused",)),
    Defect("new_device_index", "none (real binary)", _MEASURED_BY_HAND,
           "x.new() and x.new(size) land on 'privateuseone' without x's index: "
           "'Expected all tensors to be on the same device' when mixed with x",
           probe_new_device_index, ("legacy_new",), found=MEASURED, rules=("_device_without_index",)),
    Defect("broadcast_copy", "none (real binary)", _MEASURED_BY_HAND,
           "d.copy_(src) with a src that broadcasts: from the CPU only d's first src.numel() "
           "elements are written, on the device a src of fewer dims fills d with its first value",
           probe_broadcast_copy, ("broadcast_copy",), found=MEASURED, rules=("_broadcast_copy",)),
    Defect("inference_mode", "#41", "microsoft/DirectML#602, #622, #450; vladmandic/sdnext#3464",
           "a model called inside torch.inference_mode(): 'Cannot set version_counter for "
           "inference tensor'", case_probe(_inference_mode), ("inference_mode",), found=REPORTED,
           rules=("_view_of_normal_tensor_in_inference_mode", "_normal_tensor_viewed")),
    Defect("load_map_location", "#46", "nomadkaraoke/python-audio-separator PR#295; "
           "microsoft/DirectML#466", "torch.load(map_location=<device>): TypeError '>=' between "
           "torch.device and int; past it, no storage on the device (SIGSEGV)", case_probe(_load),
           ("load",), found=REPORTED, rules=("_not_a_device_index", "privateuseone.storage")),
    Defect("offset_views", "#62", NO_REPORT,
           "a view of a view with an offset (`x[1:].t()`, `x[1:][0:2]`, `x[2][0:4]`) and split's "
           "chunks are copies: writes through them are lost (silent)", case_probe(_offset_views),
           ("offset_views",), found=MEASURED, rules=("_snapshot_of",)),
    Defect("fallback_out", "none", NO_REPORT,
           "eye, kthvalue, median/nanmedian(dim), linalg.lstsq return shape [0]: the CPU fallback "
           "does not grow their empty out= (silent)", case_probe(_fallback_out), ("fallback_out",),
           found=MEASURED, rules=("_empty_out",)),
    Defect("copy_to_cpu", "#64", NO_REPORT,
           "copy_ from the device into a CPU tensor gives it new storage in the source's dtype: "
           "a CPU view or slice written so, and every alias, keeps its values (silent)",
           case_probe(_copy_to_cpu), ("copy_to_cpu",), found=MEASURED, rules=("_into_cpu",)),
    Defect("out_resize", "#65", NO_REPORT,
           "an out= tensor of the wrong size is not resized: an empty one stays empty, another "
           "stays as it was (silent), is refused, or the process aborts (mm, cat, sort, fft ...); "
           "an out= dtype the result cannot be cast to is not refused", case_probe(_out_resize),
           ("out_resize",), found=MEASURED, rules=("_unresized_out_overload",)),
    # static: probing it would end the process
    Defect("bmm_cpu_operand", "none", NO_REPORT,
           "bmm/baddbmm (and matmul of 3-D tensors) with a CPU operand end the process (terminate: "
           "c10::Error from DMLTensor.cpp:30)", None, ("bmm_cpu_operand",), found=MEASURED,
           rules=("bmm _cpu_operand",)),
    Defect("channels_last", "none", NO_REPORT,
           "memory_format=channels_last (or channels_last_3d) for a device tensor: 'memory_format' "
           "argument is must be Contiguous for DML tensors' (to, clone, empty, empty_like, Module.to)",
           case_probe(_channels_last), ("channels_last", "dispatcher:_to_copy"), found=MEASURED,
           rules=("_channels_last_here", "_to_cpu_in_a_format")),
)
