"""Fixes that recompute a float16 op keep PyTorch's opmath (``dmlshim/patches/_opmath.py``).

PyTorch's float16 kernels compute in float32 and round once; a fix that chained its device
ops in float16 would round after each (a bilinear 2x was 3x as far from float64 as the
CPU's).  Each case: the float16 result with dmlshim, on the device, is as close to the
float64 result of the same float16 inputs as the CPU's float16 result, at most and on
average, and the fix ran (``dmlshim.report()``).  Or as close as that float64 result
rounded once by the device: the real binary's lavapipe stack rounds float32 to float16
toward zero (measured: 2x the CPU's mean error for a cast, and for a float16 mul)."""
import pytest
import torch
import torch.nn.functional as F

import dmlshim

# max and mean errors may exceed the CPU's by these factors: a float32 sum in another
# order can round one element to the other neighbour (the real binary)
_MAX_SLACK, _MEAN_SLACK = 1.01, 1.05


def _input_grad(f):
    """The gradient of ``f``'s input for an upstream gradient of float16 values in [0, 30)."""
    def grad(x):
        x = x.detach().requires_grad_()
        y = f(x)
        upstream = (torch.rand(y.shape, generator=torch.Generator().manual_seed(1)) * 30).half()
        y.backward(upstream.to(x.dtype).to(x.device))
        return x.grad
    return grad


def _bilinear(x):
    return F.interpolate(x, scale_factor=2, mode="bilinear")


def _nearest(x):
    return F.interpolate(x, scale_factor=1.7, mode="nearest")


def _softplus(x):
    return F.softplus(x, beta=3)


def _norm(x):
    return torch.linalg.vector_norm(x, 3, dim=-1)


# name: (function, input shape, low, high, the aten op its fix records)
CASES = {
    "bilinear": (_bilinear, (2, 3, 17, 23), 0, 30, "aten::upsample_bilinear2d"),
    "bilinear backward": (_input_grad(_bilinear), (2, 3, 17, 23), 0, 30, "aten::upsample_bilinear2d_backward"),
    "nearest backward": (_input_grad(_nearest), (2, 3, 17, 23), 0, 30, "aten::upsample_nearest2d_backward"),
    "softplus beta": (_softplus, (64, 64), -3, 3, "aten::softplus"),
    "softplus beta backward": (_input_grad(_softplus), (64, 64), -3, 3, "aten::softplus_backward"),
    "vector_norm ord 3": (_norm, (64, 256), 0, 30, "aten::linalg_vector_norm"),
}


def _errors(t, ref):
    """(max, mean) absolute difference of ``t`` from the float64 ``ref``."""
    diff = (t.detach().cpu().double() - ref).abs()
    return diff.max().item(), diff.mean().item()


@pytest.mark.parametrize("name", sorted(CASES))
def test_float16_fix_as_close_to_float64_as_the_cpu(dml_device, shim, name):
    f, shape, low, high, op = CASES[name]
    x = (torch.rand(shape, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
         * (high - low) + low).half()
    ref = f(x.double())
    cpu = f(x)
    got = f(x.to(dml_device))
    assert (got.dtype, got.device) == (torch.float16, x.to(dml_device).device)
    once = ref.float().to(dml_device).half()              # one rounding, the device's
    (got_max, got_mean), (cpu_max, cpu_mean), (once_max, once_mean) = (
        _errors(got, ref), _errors(cpu, ref), _errors(once, ref))
    bound_max, bound_mean = max(cpu_max, once_max) * _MAX_SLACK, max(cpu_mean, once_mean) * _MEAN_SLACK
    assert got_max <= bound_max and got_mean <= bound_mean, \
        (f"{name}: max {got_max:.3g} (CPU {cpu_max:.3g}, rounded once {once_max:.3g}), "
         f"mean {got_mean:.3g} (CPU {cpu_mean:.3g}, rounded once {once_mean:.3g})")
    assert "coerce" in {a for r in dmlshim.report().rows if r["op"] == op for a in r["actions"]}, \
        f"{op}'s fix did not run"
