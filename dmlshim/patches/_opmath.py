"""PyTorch's opmath for the fixes that recompute an op: float16 and bfloat16 kernels compute
in float32 and round once when they store (ATen ``at::opmath_type``, ``OpMathType.h``), so a
fix that builds such an op from several device ops does its arithmetic in float32 too, on
the device, and casts the result back once.  Chaining the ops in float16 rounds after each
(a float16 bilinear 2x of a 2x3x17x23 image of values in [0, 30): 0.025 from float64 at
most, the CPU's 0.0078).
"""
from __future__ import annotations

import torch

REDUCED = (torch.float16, torch.bfloat16)


def dtype(d: torch.dtype) -> torch.dtype:
    """The dtype ATen computes a ``d`` op in: float32 for float16/bfloat16, else ``d``."""
    return torch.float32 if d in REDUCED else d


def wide(t: torch.Tensor) -> torch.Tensor:
    """``t`` in its opmath dtype (a float32 copy on its device for float16/bfloat16, else ``t``)."""
    return t.float() if t.dtype in REDUCED else t
