"""activate()/deactivate(): environment, idempotence, identity, lazy third-party patches."""
import importlib
import sys
import types
import warnings

import pytest
import torch
import torch.nn.functional as F

import dmlshim
from dmlshim import errors, patches
from dmlshim.patches import _wrap

# every attribute the built-in patches wrap, as (owner, name)
ENTRY_POINTS = [
    (torch, "mul"), (torch, "multiply"), (torch.Tensor, "mul"), (torch.Tensor, "mul_"),
    (torch.Tensor, "__mul__"), (torch.Tensor, "__rmul__"), (torch.Tensor, "__imul__"),
    (torch, "cat"), (torch, "concat"), (torch, "concatenate"), (torch, "stack"),
    (F, "conv1d"), (F, "conv2d"), (F, "conv3d"), (torch, "conv1d"), (torch, "conv2d"), (torch, "conv3d"),
    (torch._VF, "lstm"), (torch._VF, "gru"), (torch._VF, "lstm_cell"), (torch._VF, "gru_cell"),
    (torch.Tensor, "to"), (torch, "cumsum"), (torch.Tensor, "sum"), (torch.Tensor, "softmax"),
]


def _snapshot():
    return {(id(o), n): (getattr(o, n), n in vars(o)) for o, n in ENTRY_POINTS}


@pytest.fixture(autouse=True)
def _inactive():
    dmlshim.deactivate()
    yield
    dmlshim.deactivate()


def test_deactivate_restores_every_attribute_by_identity():
    before = _snapshot()
    original_cat = torch.cat
    dmlshim.activate(fallback="known")
    assert dmlshim.is_active()
    assert torch.cat is not original_cat
    assert all(getattr(o, n) is not before[(id(o), n)][0] for o, n in ENTRY_POINTS)
    dmlshim.deactivate()
    assert not dmlshim.is_active()
    assert torch.cat is original_cat
    assert _snapshot() == before        # same objects, and inherited ones are inherited again


def test_activate_is_idempotent_and_warns_on_different_settings(recwarn):
    dmlshim.activate(fallback="known", trace=0)
    wrapped_cat = torch.cat
    dmlshim.activate(fallback="known", trace=0)      # same settings: silent no-op
    assert not [w for w in recwarn if "already active" in str(w.message)]
    with pytest.warns(RuntimeWarning, match="already active"):
        dmlshim.activate(fallback="off")
    assert torch.cat is wrapped_cat                  # never double-wrapped
    assert dmlshim.settings().fallback == "known"


def test_activate_deactivate_activate_cycle_works(dml_device):
    for _ in range(3):
        dmlshim.activate(fallback="known")
        x = torch.ones(2, 3, device=dml_device)
        assert torch.cat([x, torch.ones(0, 3, device=dml_device)]).shape == (2, 3)
        dmlshim.deactivate()
    assert patches.installed() == []


def test_fallback_off_only_observes(dml_device):
    dmlshim.activate(fallback="off")
    dmlshim.trace.reset()
    x, e = torch.ones(2, 3, device=dml_device), torch.zeros(0, 3, device=dml_device)
    with pytest.raises(RuntimeError) as info:
        torch.cat([x, e])                                   # not fixed ...
    assert errors.recognise(str(info.value)) is errors.E_INVALIDARG
    assert (x * (x > 0)).dtype == torch.bool                # ... nor this (the DirectML bug)
    # mul's and cat's fixes sit at BackendSelect, installed in auto and known only
    assert {r["op"] for r in dmlshim.report().rows} <= {"torch.cat"}


# Bad environment values: test_reliability.test_bad_environment_values (issue 6 suite).


@pytest.mark.parametrize("kwargs", [{"fallback": "maybe"}, {"trace": 2.5}, {"target": "cpu"},
                                    {"target": "privateuseone:0"}])
def test_bad_arguments(kwargs):
    with pytest.raises(ValueError, match="allowed"):
        dmlshim.activate(**kwargs)


def test_environment_is_read_at_call_time(monkeypatch):
    monkeypatch.setenv("DMLSHIM_FALLBACK", "off")
    import dmlshim.config  # noqa: F401  (already imported: the env must still be re-read)
    dmlshim.activate()
    assert dmlshim.settings().fallback == "off"
    dmlshim.deactivate()
    monkeypatch.setenv("DMLSHIM_FALLBACK", "known")
    monkeypatch.setenv("INFERENCE_DEVICE", "cpu")
    dmlshim.activate()
    assert dmlshim.settings().fallback == "known" and dmlshim.settings().device == "cpu"
    dmlshim.deactivate()
    dmlshim.activate(fallback="off")               # an argument wins over the environment
    assert dmlshim.settings().fallback == "off"


def test_someone_else_wrapping_after_us_is_left_alone_and_ours_goes_inactive(dml_device):
    dmlshim.activate(fallback="known")
    ours = torch.cat
    calls = []

    def theirs(tensors, *args, **kwargs):
        calls.append(len(tensors))
        return ours(tensors, *args, **kwargs)

    torch.cat = theirs
    try:
        with pytest.warns(RuntimeWarning, match="replaced after dmlshim wrapped it"):
            dmlshim.deactivate()
        assert torch.cat is theirs
        x = torch.ones(2, 3, device=dml_device)
        dmlshim.trace.reset()
        torch.cat([x, x])
        assert calls == [2] and dmlshim.report().rows == []   # our inner wrapper is transparent
    finally:
        torch.cat = _wrap.original(torch, "cat")


# --------------------------------------------------------------- third-party: lazy install

@pytest.fixture
def fake_library(tmp_path, monkeypatch):
    """A third-party package ``fakelib`` (not imported yet) and a registered patch module
    ``dmlshim.patches.fakelib`` that wraps ``fakelib.core.scale`` by module name."""
    name = f"fakelib_{tmp_path.name.replace('-', '_')}"
    pkg = tmp_path / name
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "core.py").write_text("def scale(x):\n    return x * 2\n")
    monkeypatch.syspath_prepend(str(tmp_path))

    patch_module = types.ModuleType(f"dmlshim.patches.{name}")
    patch_set = _wrap.PatchSet(patch_module.__name__)
    patch_module.installs = 0

    def install(ctx):
        patch_module.installs += 1
        patch_set.wrap(ctx, f"{name}.core", "scale", lambda wrapped, inst, args, kw: wrapped(*args, **kw) + 1)

    patch_module.install = install
    patch_module.uninstall = patch_set.restore
    monkeypatch.setitem(sys.modules, patch_module.__name__, patch_module)
    monkeypatch.setitem(patches.MODULES, name, patch_module)
    monkeypatch.setattr(patches, "REGISTRY",
                        patches.REGISTRY + (patches.Patch(name, "test library", imports=(name,)),))
    yield name, patch_module
    for mod in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
        del sys.modules[mod]


def test_third_party_patch_installs_when_imported_after_activate(fake_library):
    name, patch_module = fake_library
    dmlshim.activate(fallback="known")
    assert patch_module.installs == 0 and name not in patches.installed()
    core = importlib.import_module(f"{name}.core")
    assert patch_module.installs == 1 and core.scale(1) == 3
    dmlshim.deactivate()
    assert core.scale(1) == 2 and isinstance(core.scale, types.FunctionType)


def test_third_party_patch_installs_when_imported_before_activate_and_after_reactivate(fake_library):
    name, patch_module = fake_library
    core = importlib.import_module(f"{name}.core")
    plain = core.scale
    dmlshim.activate(fallback="known")
    assert core.scale(1) == 3
    dmlshim.deactivate()
    assert core.scale is plain
    dmlshim.activate(fallback="known")              # wrapt hooks cannot be removed: no double fire
    assert core.scale(1) == 3 and patch_module.installs == 2
    dmlshim.deactivate()
    assert core.scale is plain


def test_lazy_install_cancelled_by_deactivate(fake_library):
    name, patch_module = fake_library
    dmlshim.activate(fallback="known")
    dmlshim.deactivate()
    core = importlib.import_module(f"{name}.core")
    assert patch_module.installs == 0 and core.scale(1) == 2


def _scripted_body(x: torch.Tensor, m: torch.Tensor):
    y = torch.cat([x * m, torch.mul(x, m), torch.stack([x, m])[0]])
    return F.conv1d(y.view(1, 1, -1), m.view(1, 1, -1)).cumsum(-1, dtype=torch.float64)


@pytest.mark.parametrize("mode", ["off", "known", "auto"])
def test_torchscript_still_compiles_patched_functions(mode, assert_same):
    dmlshim.activate(fallback=mode)
    scripted = torch.jit.script(_scripted_body)
    x, m = torch.arange(3.0), torch.ones(3)
    assert_same(scripted(x, m), _scripted_body(x, m))                 # CPU both sides


class _MiniFunasr(torch.nn.Module):
    """One of each: float x bool mask, depthwise conv, empty cat, BiLSTM, float64 cumsum."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv1d(6, 6, 3, padding=1, groups=6)
        self.lstm = torch.nn.LSTM(6, 4, bidirectional=True, batch_first=True)

    def forward(self, x, mask):
        x = x * mask
        x = self.conv(x.transpose(1, 2)).transpose(1, 2)
        x = torch.cat([x, x[:, :0]], dim=1)
        x, _ = self.lstm(x)
        return torch.cumsum(x.sum(-1), dim=1, dtype=torch.float64).to(torch.float32)


@pytest.mark.parametrize("mode", ["auto", "known"])
def test_default_activation_gives_cpu_results(dml_device, mode, assert_parity):
    torch.manual_seed(0)
    model = _MiniFunasr().eval()
    x, mask = torch.randn(2, 9, 6), torch.ones(2, 9, 1, dtype=torch.bool)
    mask[1, 5:] = False
    with torch.no_grad():
        expected = model(x, mask)
        dmlshim.activate(fallback=mode)
        got = model.to(dml_device)(x.to(dml_device), mask.to(dml_device))
    assert got.device == dml_device
    assert_parity(got.cpu(), expected)


def test_the_registry_order_keeps_every_declared_constraint():
    """Each ``after=`` / ``before=`` of the registry names a patch, and the order keeps it."""
    position = {p.name: i for i, p in enumerate(patches.REGISTRY)}
    broken = [f"{p.name} after {o}" for p in patches.REGISTRY for o in p.after if position[o] > position[p.name]]
    broken += [f"{p.name} before {o}" for p in patches.REGISTRY for o in p.before if position[o] < position[p.name]]
    assert not broken, f"registry order breaks: {broken}"
    assert any(p.after or p.before for p in patches.REGISTRY)


def test_activate_installs_in_registry_order(dml_device, monkeypatch):
    monkeypatch.setenv("DMLSHIM_PROBE", "off")                 # every fix on
    dmlshim.activate(fallback="known")
    installed = patches.installed()
    assert {"auto", "out_resize", "offset_views", "inference_mode", "refused"} <= set(installed)
    assert installed == [p.name for p in patches.REGISTRY if p.name in installed]
