"""Calls the real torch-directml 0.2.5 binary refuses (dmlshim.patches.refused), the empty
results of its CPU fallback's ``out=`` (patches/fallback_out.py) and ``max_pool2d``'s
``ceil_mode`` (patches/max_pool_ceil.py), both ways.

Each group's repro calls the op as OpInfo does, through a reference taken before
``activate()`` (so ``fallback="auto"``'s Python wrappers never see it) and through a C++
composite where the measured sample did (``F.linear``, ``F.one_hot``).  Without dmlshim the
emulator's rule (``emulation/rules_refused.py``) raises the real binary's error; with it
the result equals the CPU's.  The tests without the marker run on the real device too
(``DMLSHIM_TEST_DEVICE=directml``), where ``storage_scatter`` is detected as well (the
emulator cannot model it: rules_refused.py says why).
"""
import pytest
import torch
import torch.nn.functional as F

import dmlshim
from dmlshim import catalogue, emulation, patches, probing
from dmlshim.emulation import rules, rules_refused
from dmlshim.patches import refused

CPU = torch.device("cpu")
OBSERVED = [d for d in catalogue.DEFECTS if d.found == catalogue.MEASURED]
DEFECTS = {d.name: d for d in OBSERVED}
# references bound now, before any activate(), as OpInfo's are
_mm, _addmm, _index_select, _log2, _log10, _isnan, _isinf, _sinc = (
    torch.mm, torch.addmm, torch.index_select, torch.log2, torch.log10, torch.isnan, torch.isinf, torch.sinc)
_conv3d, _conv2d, _avg_pool2d, _avg_pool3d = F.conv3d, F.conv2d, F.avg_pool2d, F.avg_pool3d
_scatter_add, _scatter, _diagonal_scatter, _slice_scatter = (
    torch.scatter_add, torch.scatter, torch.diagonal_scatter, torch.slice_scatter)
_gather, _repeat, _tile = torch.gather, torch.Tensor.repeat, torch.tile


def _ramp(*shape, dtype=torch.float32):
    return torch.arange(float(torch.Size(shape).numel())).view(shape).to(dtype)


def _storage_scatter(d):
    return (_diagonal_scatter(_ramp(3, 3).to(d), torch.ones(3).to(d)),
            _slice_scatter(_ramp(4, 3).to(d), torch.ones(1, 3).to(d), 0, 1, 2))


def _conv_refused(d):
    w = torch.full((2, 1, 1, 1, 1), 0.5)
    return (_conv3d(_ramp(1, 1, 2, 3, 3).to(d), w.to(d)),
            _conv2d(_ramp(1, 1, 3, 3, dtype=torch.int64).to(d), torch.ones(1, 1, 2, 2, dtype=torch.int64).to(d)))


def _avg_pool_refused(d):
    return (_avg_pool2d(_ramp(1, 2, 4, 4).to(d), 2, divisor_override=3),
            _avg_pool3d(_ramp(1, 1, 2, 4, 4, dtype=torch.int64).to(d), 2))


def _zero_size_refused(d):
    return (_mm(torch.ones(0, 2).to(d), torch.ones(2, 3).to(d)),
            _mm(torch.ones(2, 0).to(d), torch.ones(0, 3).to(d)),          # zeros, not empty
            F.linear(torch.ones(0, 3).to(d), torch.ones(4, 3).to(d), torch.ones(4).to(d)),
            _index_select(torch.tensor(2.5).to(d), 0, torch.tensor([0]).to(d)),
            F.adaptive_avg_pool1d(torch.ones(0, 8, 8).to(d), 5),
            _gather(_ramp(2, 3).to(d), 1, torch.zeros(2, 0, dtype=torch.int64).to(d)),
            _repeat(torch.ones(0, 3).to(d), 2, 3), _repeat(_ramp(2, 3).to(d), 0, 2),
            _tile(_ramp(2, 3).to(d), (0, 1)))


def _int_math_refused(d):
    x, b = torch.arange(1, 9).to(d), torch.tensor([True, False]).to(d)
    return _log2(x), _log10(x), _isnan(x), _isinf(b), _sinc(x)


def _scatter_partial(d):
    index = torch.tensor([[0, 1], [1, 0]]).to(d)
    z = torch.zeros(3, 2).to(d)
    inplace = torch.zeros(3, 2).to(d)
    inplace.scatter_(1, index, 2.0)
    return (_scatter_add(z, 1, index, torch.ones(2, 2).to(d)),
            _scatter(z, 1, index, torch.full((2, 2), 3.0).to(d)),
            _scatter_add(torch.zeros(2, 3).to(d), -1, index, torch.ones(2, 2).to(d)),   # dim -1
            inplace, F.one_hot(torch.tensor(2).to(d), 5))


def _fallback_out(d):
    """torch's composites over torch-directml's CPU fallback with an ``out=``; linalg.solve
    into a right-size ``out`` (the real binary: max |Δ| 5)."""
    x = _ramp(5, 4) % 7
    a, b = (_ramp(4, 4) % 5 + 6 * torch.eye(4)).to(d), (_ramp(4, 2) % 3).to(d)
    solved = torch.empty(4, 2).to(d)
    torch.linalg.solve(a, b, out=solved)
    return (torch.eye(3, 2, device=d), torch.eye(0, device=d), torch.kthvalue(x.to(d), 2, 1),
            torch.median(x.to(d), 0), torch.nanmedian(x.to(d), 1, keepdim=True),
            torch.eye(2, out=torch.empty(0, device=d)), solved, torch.linalg.solve(a, b))


def _max_pool_ceil(d):
    """``ceil_mode=True`` 2-D and 1-D pools with indices, without, and the gradient."""
    x = (_ramp(1, 2, 3, 6) * 7 % 11).to(d).requires_grad_()
    y, i = F.max_pool2d(x, 3, 2, ceil_mode=True, return_indices=True)
    y.backward(torch.linspace(-1, 1, y.numel()).view(y.shape).to(d))
    line = (_ramp(1, 2, 3) * 5 % 7).to(d)
    return (y.detach(), i, x.grad, F.max_pool2d(x.detach(), 3, 2, ceil_mode=True, dilation=(1, 2)),
            *F.max_pool1d(line, 3, 2, ceil_mode=True, return_indices=True),
            F.max_pool2d(x.detach(), 3, 2))                                   # floor mode: device


REPROS = {"max_pool_ceil": _max_pool_ceil, "fallback_out": _fallback_out, "storage_scatter": _storage_scatter, "conv_refused": _conv_refused,
          "avg_pool_refused": _avg_pool_refused, "zero_size_refused": _zero_size_refused,
          "int_math_refused": _int_math_refused, "scatter_partial": _scatter_partial}
MODELLED = sorted(set(REPROS) - {"storage_scatter"})
# defect -> the default rules that produce it (emulation/rules_refused.py, by op)
RULE_OPS = {"fallback_out": (rules_refused.FALLBACK_OUT_OPS,), "max_pool_ceil": ("max_pool2d_with_indices",),
            "conv_refused": ("convolution_overrideable",),
            "avg_pool_refused": (("avg_pool2d", "avg_pool3d"),),
            "zero_size_refused": ("mm", "addmm", "index_select", "_adaptive_avg_pool2d", "gather",
                                  "repeat"),
            "int_math_refused": (("log10", "log2", "isnan", "isinf"), "sinc"),
            "scatter_partial": (("scatter", "scatter_", "scatter_add", "scatter_add_"),)}


PATCH = {"fallback_out": "fallback_out", "max_pool_ceil": "max_pool_ceil"}     # else refused's group


def _fixed(name):
    return PATCH[name] in patches.installed() if name in PATCH else name in refused.installed()


def _rules_of(name):
    return [r for r in rules.observed_rules() if r.op in RULE_OPS[name] and "OpInfo samples" in r.source
            and "window grid" not in r.source          # adaptive_pool's (test_observed_silent.py)
            and "fractional alpha" not in r.source     # int_addmm's (test_observed_silent.py)
            and "of an empty input" not in r.source    # empty_unary's (test_observed_silent.py)
            and "output_padding" not in r.source       # conv_transpose_padding's (same)
            and "unbatched" not in r.source            # max_pool_unbatched's (test_conformance_all.py)
            and "its indices" not in r.source]         # max_pool_indices' (same)


@pytest.mark.parametrize("name", sorted(REPROS))
def test_with_the_shim_equals_cpu(dml_device, shim_off, name, assert_parity):
    """Every one is detected, on the emulator and on the real binary: a probe that stops
    detecting fails here (it used to skip)."""
    dmlshim.activate(fallback="known")
    assert probing.last().status[name] == probing.DETECTED, f"{name}: the probe no longer detects it"
    assert _fixed(name)
    assert_parity(REPROS[name](dml_device), REPROS[name](CPU))


def test_probes_pass_on_the_cpu():
    assert not any(DEFECTS[n].probe(CPU).broken for n in REPROS)


def test_every_group_has_its_defect():
    assert {f for n in REPROS for f in DEFECTS[n].fixes} == {refused.fix_name(g) for g in refused.GROUPS} | {
        "fallback_out", "max_pool_ceil"}


@pytest.mark.emulated_only(reason="injects the rules of one defect with emulation.configure()")
@pytest.mark.parametrize("name", MODELLED)
def test_rule_on_fails_raw_and_is_fixed(dml_device, shim_off, name, assert_parity, assert_differs):
    emulation.configure(rules=_rules_of(name))
    verdict = DEFECTS[name].probe(dml_device)
    assert verdict.broken
    if name == "fallback_out":
        assert verdict.figure == "shape [0], CPU [3, 3]"
        assert REPROS[name](dml_device)[0].shape == (0,)                  # silent: empty
    elif name == "max_pool_ceil":
        assert verdict.figure == "shape [1, 1, 1, 2], CPU [1, 1, 1, 3]"
        x = _ramp(1, 1, 3, 6)
        assert_differs(F.max_pool2d(x.to(dml_device), 3, 2, ceil_mode=True), F.max_pool2d(x, 3, 2, ceil_mode=True))
    else:
        assert verdict.figure.startswith("RuntimeError: ")
        with pytest.raises(RuntimeError):
            REPROS[name](dml_device)
    dmlshim.activate(fallback="known")
    assert [d for d, s in probing.last().status.items() if s == probing.DETECTED] == [name]
    assert _fixed(name) and refused.installed() == ([] if name in PATCH else [name])
    assert_parity(REPROS[name](dml_device), REPROS[name](CPU))
    assert DEFECTS[name].probe(dml_device).broken                       # probes see the raw device


@pytest.mark.emulated_only(reason="removes one defect's rules with emulation.configure()")
@pytest.mark.parametrize("name", MODELLED)
def test_rule_off_probe_passes_and_no_fix(dml_device, shim_off, name, assert_parity):
    emulation.configure(rules=[r for r in rules.default_rules() if r not in _rules_of(name)])
    dmlshim.activate(fallback="known")
    assert probing.last().status[name] == probing.NOT_DETECTED
    assert not _fixed(name)
    assert_parity(REPROS[name](dml_device), REPROS[name](CPU))


@pytest.mark.parametrize("fallback", ["known", "auto"])
def test_cpu_errors_stay_the_cpus(dml_device, shim_off, fallback):
    """A call the CPU refuses too raises the CPU's error, not DirectML's, from the one CPU retry
    (``fallback.cpu_retry``): marked handled, so auto's wrapper above neither retries it on the
    CPU again nor remembers the op as one DirectML fails."""
    dmlshim.activate(fallback=fallback)
    with pytest.raises(RuntimeError, match="cannot be multiplied") as caught:
        _mm(torch.ones(0, 2).to(dml_device), torch.ones(3, 3).to(dml_device))
    assert caught.value._dmlshim_handled and caught.value.__cause__ is not None
    assert "torch.mm" not in dmlshim.patches.auto.failures()


def test_a_working_call_stays_on_the_device(dml_device, shim_off, host_reads, assert_parity):
    dmlshim.activate(fallback="known")
    dmlshim.trace.reset()
    x = _ramp(2, 3).to(dml_device)
    got = _mm(x, x.t())
    assert host_reads() == {}
    assert_parity(got, _mm(_ramp(2, 3), _ramp(2, 3).t()))


@pytest.mark.emulated_only(reason="counts native calls with emulation.records()")
def test_a_working_call_runs_the_devices_kernel(dml_device, shim_off):
    dmlshim.activate(fallback="known")
    emulation.reset_records()
    x = _ramp(2, 3).to(dml_device)
    _mm(x, x.t())
    assert emulation.records()["mm"]["native"] == 1
