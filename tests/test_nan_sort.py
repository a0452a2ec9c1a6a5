"""nan_sort (issue 50, item 2): sort/argsort/msort/topk of a float tensor holding NaN, and
log_softmax of a slice holding NaN or +inf, both ways: without dmlshim the real binary's answer
(the emulator's rule reproduces it), with it the CPU's.  Runs on the real lane too
(DMLSHIM_TEST_DEVICE=directml)."""
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dmlshim
from dmlshim import emulation, patches, probing
from dmlshim.emulation import rules, rules_refused
from dmlshim.laws import nan as nan_law

CPU = torch.device("cpu")
NAN, INF = float("nan"), float("inf")
ROW = [3.0, NAN, 1.0, INF, 2.0, NAN, -INF, 1.0, 0.0]
GRID = [[3.0, NAN, 1.0], [NAN, 2.0, INF], [1.0, 1.0, NAN], [0.0, -1.0, 5.0], [INF, -INF, 2.0]]


def _sorts(d, dtype=torch.float32):
    """sort ascending/descending, stable, of a row with NaN, +-inf and a repeated value; argsort,
    msort; a grid along each dim; the out= form; an integer sort (not touched)."""
    x, m = torch.tensor(ROW, dtype=dtype).to(d), torch.tensor(GRID, dtype=dtype).to(d)
    values, indices = torch.empty(0, dtype=dtype).to(d), torch.empty(0, dtype=torch.int64).to(d)
    torch.sort(x, descending=True, out=(values, indices))
    return (torch.sort(x), torch.sort(x, descending=True), torch.sort(x, stable=True),
            torch.sort(x, stable=True, descending=True), torch.argsort(x), torch.argsort(x, descending=True),
            torch.msort(m), torch.sort(m, 0), torch.sort(m, 1), torch.sort(m, 1, descending=True),
            torch.sort(m.t(), dim=0, stable=True), values, indices, torch.sort(torch.tensor([3, 1, 2, 1]).to(d)))


def _topks(d, dtype=torch.float32):
    """topk largest/smallest (sorted or not) of a row with NaN and no repeated value, along
    each dim of a grid; the out= form.  Indices compare where the CPU's order is unique."""
    x, m = torch.tensor([3.0, NAN, 1.0, INF, 2.0, -INF, 0.0], dtype=dtype).to(d), torch.tensor(GRID, dtype=dtype).to(d)
    values, indices = torch.empty(0, dtype=dtype).to(d), torch.empty(0, dtype=torch.int64).to(d)
    torch.topk(x, 3, out=(values, indices))
    return (torch.topk(x, 3), torch.topk(x, 1), torch.topk(x, 7), torch.topk(x, 3, largest=False),
            torch.topk(x, 7, largest=False), torch.topk(x, 2, sorted=False).values.sort().values,
            torch.topk(m[:, :2], 2, 1), torch.topk(m[3:], 2, 0, largest=False), values, indices)


def _log_softmaxes(d, dtype=torch.float32):
    """log_softmax along each dim of a grid with NaN, +inf and -inf; float16 to float32."""
    m = torch.tensor(GRID + [[-INF, -INF, -INF], [-INF, 0.0, 1.0]], dtype=dtype).to(d)
    return (torch.log_softmax(m, 1), torch.log_softmax(m, 0), torch.log_softmax(m[3:4], 1),
            torch.nn.functional.log_softmax(m, -1, dtype=torch.float32),
            torch.nn.functional.cross_entropy(m[:4].float(), torch.tensor([0, 1, 2, 0]).to(d), reduction="none"))


# ------------------------------------------------------------ raw: the defect
def test_sort_and_topk_place_nan_among_the_values_raw(dml_device, shim_off, assert_same):
    """Without dmlshim: the binary's merge sort takes a NaN for the smallest and the largest
    value at once (laws.nan.merged_order)."""
    x = torch.tensor([0.0, 1.0, NAN]).to(dml_device)
    assert_same(torch.sort(x).indices.cpu(), torch.tensor([2, 0, 1]))
    assert_same(torch.argsort(x, descending=True).cpu(), torch.tensor([2, 1, 0]))
    row = torch.tensor(ROW).to(dml_device)
    assert_same(torch.sort(row).indices.cpu(), torch.tensor(nan_law.merged_order(ROW, False)))
    assert_same(torch.topk(row, 3).indices.cpu(), torch.tensor([3, 2, 7]))        # the CPU: NaN, NaN, inf
    half = torch.tensor(ROW, dtype=torch.float16).to(dml_device)
    assert_same(torch.sort(half, descending=True).indices.cpu(), torch.tensor(nan_law.merged_order(ROW, True)))


def test_log_softmax_of_a_slice_with_nan_has_values_raw(dml_device, shim_off):
    """Without dmlshim: a slice holding NaN gives x - max + 46.05 elsewhere (the CPU: NaN
    throughout), one holding +inf -inf; a clean slice is right."""
    out = torch.log_softmax(torch.tensor([[3.0, NAN, 1.0], [1.0, INF, 2.0], [0.0, -1.0, 5.0]]).to(dml_device), 1).cpu()
    assert torch.isnan(out[0, 1]) and abs(out[0, 0].item() - 46.0517) < 1e-2 and abs(out[0, 2].item() - 44.0517) < 1e-2
    assert out[1, 0].item() == -INF and torch.isnan(out[1, 1])
    assert not torch.isnan(out[2]).any()


def test_merged_order_is_a_stable_sort_without_nan():
    """The law: without NaN the binary's merge sort is the CPU's stable sort."""
    values = [3.0, 1.0, 2.0, 1.0, -INF, INF, 0.0, 2.0, -0.0]
    for descending in (False, True):
        want = torch.sort(torch.tensor(values), stable=True, descending=descending).indices.tolist()
        assert nan_law.merged_order(values, descending) == want


# ------------------------------------------------------------ with dmlshim: the CPU's answer
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_sorts_with_nan_with_the_shim_equal_cpu(dml_device, shim_off, assert_parity, dtype, host_reads):
    dmlshim.activate(fallback="known")
    assert probing.last().status["nan_sort"] == probing.DETECTED
    assert "nan_sort" in patches.installed()
    host_reads()
    got = _sorts(dml_device, dtype)
    assert host_reads() == {}                      # on the device, nothing read
    assert_parity(got, _sorts(CPU, dtype))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_topk_with_nan_with_the_shim_equals_cpu(dml_device, shim_off, assert_parity, dtype):
    dmlshim.activate(fallback="known")
    assert_parity(_topks(dml_device, dtype), _topks(CPU, dtype))


def test_topk_of_repeated_values_and_nans_gives_the_cpus_values(dml_device, shim_off, assert_parity, assert_same):
    """Equal values (NaN among them): the CPU's topk orders them as its kernel happens to; the
    fix gives the CPU's values (NaN above +inf), distinct indices that select them."""
    dmlshim.activate(fallback="known")
    x = torch.tensor(ROW)
    for k, largest in ((3, True), (8, False), (9, True), (5, False)):
        values, indices = torch.topk(x.to(dml_device), k, largest=largest)
        assert_parity(values, torch.topk(x, k, largest=largest).values)
        assert_same(x[indices.cpu()], values.cpu())
        assert len(set(indices.cpu().tolist())) == k


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_log_softmax_with_nan_with_the_shim_equals_cpu(dml_device, shim_off, assert_parity, dtype, host_reads):
    dmlshim.activate(fallback="known")
    host_reads()
    got = _log_softmaxes(dml_device, dtype)
    assert host_reads() == {}
    assert_parity(got, _log_softmaxes(CPU, dtype))


def _gradients(d):
    """Gradients through sort's and topk's values and through log_softmax, NaN in the input."""
    grads = []
    for f in (lambda t: torch.sort(t, 1).values, lambda t: torch.sort(t, 0, descending=True).values,
              lambda t: torch.topk(t, 2, 1).values, lambda t: torch.log_softmax(t, 1)):
        x = torch.tensor(GRID).to(d).requires_grad_()
        y = f(x)
        weight = torch.arange(float(y.numel())).view(y.shape).to(d)
        product = y * weight
        torch.where(torch.isfinite(product), product, 0.0).sum().backward()
        grads.append(x.grad)
    return grads


def test_gradients_through_sort_topk_and_log_softmax_equal_cpu(dml_device, shim_off, assert_parity):
    dmlshim.activate(fallback="known")
    assert_parity(_gradients(dml_device), _gradients(CPU))


def test_six_dimensions_with_nan_with_the_shim_equal_cpu(dml_device, shim_off, assert_parity):
    """rank_limit flattens a 6-D sort first (the kernel would end the process), then this fix."""
    dmlshim.activate(fallback="known")
    x = torch.arange(24.0).view(2, 1, 2, 3, 1, 2).flip(-3)
    x[0, 0, 1, 1, 0, 0], x[1, 0, 0, 2, 0, 1] = NAN, NAN
    assert_parity(torch.sort(x.to(dml_device), 3), torch.sort(x, 3))
    assert_parity(torch.topk(x.to(dml_device), 2, 3), torch.topk(x, 2, 3))


_VALUES = st.sampled_from([NAN, NAN, INF, -INF, 0.0, -0.0, 1.0, 2.0, -1.5, 7.0])


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=st.integers(1, 3), row=st.lists(_VALUES, min_size=2, max_size=40), descending=st.booleans(),
       half=st.booleans(), k=st.integers(1, 40))
def test_random_nan_placements_sort_as_the_cpu(dml_device, shim_off, assert_parity, assert_same, rows, row,
                                               descending, half, k):
    dmlshim.activate(fallback="known")
    x = torch.tensor([row[i:] + row[:i] for i in range(rows)], dtype=torch.float16 if half else torch.float32)
    assert_parity(torch.sort(x.to(dml_device), stable=True, descending=descending),
                  torch.sort(x, stable=True, descending=descending))
    assert_parity(torch.sort(x.t().to(dml_device), dim=0, stable=True, descending=descending),
                  torch.sort(x.t(), dim=0, stable=True, descending=descending))
    k = min(k, len(row))
    assert_parity(torch.topk(x.to(dml_device), k, largest=descending).values,
                  torch.topk(x, k, largest=descending).values)
    assert_parity(torch.log_softmax(x.to(dml_device), 1), torch.log_softmax(x, 1))


# ------------------------------------------------------------ the probe: on only where the defect is
@pytest.mark.emulated_only(reason="turns the defect's emulator rules off (emulation.configure)")
def test_without_the_rules_nan_sort_is_not_detected_nor_installed(dml_device, shim_off, assert_parity):
    ours = (rules_refused._nan_sorted, rules_refused._nan_log_softmax)
    emulation.configure(rules=[r for r in rules.default_rules() if r.bind not in ours])
    x = torch.tensor(ROW)
    assert_parity(torch.sort(x.to(dml_device)), torch.sort(x))          # a device without the defect
    dmlshim.activate(fallback="known")
    assert probing.last().status["nan_sort"] == probing.NOT_DETECTED
    assert "nan_sort" not in patches.installed()
    assert_parity(torch.sort(x.to(dml_device)), torch.sort(x))
