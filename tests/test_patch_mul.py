"""mul patch: float x bool must not become bool on DirectML (DirectML#686, #737; #17)."""
import pytest
import torch
from hypothesis import given, settings, strategies as st

import dmlshim

@pytest.fixture
def data(dml_device):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, 5, generator=g)
    m = torch.rand(3, 5, generator=g) > 0.5
    return x, m, x.to(dml_device), m.to(dml_device)


def _out_mul(a, b):
    out = torch.empty(torch.broadcast_shapes(a.shape, b.shape), dtype=torch.result_type(a, b), device=a.device)
    torch.mul(a, b, out=out)
    return out


def _imul(a, b):
    a = a.clone()
    a *= b
    return a


FORMS = {
    "x * m": lambda x, m: x * m,
    "m * x": lambda x, m: m * x,
    "torch.mul": lambda x, m: torch.mul(x, m),
    "torch.multiply": lambda x, m: torch.multiply(m, x),
    "torch.mul kwargs": lambda x, m: torch.mul(input=m, other=x),
    "Tensor.mul": lambda x, m: x.mul(m),
    "Tensor.mul kwarg": lambda x, m: x.mul(other=m),
    "Tensor.multiply": lambda x, m: m.multiply(x),
    "Tensor.mul_": lambda x, m: x.clone().mul_(m),
    "x *= m": _imul,
    "out=": _out_mul,
    "2.5 * m": lambda x, m: 2.5 * m,
    "m * x (half)": lambda x, m: m * x.half(),
}


@pytest.mark.parametrize("form", ["x * m", "m * x", "torch.mul", "Tensor.mul"])
def test_without_shim_float_times_bool_is_bool(dml_device, data, form):
    dmlshim.deactivate()
    x, m, xd, md = data
    assert FORMS[form](xd, md).dtype == torch.bool          # the DirectML bug: values lost
    assert FORMS[form](x, m).dtype == torch.float32


BESIDE_A_BOOL = {    # measured on the real 0.2.5 binary: each of these comes back bool
    "m * 3": lambda x, m: m * 3,
    "3 * m": lambda x, m: 3 * m,
    "m * 2.5": lambda x, m: m * 2.5,
    "x * True": lambda x, m: x * True,
    "m * int64": lambda x, m: m * x.long(),
    "int64 * m": lambda x, m: x.long() * m,
    "torch.mul(m, 3)": lambda x, m: torch.mul(m, 3),
}


@pytest.mark.parametrize("form", list(BESIDE_A_BOOL))
def test_without_shim_any_operand_beside_a_bool_makes_bool(dml_device, data, form):
    dmlshim.deactivate()
    x, m, xd, md = data
    assert BESIDE_A_BOOL[form](xd, md).dtype == torch.bool
    assert BESIDE_A_BOOL[form](x, m).dtype != torch.bool


@pytest.mark.parametrize("form", list(BESIDE_A_BOOL))
def test_with_shim_an_operand_beside_a_bool_equals_cpu(shim, data, form, assert_parity):
    x, m, xd, md = data
    got = BESIDE_A_BOOL[form](xd, md)
    assert got.device == xd.device
    assert_parity(got.cpu(), BESIDE_A_BOOL[form](x, m))


@pytest.mark.parametrize("form", list(FORMS))
def test_with_shim_every_entry_point_equals_cpu(shim, data, form, assert_parity):
    x, m, xd, md = data
    expected = FORMS[form](x, m)
    got = FORMS[form](xd, md)
    assert got.device == xd.device
    assert_parity(got.cpu(), expected)              # checks dtype too


def test_inplace_returns_the_same_tensor(shim, data):
    _, _, xd, md = data
    y = xd.clone()
    assert y.mul_(md) is y and y.dtype == torch.float32


def test_stats_count_coercions(shim, data):
    _, _, xd, md = data
    dmlshim.trace.reset()
    xd * md
    xd * xd                                                 # float x float: fast path, not counted
    rows = {r["op"]: r for r in dmlshim.report().rows}
    assert rows["aten::mul.Tensor"]["actions"] == {"coerce": 1}
    assert rows["aten::mul.Tensor"]["h2d"] == rows["aten::mul.Tensor"]["d2h"] == 0


def test_autograd_through_coerced_mul(shim, dml_device, data, assert_parity):
    x, m, _, md = data
    xd = x.to(dml_device).requires_grad_()
    xc = x.clone().requires_grad_()
    (xd * md * xd).sum().backward()
    (xc * m * xc).sum().backward()
    assert_parity(xd.grad.cpu(), xc.grad)


SHAPES = st.lists(st.integers(0, 4), min_size=0, max_size=3)
FLOATS = st.sampled_from([torch.float32, torch.float16, torch.int64, torch.bool])


@settings(max_examples=40, deadline=None)
@given(shape=SHAPES, ones=st.lists(st.booleans(), min_size=3, max_size=3), dtype=FLOATS,
       bool_first=st.booleans(), seed=st.integers(0, 2**16))
def test_property_mul_with_bool_equals_cpu(dml_device, shape, ones, dtype, bool_first, seed, assert_parity):
    """Broadcast shapes (some dims 1), empty tensors, several dtypes, either order."""
    dmlshim.deactivate()
    dmlshim.activate(fallback="known", trace=0)
    try:
        g = torch.Generator().manual_seed(seed)
        other_shape = [1 if one else n for n, one in zip(shape, ones)]
        x = (torch.randn(shape, generator=g) * 10).to(dtype)
        m = torch.rand(other_shape, generator=g) > 0.5
        a, b = (m, x) if bool_first else (x, m)
        assert_parity((a.to(dml_device) * b.to(dml_device)).cpu(), a * b)
        y = x.clone().to(dml_device)
        if dtype != torch.bool and list(torch.broadcast_shapes(x.shape, m.shape)) == list(x.shape):
            y.mul_(m.to(dml_device))
            assert_parity(y.cpu(), x * m)
    finally:
        dmlshim.deactivate()


# ----------------------------------------------------------- FunASR SANM: silent corruption

class SanmMemoryBlock(torch.nn.Module):
    """FunASR's SANM ``forward_fsmn`` shape: ``inputs = inputs * mask`` then a depthwise
    ``Conv1d`` over time (sanm/attention.py:229,238)."""

    def __init__(self, d=8, k=5):
        super().__init__()
        self.fsmn = torch.nn.Conv1d(d, d, k, padding=k // 2, groups=d, bias=False)

    def forward(self, x, mask):                 # x [B, T, D] float, mask [B, T, 1] bool
        x = x * mask
        return self.fsmn(x.transpose(1, 2)).transpose(1, 2) + x


def test_sanm_block_fails_without_shim_and_equals_cpu_with_it(dml_device, assert_parity):
    torch.manual_seed(0)
    block = SanmMemoryBlock().eval()
    x = torch.randn(2, 11, 8)
    mask = torch.ones(2, 11, 1, dtype=torch.bool)
    mask[1, 7:] = False
    with torch.no_grad():
        expected = block(x, mask)
        block.to(dml_device)
        xd, md = x.to(dml_device), mask.to(dml_device)

        dmlshim.deactivate()
        with pytest.raises(RuntimeError):       # raw DirectML: conv1d gets a bool input
            block(xd, md)

        dmlshim.activate(fallback="known", trace=0)
        try:
            assert_parity(block(xd, md).cpu(), expected)
        finally:
            dmlshim.deactivate()


@pytest.mark.parametrize("dtype", [torch.bool, torch.int64])
def test_a_convolution_of_a_bool_or_integer_input_gets_the_cpus_error(shim, dml_device, dtype):
    """No convolution fix casts a bool input: the CPU refuses one beside a float weight, so the
    device call raises the CPU's error (the float x bool fix keeps masks from making one)."""
    x, weight = torch.ones(1, 2, 5, dtype=dtype), torch.randn(3, 2, 3)
    with pytest.raises(RuntimeError) as cpu:
        torch.nn.functional.conv1d(x, weight)
    with pytest.raises(RuntimeError) as device:
        torch.nn.functional.conv1d(x.to(dml_device), weight.to(dml_device))
    assert str(device.value).splitlines()[0] == str(cpu.value).splitlines()[0]


@pytest.mark.parametrize("shape, other", [([2, 0, 1], [2, 0, 1]), ([3, 0], [1, 0]), ([0], [0])])
def test_inplace_mul_of_an_empty_tensor(shim, dml_device, shape, other):
    """The real 0.2.5 binary copies an empty (2, 0, 1) over with strides (0, 1, 0), and its
    ``mul_`` then fails TensorIterator's overlap check (found by the property test above on
    the real binary; the emulator does not model those strides). With dmlshim: ``self``, after
    the CPU's own checks."""
    x, m = torch.randn(shape), torch.rand(other) > 0.5
    y = x.clone().to(dml_device)
    assert y.mul_(m.to(dml_device)) is y and y.shape == x.shape
    with pytest.raises(RuntimeError, match="can't be cast to the desired output type Long"):
        torch.zeros(shape, dtype=torch.int64).to(dml_device).mul_(torch.randn(other).to(dml_device))
