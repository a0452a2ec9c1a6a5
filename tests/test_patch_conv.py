"""conv patch: bool/integer input to conv1d/2d/3d (safety net; the real fix is mul)."""
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings, strategies as st

import dmlshim


def _inputs(n, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, 3, (2, 4) + (5,) * n, generator=g).to(dtype)
    w = torch.randn((3, 4) + (2,) * n, generator=g)
    return x, w


# names are looked up at call time: the shim patches the module attributes
ENTRY = [("F", n) for n in (1, 2, 3)] + [("torch", n) for n in (1, 2, 3)]


def _fn(owner, n):
    return getattr(F if owner == "F" else torch, f"conv{n}d")


def test_without_shim_bool_input_fails(dml_device):
    dmlshim.deactivate()
    x, w = _inputs(1, torch.bool)
    with pytest.raises(RuntimeError):
        F.conv1d(x.to(dml_device), w.to(dml_device))


@pytest.mark.parametrize("owner, n", ENTRY)
@pytest.mark.parametrize("dtype", [torch.bool, torch.int64, torch.uint8])
def test_with_shim_equals_cpu_on_cast_input(shim, dml_device, owner, n, dtype, assert_parity):
    x, w = _inputs(n, dtype)
    expected = _fn(owner, n)(x.float(), w, padding=1)
    got = _fn(owner, n)(x.to(dml_device), w.to(dml_device), padding=1)
    assert got.device == dml_device
    assert_parity(got.cpu(), expected)
    assert {r["op"]: r for r in dmlshim.report().rows}[f"{owner}.conv{n}d"]["actions"] == {"coerce": 1}


def test_module_and_kwargs_and_float_input_untouched(shim, dml_device, assert_parity):
    conv = torch.nn.Conv1d(4, 3, 3, padding=1)
    x, _ = _inputs(1, torch.bool)
    expected = conv(x.float())
    conv_d = torch.nn.Conv1d(4, 3, 3, padding=1)
    conv_d.load_state_dict(conv.state_dict())
    conv_d.to(dml_device)
    assert_parity(conv_d(x.to(dml_device)).cpu(), expected)
    assert_parity(F.conv1d(input=x.to(dml_device), weight=conv_d.weight).cpu(),
                  F.conv1d(x.float(), conv.weight))
    dmlshim.trace.reset()
    conv_d(x.float().to(dml_device))                       # float input: fast path, not counted
    assert dmlshim.report().rows == []


def test_autograd_to_weight(shim, dml_device, assert_parity):
    x, w = _inputs(2, torch.bool)
    wd = w.to(dml_device).requires_grad_()
    wc = w.clone().requires_grad_()
    F.conv2d(x.to(dml_device), wd).square().sum().backward()
    F.conv2d(x.float(), wc).square().sum().backward()
    assert_parity(wd.grad.cpu(), wc.grad)


@settings(max_examples=30, deadline=None)
@given(n=st.integers(1, 3), length=st.integers(0, 6), groups=st.sampled_from([1, 2]),
       stride=st.integers(1, 2), padding=st.integers(0, 2),
       dtype=st.sampled_from([torch.bool, torch.int32, torch.float32]), seed=st.integers(0, 2**16))
def test_property_conv_equals_cpu(dml_device, n, length, groups, stride, padding, dtype, seed, assert_parity):
    dmlshim.deactivate()
    dmlshim.activate(fallback="known", trace=0)
    try:
        g = torch.Generator().manual_seed(seed)
        x = (torch.randn((1, 4) + (length,) * n, generator=g) > 0).to(dtype)
        w = torch.randn((2, 4 // groups) + (2,) * n, generator=g)
        fn = getattr(F, f"conv{n}d")
        try:
            expected = fn(x.float(), w, stride=stride, padding=padding, groups=groups)
        except RuntimeError:                                   # too small for the kernel
            with pytest.raises(RuntimeError):
                fn(x.to(dml_device), w.to(dml_device), stride=stride, padding=padding, groups=groups)
            return
        got = fn(x.to(dml_device), w.to(dml_device), stride=stride, padding=padding, groups=groups)
        assert_parity(got.cpu(), expected)
    finally:
        dmlshim.deactivate()
