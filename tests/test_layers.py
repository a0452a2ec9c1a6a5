"""One defect, one layer (issue 49): the registry imports every fix statically, the
infrastructure imports none, an aten overload is held at one layer only (a BackendSelect
chain of fixes, or the dispatcher net), and no defect's fixes wrap a Python entry point that
reaches an op they also hold at the dispatcher (islands included), with every fix on."""
import ast
from pathlib import Path

import pytest
import torch

import dmlshim
from dmlshim import catalogue, generate, patches
from dmlshim.patches import _select, dispatcher

from test_import_cycles import _imported, _modules

ROOT = Path(dmlshim.__file__).parent
# Fixes: every registry patch but the net, which is infrastructure too (fix_kernel, the net's
# kernels); tools that read auto's failure records for their reports (not on a call's path).
FIXES = {patches.MODULES[p.name].__name__ for p in patches.REGISTRY} - {"dmlshim.patches.dispatcher"}
TOOLS = {"dmlshim.check", "dmlshim.conformance"}


def test_the_registry_imports_every_fix_statically():
    """``patches/__init__.py`` names every patch module in ``from . import`` (a list
    ``python -m dmlshim generate`` writes from the folder): a reader follows REGISTRY to each
    fix; nothing is loaded by name, and each module declares its own ``PATCH``."""
    tree = ast.parse((ROOT / "patches" / "__init__.py").read_text(encoding="utf-8"))
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                and (node.level, node.module) in ((1, None), (2, "integrations")) for alias in node.names}
    assert {p.name for p in patches.REGISTRY} == set(generate.patch_modules()) <= imported
    assert not generate.stale(), "run: python -m dmlshim generate"
    calls = [node for node in ast.walk(tree) if isinstance(node, ast.Attribute) and node.attr == "import_module"]
    assert not calls
    assert all(patches.MODULES[p.name].__name__ in (f"dmlshim.patches.{p.name}", f"dmlshim.integrations.{p.name}")
               for p in patches.REGISTRY)


def test_infrastructure_imports_no_fix():
    modules = _modules()
    infrastructure = {name: path for name, path in modules.items()
                      if name not in FIXES | TOOLS and name != "dmlshim.patches"
                      and not name.startswith("dmlshim.emulation")}
    assert "dmlshim.patches.dispatcher" in infrastructure and "dmlshim.patches._select" in infrastructure
    leaks = {name: sorted(_imported(name, path, modules) & FIXES) for name, path in infrastructure.items()}
    assert not {name: fixes for name, fixes in leaks.items() if fixes}


@pytest.fixture
def every_fix(dml_device, monkeypatch):
    monkeypatch.setenv("DMLSHIM_PROBE", "off")                 # every fix on
    dmlshim.deactivate()
    dmlshim.activate(fallback="known", trace=0)
    yield
    dmlshim.deactivate()


def test_an_overload_is_held_at_one_layer(every_fix):
    """No overload has both a chain of fixes (``_select``) and a kernel of the dispatcher net;
    float x bool and an empty ``cat`` input are fixed by their chains alone, with no
    Python-level wrapper of their own."""
    net = set(dispatcher._watched)
    chained = set(_select._chains)
    assert net and chained and not net & chained
    aten = torch.ops.aten
    for op, owner in ((aten.mul.Tensor, "mul"), (aten.mul_.Tensor, "mul"), (aten.mul.out, "mul"),
                      (aten.cat.default, "cat")):
        assert _select.chains()[op][0] == owner and not dispatcher.holds(op)
    for name in ("mul", "cat"):
        assert not hasattr(patches.MODULES[name], "_patches")     # no PatchSet: no wrapper


# The dtypes patch's wrappers of calls that reach an aten op the net makes islands of, each
# kept for what the net cannot see there (patches/dtypes.py's docstring).
KEPT_WRAPPERS = {
    ("Tensor", "to"): "the transfer policy: float64 moved to the device becomes float32, a complex "
                      "Parameter raises; a cast there is the net's (_to_copy)",
    ("Tensor", "type"): 'a type name ("torch.DoubleTensor") reaches _to_copy as a cast to the CPU',
}
# the Tensor methods that are casts: each reaches aten::_to_copy
CASTS = {"to", "type", "double", "float", "half", "bfloat16", "cfloat", "cdouble", "chalf"}
PREFIXES = {"torch.fft": "fft_", "torch.linalg": "linalg_", "torch.special": "special_"}
DUNDERS = {"truediv": "div", "rtruediv": "div", "radd": "add", "rmul": "mul", "rpow": "pow",
           "iadd": "add_", "isub": "sub_", "imul": "mul_", "itruediv": "div_"}


def _aten_reached(owner, attr, original):
    """The aten base names a wrapped ``owner.attr`` reaches: by name (``torch.fft.fft`` ->
    ``fft_fft``, ``Tensor.__rsub__`` -> ``rsub``, a cast -> ``_to_copy``), plus the ops a
    call of the original with one CPU tensor dispatches after torch's decompositions
    (``linalg.eigvals`` -> ``_linalg_eigvals``), where such a call works."""
    owner_name = getattr(owner, "__name__", "")
    if isinstance(owner, type) and attr in CASTS:
        names = {"_to_copy"}
    else:
        bare = attr.strip("_")
        names = {PREFIXES.get(owner_name, "") + DUNDERS.get(bare, bare)}

    class Seen(torch.utils._python_dispatch.TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            names.add(func._schema.name.split("::", 1)[1])
            return func(*args, **(kwargs or {}))

    for sample in (torch.randn(4, 4), torch.randn(4, 2)):
        try:
            with Seen():
                original(sample)
            break
        except Exception:                          # it needs more arguments
            continue
    return names


def test_islands_are_made_at_one_layer(every_fix):
    """Issue 49: an aten op that makes a value the device cannot hold (complex, bfloat16,
    float64) is made an island by the dispatcher net (``ISLANDS``, ``COMPOSITES``) or by a
    Python wrapper of the dtypes patch, never both: no dtypes wrapper reaches an op the net
    holds, but those of ``KEPT_WRAPPERS``.  Re-adding a wrapper of ``torch.fft.rfft``,
    ``Tensor.cfloat`` or ``linalg.eigvals`` fails here."""
    dtypes = patches.MODULES["dtypes"]
    held = {op._schema.name.split("::", 1)[1] for op in dispatcher.ISLANDS} | set(dispatcher.COMPOSITES)
    registered = {op._schema.name.split("::", 1)[1] for op in dispatcher._watched}
    assert {"_to_copy", "_fft_r2c", "complex"} <= registered     # the net is on: it holds them now
    wrapped = [(owner, attr, original) for owner, attr, _, original, _ in dtypes._patches._applied]
    assert wrapped
    both = {}
    for owner, attr, original in wrapped:
        key = (getattr(owner, "__name__", repr(owner)), attr)
        reached = _aten_reached(owner, attr, original) & held
        if reached and key not in KEPT_WRAPPERS:
            both[key] = sorted(reached)
    assert not both, "held by the net and wrapped by dtypes too"
    names = {(getattr(owner, "__name__", repr(owner)), attr) for owner, attr, _ in wrapped}
    assert set(KEPT_WRAPPERS) <= names                           # no stale exemption
    for owner, attr in ((torch.fft, "rfft"), (torch._VF, "stft"), (torch, "complex"),
                        (torch.linalg, "eigvals"), (torch.Tensor, "cfloat"), (torch.Tensor, "bfloat16")):
        assert _aten_reached(owner, attr, getattr(owner, attr)) & held, (owner, attr)   # the rule sees them


def test_the_net_gives_what_the_python_layer_gave(every_fix, dml_device, monkeypatch):
    """The makers the dtypes patch no longer wraps: an ``Island`` result (or the device's, for
    a real one), one ``CPUIslandWarning`` per op at the user's line, a report row of the aten
    op, gradients back on the device, and DMLSHIM_BF16 for ``x.bfloat16()``."""
    import warnings
    from dmlshim import islands

    monkeypatch.setattr(islands, "_warned", set())
    x = torch.randn(2, 16).to(dml_device).requires_grad_()
    with pytest.warns(islands.CPUIslandWarning, match="aten::fft_ifft") as caught:
        spectrum = torch.fft.ifft(x)                  # a conj after _fft_r2c inside
    assert caught[0].filename == __file__
    assert islands.is_island(spectrum) and islands.home(spectrum) == dml_device
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", islands.CPUIslandWarning)
        real = torch.stft(x, 8, 4, return_complex=False)
        cast = x.cdouble()
    assert real.device == dml_device and not islands.is_island(real)
    assert islands.is_island(cast) and cast.dtype is torch.complex128
    (spectrum.abs().sum() + real.sum()).backward()
    assert x.grad.device == dml_device
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        bf16 = x.detach().bfloat16()
    assert bf16.device == dml_device and bf16.dtype is islands.bf16_as is torch.float32
    rows = {r["op"]: r["actions"] for r in dmlshim.report().rows}
    assert rows["aten::fft_ifft"] == {"island": 1} and rows["aten::stft"] == {"island": 1}
    assert rows["aten::_to_copy"].get("coerce") == 1


# Python wrappers of a fix that reach an aten op the same defect's fixes hold at the dispatcher,
# each for what only a Python entry point sees (a decision, not a second fix of the op)
TWO_LAYERS = {
    **{("dtypes", *key): reason for key, reason in KEPT_WRAPPERS.items()},
    ("int_range", "Tensor", "scatter_"): "asks, above every kernel, whether self is memory empty_like "
                                        "made and nothing wrote since (its version unmoved); the "
                                        "scatter itself is the chain's",
    **{("int_range", "Tensor", name): "the span after the write, once the version has settled (it moves "
                                      "after the kernels return); the op itself is the chain's"
       for name in ("__iadd__", "__isub__")},
}


def test_a_defect_is_fixed_at_one_layer(every_fix):
    """Issue 49: for every defect, no Python wrapper of one of its fixes reaches an aten op that
    its fixes also hold at the dispatcher (a chain of fixes or the net's gate), but those of
    ``TWO_LAYERS``, each with its reason: a defect is fixed once, at one layer."""
    base = lambda op: op._schema.name.split("::", 1)[1]       # noqa: E731
    held: dict = {}                                          # fix name -> aten base names
    for op, owners in _select.chains().items():
        for owner in owners:
            held.setdefault(owner, set()).add(base(op))
    for op in dispatcher._watched:
        held.setdefault(dispatcher.gate(op), set()).add(base(op))
    reached, both, exempted, checked = {}, {}, set(), 0
    for defect in catalogue.DEFECTS:
        at_dispatcher = set().union(*(held.get(fix, set()) for fix in defect.fixes))
        for fix in defect.fixes:
            patch_set = getattr(patches.MODULES.get(fix), "_patches", None)
            if patch_set is None or fix == "auto":           # auto: the retry and error layer
                continue
            for owner, attr, _, original, _ in patch_set._applied:
                key = (fix, getattr(owner, "__name__", repr(owner)), attr)
                if key not in reached:
                    reached[key] = _aten_reached(owner, attr, original)
                checked += 1
                if reached[key] & at_dispatcher:
                    if key in TWO_LAYERS:
                        exempted.add(key)
                    else:
                        both.setdefault(defect.name, []).append((key, sorted(reached[key] & at_dispatcher)))
    assert checked > 100                                      # the check checks something
    assert not both, "a defect fixed at two layers"
    assert exempted == set(TWO_LAYERS)                        # no stale exemption
