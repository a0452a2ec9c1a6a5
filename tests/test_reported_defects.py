"""torch-directml 0.2.5's reported defects (failure_modes.md #41-#47), both ways.

For each: on the device with the defect (the real 0.2.5 binary, or the emulator with the
row's rule on), the probe detects it and the user-level repro of the report fails or
differs from the CPU without dmlshim, and equals the CPU with it; with the rule off, the
probe passes.  A user's own Rule that behaves like a row (pads swapped, zero nll_loss
gradients) is detected and fixed too.  The tests that turn emulator rules on or off are
``emulated_only``; the rest run on the real device too.
"""
import io
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import dmlshim
from dmlshim import catalogue, emulation
from dmlshim.emulation.rules import default_rules, unconfirmed_rules
from dmlshim.patches import _select

CPU = torch.device("cpu")
REPORTED = [d for d in catalogue.DEFECTS if d.found == catalogue.REPORTED]
DEFECTS = {d.row: d for d in REPORTED}


def _rules(without=None, extra=()):
    """Every default and unconfirmed rule, less the project's rule of row ``without``."""
    rules = default_rules() + unconfirmed_rules()
    if without is not None:
        rules = [r for r in rules if f"failure_modes.md {without};" not in r.source]
    return rules + list(extra)


# The real 0.2.5 binary normalizes strided inputs right (benchmarks/results/fidelity-defects.json):
# #45 shows on the emulator only, with its rule from unconfirmed_rules()
_NOT_ON_THE_REAL_BINARY = {"#45": "#45's emulator rule (unconfirmed_rules): the real 0.2.5 binary "
                                  "normalizes strided inputs right"}


def _rows_with_the_defect():
    """ROWS as parameters; a row the real binary does not show is ``emulated_only``."""
    return [pytest.param(row, marks=pytest.mark.emulated_only(reason=_NOT_ON_THE_REAL_BINARY[row]))
            if row in _NOT_ON_THE_REAL_BINARY else row for row in ROWS]


@pytest.fixture
def rules(dml_device):
    """The reported defects on the device, no shim: the real binary's own, or on the emulator
    all seven rules (also #45, #47, off by default; the defaults afterwards)."""
    dmlshim.deactivate()
    if emulation.is_installed():
        emulation.configure(rules=_rules())
    yield
    dmlshim.deactivate()
    if emulation.is_installed():
        emulation.configure()


@pytest.fixture
def fixed(rules):
    dmlshim.activate(fallback="known", trace=0)
    dmlshim.trace.reset()


# ---------------------------------------------------------------- user-level repros

def _linear_in_inference_mode(device):
    """DirectML#602: a module moved before, called inside inference_mode."""
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 128).eval().to(device)
    with torch.inference_mode():
        return model(torch.linspace(-1, 1, 12).view(4, 3).to(device))


def _realesrgan_x2_pad(device):
    """Real-ESRGAN x2: an odd width padded by reflection, then pixel_unshuffle."""
    img = torch.linspace(0, 1, 3 * 6 * 5).view(1, 3, 6, 5).to(device)
    return F.pixel_unshuffle(F.pad(img, (0, 1, 0, 0), "reflect"), 2)


def _fcpe_local_argmax(device):
    """FCPE's local_argmax decoder (RVC infer/fcpe.py) on device logits."""
    torch.manual_seed(0)
    latent = torch.rand(1, 5, 16).to(device)
    cents = torch.linspace(1000, 4000, 16).to(device)[None, None, :].expand(1, 5, -1)
    max_index = torch.max(latent, dim=-1, keepdim=True).indices
    local_index = (torch.arange(9).to(device) + (max_index - 4)).clamp(0, 15)
    local_cents = torch.gather(cents, -1, local_index)
    local_latent = torch.gather(latent, -1, local_index)
    return (local_cents * local_latent).sum(-1) / local_latent.sum(-1)


def _negative_dims(device):
    """FCPE's decoder, and scatter/scatter_add (functional, in place, out=) with dim -1 and -2."""
    x, src = torch.zeros(3, 4).to(device), torch.arange(1.0, 13.0).view(3, 4).to(device)
    index = torch.tensor([[3, 0, 2, 1], [1, 2, 3, 0], [0, 3, 1, 2]]).to(device)
    return (_fcpe_local_argmax(device), x.scatter(-1, index, src), x.clone().scatter_add_(-1, index, src),
            torch.scatter(x, -1, index, src, out=torch.empty(3, 4).to(device)),
            torch.gather(src, -2, index[:, :3] % 3), x.scatter(-2, index % 3, src))


def _weighted_token_loss_grad(device):
    """DirectML#739/#740: per-token cross_entropy(reduction='none'), weighted by hand."""
    torch.manual_seed(0)
    head = torch.nn.Linear(4, 6).to(device)
    x, target = torch.randn(5, 4).to(device), torch.tensor([0, 5, 2, 2, 1]).to(device)
    weights = torch.tensor([1.0, 0.5, 0.0, 2.0, 1.0]).to(device)
    loss = (F.cross_entropy(head(x), target, reduction="none") * weights).sum() / weights.sum()
    loss.backward()
    return head.weight.grad, head.bias.grad


def _layer_norm_permuted(device):
    """DirectML#588's repro: a permuted input, and x[::2]."""
    torch.manual_seed(0)
    x, w, b = torch.randn(4, 4, 4), torch.randn(4), torch.randn(4)
    x, w, b = x.to(device), w.to(device), b.to(device)
    return F.layer_norm(x.permute(0, 2, 1), [4], w, b), F.layer_norm(x[::2], [4], w, b)


def _load_state_dict(device):
    """A checkpoint loaded straight to the device (audio-separator PR#295), each form."""
    torch.manual_seed(0)
    buffer = io.BytesIO()
    torch.save(torch.nn.Linear(3, 2).state_dict(), buffer)
    results = []
    for where in (str(device), device, {"cpu": str(device)}):
        buffer.seek(0)
        state = torch.load(buffer, map_location=where)
        assert all(t.device == device for t in state.values())
        model = torch.nn.Linear(3, 2).to(device)
        model.load_state_dict(state)
        results.append(model(torch.ones(1, 3).to(device)).detach())
    return tuple(results)


def _unique_counts(device):
    return torch.unique(torch.tensor([4, 1, 4, 2, 4, 1]).to(device), return_counts=True)


REPROS = {"#41": _linear_in_inference_mode, "#42": _realesrgan_x2_pad, "#43": _negative_dims,
          "#44": _weighted_token_loss_grad, "#45": _layer_norm_permuted, "#46": _load_state_dict,
          "#47": _unique_counts}
ROWS = sorted(REPROS)


def _actions():
    """``{op: {action: count}}`` of the calls dmlshim handled since the last reset."""
    return {row["op"]: row["actions"] for row in dmlshim.trace.report().rows}


def _fails_or_differs(repro, device, assert_differs):
    """The repro raises, or its result differs from the CPU's beyond any profile."""
    try:
        got = repro(device)
    except (RuntimeError, TypeError) as exc:
        return f"{type(exc).__name__}: {exc}"
    assert_differs(got, repro(CPU), "the defect did not show: ")
    return "differs"


# ---------------------------------------------------------------- both ways

def test_every_reported_row_has_a_defect_with_a_probe_and_fixes():
    assert sorted(DEFECTS) == ROWS
    assert all(d.probe is not None and d.fixes for d in REPORTED)


@pytest.mark.parametrize("row", _rows_with_the_defect())
def test_rule_on_probe_detects_and_repro_fails_without_dmlshim(rules, dml_device, row, assert_differs):
    verdict = DEFECTS[row].probe(dml_device)
    assert verdict.broken and verdict.figure != "equal"
    _fails_or_differs(REPROS[row], dml_device, assert_differs)


@pytest.mark.parametrize("row", ROWS)
def test_repro_equals_cpu_with_dmlshim(fixed, dml_device, row, assert_parity):
    assert_parity(REPROS[row](dml_device), REPROS[row](CPU))


@pytest.mark.parametrize("row", _rows_with_the_defect())
def test_rule_on_fixes_are_on_and_probes_see_the_raw_device(fixed, dml_device, row):
    assert set(DEFECTS[row].fixes) <= set(dmlshim.patches.installed())
    assert DEFECTS[row].probe(dml_device).broken            # probes still see the raw device


@pytest.mark.emulated_only(reason="turns the row's emulator rule off (emulation.configured)")
@pytest.mark.parametrize("row", ROWS)
def test_rule_off_probe_passes_and_repro_equals_cpu(dml_device, row, assert_parity):
    dmlshim.deactivate()
    with emulation.configured(rules=_rules(without=row)):
        assert DEFECTS[row].probe(dml_device) == catalogue.Verdict(False, "equal")
        assert_parity(REPROS[row](dml_device), REPROS[row](CPU))


def test_probes_pass_on_the_cpu():
    assert all(not d.probe(CPU).broken for d in REPORTED)


def test_probes_are_fast_and_leave_no_state(rules, dml_device):
    import time
    grad_mode, inference = torch.is_grad_enabled(), torch.is_inference_mode_enabled()
    for defect in REPORTED:
        defect.probe(dml_device)                             # warm
        start = time.perf_counter()
        defect.probe(dml_device)
        assert time.perf_counter() - start < 0.5, defect.name
    assert (torch.is_grad_enabled(), torch.is_inference_mode_enabled()) == (grad_mode, inference)
    assert not _select.aside()


# ---------------------------------------------------------------- users' own rules

def _swap_hw_pads(self, padding, *rest, **kwargs):
    """A user's reflection_pad2d: the H and W pads swapped, on CPU copies."""
    left, right, top, bottom = padding
    return F.pad(self.cpu(), (top, bottom, left, right), "reflect").to(self.device)


def _zero_nll_grad(grad_output, self, target, weight, reduction, *rest, **kwargs):
    return torch.zeros_like(self)


USER_RULES = {
    "#42": emulation.Rule("reflection_pad2d", replace=_swap_hw_pads,
                          when=lambda self, padding: len(set(padding)) > 1, source="a user's GPU"),
    "#44": emulation.Rule("nll_loss_backward.default", replace=_zero_nll_grad,
                          when=lambda *args: args[4] == 0, source="a user's GPU"),
}


@pytest.mark.emulated_only(reason="injects a user's emulation.Rule in place of the row's")
@pytest.mark.parametrize("row", sorted(USER_RULES))
def test_a_users_own_rule_is_detected_and_fixed(dml_device, row, assert_parity, assert_differs):
    dmlshim.deactivate()
    with emulation.configured(rules=_rules(without=row, extra=[USER_RULES[row]])):
        assert DEFECTS[row].probe(dml_device).broken
        _fails_or_differs(REPROS[row], dml_device, assert_differs)
        dmlshim.activate(fallback="known", trace=0)
        try:
            assert_parity(REPROS[row](dml_device), REPROS[row](CPU))
        finally:
            dmlshim.deactivate()


# ---------------------------------------------------------------- how the fixes hold

def _scripted_pad(x: torch.Tensor) -> torch.Tensor:
    return F.pad(x, [0, 1, 0, 0], mode="reflect")


def test_fixes_hold_below_python(fixed, dml_device, assert_same):
    """TorchScript and torch.ops reach the same aten ops: the BackendSelect kernels see them."""
    scripted = torch.jit.script(_scripted_pad)
    x = torch.arange(12.0).view(1, 1, 3, 4)
    assert_same(scripted(x.to(dml_device)), F.pad(x, (0, 1, 0, 0), "reflect"))    # padded on the CPU
    assert_same(torch.ops.aten.reflection_pad2d(x.to(dml_device), [0, 1, 0, 0]),
                F.pad(x, (0, 1, 0, 0), "reflect"))
    assert _actions()["aten::reflection_pad2d"] == {"cpu": 2}


def test_inference_mode_keeps_torch_semantics(fixed, dml_device, host_reads, assert_parity):
    """Views of normal tensors stay normal, results of inference tensors stay inference
    tensors, on the device exactly as on the CPU; nothing goes to the CPU."""
    def run(device):
        weight = torch.ones(2, 3).to(device)
        with torch.inference_mode():
            view, out = weight.t(), F.linear(torch.ones(1, 3).to(device), weight)
            return view.is_inference(), view._version, out.is_inference(), out
    got = run(dml_device)
    assert host_reads() == {}
    assert got[:3] == run(CPU)[:3]
    assert_parity(got[3], run(CPU)[3])
    assert not any(name.endswith(("view", "as_strided")) for name in _actions())


@pytest.mark.parametrize("make", [lambda t: t.view(6, 4), lambda t: t.reshape(24), lambda t: t.split(2),
                                  lambda t: t.chunk(2, 1), lambda t: t.split([1, 3]), lambda t: t.unfold(1, 2, 2),
                                  lambda t: torch.ops.aten._unsafe_view(t, [24])],
                         ids=["view", "reshape", "split", "chunk", "split_with_sizes", "unfold", "_unsafe_view"])
def test_every_view_kernel_of_a_normal_tensor_works_in_inference_mode(fixed, dml_device, make, assert_parity):
    """Each of DirectML's view kernels (dml_ops.view_kernels: reshape, split, unfold and
    _unsafe_view have their own) gives what the CPU gives inside inference_mode: normal
    tensors, views sharing their base's version counter."""
    def run(device):
        base = torch.arange(24.0).view(4, 6).to(device)
        with torch.inference_mode():
            views = make(base)
        views = views if isinstance(views, (tuple, list)) else (views,)
        base.add_(1)                                  # a view shares its base's counter
        return [(v.is_inference(), None if v.is_inference() else v._version, v.cpu()) for v in views]
    device, cpu = run(dml_device), run(CPU)
    assert [d[:2] for d in device] == [c[:2] for c in cpu]
    assert_parity([d[2] for d in device], [c[2] for c in cpu])       # add_ ran on the device


@pytest.mark.parametrize("make, shape", [
    (lambda: torch.nn.Conv2d(2, 3, 3), (1, 2, 5, 5)),                 # the kernel views the bias
    (lambda: torch.nn.BatchNorm2d(2).eval(), (2, 2, 3, 3)),           # ... the running stats
], ids=["conv2d-bias", "batch_norm-running-stats"])
def test_kernels_that_view_a_normal_tensor_fail_and_are_fixed_on_the_device(rules, dml_device, make, shape,
                                                                            assert_parity):
    """Measured on the real 0.2.5 binary (benchmarks/results/fidelity-defects.json): a
    convolution with a bias and batch_norm with running stats fail under inference_mode
    like a view; the view-kernel fix covers them, on the device."""
    def run(device):
        torch.manual_seed(0)
        module, x = make().to(device), torch.linspace(-2, 2, int(torch.tensor(shape).prod())).view(shape)
        with torch.inference_mode():
            return module(x.to(device))
    with pytest.raises(RuntimeError, match="Cannot set version_counter for inference tensor"):
        run(dml_device)
    dmlshim.activate(fallback="known", trace=0)
    dmlshim.trace.reset()
    got = run(dml_device)
    assert got.device == dml_device and dmlshim.report().syncs["dmlshim"] == {}     # no host read
    assert_parity(got, run(CPU))


def test_the_fix_and_the_emulator_rule_share_the_view_kernels_of_the_data():
    from dmlshim import dml_ops
    from dmlshim.patches import inference_mode
    views = dml_ops.view_kernels()
    assert {"view", "as_strided", "_reshape_alias", "_unsafe_view", "split.Tensor"} <= set(views) <= dml_ops.registered()
    assert "alias" not in views
    assert {op.name() for op in inference_mode._kernels.table} == {f"aten::{n}" for n in views}
    rule = next(r for r in default_rules() if "#41" in r.source)
    assert rule.op == views


def test_the_patch_layer_reads_the_view_kernels_without_the_emulator():
    code = ("import sys, dmlshim.patches.inference_mode as m\n"
            "assert m._kernels.table\n"
            "sys.exit('dmlshim.emulation' in sys.modules)")
    run = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parents[1],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr


def test_symmetric_pads_and_gathers_counted_from_zero_stay_on_the_device(fixed, dml_device, host_reads,
                                                                         assert_same):
    x = torch.arange(16.0).view(1, 1, 4, 4)
    assert_same(F.pad(x.to(dml_device), (1, 1, 1, 1), "reflect"), F.pad(x, (1, 1, 1, 1), "reflect"))
    index = torch.tensor([[0, 3], [2, 1]])
    assert_same(torch.gather(x[0, 0, :2].to(dml_device), 1, index.to(dml_device)),
                torch.gather(x[0, 0, :2], 1, index))
    cents = torch.arange(8.0)[None].expand(2, -1)                 # FCPE's expanded table
    assert_same(torch.gather(cents.to(dml_device), 1, index.to(dml_device)), torch.gather(cents, 1, index))
    assert not {"aten::reflection_pad2d", "aten::gather"} & set(_actions()) and host_reads() == {}


def test_load_leaves_other_map_locations_alone(fixed, dml_device, tmp_path):
    path = tmp_path / "w.pt"
    torch.save({"w": torch.arange(3.0)}, path)
    assert torch.load(path, map_location="cpu")["w"].is_cpu
    assert torch.load(path, map_location=lambda storage, loc: storage)["w"].is_cpu
    assert torch.load(path)["w"].is_cpu


def test_deactivate_removes_the_fixes(rules, dml_device, assert_differs):
    dmlshim.activate(fallback="known", trace=0)
    dmlshim.deactivate()
    _fails_or_differs(_realesrgan_x2_pad, dml_device, assert_differs)
    _fails_or_differs(_load_state_dict, dml_device, assert_differs)


def test_pad_gradient_equals_cpu(fixed, dml_device, assert_parity):
    """The backward of an unequal reflect pad goes through the CPU too."""
    def grad(device):
        x = torch.arange(12.0).view(1, 1, 3, 4).to(device).requires_grad_()
        (F.pad(x, (0, 1, 0, 0), "reflect") * torch.arange(15.0).view(1, 1, 3, 5).to(device)).sum().backward()
        return x.grad
    assert_parity(grad(dml_device), grad(CPU))
    assert _actions()["aten::reflection_pad2d_backward"] == {"cpu": 1}
