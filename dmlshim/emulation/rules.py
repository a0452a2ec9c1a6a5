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
import sys
from typing import Callable, Optional, Tuple, Union

import torch

from . import _backend, opaque, routing, rules_refused
from .fatal import RANK_ABORT, FatalDirectMLError, abort_message
from .. import fallback
from ..dml_ops import aten_op, out_unresized, view_kernels
from ..laws.broadcast import wrong_on_device

# Whether the emulated GPU runs float64 math.  _state.set_config, the one writer of
# the device's configuration, passes it down: rules stays below _state (no cycle).
float64_supported = False
# torch-directml's once-per-process fallback warning; _state passes its own down.
warn_fallback: Callable[[str], None] = lambda name: None

Tensor = torch.Tensor


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
        bind: optional ``bind(rule, op) -> Rule``, called once per op the rule watches,
            for a rule whose ``when`` or ``replace`` needs the op itself (#65, ``out=``).
    """

    op: OpSelector
    when: Optional[Callable[..., bool]] = None
    error: type = RuntimeError
    message: Union[str, Callable[..., str]] = "The parameter is incorrect."
    replace: Optional[Callable[..., object]] = None
    source: str = ""
    bind: Optional[Callable[["Rule", torch._ops.OpOverload], "Rule"]] = None

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


def _is_bool(value):
    return value.dtype == torch.bool if isinstance(value, Tensor) else isinstance(value, bool)


def _bool_times_other(self, other, *_, **__):
    """A bool operand beside one that is not: a float, int64 or bool tensor, or a Python
    number or bool, either order (each measured on the real 0.2.5 binary)."""
    return _is_bool(self) != _is_bool(other)


def _bool_product(self, other, *_, **__):
    # measured on the real 0.2.5 binary: a float operand is truncated to an integer
    # first, so 0.5 * True is False and -1.2 * True is True
    host = [_backend.host(t) if isinstance(t, Tensor) else torch.as_tensor(t) for t in (self, other)]
    return _backend.to_device(torch.logical_and(*(t.trunc() if t.is_floating_point() else t
                                                  for t in host)))


def _in_device_autocast(*_, **__):
    return torch.is_autocast_enabled("privateuseone")


def _broadcast_copy(self, src, *_, **__):
    """``self.copy_(src)`` into the device, of a ``src`` that broadcasts as the real 0.2.5
    binary gets it wrong (``laws.broadcast.wrong_on_device``)."""
    return not self.is_cpu and wrong_on_device(self, src)


def _broadcast_copy_result(self, src, *_, **__):
    # measured on the real 0.2.5 binary: a CPU source lands in self's first elements (in
    # self's element order, the rest left as it was); a device source of fewer dimensions
    # fills self with its first element
    flat = _backend.host(self).flatten()                      # a copy, in self's element order
    if src.is_cpu:
        flat[:src.numel()] = src.reshape(-1)
    else:
        flat[:] = _backend.host(src).reshape(-1)[0]
    _backend.host(self).copy_(flat.view(self.shape))
    return self


def _empty_beside_data(tensors, *_, **__):
    """Empty and non-empty inputs together; all empty, or a legacy 1-D ``(0,)`` input
    (which cat skips), pass (measured on the real torch-directml 0.2.5: cat of (2, 3) and
    (0, 3) fails with E_INVALIDARG, stack of two (0, 3) and cat with a (0,) work)."""
    empty = [t.numel() == 0 for t in tensors if t.shape != (0,)]
    return any(empty) and not all(empty)


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
    return abort_message(dtype)


# Kernels of the real 0.2.5 binary that take CPU operands (measured, benchmarks/fidelity.py):
# matrix products and the indexing ops, whose CPU indices torch moves to the device first.
CPU_INDEX_OPS = ("index.Tensor", "index_put", "index_put_", "_index_put_impl_")
_TAKE_CPU_OPERANDS = frozenset(["mm", "addmm", *CPU_INDEX_OPS])
UNBOX_MESSAGE = ('tensor.device().type() == at::DeviceType::PrivateUse1 INTERNAL ASSERT FAILED at '
                 '"DMLTensor.cpp":30, please report a bug to PyTorch. unbox expects Dml at::Tensor '
                 'as inputs')


TERMINATE_UNBOX = ("terminate called after throwing an instance of 'c10::Error' (fromTensor at "
                   "DMLTensor.cpp:30): unbox expects Dml at::Tensor as inputs")


def _refuses_cpu_operands(op):
    """A DML kernel that gets its operands as given: not a copy, not one of the kernels
    that take CPU operands, not a CPU fallback (which moves everything anyway)."""
    name = routing.op_name(op)
    return not (name in _COPY_OPS or name in _TAKE_CPU_OPERANDS
                or routing.route(name) == routing.CPU_FALLBACK)


def _is_binary(op):
    return {"self", "other"} <= {a.name for a in op._schema.arguments}


def _takes_dml_tensors_only(op):
    # torch-directml's kernels unbox every input as a DML tensor; binary ops are checked
    # by torch first (_binary).
    return _refuses_cpu_operands(op) and not _is_binary(op)


def _binary(op):
    return _refuses_cpu_operands(op) and _is_binary(op)


def _cpu_operand(*args, **kwargs):
    for t in _tensors(args, kwargs):
        if t.is_cpu and t.dim() > 0:
            return True
    return False


def _devices_message(*args, **kwargs):
    devices = list(dict.fromkeys(str(t.device) for t in _tensors(args, kwargs)))
    return ("Expected all tensors to be on the same device, but found at least two devices, "
            f"{devices[0]} and {devices[1]}!")


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


# ------------------------------------------- float64 on a GPU with FP64 (#7)
# Measured on the real torch-directml 0.2.5 with FP64 reported (issue 25): DirectML's
# element-wise operators take no FLOAT64 (learn.microsoft.com, DML_ELEMENT_WISE_ADD_ /
# SQRT_OPERATOR_DESC "Tensor support"); torch-directml computes some float64 ops through
# float32, returns max()/min() as float32, and others fail with E_INVALIDARG.
FP64_SOURCE = ("failure_modes.md #7 with FP64, measured on the real torch-directml 0.2.5 "
               "(issue 25); DirectML's element-wise operators take no FLOAT64 "
               "(DML_ELEMENT_WISE_*_OPERATOR_DESC)")
_FP64_VIA_FLOAT32 = ("mul.Tensor", "add.Tensor", "div.Tensor", "sum.default", "sum.dim_IntList",
                     "mean.dim", "prod.default", "cumsum.default", "exp.default", "sigmoid.default",
                     "mm.default")
_FP64_REFUSED = ("log.default", "sqrt.default", "sin.default", "tanh.default", "pow.Tensor_Scalar",
                 "clamp.default", "_softmax.default", "sort.default")


def _float64_with_fp64(*args, **kwargs):
    return float64_supported and any(t.dtype is torch.float64 for t in _tensors(args, kwargs))


def _through_float32(name):
    """The op computed on float32 copies of its float64 tensors, results cast back."""
    op = aten_op(name)

    def kernel(*args, **kwargs):
        def f32(x):
            return x.float() if isinstance(x, Tensor) and x.dtype is torch.float64 else x
        out = op(*map(f32, args), **{k: f32(v) for k, v in kwargs.items()})
        return out.double() if out.dtype is torch.float32 else out

    return lambda *args, **kwargs: _backend.run_on_cpu(op, args, kwargs, kernel)


def _as_float32(name):
    op = aten_op(name)
    return lambda self: _backend.run_on_cpu(op, (self,), {}, lambda t: op(t).float())


def fp64_rules():
    """float64 where the emulated GPU reports FP64 (``configure(has_float64_support=True)``),
    as on the real binary: a device whose float64 results dmlshim's probe finds wrong."""
    return [*(Rule(_overload(name), when=_float64_with_fp64, replace=_through_float32(name),
                   source=f"{FP64_SOURCE}: computed through float32") for name in _FP64_VIA_FLOAT32),
            *(Rule(_overload(name), when=_float64_with_fp64, replace=_as_float32(name),
                   source=f"{FP64_SOURCE}: the result is float32") for name in ("max.default", "min.default")),
            Rule(_overloads(_FP64_REFUSED), when=_float64_with_fp64,
                 message="The parameter is incorrect.", source=f"{FP64_SOURCE}: E_INVALIDARG")]


def _overload(name):
    """A selector of exactly that overload (a name ``"sum"`` would match every one)."""
    return _overloads((name,))


def _overloads(names):
    ops = frozenset(aten_op(n) for n in names)
    return lambda op: op in ops


# ------------------------------------------- torch-directml 0.2.5 defects (#41-#47)
# Silent ones compute their wrong answer on CPU aliases (_backend), so the device's
# own kernels (and these rules) are not re-entered.

def _view_of_normal_tensor_in_inference_mode(self, *_, **__):
    # DirectML builds the view as a new TensorImpl, an inference tensor inside
    # inference_mode; torch's ADInplaceOrView kernel then gives it the base's version
    # counter, which an inference tensor refuses (c10 TensorImpl::set_version_counter).
    return torch.is_inference_mode_enabled() and not self.is_inference()


def _normal_tensor_viewed(slot):
    """Inference mode, and the argument at ``slot`` is a normal tensor: torch-directml's
    kernel views it (bias, running_mean) through the dispatcher, so #41 fails there too."""
    def when(*args, **__):
        t = args[slot] if len(args) > slot else None
        return (isinstance(t, Tensor) and torch.is_inference_mode_enabled()
                and not t.is_inference())
    return when


def _view_then(slot, kernel):
    """View the argument at ``slot`` on the device (the view kernels' rule and dmlshim's
    inference_mode fix see it), then compute as usual."""
    def replace(*args, **kwargs):
        args[slot].view(args[slot].shape)
        return kernel(*args, **kwargs)
    return replace


def _native_batch_norm(*args, **kwargs):
    return _backend.run_on_cpu(torch.ops.aten.native_batch_norm.default, args, kwargs)


def _pad_pairs_differ(self, padding, *_, **__):
    return len(padding) == 4 and (padding[0], padding[1]) != (padding[2], padding[3])


def _pad_pairs_swapped(self, padding, *args, **kwargs):
    left, right, top, bottom = padding
    return _backend.run_on_cpu(torch.ops.aten.reflection_pad2d.default,
                               (self, [top, bottom, left, right], *args), kwargs)


def _last_dim(self, dim, index, *_, **__):
    return dim == -1 and index.dim() > 0


def _below_last_dim(self, dim, *_, **__):
    """A valid negative dim other than -1 (torch refuses the others before the kernel)."""
    return -max(self.dim(), 1) <= dim < -1


def _index_ignored(op, out_op):
    """DirectML's gather/scatter/scatter_add with ``dim=-1``: the index read as ``arange``
    along the dimension (``self``'s own leading elements; ``src`` written where it lies)."""
    def replace(self, dim, index, *rest, **kwargs):
        shape = [1] * index.dim()
        shape[-1] = -1
        identity = torch.arange(index.shape[-1]).view(shape).expand(index.shape)
        return _backend.run_on_cpu(out_op if "out" in kwargs else op, (self, dim, identity, *rest), kwargs)
    return replace


# (name pattern, its functional or in-place overload, its out= overload)
_DIM_OPS = (("gather", "gather", "gather.out"), ("scatter.src", "scatter.src", None),
            ("scatter_.src", "scatter_.src", None), ("scatter.src_out", None, "scatter.src_out"),
            ("scatter_add", "scatter_add", "scatter_add.out"), ("scatter_add_", "scatter_add_", None))


def _reduction_none(grad_output, self, target, weight, reduction, *_, **__):
    return reduction == 0


def _zero_grad_input(grad_output, self, *_, grad_input=None, **__):
    if grad_input is not None:
        return grad_input.resize_(self.shape).zero_()
    return torch.zeros_like(self)


def _not_a_device_index(device_id=None):
    return device_id is not None and not isinstance(device_id, int)


def _compare_message(device_id=None):
    # torch_directml.device(): `device_id >= 0 and device_id < num_devices`
    kind = type(device_id)
    name = kind.__name__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__name__}"
    return f"'>=' not supported between instances of '{name}' and 'int'"


def _dense(t):
    """Non-overlapping and without gaps (a permuted tensor is; ``x[::2]`` is not)."""
    expected = 1
    for stride, size in sorted(zip(t.stride(), t.shape)):
        if size != 1 and stride != expected:
            return False
        expected *= size
    return True


def _layer_norm_in_memory_order(input, *args, **kwargs):
    """A permuted input normalized in memory order (wrong values, #588's max |Δ| 3.6);
    a strided slice fails to create the DirectML operator."""
    if not _dense(input):
        raise RuntimeError("m_device->CreateOperator(&opDesc, IID_PPV_ARGS(&op))")
    strides, step = [], 1
    for size in reversed(input.shape):
        strides.insert(0, step)
        step *= size
    flat = _backend.cpu_alias(input).as_strided(input.shape, strides)
    return _backend.run_on_cpu(torch.ops.aten.native_layer_norm.default, (flat, *args), kwargs)


def _counts_asked(self, sorted=True, return_inverse=False, return_counts=False):
    return return_counts


# --------------------------- seen on the real torch-directml 0.2.5 binary (dmlshim.catalogue)
# Measured there in float32: 790 nearest index vectors and 444 bilinear rows, sizes 1-40,
# scales 0.3-4, with and without a scale, equal these tables exactly.

def _dml_tables(kind, input_size, output_size, scales):
    """DirectML's source rows per axis, ``(first, second, weight)`` (nearest: the first
    alone): the source coordinate ``dst * (1 / s)`` in float32, ``s`` = float32(scale), or
    out / in in float32 without one; no half-pixel offset; nearest rounds down, linear reads
    the next row too with weight ``source - first``."""
    tables = []
    for in_size, out_size, scale in zip(input_size[2:], output_size, scales):
        ratio = (torch.tensor(scale, dtype=torch.float32) if scale is not None and scale > 0
                 else torch.tensor(out_size, dtype=torch.float32) / in_size)
        source = torch.arange(out_size, dtype=torch.float32) * (1 / ratio)
        first = source.long().clamp_max(in_size - 1)
        tables.append((first, (first + 1).clamp_max(in_size - 1), (source - first).clamp(0, 1))
                      if kind == "linear" else (first, None, None))
    return tables


def _along(weight, dim, like):
    """``weight`` in ``like``'s dtype, shaped to broadcast along its ``dim``."""
    shape = [1] * like.dim()
    shape[dim] = -1
    return weight.to(like.dtype).view(shape)


def _resample(x, dim, table):
    """``x`` read along ``dim`` from its source rows: the first, or ``a - (a - b) * w``."""
    first, second, weight = table
    a = x.index_select(dim, first)
    return a if second is None else a - (a - x.index_select(dim, second)) * _along(weight, dim, x)


def _resample_backward(grad, dim, in_size, table):
    """The gradient of :func:`_resample`'s input: each output's accumulated into its rows."""
    first, second, weight = table
    rows = grad.movedim(dim, 0)
    out = rows.new_zeros((in_size, *rows.shape[1:]))
    if second is None:
        return out.index_put_((first,), rows, accumulate=True).movedim(0, dim)
    weight = _along(weight, 0, rows)
    out.index_put_((first,), rows - rows * weight, accumulate=True)
    return out.index_put_((second,), rows * weight, accumulate=True).movedim(0, dim)


def _dml_upsample(kind):
    def upsample(self, output_size, *args, out=None):
        args = args[1:] if kind == "linear" else args                 # align_corners
        h, w = _dml_tables(kind, self.shape, output_size, (list(args) + [None, None])[:2])
        result = _backend.to_device(_resample(_resample(_backend.cpu_alias(self), -1, w), -2, h))  # W, then H
        return result if out is None else fallback.write_out(out, result)
    return upsample


def _dml_upsample_backward(kind):
    def backward(grad, output_size, input_size, *args, grad_input=None):
        args = args[1:] if kind == "linear" else args
        h, w = _dml_tables(kind, input_size, output_size, (list(args) + [None, None])[:2])
        result = _backend.to_device(_resample_backward(
            _resample_backward(_backend.cpu_alias(grad), -2, input_size[2], h), -1, input_size[3], w))
        return result if grad_input is None else fallback.write_out(grad_input, result)
    return backward


def _half_pixel(self, output_size, align_corners, *_, **__):
    return not align_corners


def _half_pixel_backward(grad, output_size, input_size, align_corners, *_, **__):
    return not align_corners


def _channel_weights_4d(self, weight):
    """nn.PReLU(C) on a >= 4-D input (the weight arrives as (1, C, 1, ...))."""
    return weight.numel() > 1 and self.dim() >= 4


def _channel_weights_3d(self, weight):
    """nn.PReLU(C) on a 3-D input of a batch other than 1 and C."""
    return weight.numel() > 1 and self.dim() == 3 and self.shape[0] not in (1, weight.numel())


def _prelu_3d_message(self, weight):
    return (f"The size of tensor a ({weight.numel()}) must match the size of tensor b "
            f"({self.shape[0]}) at non-singleton dimension 2")


def _repeat_rank(self, repeats, *_, **__):
    return max(self.dim(), len(repeats))


def _repeat_over_four(self, repeats, *_, **__):
    """Tensor.repeat with more than 4 dimensions (input or result)."""
    return _repeat_rank(self, repeats) > 4


def _repeat_message(self, repeats, *_, **__):
    return f"the dimesion of at::Tensor must be 4 or lower, but got {_repeat_rank(self, repeats)}"


def _offset_view(self, shape, *_, **__):
    """A view kernel (view, _reshape_alias, _unsafe_view) given a view with an offset
    (``view.dtype``, whose second argument is a dtype, is not measured)."""
    return self.storage_offset() != 0 and isinstance(shape, (list, tuple))


def _no_further_offset(self, size, stride, storage_offset=None):
    """as_strided of a view with an offset, at that same offset (torch's composites pass
    ``self.storage_offset() + delta``: slice from 0, select 0, t, transpose, expand ...)."""
    offset = self.storage_offset()
    return offset != 0 and (storage_offset is None or storage_offset == offset)


def _snapshot(view):
    """A new device tensor with ``view``'s sizes, strides and values: DirectML's copy."""
    cpu = _backend.cpu_alias(view)
    extent = 1 + sum((n - 1) * st for n, st in zip(cpu.shape, cpu.stride())) if cpu.numel() else 0
    region = cpu.as_strided((extent,), (1,)).clone()
    return _backend.to_device(region.as_strided(cpu.shape, cpu.stride()))


def _snapshot_of(op):
    """The view(s) ``op`` makes on the device, each replaced by its snapshot."""
    def replace(*args, **kwargs):
        out = op.redispatch(_backend._CPU_KEYSET, *args, **kwargs)
        return [_snapshot(o) for o in out] if isinstance(out, (list, tuple)) else _snapshot(out)
    return replace


def _device_without_index(*args, device=None, **kwargs):
    return device is not None and torch.device(device).index is None


def _empty_without_index(size, *, dtype=None, layout=None, device=None, pin_memory=None,
                         memory_format=None):
    # torch-directml's empty kernel keeps the device it is given: x.new(2) asks for
    # Device(PrivateUse1) (no index, torch's legacy constructor), and gets a tensor there.
    from ._python_api import device_without_index
    cpu = torch.empty(size, dtype=dtype, layout=layout, memory_format=memory_format)
    try:
        return device_without_index(cpu)
    except RuntimeError:      # torch 2.4 cannot hold it: the index is kept (not modelled)
        return _backend.to_device(cpu)


def _into_cpu(self, src, *_, **__):
    return self.is_cpu and not src.is_cpu


def _rebound(self, src, non_blocking=False):
    """DirectML's device-to-CPU ``copy_``: ``self`` given new storage holding ``src``, in
    ``src``'s dtype; ``self``'s old memory (its base, its aliases) untouched."""
    self.data = _backend.cpu_alias(src).clone()
    return self


def _nothing_to_pad(self, pad, *_, **__):
    return not any(pad)


def _never_written(self, pad, *_, **__):
    """DirectML's result of a pad with nothing to pad: allocated, never written (zeros here)."""
    return _backend.to_device(torch.zeros(self.shape, dtype=self.dtype))


def _source_unlike_index(self, dim, index, src=None, *_, **__):
    return isinstance(src, Tensor) and src.dim() > 0 and src.shape != index.shape


SCATTER_SOURCE = "DirectML scatter doesn't allow for index and source to have different dimensions."


# ops torch's composites call with an empty out= of their own: soft_margin_loss's neg_out
_CALLED_BY_COMPOSITES = frozenset({"neg"})


def _unresized_out_overload(op):
    """An ``out=`` overload of an op the real binary does not resize (dml_ops.out_unresized),
    but not one torch's composites call with an empty ``out``.  The real binary's kernel
    rebinds its ``out`` argument to a new tensor: a composite's own variable (``abs``:
    ``abs_out`` of an empty tensor; ``soft_margin_loss``: ``neg_out``) then holds the result,
    the Python object of an ``out=`` caller does not.  A Python kernel cannot rebind a C++
    caller's variable, so those ops are not modelled: the composite-routed ones, and
    :data:`_CALLED_BY_COMPOSITES`."""
    name = op._schema.name.partition("::")[2]
    return (name in out_unresized() and name not in _CALLED_BY_COMPOSITES
            and any(a.is_out for a in op._schema.arguments)
            and routing.route(name) not in (routing.COMPOSITE_EXPLICIT, routing.COMPOSITE_IMPLICIT))


def _unresized_outs(rule, op):
    """``rule`` for one ``out=`` overload: DirectML computes into new tensors; where an
    ``out`` is not of the result's shape it returns them and leaves ``out`` as it is.  No
    meta device: its ``out=`` kernels import ``torch._dynamo`` on torch 2.13, which replaces
    ``torch.manual_seed``."""
    names = [a.name for a in op._schema.arguments if a.is_out]

    def into_new_tensors(*args, **kwargs):
        fresh = {n: torch.empty(0, dtype=kwargs[n].dtype, device=kwargs[n].device) for n in names}
        result = _backend.run_on_cpu(op, args, {**kwargs, **fresh})
        if all(kwargs[n].shape == fresh[n].shape for n in names):
            return _backend.run_on_cpu(op, args, kwargs)          # the right size: written
        return result
    return dataclasses.replace(rule, replace=into_new_tensors, bind=None)


def observed_rules():
    """What the real torch-directml 0.2.5 binary gets wrong and no other rule models
    (``dmlshim.catalogue``; part of :func:`default_rules`)."""
    source = "failure_modes.md {}; the real torch-directml 0.2.5 binary{}"
    return [
        *(Rule(**case) for case in rules_refused.rank_cases()),
        Rule("upsample_bilinear2d", when=_half_pixel, replace=_dml_upsample("linear"),
             source=source.format("#21", "; microsoft/DirectML#482: align_corners=False reads "
                                         "dst / scale, no half-pixel offset (silent)")),
        Rule("upsample_bilinear2d_backward", when=_half_pixel_backward,
             replace=_dml_upsample_backward("linear"), source=source.format("#21", ": its backward")),
        Rule("upsample_nearest2d", replace=_dml_upsample("nearest"),
             source=source.format("#60", ": source floor(dst * (1 / float32(scale))) (silent)")),
        Rule("upsample_nearest2d_backward", replace=_dml_upsample_backward("nearest"),
             source=source.format("#60", ": its backward")),
        Rule("_prelu_kernel", when=_channel_weights_4d, error=FatalDirectMLError, message=RANK_ABORT,
             source=source.format("#29", "; microsoft/DirectML#271, #445: nn.PReLU(C) on a 4-D "
                                         "or 5-D input (process abort)")),
        Rule("_prelu_kernel", when=_channel_weights_3d, message=_prelu_3d_message,
             source=source.format("#29", ": nn.PReLU(C) on a 3-D input (a batch of 1 or C "
                                         "gives wrong values instead; not modelled)")),
        Rule("repeat", when=_repeat_over_four, message=_repeat_message,
             source=source.format("#61", "; Comfy-Org/ComfyUI#5860: Tensor.repeat with more "
                                         "than 4 dimensions")),
        *(Rule(name, when=when, replace=_snapshot_of(aten_op(name)),
               source=source.format("#62", ": a view of a view with an offset is a copy "
                                           "(storage_offset() reads 0 there)"))
          for name, when in (("as_strided", _no_further_offset), ("view", _offset_view),
                             ("_reshape_alias", _offset_view), ("_unsafe_view", _offset_view))),
        *(Rule(name, replace=_snapshot_of(aten_op(name)),
               source=source.format("#62", ": split's chunks are copies"))
          for name in ("split.Tensor", "split_with_sizes")),
        Rule("copy_", when=_into_cpu, replace=_rebound,
             source=source.format("#64", ": copy_ into a CPU tensor rebinds it to new storage "
                                         "in the source's dtype")),
        Rule("constant_pad_nd", when=_nothing_to_pad, replace=_never_written,
             source=source.format("#63", ": F.pad with every pad 0 returns a tensor it never "
                                         "wrote (zeros or stale values)")),
        Rule(opaque.STRIDED_CLONES, message=opaque.HAS_STORAGE_ASSERT,
             source=source.format("#46", " (benchmarks/fidelity_routing.py): torch's composite "
                                         "clones through clone_preserve_strides, which asserts "
                                         "has_storage(); its tensors have none")),
        Rule(("scatter", "scatter_", "scatter_add", "scatter_add_"), when=_source_unlike_index,
             message=SCATTER_SOURCE,
             source=source.format("none", " (benchmarks/fidelity_routing.py): scatter with a "
                                          "source of another shape than the index")),
        Rule("empty.memory_format", when=_device_without_index, replace=_empty_without_index,
             source=source.format("none", ": x.new() and x.new(size) on 'privateuseone', "
                                          "without x's index (legacy constructors ask empty for "
                                          "Device(PrivateUse1); the kernel keeps it)")),
        *(Rule(**case) for case in rules_refused.refused_cases()),
        # last: it takes every call of those out= overloads, so the rules above go first
        Rule(_unresized_out_overload, bind=_unresized_outs,
             source=source.format("#65", ": an out= of the wrong size is not resized: the "
                                         "result is a new tensor, out is left as it is (silent; "
                                         "the real binary also refuses some, and some abort)")),
    ]


def unconfirmed_rules():
    """Reported on older torch-directml, not seen on the real 0.2.5 binary (off by default; add them
    with ``configure(rules=unconfirmed_rules(), extend=True)``)."""
    return [
        Rule(CPU_INDEX_OPS, when=_cpu_operand, message=UNBOX_MESSAGE,
             source="failure_modes.md #10; microsoft/DirectML#442, #397 (0.1.13-0.2.0): CPU "
                    "index tensors refused; the real 0.2.5 binary takes them (measured)"),
        Rule("native_layer_norm", when=lambda input, *_, **__: not input.is_contiguous(),
             replace=_layer_norm_in_memory_order,
             source="failure_modes.md #45; microsoft/DirectML#588 (0.2.1): a permuted input "
                    "gives wrong values, x[::2] raises"),
    ]


def default_rules(*, declared: bool = True):
    """DirectML's known quirks, one rule each (failure_modes.md rows cited); ``declared``: with
    those the patch modules declare beside their fixes (:func:`declared_rules`)."""
    return [
        Rule(("mul.Tensor", "mul.Scalar"), when=_bool_times_other, replace=_bool_product,
             source="failure_modes.md #17; microsoft/DirectML#686, #737: float * bool "
                    "returns a bool tensor (silent); on the real 0.2.5 binary any operand "
                    "beside a bool one, a Python number included"),
        Rule("*", when=_in_device_autocast, error=NotImplementedError,
             message="Could not run this op with arguments from the 'AutocastPrivateUse1' "
                     "backend (emulated: torch-directml registers no autocast kernels)",
             source="measured on the real torch-directml 0.2.5 binary: every op inside "
                    "torch.autocast('privateuseone') raises NotImplementedError; "
                    "pytorch/pytorch#128598 (failure_modes.md #36 expected a no-op)"),
        Rule("copy_", when=_broadcast_copy, replace=_broadcast_copy_result,
             source="measured on the real torch-directml 0.2.5 binary (docs/realdml.md), no "
                    "public report: copy_ of a broadcasting source is wrong (silent)"),
        Rule("convolution_overrideable", when=lambda input, *_: input.dtype == torch.bool,
             message="The parameter is incorrect.",
             source="DESIGN.md (FunASR 'conv1d got a bool input'); DirectML convolution "
                    "accepts float16/float32 only, so operator creation fails with "
                    "E_INVALIDARG (inferred)"),
        Rule("cat", when=_empty_beside_data, message="The parameter is incorrect.",
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
        Rule(("bmm", "baddbmm", "baddbmm_"), when=_cpu_operand, error=FatalDirectMLError,
             message=TERMINATE_UNBOX,
             source="measured on the real 0.2.5 binary (by hand): bmm/baddbmm with a CPU operand "
                    "end the process (its unbox check thrown where nothing catches it)"),
        Rule(_takes_dml_tensors_only, when=_cpu_operand, message=UNBOX_MESSAGE,
             source="failure_modes.md #10; microsoft/DirectML#442, #397; on the real 0.2.5 "
                    "binary mm, addmm and indexing take CPU operands (measured)"),
        Rule(_binary, when=_cpu_operand, message=_devices_message,
             source="measured on the real 0.2.5 binary (benchmarks/fidelity.py): a binary op "
                    "with a CPU operand of 1 or more dims fails torch's device check (a 0-dim "
                    "one is a scalar)"),
        Rule(view_kernels(), when=_view_of_normal_tensor_in_inference_mode,
             message="Cannot set version_counter for inference tensor",
             source="failure_modes.md #41; microsoft/DirectML#602 (0.2.5 in a comment), #622, "
                    "#450; vladmandic/sdnext#3464"),
        # measured on the real 0.2.5 binary (benchmarks/fidelity.py): conv with a bias and
        # batch_norm with running stats fail the same way when those are normal tensors
        Rule("convolution_overrideable", when=_normal_tensor_viewed(2),
             replace=_view_then(2, _backend._convolution),
             source="failure_modes.md #41, measured on the real 0.2.5 binary: the kernel views "
                    "the bias"),
        Rule("native_batch_norm", when=_normal_tensor_viewed(3),
             replace=_view_then(3, _native_batch_norm),
             source="failure_modes.md #41, measured on the real 0.2.5 binary: the kernel views "
                    "running_mean"),
        Rule("reflection_pad2d", when=_pad_pairs_differ, replace=_pad_pairs_swapped,
             source="failure_modes.md #42; microsoft/DirectML#687: F.pad's (left, right, top, "
                    "bottom) applied as (top, bottom, left, right)"),
        *(Rule(name, when=_last_dim, replace=_index_ignored(op and aten_op(op), out and aten_op(out)),
               source="failure_modes.md #43; RVC-Project/Retrieval-based-Voice-Conversion-WebUI "
                      "infer/fcpe.py (wrong bins, gather(dim=-1)); the real 0.2.5 binary: dim=-1 "
                      "ignores the index") for name, op, out in _DIM_OPS),
        Rule(tuple(name for name, _, _ in _DIM_OPS), when=_below_last_dim,
             source="failure_modes.md #43; the real 0.2.5 binary: gather/scatter/scatter_add with "
                    "dim < -1 refused (E_INVALIDARG)"),
        Rule("nll_loss_backward", when=_reduction_none, replace=_zero_grad_input,
             source="failure_modes.md #44; microsoft/DirectML#739, #740: "
                    "cross_entropy(reduction='none') gradients are all zero"),
        Rule(opaque.RULE, error=NotImplementedError, message=opaque.STORAGE_MESSAGE,
             source="failure_modes.md #46; torch-directml's tensors are OpaqueTensorImpls without "
                    "storage (real 0.2.5 binary, issue 25): data_ptr()/untyped_storage() raise, "
                    "torch.UntypedStorage(device=dml) dies with SIGSEGV (raised here), "
                    "torch.jit.load(map_location=dml) fails"),
        Rule("privateuseone.device", when=_not_a_device_index, error=TypeError,
             message=_compare_message,
             source="failure_modes.md #46; torch_directml.device(device_id) compares with int; "
                    "python-audio-separator PR#295, microsoft/DirectML#466"),
        Rule("_unique2", when=_counts_asked,
             message="Return counts not implemented for unique operator for DirectML.",
             source="failure_modes.md #47; microsoft/DirectML#410 (0.1.13); the same on the real "
                    "0.2.5 binary (measured, benchmarks/fidelity.py)"),
        *(declared_rules() if declared else ()),
        *fp64_rules(),
        *fused_rnn_rules(),
        *observed_rules(),
    ]


def declared_rules():
    """The rules the patch modules declare beside their fixes (a module's ``emulated_rules()``:
    one defect in one place), in the patches' install order (their ``after=``/``before=``).

    Read from the registry that importing ``dmlshim`` has loaded, not imported here: the
    emulator imports no fix, and a fix module's rule may import the emulator without a cycle."""
    patches = sys.modules.get("dmlshim.patches")
    if patches is None or not hasattr(patches, "REGISTRY"):
        return []
    return [rule for patch in patches.REGISTRY
            for rule in getattr(patches.MODULES[patch.name], "emulated_rules", tuple)()]
