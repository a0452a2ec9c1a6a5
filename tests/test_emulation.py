"""The emulated DirectML device behaves like a real PrivateUse1 backend."""
import torch
from torch.testing import assert_close


def test_round_trip_and_math(dml_device):
    x = torch.arange(6.0).reshape(2, 3)
    d = x.to(dml_device)
    assert d.device.type == "privateuseone"
    assert_close((d * 2 + 1).cpu(), x * 2 + 1, rtol=0, atol=0)


def test_linear_and_conv_forward_backward(dml_device):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(2, 3, 3), torch.nn.ReLU(), torch.nn.Flatten(),
                                torch.nn.Linear(27, 4))
    x = torch.randn(2, 2, 5, 5)
    ref = model(x)
    ref.sum().backward()
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    model.to(dml_device)
    out = model(x.to(dml_device))
    out.sum().backward()
    assert_close(out.cpu(), ref, rtol=0, atol=0)
    for p, g in zip(model.parameters(), grads):
        assert isinstance(p, torch.nn.Parameter) and p.device.type == "privateuseone"
        assert_close(p.grad.cpu(), g, rtol=0, atol=0)
