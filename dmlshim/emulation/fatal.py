"""DirectML's process abort, as the emulated device raises it (failure_modes.md #8, #9, #29).

The lowest layer of the emulator: ``_backend`` and ``rules`` both raise it."""
import torch

C10_NAMES = {torch.bfloat16: "BFloat16", torch.complex32: "ComplexHalf",
             torch.complex64: "ComplexFloat", torch.complex128: "ComplexDouble"}


class FatalDirectMLError(Exception):
    """Stands for the process abort of real DirectML (``[F dml_util.cc:118]``).

    Real torch-directml terminates the process on bf16 or complex tensors
    (failure_modes.md #8, #9), and on a tensor description of too high a rank (#29);
    nothing can catch that. The emulator raises this
    instead. It is deliberately *not* a ``RuntimeError``, so no CPU fallback
    that catches ``RuntimeError`` can pretend to recover from it.
    """


# torch-directml's check on a tensor description's rank (#29; what nn.PReLU(C) on a 4-D
# input hits on the real 0.2.5 binary)
RANK_ABORT = "[F dml_tensor_desc.cc:80] Check failed: rank <= DML_TENSOR_DIMENSION_COUNT_MAX"


def abort_message(dtype: torch.dtype) -> str:
    """DirectML's abort text for ``dtype`` (one of :data:`C10_NAMES`)."""
    return f"[F dml_util.cc:118] Invalid or unsupported data type {C10_NAMES[dtype]}."
