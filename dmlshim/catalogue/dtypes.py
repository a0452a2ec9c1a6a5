"""Dtypes and modes the device lacks: float64, bfloat16, complex, sparse, autocast.

bfloat16 and complex are static (never probed): probing them would abort the process
(failure_modes.md #8, #9); so is sparse, which the emulated device cannot hold either, so
a probe could not be tested both ways (0.2.5 has no sparse kernels beyond empty and copy).
"""
from __future__ import annotations

from typing import Tuple

import torch

from .defect import CATALOGUE, Defect, Verdict
from .probes import all_of, compare

TOPIC = "Dtypes and modes the device lacks"


def probe_float64(device) -> Verdict:
    """`f64[2] * 3` to float64 precision, `max()` (dtype), `sqrt()` on the device"""
    # values float32 cannot hold: torch-directml with FP64 computes float64 through
    # float32, returns max()/min() as float32 and refuses sqrt (E_INVALIDARG)
    x = torch.tensor([0.1, 1 / 3], dtype=torch.float64)
    d = x.to(device)
    return all_of(compare(d * 3, x * 3, 1e-12, 0.0), compare(d.max(), x.max()),
                  compare(d.sqrt(), x.sqrt(), 1e-12, 0.0))


def probe_autocast(device) -> Verdict:
    """`x @ x` inside `torch.autocast(device.type)`"""
    x = torch.ones(2, 2)
    with torch.autocast(device.type, dtype=torch.float16):
        got = x.to(device) @ x.to(device)
    return compare(got, x @ x)


DEFECTS: Tuple[Defect, ...] = (
    Defect("float64", "#7, #25", "microsoft/DirectML#430, #396, #438, #699; DirectML's element-wise "
           "operators take no FLOAT64 (learn.microsoft.com, DML_ELEMENT_WISE_ADD_OPERATOR_DESC)",
           "float64 math: 'The GPU device does not support Double (Float64) operations!'; with "
           "FP64: float32 precision, max() as float32, sqrt refused",
           probe_float64, ("dtypes", "dispatcher:float64", "dispatcher:_to_copy"), found=CATALOGUE,
           rules=("_uses_float64", "_python_float_scalar", "_float64_with_fp64")),
    Defect("autocast", "#36", "the real torch-directml 0.2.5 binary; pytorch/pytorch#128598 (torch 2.4 "
           "has no AutocastPrivateUse1 kernels); #36 expected a silent no-op",
           "inside torch.autocast('privateuseone') every op raises NotImplementedError "
           "('AutocastPrivateUse1' backend)",
           probe_autocast, ("autocast",), found=CATALOGUE, rules=("_in_device_autocast",)),
    # static: probing them would abort the process
    Defect("bfloat16", "#8", "microsoft/DirectML#688",
           "a bfloat16 tensor on the device aborts the process",
           None, ("dtypes", "dispatcher:bfloat16", "dispatcher:_to_copy"), found=CATALOGUE,
           rules=("_unsupported_dtype",)),
    Defect("complex", "#9", "microsoft/DirectML#421, #704",
           "a complex tensor on the device aborts the process (torch.stft, fft)",
           None, ("dtypes", "dispatcher:complex", "dispatcher:_to_copy"), found=CATALOGUE,
           rules=("_unsupported_dtype", "_fft_r2c fatal_dtype_message")),
    # static: not testable both ways (the docstring)
    Defect("sparse", "#30", "microsoft/DirectML#414",
           "no sparse kernels on DirectML (Whisper's sparse alignment_heads buffer)",
           None, ("dtypes", "dispatcher:sparse"), found=CATALOGUE),
)
