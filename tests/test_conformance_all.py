"""Defects found by conformance over every OpInfo sample (issue 40; docs/conformance.md),
each both ways: without dmlshim the defect shows (the emulator's rule, the real binary),
with it the device equals the CPU. Runs on the real lane too (DMLSHIM_TEST_DEVICE=directml).
"""
import pytest
import torch

import dmlshim
from dmlshim import patches, probing

CPU = torch.device("cpu")


# ------------------------------------------------------------ sort_scalar (static)
def _sorts(d):
    """sort/argsort/msort of a 0-dim tensor and of empty ones, stable too, an out= pair."""
    x, empty = torch.tensor(1.5).to(d), torch.empty(2, 0).to(d)
    values, indices = torch.empty(0).to(d), torch.empty(0, dtype=torch.int64).to(d)
    torch.sort(torch.tensor(-2.0).to(d), out=(values, indices))
    return (torch.sort(x), torch.sort(x, stable=True, descending=True), torch.argsort(x), torch.msort(x),
            torch.sort(empty, dim=1), torch.argsort(empty), values, indices,
            torch.sort(torch.tensor([3, 1, 2]).to(d)))


def test_sort_of_a_0dim_tensor_is_never_written_raw(dml_device, shim_off):
    """Without dmlshim: a 0-dim tensor's sorted value is never written: whatever its memory held
    (0 on a fresh block, on the real binary often the last freed 4-byte tensor's value; the
    emulator: 0), so not the input's.  Guaranteed: shape and dtype, the index 0, argsort right;
    and values of this test's own (never written before) do not come back, all of them."""
    inputs = (1.5078125, -2.5234375, 3.5390625)
    got = []
    for v in inputs:
        values, indices = torch.sort(torch.tensor(v).to(dml_device))
        assert values.shape == () and values.dtype == torch.float32 and indices.dtype == torch.int64
        assert indices.cpu().item() == 0
        got.append(values.cpu().item())
    assert not all(g == v for g, v in zip(got, inputs)), got
    assert torch.argsort(torch.tensor(1.5).to(dml_device)).cpu().item() == 0


def test_sort_with_the_shim_equals_cpu(dml_device, shim_off, assert_parity):
    """With dmlshim: the CPU's values, and no process end (the out= kernel's invalid returns
    of a 0-dim or empty input are never read)."""
    dmlshim.activate(fallback="known")
    assert probing.last().status["sort_scalar"] == probing.STATIC          # never probed
    assert "sort_scalar" in patches.installed()
    assert_parity(_sorts(dml_device), _sorts(CPU))


# ------------------------------------------------------------ pad_value (probed)
def _pads(d, n):
    """constant_pad_nd of a 1xn ramp with 1.0 then 2.0 (n: a shape no other test pads), of
    int64 and float16 with two values, an all-negative crop, and an empty input."""
    x = (torch.arange(float(n)).view(1, n) + 10).to(d)
    ints, halves = x.long(), x.half()
    return (torch.constant_pad_nd(x, (1, 2), 1.0), torch.constant_pad_nd(x, (1, 2), 2.0),
            torch.constant_pad_nd(x, (1, 2), 0.0), torch.constant_pad_nd(ints, (0, 1), 4),
            torch.constant_pad_nd(ints, (0, 1), -6), torch.constant_pad_nd(halves, (2, 0), 5.0),
            torch.constant_pad_nd(halves, (2, 0), float("-inf")), torch.constant_pad_nd(x, (-1, 0), 3.0),
            torch.constant_pad_nd(x.view(1, 1, n), (-1, 1, 0, 1), 1.0), torch.constant_pad_nd(x.view(1, 1, n), (-1, 1, 0, 1), 2.0),
            torch.nn.functional.pad(torch.empty(0, 3, n).to(d), (1, 2), value=2.0))


def test_constant_pad_keeps_its_first_value_raw(dml_device, shim_off):
    """Without dmlshim: the second pad of the same shape, pads and dtype gets the first value."""
    x = (torch.arange(5.0).view(1, 5)).to(dml_device)
    torch.constant_pad_nd(x, (2, 1), 1.0)
    assert torch.constant_pad_nd(x, (2, 1), 2.0).cpu()[0, 0].item() == 1.0
    with pytest.raises(RuntimeError, match="CreateOperator"):
        torch.constant_pad_nd(torch.empty(0, 3, 3).to(dml_device), (1, 2), 2.0)


# ------------------------------------------------------------ empty_reduction (probed)
def _reductions(d):
    """Reductions of empty inputs, over an empty dimension and whole; a non-empty sum."""
    e, e2 = torch.empty(0).to(d), torch.empty(0, 3).to(d)
    return (torch.sum(e2, 0), torch.prod(e), torch.prod(e2, 1), torch.mean(e), torch.mean(e2, 0),
            torch.linalg.vector_norm(e), torch.linalg.vector_norm(e2, dim=0), torch.nansum(e2, 0),
            torch.logsumexp(e2, 0), torch.linalg.vecdot(torch.empty(0, 1).to(d), torch.empty(0, 1).to(d), dim=0),
            torch.sum(e2.long(), 0), torch.sum(torch.ones(2, 3).to(d), 0))


def test_reduction_of_an_empty_input_is_never_written_raw(dml_device, shim_off, assert_differs):
    """Without dmlshim: a sum over an empty dimension is not the CPU's zeros."""
    (torch.arange(64.0) - 7).to(dml_device).mul(3)
    assert_differs(torch.sum(torch.empty(0, 3).to(dml_device), 0), torch.zeros(3))


# ------------------------------------------------------------ vector_norm's fix on a 0-dim input
def _zero_dim_norms(d):
    x = torch.tensor(-1.5).to(d)
    return (torch.linalg.vector_norm(x, ord=6, dim=0, keepdim=True), torch.linalg.vector_norm(x, ord=4, dim=-1),
            torch.linalg.norm(torch.tensor(2.0).to(d), 4, dim=0), torch.linalg.vector_norm(x, ord=3, dim=[]))


def test_vector_norm_of_a_0dim_tensor_with_the_shim_equals_cpu(dml_device, shim_off, assert_parity):
    """The vector_norm fix counted dim modulo the rank: a 0-dim input with dim=0 raised
    ZeroDivisionError (OpInfo's linalg.vector_norm, norm, normalize samples past the first 4)."""
    dmlshim.activate(fallback="known")
    assert_parity(_zero_dim_norms(dml_device), _zero_dim_norms(CPU))


# ------------------------------------------------------------ empty_broadcast (probed)
def _empty_binaries(d):
    """Binary ops with an operand of no elements: OpInfo's (0, 1, 3) with (0, 10, 3) (rsub,
    bitwise_xor, isclose, diff), in place and out=, a 0-dim and a number operand, int64, bool
    and float16, and results whose last dimension is 0 or 1."""
    a, b = torch.ones(0, 1, 3).to(d), torch.ones(0, 10, 3).to(d)
    i, m = torch.ones(0, 3, dtype=torch.int64).to(d), torch.zeros(0, 3, dtype=torch.bool).to(d)
    out = torch.empty(2, dtype=torch.int64).to(d)
    return (torch.sub(a, b), torch.rsub(a, b, alpha=2), b - a, torch.sub(torch.ones(1, 3).to(d), a),
            torch.sub(a, torch.tensor(2.0).to(d)), torch.sub(a, 2), torch.ops.aten.isclose.default(a, b), torch.ops.aten.isclose.default(a.half(), b.half()),
            torch.diff(torch.ones(0, 4, 3).to(d), dim=1), torch.diff(torch.ones(0, 4, 3).to(d), dim=0),
            torch.bitwise_xor(i, i), torch.bitwise_xor(i, 3), torch.bitwise_xor(m, m), i ^ torch.ones(1, 3, dtype=torch.int64).to(d),
            torch.bitwise_xor(i, i, out=out), torch.sub(a, b, out=torch.empty(5).to(d)),
            a.clone().add_(a), a.clone().sub_(a, alpha=3), i.clone().div_(i, rounding_mode="floor"), a.clone().pow_(a),
            i.clone().bitwise_or_(i), m.clone().bitwise_and_(m), a.clone().addcmul_(a, a),
            torch.sub(torch.ones(2, 1, 0).to(d), torch.ones(2, 5, 0).to(d)), torch.ones(3, 0).to(d) - torch.ones(3, 1).to(d),
            torch.sub(torch.ones(2, 3).to(d), torch.ones(2, 3).to(d)))


def test_binary_op_with_an_empty_operand_is_refused_raw(dml_device, shim_off):
    """Without dmlshim: float32 sub, bitwise_xor and in-place add_ with an empty operand raise."""
    a, b = torch.ones(0, 1, 3).to(dml_device), torch.ones(0, 10, 3).to(dml_device)
    with pytest.raises(RuntimeError, match="The size of tensor a \\(0\\) must match"):
        torch.sub(a, b)
    with pytest.raises(RuntimeError, match="The size of tensor a \\(0\\) must match"):
        torch.bitwise_xor(a.long(), b.long())
    with pytest.raises(RuntimeError, match="The size of tensor a \\(0\\) must match"):
        b.clone().add_(a)
    assert torch.sub(torch.ones(2, 1, 0).to(dml_device), torch.ones(2, 5, 0).to(dml_device)).shape == (2, 5, 0)

    with pytest.raises(RuntimeError, match="The size of tensor a \\(2\\) must match"):   # the CPU's error
        torch.sub(torch.ones(0, 2).to(dml_device), torch.ones(0, 3).to(dml_device))
    with pytest.raises(RuntimeError, match="doesn't match the broadcast shape"):
        torch.ones(1, 3).to(dml_device).add_(torch.ones(0, 3).to(dml_device))


# ------------------------------------------------------------ cdist of an empty 3-D batch (cdist's fix)
def _empty_cdists(d):
    """cdist of 3-D inputs whose result has no elements: OpInfo's (0, 4, 5) with (1, 3, 5), an
    empty batch on the right, no rows, p 2 and 1, and inputs of no columns (zeros)."""
    def pair(s1, s2):
        return torch.ones(s1).to(d), torch.ones(s2).to(d)
    return (torch.cdist(*pair((0, 4, 5), (1, 3, 5))), torch.cdist(*pair((1, 4, 5), (0, 3, 5)), p=1.0),
            torch.cdist(*pair((2, 0, 5), (2, 3, 5)), compute_mode="donot_use_mm_for_euclid_dist"),
            torch.cdist(*pair((2, 4, 5), (2, 0, 5)), p=3.0), torch.cdist(*pair((2, 4, 0), (2, 3, 0))))


def test_cdist_of_an_empty_3d_batch_is_refused_raw(dml_device, shim_off):
    with pytest.raises(RuntimeError):
        torch.cdist(torch.ones(0, 4, 5).to(dml_device), torch.ones(1, 3, 5).to(dml_device))


def test_cdist_of_an_empty_3d_batch_with_the_shim_equals_cpu(dml_device, shim_off, assert_parity):
    dmlshim.activate(fallback="known")
    assert "cdist" in patches.installed()
    assert_parity(_empty_cdists(dml_device), _empty_cdists(CPU))


# ------------------------------------------------------------ masked_fill_rank (probed)
def _masked_fills(d):
    """masked_fill(_) of 5 to 8 dimensions: a tensor value, int64, a broadcast mask, a
    non-contiguous self; nanquantile of a 4-D input with a tensor q and keepdim (OpInfo's)."""
    x = torch.arange(48.0).view(2, 1, 2, 3, 2, 2) - 20
    outs = []
    for rank in (5, 6, 8):
        t = x.reshape((2, 2, 3, 2, 2) if rank == 5 else (2, 1, 2, 3, 2, 2) if rank == 6 else (2, 1, 2, 1, 3, 2, 1, 2)).to(d)
        outs += [t.masked_fill(t > 3, -1.0), t.long().masked_fill(t < 0, 7), t.masked_fill(t[..., :1] > 0, torch.tensor(2.5).to(d))]
        y = t.clone()
        y.masked_fill_(t > 5, 0.0)
        z = t.transpose(0, -1).contiguous().transpose(0, -1)  # non-contiguous: strides of the transpose
        assert not z.is_contiguous()
        z.masked_fill_(t > 1, 3.0)
        outs += [y, z]
    gaps = (torch.arange(96.0).view(2, 2, 3, 2, 4) - 40).to(d)
    gaps[..., ::2].masked_fill_(gaps[..., ::2] > 0, 0.5)     # 5-D with gaps between elements
    outs.append(gaps)
    q = torch.tensor([0.25, 0.5])
    g = torch.linspace(-1, 1, 120).view(2, 3, 4, 5)
    outs += [torch.nanquantile(g.to(d), q.to(d), dim=0, keepdim=True), torch.quantile(g.to(d), q.to(d), dim=2, keepdim=True)]
    return outs


def test_masked_fill_of_five_dimensions_is_refused_raw(dml_device, shim_off, assert_parity):
    """Without dmlshim: 5 dimensions raise (6 would end the process: not run)."""
    x = torch.ones(1, 1, 1, 2, 3).to(dml_device)
    with pytest.raises(RuntimeError, match="CreateOperator"):
        x.masked_fill(x > 0, 0.0)
    assert_parity(x[0, 0].masked_fill(x[0, 0] > 0, 2.0), torch.full((1, 2, 3), 2.0))


# ------------------------------------------------------------ empty_layer_norm (probed)
def _layer_norms(d):
    """native_layer_norm of inputs with no elements: OpInfo's (0, 1), (0, 2, 3) with weights,
    (2, 0) over [0] (mean and rstd: NaN and inf); F.layer_norm; a non-empty one."""
    w, b = torch.full((3,), 2.0).to(d), torch.ones(3).to(d)
    return (torch.native_layer_norm(torch.ones(0, 1).to(d), [1], None, None, 1e-5),
            torch.native_layer_norm(torch.ones(0, 2, 3).to(d), [3], w, b, 1e-5),
            torch.native_layer_norm(torch.ones(2, 0).to(d), [0], None, None, 1e-5),
            torch.nn.functional.layer_norm(torch.ones(0, 3).half().to(d), [3]),
            torch.nn.functional.layer_norm(torch.arange(6.0).view(2, 3).to(d), [3], w, b))


def test_layer_norm_of_an_empty_input_is_refused_raw(dml_device, shim_off):
    with pytest.raises(RuntimeError, match="CreateOperator"):
        torch.native_layer_norm(torch.ones(0, 1).to(dml_device), [1], None, None, 1e-5)


def _layer_norm_grads(d):
    x, w = torch.ones(0, 3).to(d).requires_grad_(), torch.ones(3).to(d).requires_grad_()
    torch.nn.functional.layer_norm(x, [3], w).sum().backward()
    return x.grad, w.grad

    assert_parity(_layer_norm_grads(dml_device), _layer_norm_grads(CPU))


# ------------------------------------------------------------ max_pool_unbatched (probed)
def _unbatched_pools(d):
    """max_pool2d of unbatched 3-D inputs, its indices and gradient: kernel, stride, padding, a
    dilation (max_pool_indices' CPU), ceil_mode (max_pool_ceil's CPU), float16; a batched one."""
    outs = []
    for shape, kw in (((3, 6, 6), dict(kernel_size=2)), ((2, 5, 7), dict(kernel_size=3, stride=2, padding=1)),
                      ((2, 5, 7), dict(kernel_size=2, stride=1, dilation=2)), ((2, 5, 7), dict(kernel_size=3, stride=2, ceil_mode=True)),
                      ((1, 2, 5, 7), dict(kernel_size=2))):
        x = (torch.arange(float(torch.Size(shape).numel())).view(shape) * 7 % 11).to(d).requires_grad_()
        y, i = torch.nn.functional.max_pool2d(x, return_indices=True, **kw)
        (y * torch.arange(float(y.numel())).view(y.shape).to(d)).sum().backward()
        outs += [y, i, x.grad]
    h = torch.nn.functional.max_pool2d((torch.arange(36.0).view(1, 6, 6) % 5).half().to(d), 2)
    return outs + [h]


def test_max_pool_of_an_unbatched_input_is_refused_raw(dml_device, shim_off):
    with pytest.raises(IndexError, match="Dimension out of range"):
        torch.ops.aten.max_pool2d_with_indices_backward(torch.ones(1, 2, 2).to(dml_device), torch.ones(1, 4, 4).to(dml_device),
                                                        [2, 2], [2, 2], [0, 0], [1, 1], False,
                                                        torch.zeros(1, 2, 2, dtype=torch.int64).to(dml_device))


# ------------------------------------------------------------ nan_reductions (probed)
_NAN, _INF = float("nan"), float("inf")
_ROWS = [[1, _NAN, 3], [_NAN, _NAN, _NAN], [4, 5, 6], [_NAN, 7, _NAN], [-_INF, -_INF, -_INF], [2, 2, 1],
         [_INF, 1, _NAN], [-_INF, 1, -_INF], [_INF, _INF, 1]]


def _nan_reductions(d, dtype=torch.float32):
    """Reductions of rows with NaN, -inf only, +inf and ties, along each dim and whole: amax,
    max/min (all, dim), argmax/argmin, logsumexp, inf-norms; amin (right raw)."""
    x = torch.tensor(_ROWS, dtype=dtype).to(d)
    return (torch.amax(x, 1), torch.amax(x, 0, keepdim=True), torch.amax(x), torch.amax(x[2]),
            torch.max(x), torch.min(x), torch.max(x[3]), torch.min(x[1:3]), *torch.max(x, 1), *torch.min(x, 1, keepdim=True),
            *torch.max(x, 0), torch.argmax(x, 1), torch.argmin(x, 1), torch.argmax(x, 0), torch.argmax(x), torch.argmin(x),
            torch.argmax(x, 1, keepdim=True), torch.argmax(x[2]), torch.argmin(x[0], 0, keepdim=True),
            torch.logsumexp(x, 1), torch.logsumexp(x[4:8], 1, keepdim=True), torch.logsumexp(x[2:3], (0, 1)),
            torch.linalg.vector_norm(x, _INF, 1), torch.linalg.vector_norm(x, -_INF, 1), torch.linalg.vector_norm(x, _INF),
            torch.amin(x, 1), torch.max(torch.tensor(2.5).to(d)), torch.argmax(torch.tensor(_NAN).to(d)))


def test_reductions_skip_nan_raw(dml_device, shim_off):
    """Without dmlshim: amax and argmax skip the NaN (logsumexp of -inf only gives NaN on the
    real binary; the emulator, which gets it as amax and the rest, does not model that)."""
    x = torch.tensor([1.0, _NAN, 3.0]).to(dml_device)
    assert torch.amax(x).cpu().item() == 3.0 and torch.argmax(x).cpu().item() == 2
    assert torch.max(x.view(1, 3), 1).values.cpu().item() == 3.0


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_reductions_with_nan_with_the_shim_equal_cpu(dml_device, shim_off, assert_parity, dtype):
    dmlshim.activate(fallback="known")
    assert probing.last().status["nan_reductions"] == probing.DETECTED
    assert "nan_reductions" in patches.installed()
    assert_parity(_nan_reductions(dml_device, dtype), _nan_reductions(CPU, dtype))


# ------------------------------------------------------------ max_pool_indices (probed)
def _pool_indices(d):
    """max_pool1d/2d with indices of inputs of several planes (the batch too), padding,
    float16, a dilation; nn.MaxPool2d and its gradient."""
    x = (torch.arange(2 * 3 * 5 * 7.0).view(2, 3, 5, 7) * 13 % 17)
    outs = [*torch.nn.functional.max_pool2d(x.to(d), 2, return_indices=True),
            *torch.nn.functional.max_pool2d(x.to(d), 3, 2, 1, return_indices=True),
            *torch.nn.functional.max_pool2d(x.half().to(d), (2, 3), return_indices=True),
            *torch.nn.functional.max_pool2d(x.to(d), 2, 1, 0, 2, return_indices=True),
            *torch.nn.functional.max_pool1d(x[0].to(d), 3, 2, return_indices=True)]
    g = x.to(d).requires_grad_()
    y, i = torch.nn.MaxPool2d(2, return_indices=True)(g)
    (y * y).sum().backward()
    return outs + [y, i, g.grad]


def test_max_pool_indices_count_over_the_whole_tensor_raw(dml_device, shim_off):
    x = torch.arange(8.0).view(1, 2, 2, 2)
    indices = torch.nn.functional.max_pool2d(x.to(dml_device), 2, return_indices=True)[1]
    assert indices.cpu().flatten().tolist() == [3, 7]                  # the CPU: [3, 3]


def test_max_pool_indices_with_the_shim_equal_cpu(dml_device, shim_off, assert_parity):
    dmlshim.activate(fallback="known")
    assert probing.last().status["max_pool_indices"] == probing.DETECTED
    assert "max_pool_indices" in patches.installed()
    assert_parity(_pool_indices(dml_device), _pool_indices(CPU))


# ------------------------------------------------------------ pad_unbatched (probed)
def _reflect_pads(d):
    """F.pad(mode="reflect") of unbatched 3-D inputs: equal pads, unequal ones (the pad patch's
    CPU call), its gradient; nn.ReflectionPad2d; a batched one (float32: the CPU of torch 2.4.1
    has no float16 reflection_pad2d)."""
    x = torch.arange(2 * 4 * 5.0).view(2, 4, 5) * 3 % 7
    g = x.to(d).requires_grad_()
    y = torch.nn.functional.pad(g, (1, 1, 2, 2), mode="reflect")
    (y * y).sum().backward()
    return (y, g.grad, torch.nn.functional.pad(x.to(d), (1, 2, 0, 1), mode="reflect"),
            torch.nn.ReflectionPad2d(1)(x.to(d)), torch.nn.functional.pad(x[None].to(d), (1, 1, 1, 1), mode="reflect"))


def test_reflection_pad_of_an_unbatched_input_is_refused_raw(dml_device, shim_off):
    with pytest.raises((IndexError, RuntimeError), match="_M_range_check"):
        torch.nn.functional.pad(torch.ones(1, 3, 3).to(dml_device), (1, 1, 1, 1), mode="reflect")


# ------------------------------------------------------------ lazy_modules (static)
_LAZY = ((lambda: torch.nn.LazyConv1d(4, 3), (2, 3, 10)), (lambda: torch.nn.LazyConv2d(2, 3, padding=1), (1, 3, 5, 5)),
         (lambda: torch.nn.LazyConvTranspose1d(2, 3), (2, 3, 6)), (lambda: torch.nn.LazyLinear(5), (4, 7)),
         (lambda: torch.nn.LazyBatchNorm1d(), (4, 3)))


def _lazy_modules(d):
    """Lazy modules moved to the device before their first forward (conv 1-D, 2-D, transposed,
    linear, batch norm: uninitialized buffers), run once, then given the CPU module's weights
    (their initial draws come from another generator) and run again."""
    outs = []
    for make, shape in _LAZY:
        x = torch.arange(float(torch.Size(shape).numel())).view(shape) % 5 - 2
        torch.manual_seed(0)
        reference = make()
        reference(x)
        module = make().to(d)
        module(x.to(d))                                  # materialized, on the device
        module.load_state_dict(reference.state_dict())
        outs += [module(x.to(d)), *module.parameters(), *module.buffers()]
    return outs


def test_a_lazy_module_moved_to_the_device_fails_raw(dml_device, shim_off):
    module = torch.nn.LazyConv1d(4, 3).to(dml_device)
    with pytest.raises(RuntimeError, match="weight should have at least three dimensions"):
        module(torch.randn(2, 3, 10).to(dml_device))


def test_a_lazy_module_moved_to_the_device_with_the_shim_equals_cpu(dml_device, shim_off, assert_parity):
    dmlshim.activate(fallback="known")
    assert "lazy_modules" in patches.installed()
    assert_parity(_lazy_modules(dml_device), _lazy_modules(CPU))    # .to(CPU) leaves a CPU module as it is
    module = torch.nn.LazyLinear(3)
    assert type(module.cpu().weight) is torch.nn.parameter.UninitializedParameter    # a CPU move: untouched


# defect -> (its patch, the calls of the repro above): with dmlshim on the device, the CPU's results
SHIMMED = {
    "pad_value": ("pad_value", lambda d: _pads(d, 6)),
    "empty_reduction": ("empty_reduction", _reductions),
    "empty_broadcast": ("empty_broadcast", _empty_binaries),
    "masked_fill_rank": ("masked_fill_rank", _masked_fills),
    "empty_layer_norm": ("empty_layer_norm", _layer_norms),
    "max_pool_unbatched": ("max_pool_unbatched", _unbatched_pools),
    "pad_unbatched": ("pad_unbatched", _reflect_pads),
}


@pytest.mark.parametrize("defect", sorted(SHIMMED))
def test_with_the_shim_equals_cpu(defect, dml_device, shim_off, assert_parity):
    patch, calls = SHIMMED[defect]
    dmlshim.activate(fallback="known")
    assert probing.last().status[defect] == probing.DETECTED
    assert patch in patches.installed()
    assert_parity(calls(dml_device), calls(CPU))
