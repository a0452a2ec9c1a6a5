"""The registry of patch modules.

Each patch module ``dmlshim/patches/<name>.py`` fixes one concern and exports::

    def install(ctx: Context) -> None     # wrap what it needs (see _wrap.PatchSet)
    def uninstall() -> None               # undo exactly that

and is declared once in ``REGISTRY`` below.  Patches for third-party libraries list
the modules they patch in ``imports``: they are imported and installed only when the
first of those modules is imported (wrapt post-import hooks), so the order of
``import funasr`` and ``dmlshim.activate()`` does not matter.  A patch module must not
import its third-party library at its own top level.

To add one: write ``dmlshim/patches/<name>.py`` with ``install``/``uninstall`` (use
``PatchSet.intercept`` for "act only on target-device calls", ``PatchSet.wrap`` for a
raw wrapt wrapper; owners may be module names, wrapped lazily), then append
``Patch("<name>", "<what it fixes + DirectML source>", imports=(...))`` to REGISTRY.
"""
from __future__ import annotations

import functools
import threading
import warnings
from dataclasses import dataclass
from typing import Callable, Dict, List, Tuple

from ..config import FALLBACK_MODES
from ._wrap import Context, PatchSet, original, when_imported  # noqa: F401  (the helper API)
from . import _caller  # noqa: F401


@dataclass(frozen=True)
class Patch:
    """One registry entry.

    ``name``: module ``dmlshim.patches.<name>``.  ``doc``: what it fixes and the source
    of the DirectML fact.  ``imports``: third-party modules that trigger a lazy install
    (empty = install at ``activate()``).  ``modes``: the ``fallback`` modes it is
    installed in.  In ``"off"`` the ``PatchSet.intercept`` wrappers only observe and
    trace (they fix nothing), so patches built on ``intercept`` may stay listed there.
    ``anywhere``: installed with no target device too, because no call passes through
    it (a module alias); every other patch waits until a device appears
    (``Context.present``), so a CPU-only or CUDA machine pays nothing per call.
    ``after`` / ``before``: patches this one must be installed after / before (the registry
    is installed in order; tests/test_activate.py checks every constraint), and whose fixes
    it follows / precedes in every BackendSelect chain they share (``_select``'s chains
    and the dispatcher net's hooks are sorted by :func:`rank`, whatever the install
    order; tests/test_fix_order.py asks every two patches of a chain for a declared
    relation), the comment beside them says why.
    """

    name: str
    doc: str
    imports: Tuple[str, ...] = ()
    modes: Tuple[str, ...] = ("auto", "known")
    anywhere: bool = False
    after: Tuple[str, ...] = ()
    before: Tuple[str, ...] = ()


REGISTRY: Tuple[Patch, ...] = (
    Patch("mul", "float x bool returns bool on DirectML: the bool operand cast first, at "
                 "BackendSelect (DirectML#686, #737; failure_modes.md #17)"),
    Patch("dispatcher", "the dispatcher net: CPU index tensors moved over, and values the device "
                        "cannot hold (complex, bfloat16, float64) made as CPU islands, however "
                        "the op is reached (C++ composites, torch.ops.aten, backward())"),
    Patch("rnn", "LSTM/GRU have no DirectML or CPU kernel (_thnn_fused_*_cell): aten::lstm/gru/"
                 "*_cell run on the CPU with cached CPU weights however reached (nn modules, "
                 "TorchScript, torch.ops.aten; AutogradPrivateUse1 + PrivateUse1 kernels) "
                 "(DirectML#613, #654, #677; failure_modes.md #1, #2, #49)"),
    Patch("jit", "ScriptModule.to(dml) asserts 'param must be a Parameter' (PrivateUse1 is no dense "
                 "backend for Module._apply; failure_modes.md #48): loaded plain tensors become "
                 "Parameters, scripted RNNs' _flat_weights are refreshed"),
    Patch("lazy_modules", "a lazy module (nn.LazyConv2d, LazyLinear ...) moved to the device before its first "
                          "forward loses its uninitialized parameters (PrivateUse1 is no dense backend; "
                          "'weight should have at least three dimensions'): put back, of the new device"),
    Patch("broadcast_copy", "Tensor.copy_ of a source that broadcasts: a CPU one fills only the first "
                            "elements, a device one of fewer dims fills the first value (measured on "
                            "the real 0.2.5 binary): expand the source first", modes=FALLBACK_MODES),
    Patch("copy_to_cpu", "a copy from the device into a CPU tensor rebinds it to new storage in the "
                         "source's dtype: views and aliases never see it (measured on the real 0.2.5 "
                         "binary; #64): the source moved to the CPU first", modes=FALLBACK_MODES),
    Patch("autocast", "inside torch.autocast('privateuseone') every op raises NotImplementedError "
                      "(no AutocastPrivateUse1 kernels; measured on the real 0.2.5 binary, #36): "
                      "the autocast is entered disabled, with a warning"),
    Patch("cat", "cat/stack with an empty input: 'The parameter is incorrect.' (failure_modes.md "
                 "#19, #20; DirectML PR#527): the empties dropped on the device, at BackendSelect"),
    Patch("dtypes", "no float64 on most DirectML GPUs (DirectML#430, #396, #438, #699; failure_modes.md "
                    "#7); bf16/complex abort the process (DirectML#688, #421, #704; #8, #9)",
          modes=FALLBACK_MODES),
    Patch("out_resize", "an out= tensor of the wrong size is neither resized nor checked (measured on "
                        "the real 0.2.5 binary; #65): its sizes, strides and checks from the meta "
                        "device, at every torch function that takes out=", modes=FALLBACK_MODES,
          # outside the wrappers of the patches that intercept torch functions, so dtypes still
          # finds torch.fft's builtins; inside auto's wrapper
          after=("dtypes",), before=("auto",)),
    Patch("legacy_new", "Tensor.new(...) refused on PrivateUse1 by torch 2.0 (torch-directml <= 0.2.0; "
                        "failure_modes.md #11, DirectML#400, #415): rebuild each legacy form on the device; "
                        "passes through where torch accepts it (2.4.1)", modes=FALLBACK_MODES),
    # GFPGAN stack (third-party, installed lazily on import).  basicsr's fix must be in
    # place before basicsr's own import line runs, so it triggers on torchvision.
    Patch("basicsr", "basicsr 1.4.2 imports torchvision.transforms.functional_tensor, removed in "
                     "torchvision 0.17 (tdml 0.2.5 pins 0.19.1, failure_modes.md #37): alias it",
          imports=("torchvision",), anywhere=True),
    Patch("facexlib", "facexlib's device defaults know only CUDA: calls without device= get "
                      "select_device()", imports=("facexlib",)),
    Patch("gfpgan", "GFPGANer device default; StyleGAN2 noise from the CPU generator (no device "
                    "Generator, failure_modes.md #35); log the RuntimeError GFPGANer.enhance swallows",
          imports=("gfpgan",)),
    Patch("funasr", "funasr's CTC prefix scorer (CTCPrefixScoreTH) takes every non-CUDA tensor for a "
                    "CPU tensor: device mismatch on DirectML with decoding_ctc_weight > 0 (issue 20)",
          imports=("funasr",)),
    Patch("auto", "any torch call DirectML fails (RuntimeError/NotImplementedError, localized "
                  "UnicodeDecodeError, failure_modes.md Note A) is retried on the CPU and "
                  "remembered; 'known' only translates errors to DirectMLError",
          modes=("auto", "known"),
          # it leaves alone what the core patches' intercept wrappers already guard (they run
          # its retry inline; __dmlshim_guarded__) and wraps the rest
          after=("broadcast_copy", "copy_to_cpu", "dtypes", "legacy_new")),
    Patch("rank_limit", "reductions, scans, sorts, cat, where, gather, index_select, flip, layer_norm and "
                        "broadcasting binary ops of more than 5 dimensions end the process (measured on the "
                        "real 0.2.5 binary; DirectML#537): on fewer dimensions on the device, else on the CPU",
          # first in every chain it shares but mul's and cat's, which make their fixed call
          # again from the top, so it reaches this one (a fix before it that redispatched below
          # would hand the call of 6 dimensions to the kernel that ends the process)
          after=("mul", "cat"),
          before=("gather", "layer_norm", "empty_layer_norm", "empty_reduction", "sort_scalar", "int_range",
                  "nan_reductions", "int_broadcast", "bool_minmax", "flip_dims", "refused", "pad_negative",
                  "pad_zero", "pad_value", "empty_broadcast", "var_correction")),
    Patch("offset_views", "views of a view with an offset, and split's chunks, are copies: writes "
                          "through them are lost (measured on the real 0.2.5 binary; #62): made from "
                          "the tensor they alias with as_strided, on the device",
          # both hold the view kernels, and this one makes its views through the rest of their
          # chain (_select.pass_on)
          before=("inference_mode",)),
    # torch-directml 0.2.5's reported defects (failure_modes.md #41-#47; dmlshim.catalogue
    # probes them): BackendSelect kernels (_select.py), and load's device-module wrapper.
    Patch("inference_mode", "views of normal tensors inside torch.inference_mode(): 'Cannot set "
                            "version_counter for inference tensor' (DirectML#602, #622; #41)"),
    Patch("pad", "4-element F.pad applied as (top, bottom, left, right) (DirectML#687; #42): "
                 "reflection_pad2d with unequal pairs on the CPU"),
    Patch("gather", "gather gives wrong values (RVC infer/fcpe.py; #43): strided gathers on the CPU"),
    Patch("losses", "cross_entropy(reduction='none') gradients all zero (DirectML#739, #740; #44): "
                    "nll_loss_backward 'none' on the CPU"),
    Patch("empty_layer_norm", "native_layer_norm of an input with no elements refused (CreateOperator; measured "
                              "on the real 0.2.5 binary): on the CPU (nothing to compute)",
          # measured on the real binary (conformance over every sample); here: before layer_norm's
          # contiguous fix of the same overload (#45), whose fixed call would reach the kernel
          before=("layer_norm",)),
    Patch("layer_norm", "layer_norm on a non-contiguous input: wrong values or CreateOperator error "
                        "(DirectML#588; #45): .contiguous() on the device"),
    Patch("load", "torch.load(map_location=dml): TypeError '>=' between torch.device and int "
                  "(audio-separator PR#295, DirectML#466; #46): device() gets the index"),
    Patch("unique", "unique(return_counts=True) refused (DirectML#410; #47): on the CPU"),
    # seen on the real torch-directml 0.2.5 binary (dmlshim.catalogue): BackendSelect kernels
    # (_resample.py), and prelu's at the Autograd and backend keys
    Patch("upsample_bilinear", "bilinear upsampling without the half-pixel offset (DirectML#482; #21): "
                               "two one-axis resamplings with PyTorch's tables, on the device"),
    Patch("upsample_nearest", "nearest upsampling at a non-integer scale reads the pixel before (#60): "
                              "index_select with the CPU kernel's indices, on the device"),
    Patch("prelu", "PReLU(C) on a >= 3-D input aborts the process (DirectML#271, #445; #29): "
                   "relu(x) - w * (-x).clamp_min(0), on the device"),
    Patch("repeat", "Tensor.repeat with more than 4 dimensions refused: 'must be 4 or lower' "
                    "(ComfyUI#5860; #61): one cat per repeated dimension, on the device"),
    Patch("adaptive_pool", "adaptive_avg_pool with windows off DirectML's grid (stride = in // out; "
                           "upsampling) is silently wrong (measured on the real 0.2.5 binary): on the CPU"),
    Patch("masked_select", "masked_select with an input that broadcasts to the mask comes back too short "
                           "(measured on the real 0.2.5 binary): both expanded first, on the device"),
    Patch("empty_reduction", "sum/prod/mean/norm/logsumexp of an empty input return device memory never "
                             "written (measured on the real 0.2.5 binary): on the CPU",
          # before the fixes that share its overloads (vector_norm's linalg_vector_norm, norm),
          # so an empty input never reaches their device kernels
          before=("vector_norm",)),
    Patch("sort_scalar", "sort of a 0-dim tensor gives 0, of a 0-dim or empty one returns invalid tensors "
                         "that end the process when read (measured on the real 0.2.5 binary): on the CPU",
          # before int_range's, which answers every int64 sort on the device (the emulator's
          # rules keep the same order)
          before=("int_range",)),
    Patch("pad_negative", "replication_pad with a negative begin pad is silently wrong, constant_pad_nd "
                          "with mixed signs refused (measured on the real 0.2.5 binary): crop, then pad"),
    Patch("pad_zero", "constant_pad_nd with every pad 0 returns an uninitialised tensor (measured on the "
                      "real 0.2.5 binary; #63): a copy, on the device",
          # pad_negative hands its cropped call on (_select.pass_on): a crop that leaves every
          # pad 0 is this one's call
          after=("pad_negative",)),
    Patch("combinations", "torch.combinations' C++ composite fails (measured on the real 0.2.5 binary: "
                          "'The size of tensor a (n) must match ... (0)', CreateOperator): on the CPU"),
    Patch("empty_unary", "log2/log10/sinc/bitwise_not/pow of an empty input come back with another dtype or "
                         "shape (measured on the real 0.2.5 binary): on the CPU (nothing to compute)",
          # pow's overloads are in int_broadcast's chain too (the first fix that answers wins); an
          # empty input has nothing to compute, so it answers before the fixes that would compute
          # it (pow: int_pow_zero, bool_exp2, int_range, empty_broadcast's pow_; log2/log10/sinc:
          # refused's retry, which would take the device's wrong dtype or shape as an answer)
          before=("int_broadcast", "empty_broadcast", "int_pow_zero", "bool_exp2", "int_range", "refused")),
    Patch("empty_broadcast", "sub/rsub of float32, bitwise_xor and in-place add_/sub_/div_/pow_/bitwise_or_ ... "
                             "with an operand of no elements raise 'The size of tensor a (0) must match' "
                             "(measured on the real 0.2.5 binary): the empty result's shape from meta, "
                             "on the device (nothing to compute)",
          # sub/rsub.Tensor and the in-place ops are in int_broadcast's and int_range's chains,
          # pow_.Tensor in int_pow_zero's: an empty result has nothing to compute
          before=("int_broadcast", "int_range", "int_pow_zero")),
    Patch("masked_fill_rank", "masked_fill_ of 5 dimensions refused, of 6 to 8 ends the process (measured on the "
                              "real 0.2.5 binary; nanquantile with keepdim): flattened, the mask expanded, on "
                              "the device"),
    Patch("int_pow_zero", "integer pow of a zero base to a negative exponent gives the int32 maximum "
                          "(measured on the real 0.2.5 binary): those elements 0, on the device",
          # it computes the whole call itself (_select.itself, int_broadcast's leading ones
          # included), so it answers before the fixes of pow it would otherwise hand on to
          before=("bool_exp2", "int_broadcast")),
    Patch("bool_exp2", "exp2 of bool, pow of a number to a bool exponent give 1 (measured on the real "
                       "0.2.5 binary): the exponent cast to the result's dtype, on the device"),
    Patch("linspace_int", "linspace of an integer dtype truncates its step, of bool is refused (measured on "
                          "the real 0.2.5 binary): on the CPU"),
    Patch("arange_float32", "arange takes its length from float32: values dropped or added, none past 2**31 "
                            "(measured on the real 0.2.5 binary): on the CPU"),
    Patch("bmm_cpu_operand", "bmm/baddbmm with a CPU operand end the process (measured on the real 0.2.5 "
                         "binary): torch's error for operands on two devices, before the kernel",
          # it only raises torch's error, so it goes first: after them, int_addmm's fixed call of
          # a fractional alpha was redispatched past it, to the kernel that ends the process
          # (issue 49)
          before=("int_range", "int_addmm")),
    Patch("int_range", "integer arithmetic computes in float32 (add/sub/mul with a number, neg, pow, // and %, "
                       "mm): exact only within 2**24, saturating; int64 clone/sub/maximum/clamp/sort read 32 "
                       "bits (measured on the real 0.2.5 binary): calls whose values leave that span on the CPU",
          # its spans are of the call those hand on (gather's dim from 0: _select.pass_on) or make
          # again (masked_fill_rank's flattened call); an empty sum has nothing to compute; unique's
          # counts go to the CPU; int_pow_zero and bool_exp2 answer as the registry had them
          # mul's cast and cat's dropped empties make their call again, which this one then sees
          after=("gather", "unique", "empty_reduction", "masked_fill_rank", "int_pow_zero", "bool_exp2",
                 "mul", "cat")),
    Patch("unique_bytes", "unique of bool/uint8/int8 drops the zeros, of >= 2 dimensions aborts (measured "
                          "on the real 0.2.5 binary): flattened, widened to int32, on the device",
          # unique's counts go to the CPU, right for every dtype and rank; int_range's guard hands
          # the call on to this one, which computes it below the chain (_select.itself): before
          # it, an int64 of >= 2 dimensions past 32 bits came back wrong (issue 49)
          after=("unique", "int_range")),
    Patch("nan_reductions", "amax/max/min/argmax/argmin, logsumexp and the inf-norms skip NaN (measured on the "
                            "real 0.2.5 binary): NaN, its first index, or logsumexp's -inf/inf put in by where, "
                            "on the device (three to five more kernels a call, no read)",
          # after int_range, whose argmax/max(dim) indices' span it keeps (its fix passes the call
          # on to this one); before vector_norm, whose fixed norm it amends
          after=("int_range", "empty_reduction"), before=("vector_norm", "bool_minmax")),
    Patch("nan_sort", "sort/argsort/msort/topk place NaN among the values, log_softmax of a slice holding NaN or "
                      "+inf gives values where the CPU has NaN (measured on the real 0.2.5 binary): the device's "
                      "stable sort with NaN as +inf, then of the NaN mask; NaN put in by where, on the device "
                      "(no read; 2x to 5x the sort or topk, 2x to 3.5x log_softmax on lavapipe)",
          # after rank_limit (6-D: flattened first), sort_scalar (0-dim, empty) and int_range, whose
          # sort/topk indices' span it keeps (its fix passes the call on to this one)
          after=("rank_limit", "sort_scalar", "int_range")),
    Patch("int_broadcast", "binary ops of operands of different ranks, one cast (integer div/remainder/"
                           "floor_divide/atan2/pow; add, mul, lt ... of mixed dtypes), read the smaller one's "
                           "first value (measured on the real 0.2.5 binary): it gets leading size-1 dimensions, "
                           "on the device",
          # int_range measures the operands and hands the call on to this one (_select.pass_on);
          # this one's fixed call is redispatched below the chain, past int_range
          after=("int_range", "mul")),
    Patch("var_correction", "var()/std_mean() over every dimension without a correction divide by n "
                            "(measured on the real 0.2.5 binary): every dimension and the correction "
                            "named, on the device"),
    Patch("dropout_backward", "native_dropout_backward (dropout's gradient) comes back bool (measured on "
                              "the real 0.2.5 binary): grad * mask * scale, on the device"),
    Patch("int_addmm", "addmm/baddbmm of integers with a fractional alpha/beta scale by the float values "
                       "(measured on the real 0.2.5 binary): truncated as the CPU does, on the device",
          # int_range hands its call on (_select.pass_on); this one's is redispatched below the chain
          after=("int_range",)),
    Patch("vector_norm", "linalg_vector_norm/norm with an ord other than 0, 1, 2 overwrite the input with "
                         "abs(x)**ord, in float16 for float16 (saturated, dtype= ignored); keepdim over every "
                         "dimension gives 0-dim (measured on the real 0.2.5 binary): a copy for the kernel, "
                         "float32 for float16, every dimension named, on the device"),
    Patch("cdist", "_cdist_forward (cdist with p != 2) of inputs that are not 3-D: wrong shapes, values "
                   "or 'size of tensor a must match' (measured on the real 0.2.5 binary): the batch "
                   "flattened to 3-D, on the device"),
    Patch("conv_transpose_padding", "transposed convolutions with an output_padding leave its last "
                                    "positions zero, their backward wrong (measured on the real 0.2.5 "
                                    "binary): without padding, cropped and extended, on the device"),
    Patch("batch_norm_stats", "native_batch_norm's saved statistics (eval mode, one channel) and its "
                              "backward's one-channel gradients have other shapes (measured on the real "
                              "0.2.5 binary): the CPU's shapes, on the device"),
    Patch("softplus_beta", "softplus with beta != 1 tests x > threshold, not x * beta, softplus_backward "
                           "has no linear branch (measured on the real 0.2.5 binary): beta=1's kernels on "
                           "x * beta, the linear branch by where, on the device"),
    Patch("avg_pool_ceil", "avg_pool with ceil_mode and count_include_pad divides a last window past the "
                           "padded input by the whole kernel (measured on the real 0.2.5 binary): padded "
                           "explicitly, count_include_pad=False, on the device"),
    Patch("bool_minmax", "max()/min() of a bool tensor come back int32 (measured on the real 0.2.5 "
                         "binary): cast back to bool, on the device"),
    Patch("flip_dims", "flip with a negative dimension or of a 0-dim tensor ends the process (measured on "
                       "the real 0.2.5 binary): the dimension counted from 0, on the device",
          # int_range keeps the span of the flip this one fixes (_select.pass_on)
          after=("int_range",)),
    Patch("pad_value", "constant_pad_nd keeps the pad value of its first call per shape, pads and dtype, "
                       "refuses an empty input (measured on the real 0.2.5 binary): padded with 0, the value "
                       "by masked_fill, on the device; an empty input on the CPU",
          # pad_negative hands its cropped call of mixed signs on to it (_select.pass_on);
          # pad_zero answers every pad of 0s first (this one's own pad of 0s would be that call)
          after=("pad_negative", "pad_zero")),
    Patch("batched_tril_triu", "tril/triu of a batch of matrices keep the wrong diagonals (measured on "
                               "the real 0.2.5 binary): the 2-D mask of the last two dimensions, where, "
                               "on the device"),
    Patch("channels_last", "memory_format=channels_last is refused for device tensors ('must be "
                           "Contiguous for DML tensors', measured on the real 0.2.5 binary): the CPU's "
                           "strides by empty_strided and a copy, on the device",
          # int_range's int64 clone guard hands the call on to this one's clone (_select.pass_on)
          after=("int_range",)),
    Patch("scatter_repeated", "scatter_add/scatter(reduce=) with a repeated index write it once (measured "
                              "on the real 0.2.5 binary): index_put_(accumulate=True), on the device",
          # gather's dim=-1 fix hands the dimension counted from 0 on; refused's retry answers all
          after=("gather",), before=("refused",)),
    Patch("refused", "calls the real 0.2.5 binary refuses (3-D and integer convolution, avg_pool's "
                     "divisor_override, zero-size mm/addmm, integer log2/isnan/sinc, partial scatter, "
                     "the *_scatter ops): retried on the CPU at BackendSelect, however reached",
          # its retry answers every call it holds, so the fixes that share its overloads go first
          # (_select sorts each chain by the declared order)
          after=("gather", "repeat", "adaptive_pool", "int_range", "int_addmm", "conv_transpose_padding",
                 "avg_pool_ceil")),
    Patch("max_pool_unbatched", "max_pool2d_with_indices and its backward of an unbatched 3-D input: 'Dimension "
                                "out of range' (measured on the real 0.2.5 binary): with a batch of one, on the device",
          # before max_pool_ceil, which runs ceil_mode on the CPU: the batched call reaches it
          before=("max_pool_ceil",)),
    Patch("fallback_out", "eye, kthvalue, median/nanmedian(dim), linalg.lstsq come back empty: torch-"
                          "directml's CPU fallback does not grow their empty out= (measured on the real "
                          "0.2.5 binary): on the CPU, the outs grown to the CPU's shapes"),
    Patch("max_pool_ceil", "max_pool2d with ceil_mode=True gives floor mode's shape, other indices and "
                           "gradients (measured on the real 0.2.5 binary): with ceil_mode on the CPU"),
    Patch("pad_unbatched", "reflection_pad2d of an unbatched 3-D input: 'vector::_M_range_check' (measured on "
                           "the real 0.2.5 binary): with a batch of one, on the device",
          # pad's CPU answer of unequal pairs holds at any rank; this one's batched call goes
          # through the whole chain again (the op called, not redispatched)
          after=("pad",)),
    Patch("max_pool_indices", "max_pool2d_with_indices counts its indices over the whole tensor, not per plane; "
                              "with a dilation its values are wrong (measured on the real 0.2.5 binary): the "
                              "planes' offsets subtracted on the device; a dilated call on the CPU",
          # after max_pool_ceil (ceil_mode: the CPU's indices) and max_pool_unbatched (3-D: batched)
          after=("max_pool_ceil", "max_pool_unbatched")),
)



# Every patch module, imported here: REGISTRY's names lead a reader (and tests/test_layers.py)
# to each fix; none imports its third-party library at its top level.
from . import (  # noqa: E402, F401  (MODULES reads them)
    adaptive_pool, arange_float32, auto, autocast, avg_pool_ceil, basicsr, batch_norm_stats,
    batched_tril_triu, bmm_cpu_operand, bool_exp2, bool_minmax, broadcast_copy, cat, cdist,
    channels_last, combinations, conv_transpose_padding, copy_to_cpu, dispatcher,
    dropout_backward, dtypes, empty_broadcast, empty_layer_norm, empty_reduction, empty_unary,
    facexlib, fallback_out, flip_dims, funasr, gather, gfpgan, inference_mode, int_addmm,
    int_broadcast, int_pow_zero, int_range, jit, layer_norm, lazy_modules, legacy_new,
    linspace_int, load, losses, masked_fill_rank, masked_select, max_pool_ceil,
    max_pool_indices, max_pool_unbatched, mul, nan_reductions, nan_sort, offset_views,
    out_resize, pad, pad_negative, pad_unbatched, pad_value, pad_zero, prelu, rank_limit,
    refused, repeat, rnn, scatter_repeated, softplus_beta, sort_scalar, unique, unique_bytes,
    upsample_bilinear, upsample_nearest, var_correction, vector_norm)

MODULES: Dict[str, object] = {p.name: globals()[p.name] for p in REGISTRY}   # name -> module

# The order's source, kept whole: a test that installs fewer patches narrows REGISTRY only.
_DECLARED = REGISTRY


@functools.lru_cache(maxsize=None)
def _ranks() -> Dict[str, int]:
    """Each patch's place in a topological order of REGISTRY's ``after=``/``before=``, ties
    broken by registry position (so it is the registry's own order while that keeps every
    declaration, as tests/test_activate.py checks)."""
    first: Dict[str, set] = {p.name: set(p.after) for p in _DECLARED}    # name -> who goes before it
    for patch in _DECLARED:
        for later in patch.before:
            first[later].add(patch.name)
    placed: List[str] = []
    while len(placed) < len(_DECLARED):
        ready = [p.name for p in _DECLARED if p.name not in placed and first[p.name] <= set(placed)]
        if not ready:
            raise ValueError(f"REGISTRY's after=/before= make a cycle among {sorted(set(first) - set(placed))}")
        placed.append(ready[0])
    return {name: i for i, name in enumerate(placed)}


def rank(name: str) -> int:
    """Where patch ``name``'s fixes go in a chain they share with others' (lower: earlier),
    from the declared order; a name not in REGISTRY (a test's) goes after them all."""
    return _ranks().get(name, len(_DECLARED))


def held() -> Dict[object, Tuple[str, ...]]:
    """``{aten overload: the patches whose BackendSelect fixes hold it, in chain order}``,
    read from every patch module's ``_select.Kernels`` tables (each module imported; its
    third-party library is not), installed or not.  The dispatcher net's hooks hold the
    same overloads as their patch's ``Kernels`` twin (used where the net holds none)."""
    from . import _select
    return _select.tables()


_lock = threading.RLock()
_installed: Dict[str, object] = {}          # name -> imported patch module
_waiting: Dict[str, List[Callable[[], None]]] = {}   # lazy patch name -> cancels of its hooks


def _install(patch: Patch, ctx: Context) -> None:
    with _lock:
        if patch.name in _installed or not ctx.active:
            return
        module = MODULES[patch.name]
        module.install(ctx)
        _installed[patch.name] = module


def _wanted(patch: Patch, ctx: Context) -> bool:
    return (ctx.fallback in patch.modes and ctx.enabled(patch.name)
            and (ctx.present or patch.anywhere))


def install_all(ctx: Context) -> None:
    """Install every registered patch for ``ctx.fallback`` (lazy ones on import) whose
    fix is on (``ctx.enabled``: probed defects, dmlshim.probing); with no target device
    (``ctx.present`` False) only the ``anywhere`` ones.  Patches already installed or
    waiting for their import are left as they are, so it runs again, in registry order,
    when a device appears."""
    _caller.install()                            # warnings inside wrappers name the caller
    for patch in REGISTRY:
        if not _wanted(patch, ctx) or patch.name in _installed or patch.name in _waiting:
            continue
        if not patch.imports:
            _install(patch, ctx)
            continue
        # the first import installs; later ones no-op
        _waiting[patch.name] = [when_imported(module_name, lambda mod, p=patch: _install(p, ctx))
                                for module_name in patch.imports]


def uninstall_all() -> None:
    """Uninstall in reverse order; cancel lazy installs still waiting for an import."""
    with _lock:
        for cancel in (c for cancels in _waiting.values() for c in cancels):
            cancel()
        _waiting.clear()
        for name in reversed(list(_installed)):
            try:
                _installed.pop(name).uninstall()
            except Exception as exc:             # one broken patch must not block the rest
                warnings.warn(f"dmlshim: uninstalling patch {name!r} failed: {exc!r}", RuntimeWarning)
        _caller.uninstall()


def installed() -> List[str]:
    """Names of the patch modules installed now."""
    with _lock:
        return list(_installed)
