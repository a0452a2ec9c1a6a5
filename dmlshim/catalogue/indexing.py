"""Indexing, scatter and shape ops: empty cat, CPU indices, gather/scatter, unique counts,
repeat, the ``*_scatter`` ops, zero-size operands, masked_select, flip, tril/triu, combinations.

``flip_dims`` is static: probing it would end the process (signal 11).
"""
from __future__ import annotations

from typing import Tuple

import torch

from .defect import CATALOGUE, MEASURED, NO_REPORT, REPORTED, Defect, Verdict
from .probes import all_of, case_probe, compare

TOPIC = "Indexing, scatter and shape ops"


def probe_empty_cat(device) -> Verdict:
    """`cat([f32[2,3], f32[0,3]])`"""
    a, empty = torch.arange(6.0).reshape(2, 3), torch.empty(0, 3)
    return compare(torch.cat([a.to(device), empty.to(device)]), torch.cat([a, empty]))


def probe_cpu_index(device) -> Verdict:
    """`x[cpu_idx]` and `x[cpu_idx] = v` on a device `x`"""
    x, idx = torch.arange(6.0), torch.tensor([0, 2])
    got = x.to(device)
    read = compare(got[idx], x[idx])
    got[idx] = torch.tensor([7.0, 9.0], device=device)
    want = x.clone()
    want[idx] = torch.tensor([7.0, 9.0])
    return all_of(read, compare(got, want))


def _gather(device):
    """FCPE's local decoder: gather (dim=-1) a window from an expanded (stride-0) cent table."""
    cents = torch.arange(8.0).to(device)[None, None, :].expand(2, 3, -1)
    peaks = torch.tensor([[[1], [2], [4]], [[0], [3], [6]]]).to(device)
    window = (torch.arange(3).to(device) + peaks - 1).clamp_(0, 7)
    return torch.gather(cents, -1, window)


def _unique_counts(device):
    """torch.unique(x, return_counts=True) (DirectML#410)."""
    return torch.unique(torch.tensor([3, 1, 3, 2, 3]).to(device), return_counts=True)


def _repeat_5d(device):
    """A 5-D `repeat` (FunASR's CTC prefix scorer)."""
    x = torch.arange(12.0).view(1, 2, 1, 2, 3).to(device)
    return x.repeat(2, 1, 3, 1, 1)


def _storage_scatter(device):
    """`diagonal_scatter` of a 3x3 zero matrix and a row of ones."""
    return torch.diagonal_scatter(torch.zeros(3, 3).to(device), torch.ones(3).to(device))


def _zero_size_refused(device):
    """`mm` of a 0x2 and a 2x3 matrix."""
    return torch.mm(torch.ones(0, 2).to(device), torch.ones(2, 3).to(device))


def _scatter_partial(device):
    """`scatter_add` into a 3x2 zero matrix from a 2x2 index (dim 1)."""
    index = torch.tensor([[0, 1], [1, 0]]).to(device)
    return torch.zeros(3, 2).to(device).scatter_add(1, index, torch.ones(2, 2).to(device))


def _masked_fill_rank(device):
    """`masked_fill` of a 1x1x1x2x3 ramp under its mask of values past 2 (5 dimensions; the
    defect: CreateOperator, 6 would end the process)."""
    x = torch.arange(6.0).view(1, 1, 1, 2, 3).to(device)
    return x.masked_fill(x > 2, -1.0)


def _masked_select(device):
    """`masked_select` of `arange(3)` under a 2x3 mask."""
    mask = torch.tensor([[True, False, True], [False, True, True]])
    return torch.masked_select(torch.arange(3.0).to(device), mask.to(device))


def _batched_tril_triu(device):
    """`triu` and `tril` of a 1x3x4 ramp (the defect: `[0, 3]` dropped, and kept)."""
    x = torch.arange(1.0, 13.0).view(1, 3, 4).to(device)
    return x.triu(), x.tril()


def _scatter_repeated(device):
    """`scatter_add` into 10s of `[1, 2, 3]` at `[0, 1, 1]` (the CPU: `[11, 15, 10]`)."""
    index = torch.tensor([0, 1, 1]).to(device)
    return torch.full((3,), 10.0).to(device).scatter_add(0, index, torch.arange(1.0, 4.0).to(device))


def _combinations(device):
    """`torch.combinations` of a 3-value ramp, r = 2."""
    return torch.combinations(torch.arange(3.0).to(device), 2)


DEFECTS: Tuple[Defect, ...] = (
    Defect("empty_cat", "#19, #20", "microsoft/VibeVoice#49; DirectML PR#527",
           "cat/stack with an empty input: 'The parameter is incorrect.'",
           probe_empty_cat, ("cat",), found=CATALOGUE, rules=("_empty_beside_data",)),
    Defect("cpu_index", "#10", "microsoft/DirectML#442, #397",
           "a CPU index tensor in a DirectML kernel: 'unbox expects Dml at::Tensor'",
           probe_cpu_index, ("dispatcher:index",), found=CATALOGUE, rules=("index.Tensor _cpu_operand",)),
    Defect("gather", "#43", "RVC-Project/Retrieval-based-Voice-Conversion-WebUI infer/fcpe.py; the "
           "real 0.2.5 binary", "gather returns wrong values (FCPE pitch decoder): with dim=-1 "
           "gather/scatter/scatter_add read the index as arange, below -1 they are refused",
           case_probe(_gather), ("gather",), found=REPORTED, rules=("_last_dim", "_below_last_dim")),
    Defect("unique_counts", "#47", "microsoft/DirectML#410",
           "unique(return_counts=True): 'Return counts not implemented'",
           case_probe(_unique_counts), ("unique",), found=REPORTED, rules=("_counts_asked",)),
    Defect("repeat_5d", "#61", "Comfy-Org/ComfyUI#5860; the real 0.2.5 binary",
           "Tensor.repeat with more than 4 dimensions: 'the dimesion of at::Tensor must be 4 "
           "or lower, but got 5'", case_probe(_repeat_5d), ("repeat",), found=MEASURED,
           rules=("_repeat_over_four",)),
    # refused calls (patches/refused.py): each raises on the device where the CPU computes
    Defect("storage_scatter", "none", NO_REPORT,
           "diagonal/select/slice/as_strided_scatter: 'self.has_storage() INTERNAL ASSERT "
           "FAILED'", case_probe(_storage_scatter), ("refused:storage_scatter",), found=MEASURED,
           rules=("diagonal_scatter",)),
    Defect("zero_size_refused", "none", NO_REPORT,
           "mm/addmm with a zero-size operand, index_select of a 0-dim tensor, gather with an "
           "empty index, repeat/tile with an empty result (E_INVALIDARG), adaptive_avg_pool2d of "
           "an empty batch", case_probe(_zero_size_refused),
           ("refused:zero_size_refused",), found=MEASURED,
           rules=("_mm_zero_size", "_addmm_zero_size", "_zero_dim", "_empty_index", "_empty_repeat",
                  "_empty_batch")),
    Defect("scatter_partial", "none", NO_REPORT,
           "scatter/scatter_add with an index smaller than self outside dim: 'DirectML scatter "
           "doesn't allow partially modified dimensions'", case_probe(_scatter_partial),
           ("refused:scatter_partial",), found=MEASURED, rules=("_partial",)),
    Defect("masked_select_broadcast", "none", NO_REPORT,
           "masked_select with an input that broadcasts to the mask: too few values (silent)",
           case_probe(_masked_select), ("masked_select",), found=MEASURED, rules=("_input_broadcasts",)),
    # static: probing it would end the process
    Defect("flip_dims", "none", NO_REPORT,
           "flip with a negative dim (x.flip(-1)) or of a 0-dim tensor ends the process (signal 11)",
           None, ("flip_dims",), found=MEASURED, rules=("_flip_ends_the_process",)),
    Defect("batched_tril_triu", "none", NO_REPORT,
           "tril/triu of 3-D and 4-D inputs keep the wrong diagonals (silent; a 1x3x4 triu() drops "
           "[0, 3]); of 5-D refused (E_INVALIDARG)", case_probe(_batched_tril_triu), ("batched_tril_triu",),
           found=MEASURED, rules=("_batched", "_over_four_dims")),
    Defect("scatter_repeated", "none", NO_REPORT,
           "scatter_add and scatter(reduce=) with an index repeated along dim write the place once: "
           "self plus the last value (silent); an index longer than self along dim refused "
           "(E_INVALIDARG)", case_probe(_scatter_repeated), ("scatter_repeated",), found=MEASURED,
           rules=("_index_longer", "_dml_scatter_once")),
    Defect("combinations", "none", NO_REPORT,
           "torch.combinations: 'The size of tensor a (n) must match the size of tensor b (0)', "
           "CreateOperator for one element (its C++ composite only)", case_probe(_combinations),
           ("combinations",), found=MEASURED, rules=("_r_positive",)),
    # found by conformance over every OpInfo sample (issue 40, docs/conformance.md); static:
    # probing its out= kernel would end the process
    Defect("sort_scalar", "none", NO_REPORT,
           "sort of a 0-dim tensor gives 0 (silent); of a 0-dim or empty tensor its out= kernel returns "
           "invalid tensors, which end the process when read (signal 11)", None, ("sort_scalar",),
           found=MEASURED, rules=("_zero_dim_sort",)),
    Defect("masked_fill_rank", "none", NO_REPORT,
           "masked_fill_/masked_fill of 5 dimensions refused (CreateOperator), of 6 to 8 end the process "
           "('rank <= DML_TENSOR_DIMENSION_COUNT_MAX'; nanquantile of a 4-D input with keepdim)",
           case_probe(_masked_fill_rank), ("masked_fill_rank",), found=MEASURED,
           rules=("_masked_fill_five", "_masked_fill_past_five")),
    # measured by hand and by benchmarks/rank_sweep.py on the real binary; static: a probe
    # would end the process
    Defect("rank_limit", "none", "microsoft/DirectML#537 (the check, in the field); the real 0.2.5 binary",
           "reductions, scans, sorts, cat, where, gather, index_select, flip and layer_norm of more than 5 "
           "dimensions, and binary ops whose operands broadcast there, end the process ('Check failed: rank <= "
           "DML_TENSOR_DIMENSION_COUNT_MAX'); cumsum, index_select and layer_norm with a weight of 5 raise; "
           "copy_ into a permuted destination of 6 to 8 is silently wrong", None,
           ("rank_limit",), found=MEASURED,
           rules=("_past_the_rank_limit", "_broadcast_past_the_rank_limit", "_five_dimensions_refused",
                  "_layer_norm_five_refused", "_pad_of_six", "_pad_past_six", "_copied_in_memory_order",
                  "_one_element_past_the_rank_limit")),
)
