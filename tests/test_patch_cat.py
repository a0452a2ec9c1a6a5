"""cat patch: an empty input fails on DirectML (failure_modes.md #19, #20)."""
import pytest
import torch
from hypothesis import given, settings, strategies as st

import dmlshim
from dmlshim import errors


def _row(op):
    return {r["op"]: r for r in dmlshim.report().rows}[op]


NAMES = ["cat", "concat", "concatenate"]       # looked up at call time: the shim patches them


@pytest.mark.parametrize("name", NAMES)
def test_without_shim_empty_input_fails(dml_device, name):
    dmlshim.deactivate()
    fn = getattr(torch, name)
    a, e = torch.randn(43, 512).to(dml_device), torch.zeros(0, 512).to(dml_device)
    with pytest.raises(RuntimeError) as info:        # E_INVALIDARG: Windows' text, or Linux's
        fn([a, e])
    assert errors.recognise(str(info.value)) is errors.E_INVALIDARG


def test_without_shim_only_empty_beside_data_fails(dml_device, assert_parity):
    """As on the real binary: all-empty inputs and a legacy (0,) input concatenate."""
    dmlshim.deactivate()
    e, a = torch.zeros(0, 3), torch.ones(2, 3)
    assert_parity(torch.stack([e.to(dml_device), e.to(dml_device)]).cpu(), torch.stack([e, e]))
    assert_parity(torch.cat([a.to(dml_device), torch.zeros(0).to(dml_device)]).cpu(), a)
    with pytest.raises(RuntimeError) as info:
        torch.cat([e.to(dml_device), a.to(dml_device)])
    assert errors.recognise(str(info.value)) is errors.E_INVALIDARG


@pytest.mark.parametrize("name", NAMES)
def test_funasr_cif_case_stays_on_device(shim, dml_device, name, assert_parity):
    fn = getattr(torch, name)
    a, e = torch.randn(43, 512), torch.zeros(0, 512)
    got = fn([a.to(dml_device), e.to(dml_device)])
    assert got.device == dml_device
    assert_parity(got.cpu(), torch.cat([a, e]))
    row = _row("aten::cat")                         # one fix, at BackendSelect, for every name
    assert row["actions"] == {"coerce": 1} and row["h2d"] == row["d2h"] == 0


@pytest.mark.parametrize("case", [
    "promotion", "legacy 1-d empty", "all empty", "dim=1", "negative dim", "kwargs", "stack empties",
])
def test_results_equal_cpu(shim, dml_device, case, assert_parity):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(2, 3, generator=g)
    calls = {
        "promotion": lambda d: torch.cat([d(x.half()), d(torch.zeros(0, 3))]),        # f16 + empty f32 -> f32
        "legacy 1-d empty": lambda d: torch.cat([d(x), d(torch.zeros(0)), d(x)]),
        "all empty": lambda d: torch.cat([d(torch.zeros(0, 3)), d(torch.zeros(0, 3, dtype=torch.int64))]),
        "dim=1": lambda d: torch.cat([d(torch.zeros(2, 0)), d(x), d(x)], dim=1),
        "negative dim": lambda d: torch.cat((d(x), d(torch.zeros(2, 0))), -1),
        "kwargs": lambda d: torch.cat(tensors=[d(x), d(torch.zeros(0, 3))], dim=0),
        "stack empties": lambda d: torch.stack([d(torch.zeros(0, 3)), d(torch.zeros(0, 3))], 1),
    }
    expected = calls[case](lambda t: t)
    got = calls[case](lambda t: t.to(dml_device))
    assert got.device == dml_device
    assert_parity(got.cpu(), expected)


def test_bad_input_raises_what_cpu_raises(shim, dml_device):
    with pytest.raises(RuntimeError, match="Sizes of tensors must match"):
        torch.cat([torch.zeros(2, 3).to(dml_device), torch.zeros(0, 4).to(dml_device), torch.zeros(2, 4).to(dml_device)])


def test_out_argument_is_retried_on_the_cpu(default_shim, dml_device, assert_parity):
    """cat.out is not held (the real binary's cat reaches it with an empty out: the gate would
    send every device cat to Python): auto's CPU retry writes ``out``."""
    x = torch.randn(2, 3)
    out = torch.empty(0).to(dml_device)
    with pytest.warns(UserWarning):                 # auto's DirectMLFallbackWarning
        result = torch.cat([x.to(dml_device), torch.zeros(0, 3).to(dml_device)], out=out)
    assert result is out and out.device == dml_device
    assert_parity(out.cpu(), x)


def test_autograd_through_cat(shim, dml_device, assert_parity):
    x = torch.randn(2, 3)
    xd = x.to(dml_device).requires_grad_()
    ed = torch.zeros(0, 3).to(dml_device).requires_grad_()   # below autograd: its empty gradient
    xc, ec = x.clone().requires_grad_(), torch.zeros(0, 3, requires_grad=True)
    (torch.cat([xd, ed]) * 3).sum().backward()
    (torch.cat([xc, ec]) * 3).sum().backward()
    assert_parity(xd.grad.cpu(), xc.grad)
    assert ed.grad is not None and ed.grad.shape == ec.grad.shape
    yd = x.to(dml_device).requires_grad_()
    (torch.cat([yd, torch.zeros(0, 3).to(dml_device)]) * 3).sum().backward()  # empty needs no grad: stays
    assert_parity(yd.grad.cpu(), xc.grad)


DTYPES = st.sampled_from([torch.float32, torch.float16, torch.int64, torch.bool])


@settings(max_examples=50, deadline=None)
@given(sizes=st.lists(st.integers(0, 3), min_size=1, max_size=4),
       other=st.lists(st.integers(0, 3), min_size=1, max_size=2),
       dim_pos=st.integers(0, 2), dtypes=st.lists(DTYPES, min_size=4, max_size=4),
       stack=st.booleans(), seed=st.integers(0, 2**16))
def test_property_cat_and_stack_equal_cpu(dml_device, sizes, other, dim_pos, dtypes, stack, seed, assert_parity):
    """Random sizes along the cat dim (0 included), other dims (0 included), dtypes."""
    dmlshim.deactivate()
    dmlshim.activate(fallback="known", trace=0)
    try:
        g = torch.Generator().manual_seed(seed)
        dim = min(dim_pos, len(other))
        shapes = [other[:dim] + [n if not stack else other[0]] + other[dim:] for n in sizes]
        xs = [(torch.randn(s, generator=g) * 5).to(dt) for s, dt in zip(shapes, dtypes)]
        fn = torch.stack if stack else torch.cat
        try:
            expected = fn(xs, dim)
        except RuntimeError as exc:                       # CPU refuses: so must the shim
            with pytest.raises(RuntimeError):
                fn([x.to(dml_device) for x in xs], dim)
            return
        if any(x.numel() == 0 for x in xs) or expected.numel() == 0:
            got = fn([x.to(dml_device) for x in xs], dim)
            assert_parity(got.cpu(), expected)
    finally:
        dmlshim.deactivate()
