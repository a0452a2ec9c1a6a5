"""The CPU fallback engine (CPUFallback.cpp checklist) and the re-entrancy guard."""
import pytest
import torch

import dmlshim
from dmlshim import fallback, trace



@pytest.fixture
def counted():
    """Run the engine inside a counted call so bytes moved show in the stats."""
    trace.reset()

    def run(func, args, kwargs=None, **options):
        return trace.call("test.op", lambda f, a, k: ("cpu", fallback.run_on_cpu(f, a, k, **options)),
                          func, args, kwargs or {})
    yield run
    trace.reset()


def test_nested_lists_move_in_one_go_and_come_back(dml_device, counted, assert_parity):
    xs = [torch.randn(2, 3), torch.randn(4, 3)]
    xd = [x.to(dml_device) for x in xs]
    got = counted(torch.cat, ([xd[0], xd[1], xd[0]],))
    assert got.device == dml_device
    assert_parity(got.cpu(), torch.cat([xs[0], xs[1], xs[0]]))
    row = dmlshim.report().rows[0]
    assert row["d2h"] == (6 + 12) * 4                       # xd[0] passed twice, copied once
    assert row["h2d"] == 24 * 4


def test_device_of_first_target_tensor(dml_device):
    assert fallback.device_of((1, [torch.zeros(1), torch.zeros(1).to(dml_device)]), {}) == dml_device
    assert fallback.device_of((torch.zeros(1),), {"x": [torch.zeros(1)]}) is None


def test_inplace_writes_back_and_returns_the_original(dml_device, counted, assert_parity):
    x = torch.randn(3)
    xd = x.to(dml_device)
    got = counted(torch.Tensor.add_, (xd, torch.ones(3).to(dml_device)))
    assert got is xd
    assert_parity(xd.cpu(), x + 1)


def test_out_argument_is_resized_and_written_back(dml_device, counted, assert_parity):
    a, b = torch.randn(2, 2), torch.randn(2, 2)
    out = torch.empty(0).to(dml_device)
    got = counted(torch.add, (a.to(dml_device), b.to(dml_device)), {"out": out})
    assert got is out and out.shape == (2, 2)
    assert_parity(out.cpu(), a + b)


def test_views_are_refused(dml_device, counted):
    xd = torch.randn(4, 4).to(dml_device)
    with pytest.raises(RuntimeError, match="view op"):
        counted(torch.Tensor.transpose, (xd, 0, 1))


def test_cpu_arguments_stay_on_cpu_and_scalars_pass(dml_device, counted, assert_parity):
    idx = torch.tensor([0, 2])
    got = counted(lambda x, i, k: (x[i] * k, i), (torch.arange(4.0).to(dml_device), idx, 3))
    assert got[0].device == dml_device and got[1] is idx
    assert_parity(got[0].cpu(), torch.tensor([0.0, 6.0]))


def test_dtype_map_on_results(dml_device, counted, assert_parity):
    x = torch.rand(5)
    got = counted(torch.cumsum, (x.to(dml_device), 0), {"dtype": torch.float64},
                  dtype_map={torch.float64: torch.float32})
    assert got.dtype == torch.float32
    assert_parity(got.cpu(), torch.cumsum(x, 0, dtype=torch.float64).float())


def test_autograd_flows_through(dml_device, counted, assert_parity):
    x = torch.randn(3, 4)
    xd = x.to(dml_device).requires_grad_()
    xc = x.clone().requires_grad_()
    counted(torch.Tensor.sin, (xd,)).sum().backward()
    xc.sin().sum().backward()
    assert xd.grad.device == dml_device
    assert_parity(xd.grad.cpu(), xc.grad)


def test_guard_makes_wrappers_transparent(dml_device):
    dmlshim.activate(fallback="known", trace=0)
    try:
        trace.reset()
        x, e = torch.ones(2, 3).to(dml_device), torch.zeros(0, 3).to(dml_device)
        with fallback.guard():
            assert fallback.busy()
            # cat's BackendSelect fix (patches/cat.py) drops the empty input of the shim's
            # own calls too
            assert torch.cat([x, e]).shape == (2, 3)
        assert {r["op"] for r in dmlshim.report().rows} == {"aten::cat"}
        assert not fallback.busy()
        assert torch.cat([x, e]).shape == (2, 3)
        assert [r["calls"] for r in dmlshim.report().rows if r["op"] == "aten::cat"] == [2]
    finally:
        dmlshim.deactivate()


def test_guard_is_per_thread():
    import threading
    seen = []
    with fallback.guard():
        t = threading.Thread(target=lambda: seen.append(fallback.busy()))
        t.start()
        t.join()
    assert seen == [False]


@pytest.mark.parametrize("inference_input", [False, True])
def test_inplace_and_out_write_back_in_inference_mode(dml_device, counted, inference_input, assert_parity):
    # Inference tensors have no version counter: the CPU copies must be normal tensors.
    x = torch.randn(4)
    with torch.inference_mode():
        xd = x.to(dml_device) if inference_input else None
    if xd is None:
        xd = x.to(dml_device)
    out = torch.empty(0, device=dml_device)
    with torch.inference_mode():
        got = counted(torch.Tensor.add_, (xd, 1.0))
        counted(torch.mul, (xd, 2.0), {"out": out})
    assert got is xd
    assert_parity(xd.cpu(), x + 1.0)
    assert_parity(out.cpu(), (x + 1.0) * 2.0)


def test_copy_all_copies_as_to_does(shim, dml_device, assert_same):
    """``copy_all``: each tensor copied as ``.to(device)`` copies it (values, dtype, bytes),
    and autograd records the copies both ways."""
    x, h = torch.randn(3, 4), torch.randn(2).half()
    leaf = x.clone().requires_grad_()
    moved = [leaf.to(dml_device), h.to(dml_device)]
    assert fallback.copy_all(moved, torch.device("cpu")) == 12 * 4 + 2 * 2
    assert [t.device.type for t in moved] == ["cpu", "cpu"]
    assert_same(moved[0].detach(), x)
    assert_same(moved[1], h)
    back = [moved[0] * 2]
    assert fallback.copy_all(back, dml_device) == 12 * 4
    assert back[0].device == dml_device and back[0].requires_grad
    back[0].sum().backward()
    assert_same(leaf.grad, torch.full((3, 4), 2.0))


def test_copy_all_in_no_grad_and_inference_mode(shim, dml_device):
    xd = torch.randn(3, requires_grad=True).to(dml_device)
    with torch.no_grad():
        moved = [xd]
        fallback.copy_all(moved, torch.device("cpu"))
    assert moved[0].is_cpu and not moved[0].requires_grad
    with torch.inference_mode():
        moved = [xd]
        fallback.copy_all(moved, torch.device("cpu"))
    assert moved[0].is_cpu and moved[0].is_inference()


def test_copy_all_under_a_dispatch_mode_goes_through_it(shim, dml_device):
    """A thread with a dispatch mode (or a tensor with keys of its own) gets ``.to()``: the
    mode sees the copy."""
    xd = torch.randn(3).to(dml_device)
    with trace.counting() as ops:
        moved = [xd]
        fallback.copy_all(moved, torch.device("cpu"))
    assert moved[0].is_cpu and ops.device == 1


@pytest.mark.emulated_only(reason="counts the emulated device's path: its kernels are left out of the count")
def test_copy_all_runs_no_other_python_of_dmlshim(shim, dml_device):
    """The copies skip ``Tensor.to``'s wrapper and the ``_to_copy`` kernel at BackendSelect
    (which pass the shim's copies by): one Python call of dmlshim for them all."""
    import os
    import sys
    root = os.path.dirname(dmlshim.__file__)
    emulator = os.path.join(root, "emulation")
    tensors = [torch.randn(2, 3).to(dml_device) for _ in range(3)]
    calls = []

    def profile(frame, event, arg):
        f = frame
        while event == "call" and f is not None:
            if f.f_code.co_filename.startswith(emulator):
                return
            f = f.f_back
        if event == "call" and frame.f_code.co_filename.startswith(root):
            calls.append(frame.f_code.co_name)

    fallback.copy_all(list(tensors), torch.device("cpu"))          # warm-up
    sys.setprofile(profile)
    try:
        moved = list(tensors)
        fallback.copy_all(moved, torch.device("cpu"))
        fallback.copy_all(moved, dml_device)
    finally:
        sys.setprofile(None)
    assert calls == ["copy_all", "copy_all"]
    assert all(t.device == dml_device for t in moved)
