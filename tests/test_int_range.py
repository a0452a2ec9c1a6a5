"""Integers past float32's 24 bits and int64 past 32 bits (patches/int_range.py): the laws the
fix decides by (laws/integers.py), its selectivity (values within the exact span stay on the
device), and a property test of the fix against the CPU.  The repro both ways is ``test_observed_silent``'s
(``int_range``).  The tests without the marker run on the real device too."""
import os
import weakref

import pytest
import torch
from hypothesis import HealthCheck, given, settings, strategies as st

import dmlshim
from dmlshim import ranges
from dmlshim.laws import integers
from dmlshim.patches import int_range

aten = torch.ops.aten


@pytest.mark.parametrize("op, args, kwargs, outside", [
    (aten.add.Tensor, (torch.tensor([2 ** 24 - 2]), torch.tensor(1)), {}, False),
    (aten.add.Tensor, (torch.tensor([2 ** 24 - 1]), torch.tensor(1)), {}, True),   # the result leaves
    (aten.add.Tensor, (torch.tensor([2 ** 24 + 1]), torch.tensor([1])), {}, False),  # two tensors: exact
    (aten.add.Tensor, (torch.tensor([3]), torch.tensor(1)), {"alpha": 2 ** 24}, True),
    (aten.sub.Tensor, (torch.tensor([2 ** 31]), torch.tensor([1])), {}, True),      # two int64: 32 bits
    (aten.sub.Tensor, (torch.tensor([2 ** 31], dtype=torch.float64), torch.tensor(1)), {}, False),
    (aten.sub.Tensor, (torch.tensor([2 ** 30], dtype=torch.int32), torch.tensor([1], dtype=torch.int32)), {}, False),
    (aten.mul.Tensor, (torch.tensor([4097]), torch.tensor(4096)), {}, True),
    (aten.mul.Tensor, (torch.tensor([4095]), torch.tensor(4096)), {}, False),
    (aten.mul.Tensor, (torch.tensor([4097]), torch.tensor(4096.0)), {}, False),    # a float: float math
    (aten.mul.Tensor, (torch.tensor([200], dtype=torch.uint8), torch.tensor(2)), {}, True),
    (aten.mul.Tensor, (torch.tensor([100], dtype=torch.uint8), torch.tensor(2)), {}, False),
    (aten.neg.default, (torch.tensor([-(2 ** 24) + 1]),), {}, False),
    (aten.pow.Tensor_Scalar, (torch.tensor([4]), 11), {}, False),
    (aten.pow.Tensor_Scalar, (torch.tensor([4]), 12), {}, True),
    (aten.floor_divide.default, (torch.tensor([2 ** 24 + 1]), torch.tensor(3)), {}, True),
    (aten.floor_divide.default, (torch.tensor([-49]), torch.tensor(7)), {}, True),        # by a number
    (aten.floor_divide.default, (torch.tensor([-49]), torch.tensor([7])), {}, True),     # NVIDIA's
    (aten.div.Tensor_mode, (torch.tensor([-49]), torch.tensor(7)), {"rounding_mode": "trunc"}, False),
    (aten.div.Tensor_mode, (torch.tensor([-49]), torch.tensor(7)), {"rounding_mode": "floor"}, True),
    (aten.mm.default, (torch.full((1, 3), 2 ** 11), torch.full((3, 1), 2 ** 11)), {}, False),
    (aten.mm.default, (torch.full((1, 5), 2 ** 12), torch.full((5, 1), 2 ** 11)), {}, True),
    (aten.clone.default, (torch.tensor([2 ** 31 - 256, -(2 ** 31) + 256]),), {}, False),
    (aten.clone.default, (torch.tensor([-(2 ** 31) - 1]),), {}, True),     # float32: -2**31, refused
    (aten.clone.default, (torch.tensor([2 ** 31]),), {}, True),
    (aten.clone.default, (torch.tensor([2 ** 31], dtype=torch.float32),), {}, False),
    (aten.gt.Scalar, (torch.tensor([2 ** 31]), 0), {}, True),
    (aten.gt.Tensor, (torch.tensor([2 ** 24 + 1]), torch.tensor([0])), {}, False),
])
def test_outside_follows_the_laws(op, args, kwargs, outside):
    assert integers.outside(op, args, kwargs) is outside
    assert int_range.outside(op, args, kwargs) is outside        # the fix's, on CPU operands


@pytest.mark.parametrize("dtype, law, refused", [
    (torch.int64, integers.FLOAT32, (-(2 ** 24), 2 ** 24)), (torch.int32, integers.FLOAT32, (-(2 ** 24), 2 ** 24)),
    (torch.int64, integers.BITS32, (-(2 ** 31), 2 ** 31)), (torch.uint8, integers.FLOAT32, (-1, 256)),
    (torch.int8, integers.FLOAT32, (-129, 128)), (torch.int16, integers.FLOAT32, (-(2 ** 15) - 1, 2 ** 15)),
])
def test_refused_bounds(dtype, law, refused):
    assert integers.refused(dtype, law) == refused


def test_spans_survive_a_device_that_reads_32_bits(dml_device, shim_off):
    """A small tensor's range is read on the CPU; a large one's in float32 on the device, where
    a value past the exact span never rounds back inside."""
    large = torch.arange(70000) - 35000
    for values in ([-1, -(2 ** 31) - 1], [2 ** 24 + 1], [2 ** 40 + 5, 3], large.tolist(),
                   torch.cat([large, torch.tensor([-(2 ** 31) - 1])]).tolist(),
                   torch.cat([large, torch.tensor([2 ** 31 + 1])]).tolist()):
        assert int_range.outside(aten.clone.default, (torch.tensor(values).to(dml_device),), {}) is (
            min(values) < -(2 ** 31) or max(values) >= 2 ** 31)


def test_pixel_shuffle_of_integers_with_the_shim(dml_device, shim_off, assert_parity):
    """Its clone is of a 6-D view, whose range the fix takes flat: a reduction of more than 5
    dimensions ends the real binary's process (dml_tensor_desc.cc, as PReLU's)."""
    dmlshim.activate(fallback="known")
    x = torch.arange(2 * 4 * 3 * 3).view(2, 4, 3, 3)
    assert_parity(torch.nn.functional.pixel_shuffle(x.to(dml_device), 2), torch.nn.functional.pixel_shuffle(x, 2))


def test_values_within_the_span_stay_on_the_device(dml_device, shim_off, host_reads, assert_parity):
    dmlshim.activate(fallback="known")
    dmlshim.trace.reset()

    def work(d):
        x = torch.arange(-50, 50).to(d)
        return (x + 1, x * 3, -x, x ** 2, torch.div(x, 7, rounding_mode="trunc"), x % 7, x.clone(), x.sort().values, x - x.flip(0),
                x.view(10, 10) @ x.view(10, 10), torch.maximum(x, x.flip(0)), x.clamp(-5, 5), x > 3,
                x // 7, torch.div(x, 41, rounding_mode="floor"))

    device_results = work(dml_device)
    # x's range is known from its copy and every result's from x's, x.flip(0)'s too (its
    # values are x's): no host read, and no call went to the CPU
    assert host_reads() == {}
    assert_parity(device_results, work(torch.device("cpu")))
    dmlshim.trace.reset()
    (torch.tensor([2 ** 40]).to(dml_device) ** 2).cpu()      # past the span: on the CPU
    (torch.arange(3).to(dml_device) // torch.tensor([2]).to(dml_device)).cpu()   # by a tensor
    assert host_reads() == {"aten::pow.Tensor_Scalar": {"reads": 1, "bytes": 8},
                            "aten::floor_divide": {"reads": 1, "bytes": 4 * 8}}


def test_known_ranges_make_no_host_read(dml_device, shim_off, range_reads, assert_parity):
    """A small integer tensor copied from the CPU has its range at the copy; each result the
    fix keeps on the device has its range from its operands'."""
    dmlshim.activate(fallback="known")
    dmlshim.trace.reset()

    def work(d):
        i = torch.arange(-8, 56).to(d)
        j = i + 1
        return j, j > 3, j.clone(), (j.clone() - 5) ** 2, -j.view(8, 8)[1:]

    got = work(dml_device)
    assert range_reads() == {}
    assert_parity(got, work(torch.device("cpu")))


def test_an_unknown_range_is_read_once_until_a_write(dml_device, shim_off, range_reads, assert_parity):
    dmlshim.activate(fallback="known")
    x = torch.arange(128).repeat(40).to(dml_device)   # 5120 elements: too many to take at the copy
    dmlshim.trace.reset()
    y, z = x.clone(), -x
    assert range_reads() == {"aten::clone": 1}
    x[3] = 2 ** 30                              # x[i] = v: the range is the union, a bound
    w = x ** 2                                  # the bound leaves the span: the values read,
    assert range_reads() == {"aten::clone": 1, "aten::pow.Tensor_Scalar": 1}   # 2**60: on the CPU
    x.sub_(1)                                   # another write: the range kept is forgotten
    v = -x                                      # read again
    assert range_reads() == {"aten::clone": 1, "aten::pow.Tensor_Scalar": 1, "aten::neg": 1}
    expected = torch.arange(128).repeat(40)
    assert_parity((y, z), (expected, -expected))
    expected[3] = 2 ** 30
    assert_parity((w, v), (expected ** 2, -(expected - 1)))


def test_a_range_read_is_traced_with_the_tensor_read(dml_device, shim_off, tmp_path):
    """``DMLSHIM_TRACE``'s record of a ``range read`` names the tensor read (its shape and
    dtype), so a read can be told to its call (GFPGAN's was found so)."""
    import json

    path = tmp_path / "trace.jsonl"
    dmlshim.activate(fallback="known", trace=str(path))
    x = torch.arange(128).repeat(40).to(dml_device)   # too many elements to take at the copy
    x.clone()
    dmlshim.deactivate()
    reads = [r for r in map(json.loads, path.read_text().splitlines()) if r["action"] == "range read"]
    assert [(r["op"], r["inputs"][0]["shape"], r["inputs"][0]["dtype"]) for r in reads] == \
        [("aten::clone", [5120], "int64")]


def test_ranges_carry_through_cat_indexing_and_writes(dml_device, shim_off, range_reads, assert_parity):
    """A decoder's token list: argmax indices, a write of the end token, a concatenation and
    arithmetic on its views read nothing (Whisper's greedy decode)."""
    dmlshim.activate(fallback="known")
    dmlshim.trace.reset()

    def decode(d):
        tokens = torch.tensor([[50258, 50259, 50359]]).to(d)
        logits = torch.tensor([[0.0, 3.0, 1.0, 2.0]]).to(d)
        for _ in range(3):
            next_tokens = logits.argmax(dim=-1)
            next_tokens[tokens[:, -1] == 50257] = 50257
            tokens = torch.cat([tokens, next_tokens[:, None] + 50300], dim=-1)
        return tokens, tokens[0, 3:].ge(50301), tokens[:, -1] + 1, tokens - 7

    got = decode(dml_device)
    assert range_reads() == {}
    assert_parity(got, decode(torch.device("cpu")))


def test_a_known_range_past_the_span_goes_to_the_cpu(dml_device, shim_off, host_reads, range_reads,
                                                    assert_parity):
    dmlshim.activate(fallback="known")
    big = torch.tensor([2 ** 24 + 1, 5]).to(dml_device)
    dmlshim.trace.reset()
    assert_parity(big ** 2, torch.tensor([(2 ** 24 + 1) ** 2, 25]))
    # no range read (known at the copy): the one read is pow's operand, taken to the CPU
    assert host_reads() == {"aten::pow.Tensor_Scalar": {"reads": 1, "bytes": 2 * 8}} and range_reads() == {}
    assert_parity((big + 1, big - 3, big * 3), (torch.tensor([2 ** 24 + 2, 6]), torch.tensor([2 ** 24 - 2, 2]),
                                                  torch.tensor([3 * 2 ** 24 + 3, 15])))
    # with a number: the number as a 0-dim device tensor, two tensors on the device
    assert host_reads() == {"aten::pow.Tensor_Scalar": {"reads": 1, "bytes": 2 * 8}} and range_reads() == {}


def test_a_number_with_an_unknown_range_reads_nothing(dml_device, shim_off, host_reads, assert_parity,
                                                      assert_differs):
    """``x + n``, ``x - n``, ``x * n`` of an int32 or int64 tensor whose range nothing knows
    (cast from floats: SeACo-Paraformer's CIF ``max_label_len - l.size(0)``): the number as a
    0-dim device tensor, the two tensors computed with every bit and the dtype's wrap, as on
    the real binary (docs/defects.md, ``int_range``); no read.  Raw, the law's float32 loses
    the low bits and saturates."""
    int32s = torch.tensor([2.0 ** 31 - 128, -2.0 ** 31, 2.0 ** 24 + 2, 5.0])
    int64s = torch.tensor([2.0 ** 40, -2.0 ** 50, 2.0 ** 62, 3e9, -7.0])

    def work(d):
        a = (int32s.to(d) * 1.0).int()                   # cast on the device: no span kept
        b = (int64s.to(d) * 1.0).long()
        top = a.max()                                    # a 0-dim int32, as CIF's max_label_len
        c = b.clone() if d.type == "cpu" else b * 1
        c.add_(5)
        return a - 3, a + (2 ** 31 - 1), a * 3, top - 7, b + 1, b - 2 ** 33, b * 3, c

    cpu = work(torch.device("cpu"))
    assert_differs(work(dml_device)[0].cpu(), cpu[0])
    raw = (int32s.to(dml_device) * 1.0).int()            # raw, a 0-dim device tensor is exact
    assert_parity(raw + torch.full((), -3, dtype=torch.int32, device=dml_device), cpu[0])
    dmlshim.activate(fallback="known")
    dmlshim.trace.reset()
    got = work(dml_device)
    assert host_reads() == {}
    assert_parity(got, cpu)


def test_a_number_minus_a_tensor_with_the_shim(dml_device, shim_off, assert_parity):
    """``7 - x`` is ``rsub.Scalar``, which the real binary computes through ``rsub.Tensor`` with
    the number wrapped on the device: a Python kernel there ended in torch's INTERNAL ASSERT
    (int_broadcast and int_range held one)."""
    dmlshim.activate(fallback="known")
    for x in (torch.tensor([5.0, -3.0]), torch.tensor([5, -3]), torch.tensor([2 ** 40, 3])):
        assert_parity(7 - x.to(dml_device), 7 - x)
        assert_parity(torch.rsub(x.to(dml_device), 2), torch.rsub(x, 2))


def test_add_scalar_takes_its_alpha_third(dml_device, shim_off, assert_parity):
    """``add.Scalar``/``sub.Scalar`` take ``alpha`` positionally (``add.Tensor`` as a keyword):
    the law's span and the two-tensor call of a range not kept count it (they once took 1)."""
    dmlshim.activate(fallback="known")
    ops = torch.ops.aten
    for known in (True, False):
        x = torch.arange(8).to(dml_device)
        if not known:
            ranges.forget(x)
        for op in (ops.add.Scalar, ops.sub.Scalar):
            y = op(x, 5, 2)
            assert_parity(y, op(torch.arange(8), 5, 2))
            assert ranges.known_span(y) in (None, (10, 17) if op is ops.add.Scalar else (-10, -3))


_OPS = {"add": lambda x, n: x + n, "sub": lambda x, n: x - n, "rsub": lambda x, n: n - x,
        "mul": lambda x, n: x * n, "neg": lambda x, n: -x, "floordiv": lambda x, n: x // (abs(n) or 1),
        "remainder": lambda x, n: x % (abs(n) or 1), "clone": lambda x, n: x.clone(),
        "sub_tensor": lambda x, n: x - x.flip(0), "maximum": lambda x, n: torch.maximum(x, x.flip(0)),
        "clamp_min": lambda x, n: x.clamp_min(n), "sort": lambda x, n: x.sort().values,
        "lt": lambda x, n: x < n, "in_place": lambda x, n: x.clone().mul_(n).add_(n)}
_INT64 = st.integers(-(2 ** 62), 2 ** 62)
_VALUES = st.one_of(st.integers(-(2 ** 26), 2 ** 26), st.integers(-(2 ** 33), 2 ** 33), _INT64)


@settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(values=st.lists(_VALUES, min_size=1, max_size=6), number=st.integers(-(2 ** 20), 2 ** 20),
       op=st.sampled_from(sorted(_OPS)))
def test_property_with_the_shim_equals_cpu(dml_device, default_shim, assert_parity, values, number, op):
    if op in ("mul", "in_place"):
        values = [v >> 21 for v in values]                  # no int64 overflow on the CPU
    x = torch.tensor(values, dtype=torch.int64)
    assert_parity(_OPS[op](x.to(dml_device), number), _OPS[op](x, number), f"{op} {values} {number}: ")


V = 2 ** 40 + 5
BIG = [V, -(2 ** 35) - 1, 2 ** 32 + 7, 3]


def _writes(d):
    """int64 values past 32 bits written: x[i] = v in its forms, index_put_ (accumulate too),
    scatter_, masked_scatter_, torch.diag (a C++ copy_ into a view)."""
    big, mask, pair = torch.tensor(BIG).to(d), torch.tensor([True, False, True, False]).to(d), torch.tensor([1, 2]).to(d)
    written = []
    for index, value in ((pair, big[:2]), (1, V), (slice(1, 3), big[:2]), (slice(1, 3), V), (mask, big[:2]),
                         ((Ellipsis, 0), -V)):
        x = torch.zeros(4, dtype=torch.int64).to(d)
        x[index] = value
        written.append(x)
    grid = torch.zeros(2, 3, dtype=torch.int64).to(d)
    grid[:, 1:] = torch.tensor([[V, -V]]).to(d)
    zeros = lambda: torch.zeros(4, dtype=torch.int64).to(d)         # noqa: E731
    return (*written, grid, zeros().index_put_((torch.tensor([1, 1]).to(d),), big[:2], accumulate=True),
            zeros().scatter_(0, pair, big[:2]), zeros().masked_scatter_(mask, big), torch.diag(big),
            torch.zeros(2, 2, dtype=torch.int64).to(d).index_put_((pair - 1, 2 - pair), big[:2]))




def test_a_write_into_a_view_keeps_32_bits_raw(dml_device, shim_off):
    """Not fixed (docs/realdml.md): fill_ of a view with an offset, copy_ from the CPU into one
    or into a strided view keep the low 32 bits; the emulator models them."""
    x = torch.zeros(4, dtype=torch.int64).to(dml_device)
    x[1:].fill_(V)
    x[::2].copy_(torch.tensor([V, V]))
    assert x.cpu().tolist() == [5, 5, 5, 5]


def _outs(d):
    """The out= overloads the laws reach (pow.out, clamp.out, maximum.out keep every bit)."""
    a, s = torch.tensor([2 ** 24 + 1, 2 ** 40, 3, -(2 ** 33) - 5]).to(d), torch.tensor([2 ** 24 + 1, 2 ** 31 + 3, 3, -(2 ** 31) - 5]).to(d)
    m = torch.tensor([[2 ** 12 + 1, 2], [3, 4]]).to(d)
    e = lambda n=4, dtype=torch.int64: torch.empty(n, dtype=dtype).to(d)        # noqa: E731
    return (torch.add(a, 1, out=e()), torch.sub(a, s, out=e()), torch.mul(s, 3, out=e()), torch.neg(a, out=e()),
            torch.floor_divide(torch.tensor([-49, 9]).to(d), 7, out=e(2)), torch.remainder(a, 1000, out=e()),
            torch.mm(m, m, out=torch.empty(2, 2, dtype=torch.int64).to(d)), torch.gt(s, 2 ** 31 - 1, out=e(dtype=torch.bool)),
            torch.sort(s, out=(e(), e()))[0], torch.topk(s, 2, out=(e(2), e(2)))[0],
            torch.mul(torch.tensor([2 ** 30, 7], dtype=torch.int32).to(d), 4, out=e(2, torch.int32)))


@pytest.mark.parametrize("case", [_writes, _outs], ids=["writes", "outs"])
def test_past_the_span_differ_raw(dml_device, shim_off, assert_differs, case):
    for got, want in zip(case(dml_device), case(torch.device("cpu"))):
        assert_differs(got, want)


@pytest.mark.parametrize("case", [_writes, _outs], ids=["writes", "outs"])
def test_past_the_span_with_the_shim(dml_device, shim_off, assert_parity, case):
    dmlshim.activate(fallback="known")
    assert_parity(case(dml_device), case(torch.device("cpu")))


@pytest.mark.emulated_only(reason="the real binary's tensors are opaque: no view as another dtype "
                                   "('Cannot access storage of OpaqueTensorImpl')")
def test_a_view_as_another_dtype_does_not_take_its_bases_range(dml_device, shim_off):
    """int64 -1's bytes are 255: a uint8 view's values are not among the int64 values."""

    dmlshim.activate(fallback="known")
    x = torch.tensor([-1, 5]).to(dml_device)
    assert ranges.known_span(x) == (-1, 5) and ranges.known_span(x[1:]) == (-1, 5)
    assert ranges.known_span(x.view(torch.uint8)) is None


@settings(max_examples=60, deadline=None, derandomize=True)
@given(a=st.lists(st.integers(-300, 300), min_size=1, max_size=5),
       b=st.lists(st.integers(0, 300), min_size=1, max_size=5))
def test_exact_ops_spans_bound_their_results(a, b):
    """``laws.integers.SPANS``: each result within the span its law gives from its operands'."""
    x, y = torch.tensor(a), torch.tensor(b)
    n = min(len(a), len(b))
    spans = [integers.host_span(x), integers.host_span(y)]
    for op, result in ((aten.bitwise_and.Tensor, x[:n] & y[:n]), (aten.bitwise_and.Tensor, y[:n] & x[:n]),
                       (aten.bitwise_or.Tensor, y[:n] | y.flip(0)[:n]), (aten.bitwise_xor.Tensor, y[:n] ^ y.flip(0)[:n]),
                       (aten.cumsum.default, x.cumsum(0))):
        span_of, measured = integers.SPANS[op]
        operands = [integers.host_span(v) for v in ((x, y) if op is aten.bitwise_and.Tensor else (y, y))]
        span = span_of([spans[0]] if op is aten.cumsum.default else operands, (x, 0), {})
        if span is not None:
            assert span[0] <= int(result.min()) and int(result.max()) <= span[1], (op, span, result)


def test_factories_fills_and_exact_ops_carry_ranges(dml_device, shim_off, range_reads, assert_parity):
    """A decoder's bookkeeping reads nothing: ``torch.ones``/``zeros``' fills, ``& ~done``, a
    mask's ``long().cumsum(-1) - 1`` (Fun-ASR-Nano's ``generate``), ``lengths += 3``
    (SenseVoice's) and ``x[:, t] += d`` into a tensor of known range."""
    dmlshim.activate(fallback="known")
    dmlshim.trace.reset()

    def work(d):
        unfinished = torch.ones(2, dtype=torch.long, device=d)
        unfinished = unfinished & ~torch.tensor([True, False]).to(d)
        tokens = torch.tensor([7, 9]).to(d) * unfinished + 5 * (1 - unfinished)
        mask = torch.zeros(2, 6, dtype=torch.bool, device=d)
        mask[:, 2:] = True
        positions = mask.long().cumsum(-1) - 1
        if emulated:        # the real binary: masked_fill_'s span is not kept (not yet traced)
            positions.masked_fill_(mask == 0, 1)
        lengths = torch.tensor([30, 40]).to(d)
        lengths += 3
        path = torch.zeros((2, 5), dtype=torch.long, device=d)
        path[:, 3] += lengths
        return tokens - 1, positions.clone(), lengths - 4, path - 2, x_like(d).new_zeros(3) - 1

    emulated = os.environ.get("DMLSHIM_TEST_DEVICE", "").lower() != "directml"   # as conftest

    def x_like(d):
        return torch.arange(4).to(d)

    got = work(dml_device)
    assert range_reads() == {}
    assert_parity(got, work(torch.device("cpu")))


def test_a_fill_at_the_top_level_keeps_no_stale_range(dml_device, shim_off, assert_parity):
    """``x.fill_(v)``/``x.zero_()`` called by the model move the version after the kernel that
    saw them returns: the range seen there is dropped, never kept for the values after."""
    dmlshim.activate(fallback="known")

    def work(d):
        x = torch.zeros(3, dtype=torch.long, device=d)
        x.fill_(2 ** 40 + 3)
        y = torch.ones(3, dtype=torch.long, device=d)
        return x - y, x > y

    assert_parity(work(dml_device), work(torch.device("cpu")))


def test_a_loop_of_additions_into_its_columns_reads_nothing(dml_device, shim_off, range_reads,
                                                           assert_parity):
    """SenseVoice's CTC alignment (funasr ``ctc_alignment.py``) adds a value derived from
    ``path``'s column ``t`` into column ``t - 1``, once per column: each column's span is kept
    apart from the rest (``ranges.remember_region``), so a bound grows by a column's each step
    instead of doubling (one span per tensor read the tensor every 24 steps), and nothing is
    read; exact results."""
    dmlshim.activate(fallback="known")

    def align(d, steps=300):
        back = torch.zeros((2, steps, 6), dtype=torch.long, device=d)
        back[:, :, 2:] = torch.tensor([[1, 0, 2, 1]]).to(d)
        path = torch.zeros((2, steps), dtype=torch.long, device=d)
        path[torch.arange(2).to(d), torch.tensor([steps - 1, steps - 40]).to(d)] = torch.tensor([5, 3]).to(d)
        rows = torch.arange(2).to(d)
        for t in range(steps - 1, 0, -1):
            here = path[:, t]
            path[:, t - 1] += here - back[rows, t, here]
        return path

    dmlshim.trace.reset()
    got = align(dml_device)
    assert range_reads() == {}
    assert_parity(got, align(torch.device("cpu")))


_COLUMNS = st.lists(st.tuples(st.sampled_from(["add", "sub", "set", "element", "row", "whole", "flat",
                                               "flat set"]),
                              st.integers(0, 5), st.integers(0, 5), st.integers(-3, 3)), max_size=25)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture],
          database=None)
@given(steps=_COLUMNS)
def test_column_spans_bound_their_values(dml_device, default_shim, steps):
    """Whatever mix of writes: a column's ``+=``/``-=`` of another, a column, a row or one
    element set, the whole tensor written (untracked: the version moves), a flat window
    added to or set (another geometry; windows overlap one another), every column's and
    window's span kept bounds its values, and so does the tensor's."""

    path = torch.zeros((2, 6), dtype=torch.long).to(dml_device)
    for kind, a, b, k in steps:
        if kind == "add":
            path[:, a] += path[:, b] + k
        elif kind == "sub":
            path[:, a] -= path[:, b] - k
        elif kind == "set":
            path[:, a] = path[:, b] + k
        elif kind == "element":
            path[a % 2, b] = k
        elif kind == "row":
            path[a % 2, ...] = path[1 - a % 2] - k
        elif kind == "whole":
            path.add_(k)
        elif kind == "flat":
            window = path.view(-1)[a:a + 3]
            window += k                     # no x[i] = v after: the windows' regions stay
        else:
            path.view(-1)[b:b + 3] = k
        values = path.cpu()
        views = [(path[:, c], values[:, c]) for c in range(6)] + \
                [(path.view(-1)[i:i + 3], values.view(-1)[i:i + 3]) for i in range(10)] + [(path, values)]
        for view, held in views:
            span = ranges.known_span(view)
            assert span is None or span[0] <= held.min() <= held.max() <= span[1]


def test_ones_like_and_full_keep_their_fill(dml_device, shim_off, range_reads, assert_parity):
    """``ones_like`` and ``full`` are kernels of their own on the real binary (no ``fill_`` to
    see): their value is their span.  transformers' ``generate``: ``ones_like(x[0, :, 0],
    dtype=torch.int64).cumsum(0) - 1`` (Fun-ASR-Nano's ``cache_position``).  A fill past 32
    bits is known too, so the call it leaves runs on the CPU, read for nothing."""
    dmlshim.activate(fallback="known")
    dmlshim.trace.reset()

    def work(d):
        x = torch.randn(1, 6, 3).to(d)
        cache_position = torch.ones_like(x[0, :, 0], dtype=torch.int64).cumsum(0) - 1
        pads = torch.full((2, 3), 7, dtype=torch.long, device=d)
        big = torch.full((2,), 2 ** 40 + 3, dtype=torch.long, device=d)
        return (cache_position, pads * 3 - 1, torch.full_like(pads, -2) + 1, pads.new_full((2,), 5) - 1,
                torch.zeros_like(pads) - 1, big - 1, big > 5)

    got = work(dml_device)
    assert range_reads() == {}
    assert_parity(got, work(torch.device("cpu")))
    assert ranges.known_span(torch.ones_like(torch.randn(3).to(dml_device), dtype=torch.int32)) == (1, 1)


def test_a_mask_sum_is_a_length_of_known_range(dml_device, shim_off, host_reads, assert_parity):
    """An encoder's output lengths are a mask's sum: ``masks.squeeze(1).sum(1)`` of a bool mask
    (SeACo-Paraformer's SANM encoder) or of a float one, cast back (SenseVoice's:
    ``.sum(1).int()``): 0 to the mask's length, known without a read, and so the lengths'
    arithmetic after (Fun-ASR-Nano's adaptor: ``(ilens - 1) // k + 1``; SenseVoice's
    ``encoder_out_lens[i] - 4``) stays on the device."""
    dmlshim.activate(fallback="known")
    dmlshim.trace.reset()

    def work(d):
        lengths = torch.tensor([37, 50, 1]).to(d)
        row = torch.arange(0, 50).to(d)
        masks = (row < lengths[:, None])[:, None, :]
        bool_lens = masks.squeeze(1).sum(1)
        float_lens = masks.type(torch.float32).squeeze(1).sum(1).int()
        half_lens = masks.half().sum(-1).long()
        return (bool_lens, row < bool_lens[:, None], float_lens, (float_lens - 1) // 5 + 1,
                float_lens[0] - 4, half_lens * 2, masks.sum() + 1)

    got = work(dml_device)
    assert host_reads() == {}
    assert_parity(got, work(torch.device("cpu")))


def test_only_whole_floats_within_their_dtype_keep_a_span(dml_device, shim_off):
    """A float sum keeps a span only from an operand of whole values within it and a result
    whose every partial sum the dtype holds: not an arbitrary float's, not float16's past
    2**11 (``2049`` has no float16)."""
    dmlshim.activate(fallback="known")
    d = dml_device
    mask = torch.ones(3000, dtype=torch.bool).to(d)
    assert ranges.known_span(mask.float().sum()) == (0, 3000)
    assert ranges.known_span(mask.half()) == (0, 1) and ranges.known_span(mask.half().sum()) is None
    assert ranges.known_span(mask[:2000].half().sum()) == (0, 2000)
    assert ranges.known_span(torch.randn(4).to(d).sum()) is None
    assert ranges.known_span(torch.arange(4.0).to(d) * 0.5) is None
    ranges.remember(torch.zeros(2).to(d), (0.5, 1))          # not whole: refused
    scaled = mask.float() * 0.5
    assert ranges.known_span(scaled) is None and ranges.known_span(scaled.sum().int()) is None


def test_floor_division_of_a_known_range_by_a_number_stays_on_the_device(dml_device, shim_off, host_reads,
                                                                        assert_parity, assert_differs):
    """The device's floor division misses multiples of the divisor below zero (``-49 // 7``
    gives -8; the emulator's law, ``floor(x * (1/n))``, misses ``41 // 41`` too); with a known
    span and a positive integral divisor it is computed on the device by truncation, which
    divides: ``(x + m*n) // n - m``, exact (docs/defects.md, ``int_range``)."""
    x = torch.arange(-300, 300)
    assert_differs((x.to(dml_device) // 7).cpu(), x // 7)                 # the defect, raw
    dmlshim.activate(fallback="known")
    dmlshim.trace.reset()

    def work(d):
        y = x.to(d)
        small = torch.tensor([0, 1, 2, 200, 255], dtype=torch.uint8).to(d)
        narrow = torch.tensor([-60, -49, 0, 49, 60], dtype=torch.int8).to(d)
        return (*(y // n for n in (1, 3, 7, 41, 97, 128, 1000)), torch.div(y, 41, rounding_mode="floor"),
                torch.floor_divide(y, torch.tensor(7)), y.int() // 13, small // 3, narrow // 7, y[:4] // 2 + 1)

    got = work(dml_device)
    assert host_reads() == {}
    assert_parity(got, work(torch.device("cpu")))
    dmlshim.trace.reset()
    near = torch.tensor([-128, -1, 127], dtype=torch.int8)
    assert_parity((near.to(dml_device) // 7).cpu(), near // 7)           # shifted past int8: the CPU
    y = x.to(dml_device)
    y //= 7                                                            # in place: the CPU, as before
    assert_parity(y.cpu(), x // 7)
    assert set(host_reads()) == {"aten::floor_divide", "aten::floor_divide_.Tensor"}


def test_a_float_derived_length_compared_with_a_known_range_reads_nothing(dml_device, shim_off, host_reads,
                                                                          assert_parity, assert_differs):
    """An int64 cast from floats has no span (SeACo-Paraformer's ``token_num.round().long()``);
    its comparison with a number or an ``arange`` runs as a float32 comparison on the device,
    exact where the known side lies within 2**24 (the int64 -> float32 cast reads all 64 bits,
    the int64 comparison 32: docs/defects.md, ``int_range``).  Neither side known: one read,
    as before."""
    lengths = torch.tensor([0.0, 0.4, 1.6, 7.0, -7.0, 2.0**31, 3e9, -5e9, 2.0**24 + 3])

    def work(d):
        x = (lengths.to(d) * 1.0).round().long()               # cast on the device: no span kept
        steps = torch.arange(8, device=d)
        return (x < 1, x <= -7, x > 2**24 - 1, x >= torch.tensor(7, device=d),
                steps[None, :] < x[:, None], x[:, None] >= steps[None, :])

    cpu = work(torch.device("cpu"))
    assert_differs(work(dml_device)[0].cpu(), cpu[0])          # 2**31 and 3e9 read by 32 bits, raw
    dmlshim.activate(fallback="known")
    dmlshim.trace.reset()
    got = work(dml_device)
    assert host_reads() == {}
    assert_parity(got, cpu)
    x, y = (lengths.to(dml_device) * 1.0).round().long(), lengths.round().long()
    assert_parity((x < x.flip(0)).cpu(), y < y.flip(0))
    assert set(host_reads()) == {"aten::lt.Tensor"}            # two unknown sides: read, then the CPU


def test_x_setitem_into_any_integer_tensor_keeps_its_range(dml_device, shim_off, range_reads, assert_parity):
    """``x[x < 0] = 0`` into an int32 tensor: its range the union of its own and the value's,
    kept once the version settles (Fun-ASR-Nano's ``fake_token_len``, then
    ``fbank_beg_idx + speech_token_len``); a value past the exact span is kept too, so the
    next call leaving it (``wide * 64``) multiplies by the number as a device tensor, with
    int32's wrap (:func:`test_a_number_with_an_unknown_range_reads_nothing`)."""
    dmlshim.activate(fallback="known")

    def work(d):
        lens = torch.tensor([[3, -1, 5]], dtype=torch.int32).to(d)
        lens[lens < 0] = 0
        token_len = lens[0, 2]
        wide = torch.tensor([1, 2], dtype=torch.int32).to(d)
        wide[1] = 2 ** 30
        return 7 + token_len, lens - 1, wide * 64

    dmlshim.trace.reset()
    got = work(dml_device)
    assert range_reads() == {}
    assert_parity(got, work(torch.device("cpu")))


def test_pack_padded_sequence_reads_nothing(dml_device, shim_off, host_reads, assert_parity):
    """``pack_padded_sequence(enforce_sorted=False)``'s ``invert_permutation``: ``scatter_`` of
    an ``arange`` into ``torch.empty_like(...)``, uninitialized memory whose 32 bits change
    no value the model may rely on, so it is not measured (SeACo-Paraformer's hotwords read
    it twice and sent it to the CPU).  A tensor written since is measured again."""
    dmlshim.activate(fallback="known")

    x = torch.randn(3, 5, 4)

    def work(d):
        packed = torch.nn.utils.rnn.pack_padded_sequence(x.to(d), torch.tensor([3, 5, 2]), batch_first=True,
                                                         enforce_sorted=False)
        return packed.data, packed.sorted_indices, packed.unsorted_indices

    dmlshim.trace.reset()
    got = work(dml_device)
    assert host_reads() == {}
    assert_parity(got, work(torch.device("cpu")))

    def written(d):
        perm = torch.tensor([2, 0, 1]).to(d)
        out = torch.empty_like(perm)
        out.fill_(2 ** 40 + 5)                  # a write: its values are the model's now
        return out.scatter_(0, perm[:2], torch.arange(2, device=d))

    assert_parity(written(dml_device), written(torch.device("cpu")))


def test_max_pool_indices_read_nothing(dml_device, shim_off, host_reads, assert_parity):
    """``max_pool2d``'s indices (GFPGAN's RetinaFace, with and without ``return_indices``; not
    ``ceil_mode``, max_pool_ceil's CPU call): the fix's ``indices - offsets`` has both spans
    from the shape, and the emulator's ``out=`` kernel writes them as the real binary's C++
    does, past dmlshim's ``Tensor.copy_`` (which took the write for the model's int64 copy and
    read its source: one ``aten::clone`` range read per call)."""
    dmlshim.activate(fallback="known")
    x = torch.randn(2, 3, 8, 8)

    def work(d):
        return (torch.nn.functional.max_pool2d(x.to(d), 2),
                *torch.nn.functional.max_pool2d(x.to(d), 3, 2, 1, return_indices=True))

    dmlshim.trace.reset()
    got = work(dml_device)
    assert host_reads() == {}
    assert_parity(got, work(torch.device("cpu")))


def _padded_ids(d):
    """Whisper's ``finalize``: ``F.pad(tokens, (0, 1), value=eot)``, pad_value's masked_fill of
    ids whose span is known."""
    return torch.nn.functional.pad(torch.tensor([[50257, 50362, 400, 2068, 7586]]).to(d), (0, 1), value=50256)


def test_a_masked_fill_of_known_ids_reads_nothing(dml_device, shim_off, host_reads, assert_parity):
    """The real binary's ``masked_fill_`` returns a new tensor, which the net's kernel copies
    into ``self`` (``copy_`` of int64: its range was read, 200 bytes in test_whisper_real);
    ``masked_fill_`` keeps its result's span, so that copy reads nothing.  A fill past 32 bits
    keeps the CPU's values (the copy reads it then)."""
    dmlshim.activate(fallback="known")
    dmlshim.trace.reset()
    got = _padded_ids(dml_device)
    assert host_reads() == {}
    assert_parity(got, _padded_ids(torch.device("cpu")))

    def past_32_bits(d):
        tokens = torch.tensor([[50257, 400, 2068]]).to(d)
        return tokens.clone().masked_fill_(tokens > 1000, 2 ** 40 + 5)

    assert_parity(past_32_bits(dml_device), past_32_bits(torch.device("cpu")))


@pytest.mark.emulated_only(reason="a rule modelling the real binary's new tensor from masked_fill_")
def test_a_rebound_masked_fill_reads_nothing(dml_device, shim_off, host_reads, assert_parity):
    """:func:`test_a_masked_fill_of_known_ids_reads_nothing` with the emulator's ``masked_fill_``
    returning a new tensor as the real binary's does (failure_modes.md #65); without the
    result's span kept, the net's write-back read it (``aten::clone``, 48 bytes)."""
    from dmlshim import emulation
    from dmlshim.emulation import _backend

    def rebound(self, mask, value):
        return _backend.run_on_cpu(aten.masked_fill.Scalar, (self, mask, value), {})

    rules = emulation.default_rules() + [emulation.Rule("masked_fill_.Scalar", replace=rebound)]
    with emulation.configured(rules=rules):
        dmlshim.activate(fallback="known")
        dmlshim.trace.reset()
        got = torch.nn.functional.pad(torch.tensor([[50257, 400]]).to(dml_device), (0, 1), value=50256)
        assert host_reads() == {}
        assert got.cpu().tolist() == [[50257, 400, 50256]]


@pytest.mark.parametrize("index", [
    (slice(None), 3), (1, slice(None)), (slice(None), -1), (0, 2), 4, -2, (Ellipsis, 2), (1, Ellipsis),
    (slice(1, None, 2), 3), (None, slice(None), 5), (slice(None), slice(2, 3)), (slice(0, 0), 1),
    (slice(None), slice(1, 5, 2)), (slice(None), 7), (Ellipsis,), slice(None)])
@pytest.mark.parametrize("make", [lambda: torch.arange(4 * 7).view(4, 7), lambda: torch.arange(60).view(6, 10)[1:5, 2:9],
                                  lambda: torch.arange(28).view(7, 4).t()], ids=["plain", "offset", "transposed"])
def test_an_index_key_is_the_views_own(shim_off, make, index):
    """``ranges.index_key`` computes ``t[index]``'s place from ``t``'s geometry, without the
    view: where it gives one, the view's own (a wrong one would keep a wrong span)."""

    t = make()
    try:
        view = t[index]
    except IndexError:
        assert ranges.index_key(t, index) is None
        return
    key = ranges.index_key(t, index)
    assert key == ranges.view_key(view)
    assert key is not None or view.numel() == 0 or sum(n > 1 for n in view.shape) > 1


def test_a_number_added_into_a_view_in_place_keeps_the_laws_way(dml_device, shim_off, host_reads,
                                                                assert_parity):
    """``x[1:] += n`` of an unknown range: a write into a view (the real binary's views read
    offset 0), so not as two tensors: the law's read, then the CPU where it leaves the span."""
    values = torch.tensor([2.0 ** 30, 2.0 ** 24 + 2, -7.0])

    def work(d):
        x = (values.to(d) * 1.0).long()
        x[1:].add_(1)
        return x

    dmlshim.activate(fallback="known")
    dmlshim.trace.reset()
    assert_parity(work(dml_device), work(torch.device("cpu")))
    assert "aten::add_.Tensor" in host_reads()


def test_a_dead_tensors_callback_drops_only_its_own_span(dml_device):
    """``ranges`` keeps no lock: a tensor's weak-reference callback, run late (on another
    thread, after its ``id`` went to a new tensor), leaves the new tensor's span alone."""
    old = torch.arange(4).to(dml_device)
    ranges.remember(old, (0, 3))
    key, (old_ref, *_) = id(old), ranges._known[id(old)]
    new = torch.arange(5).to(dml_device)
    ranges._known[key] = (weakref.ref(new), ranges._version(new), (0, 4), True)   # the id reused
    ranges._drop(ranges._known, key, old_ref)
    assert ranges._known[key][2] == (0, 4)
    ranges._drop(ranges._known, key, ranges._known[key][0])
    assert key not in ranges._known
