"""DirectML's quirks as data: one :class:`Rule` per known failure.

A rule names the aten op(s) it watches, an optional predicate over the op's
arguments, and what DirectML does instead of computing the right answer:
raise ``error(message)``, or (``replace=``) return a silently wrong result.
Users describe failures we have not met yet with their own rules::

    from dmlshim import emulation
    emulation.configure(rules=[emulation.Rule(
        "aten::upsample_bilinear2d", message="The parameter is incorrect.",
        source="my model, AMD RX 6600")], extend=True)

Every default cites its row of ``failure_modes.md``; the table of defaults and what
is deliberately not a rule: docs/emulation.md ("DirectML's quirks are rules")."""
import dataclasses
from typing import Callable, Optional, Tuple, Union

import torch

from . import routing

# Whether the emulated GPU runs float64 math.  _state.set_config, the one writer of
# the device's configuration, passes it down: rules stays below _state (no cycle).
float64_supported = False
# torch-directml's once-per-process fallback warning; _state passes its own down.
warn_fallback: Callable[[str], None] = lambda name: None

Tensor = torch.Tensor


class FatalDirectMLError(Exception):
    """Stands for the process abort of real DirectML (``[F dml_util.cc:118]``).

    Real torch-directml terminates the process on bf16 or complex tensors
    (failure_modes.md #8, #9); nothing can catch that. The emulator raises this
    instead. It is deliberately *not* a ``RuntimeError``, so no CPU fallback
    that catches ``RuntimeError`` can pretend to recover from it.
    """


OpSelector = Union[str, Tuple[str, ...], Callable[[torch._ops.OpOverload], bool]]


@dataclasses.dataclass(frozen=True)
class Rule:
    """One DirectML failure, matched per call of an aten op on the device.

    Attributes:
        op: which ops the rule watches: a name with or without overload
            (``"cat"`` matches every ``cat`` overload, ``"mul.Tensor"`` one;
            an ``"aten::"`` prefix is allowed), a tuple of names, ``"*"`` for
            all ops, or a callable ``(OpOverload) -> bool`` (decided once per op).
            Views and other metadata-only ops are never matched by ``"*"`` or a
            callable: they compute nothing.
        when: optional predicate called with the op's arguments as the
            dispatcher passes them (``when(*args, **kwargs) -> bool``); device
            tensors are the device tensors themselves. ``None`` = always.
        error: the exception type raised (default ``RuntimeError``).
        message: the exception text, or a callable ``(*args, **kwargs) -> str``.
            HRESULT texts such as ``"The parameter is incorrect."`` become a
            ``UnicodeDecodeError`` under ``configure(localized_errors=...)``.
        replace: instead of raising, return ``replace(*args, **kwargs)``:
            a silently wrong result, as DirectML gives for float x bool (#17).
        source: where the failure is documented (issue, failure_modes.md row).
    """

    op: OpSelector
    when: Optional[Callable[..., bool]] = None
    error: type = RuntimeError
    message: Union[str, Callable[..., str]] = "The parameter is incorrect."
    replace: Optional[Callable[..., object]] = None
    source: str = ""

    def __post_init__(self):
        if not (isinstance(self.op, (str, tuple)) or callable(self.op)):
            raise TypeError(f"Rule.op must be an op name, a tuple of names or a callable "
                            f"(OpOverload) -> bool, got {type(self.op).__name__}")
        if not (isinstance(self.error, type) and issubclass(self.error, BaseException)):
            raise TypeError(f"Rule.error must be an exception class, got {self.error!r}")

    def matches_op(self, op, name, metadata):
        """Whether this rule watches ``op`` (called once per op, then cached)."""
        if isinstance(self.op, str) and self.op != "*":
            return _name_matches(self.op, name)
        if isinstance(self.op, tuple):
            return any(_name_matches(n, name) for n in self.op)
        if metadata:
            return False
        return self.op == "*" or bool(self.op(op))

    def apply(self, args, kwargs):
        """Raise the rule's error or return its replacement result."""
        if self.replace is not None:
            return self.replace(*args, **kwargs)
        message = self.message(*args, **kwargs) if callable(self.message) else self.message
        raise self.error(message)


def _name_matches(pattern, name):
    pattern = routing.op_name(pattern)
    return name == pattern or ("." not in pattern and name.split(".", 1)[0] == pattern)


# ---------------------------------------------------------------- defaults

def _tensors(args, kwargs):
    """The tensor arguments, also inside lists (a list: predicates run per call)."""
    found = []
    for a in (*args, *kwargs.values()) if kwargs else args:
        if isinstance(a, Tensor):
            found.append(a)
        elif isinstance(a, (list, tuple)):
            found.extend(t for t in a if isinstance(t, Tensor))
    return found


def _float_times_bool(self, other, *_, **__):
    return (isinstance(other, torch.Tensor) and
            ((self.is_floating_point() and other.dtype == torch.bool)
             or (self.dtype == torch.bool and other.is_floating_point())))


def _bool_product(self, other, *_, **__):
    return torch.logical_and(self, other)


def _any_empty(tensors, *_, **__):
    return any(t.numel() == 0 for t in tensors)


# Copies between devices. Metadata ops (set_, resize_) need no entry: callable
# selectors never match them (Rule.matches_op).
_COPY_OPS = frozenset(["_copy_from", "_copy_from_and_resize", "copy_", "_to_copy"])
# The float64 ops DirectML runs: it has only casts and data movement (#7).
_DATA_MOVEMENT = _COPY_OPS | {"clone", "empty.memory_format", "empty_strided",
                              "_local_scalar_dense", "cat", "cat.out", "fill_.Scalar", "zero_"}


def _is_float64_math(op):
    name = routing.op_name(op)
    return name not in _DATA_MOVEMENT and routing.route(name) != routing.CPU_FALLBACK


def _uses_float64(*args, **kwargs):
    if float64_supported:
        return False
    if kwargs and kwargs.get("dtype") is torch.float64:
        return True
    for t in _tensors(args, kwargs):
        if t.dtype is torch.float64:
            return True
    return False


def _python_float_scalar(self, other, *_, **__):
    return isinstance(other, float) and not float64_supported


_UNSUPPORTED_DTYPES = frozenset([torch.bfloat16, torch.complex32, torch.complex64,
                                 torch.complex128])
_C10_NAMES = {torch.bfloat16: "BFloat16", torch.complex32: "ComplexHalf",
              torch.complex64: "ComplexFloat", torch.complex128: "ComplexDouble"}


def _requested_dtype(*args, **kwargs):
    dtype = kwargs.get("dtype")
    if dtype is None and len(args) > 1 and isinstance(args[1], torch.dtype):
        dtype = args[1]  # view.dtype(self, dtype)
    return dtype


def _unsupported_dtype(*args, **kwargs):
    if _requested_dtype(*args, **kwargs) not in _UNSUPPORTED_DTYPES:
        return False
    device = kwargs.get("device")
    return device is None or torch.device(device).type != "cpu"  # _to_copy to the CPU is fine


def fatal_dtype_message(*args, **kwargs):
    """The text of DirectML's abort for the dtype an op asks for or makes."""
    dtype = _requested_dtype(*args, **kwargs)
    if dtype is None:  # a complex-producing op: complex64 unless its input is double
        inputs = _tensors(args, kwargs)
        dtype = torch.complex128 if inputs and inputs[0].dtype == torch.float64 \
            else torch.complex64
    return f"[F dml_util.cc:118] Invalid or unsupported data type {_C10_NAMES[dtype]}."


def _takes_dml_tensors_only(op):
    # DirectML's binary kernels accept one CPU operand ("self or other tensor
    # must be on the DML device!"); its other kernels unbox every input as a DML
    # tensor. CPU-fallback ops move everything to the CPU anyway.
    name = routing.op_name(op)
    if name in _COPY_OPS or routing.route(name) == routing.CPU_FALLBACK:
        return False
    arg_names = {a.name for a in op._schema.arguments}
    return not {"self", "other"} <= arg_names


def _cpu_operand(*args, **kwargs):
    for t in _tensors(args, kwargs):
        if t.is_cpu and t.dim() > 0:
            return True
    return False


def _no_fused_kernel(name):
    def message(*_, **__):
        warn_fallback(name)                      # torch-directml warns, then the CPU has no kernel
        return str(routing.no_cpu_kernel_error(name))
    return message


def fused_rnn_rules():
    """LSTM/GRU: torch's fused cells have no DirectML and no CPU kernel (rows #1, #2, #34).
    One rule per op (the message names it); without them the emulated device computes
    the cells (:mod:`.fused_rnn`), as a device with those kernels would."""
    from .fused_rnn import OPS
    return [Rule(name, error=NotImplementedError, message=_no_fused_kernel(name),
                 source="failure_modes.md #1, #2, #34; microsoft/DirectML#613, #654, #677")
            for name in OPS]


def default_rules():
    """DirectML's known quirks, one rule each (failure_modes.md rows cited)."""
    return [
        Rule("mul.Tensor", when=_float_times_bool, replace=_bool_product,
             source="failure_modes.md #17; microsoft/DirectML#686, #737: float * bool "
                    "returns a bool tensor (silent)"),
        Rule("convolution_overrideable", when=lambda input, *_: input.dtype == torch.bool,
             message="The parameter is incorrect.",
             source="DESIGN.md (FunASR 'conv1d got a bool input'); DirectML convolution "
                    "accepts float16/float32 only, so operator creation fails with "
                    "E_INVALIDARG (inferred)"),
        Rule("cat", when=_any_empty, message="The parameter is incorrect.",
             source="failure_modes.md #19, #20; microsoft/VibeVoice#49, DirectML PR#527 "
                    "(torch.stack reaches cat)"),
        Rule(_is_float64_math, when=_uses_float64,
             message="The GPU device does not support Double (Float64) operations!",
             source="failure_modes.md #7, #25; microsoft/DirectML#430, #396, #438, #699 "
                    "(DirectML has only cast and data movement for float64)"),
        Rule("rsub.Scalar", when=_python_float_scalar,
             message="The GPU device does not support Double (Float64) operations!",
             source="failure_modes.md #7: `1.0 - x` wraps 1.0 as a Double scalar "
                    "(workaround: `-x + 1.0`)"),
        Rule(("empty.memory_format", "empty_strided", "_to_copy", "view.dtype"),
             when=_unsupported_dtype,
             error=FatalDirectMLError, message=fatal_dtype_message,
             source="failure_modes.md #8, #9; microsoft/DirectML#688, #421, #704 "
                    "(process abort)"),
        Rule(("_fft_r2c", "_fft_c2c", "view_as_complex", "complex", "polar"),
             error=FatalDirectMLError, message=fatal_dtype_message,
             source="failure_modes.md #9: a complex result cannot live on DirectML "
                    "(torch.stft, even with return_complex=False)"),
        Rule(_takes_dml_tensors_only, when=_cpu_operand,
             message='tensor.device().type() == at::DeviceType::PrivateUse1 INTERNAL ASSERT '
                     'FAILED at "DMLTensor.cpp":30, please report a bug to PyTorch. unbox '
                     'expects Dml at::Tensor as inputs',
             source="failure_modes.md #10; microsoft/DirectML#442, #397"),
        *fused_rnn_rules(),
    ]
