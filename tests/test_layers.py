"""One defect, one layer (issue 49): the registry imports every fix statically, the
infrastructure imports none, and an aten overload is held at one layer only (a BackendSelect
chain of fixes, or the dispatcher net), with every fix on."""
import ast
from pathlib import Path

import pytest
import torch

import dmlshim
from dmlshim import generate, patches
from dmlshim.patches import _select, dispatcher

from test_import_cycles import _imported, _modules

ROOT = Path(dmlshim.__file__).parent
# Fixes: every registry patch but the net, which is infrastructure too (fix_kernel, the net's
# kernels); tools that read auto's failure records for their reports (not on a call's path).
FIXES = {f"dmlshim.patches.{p.name}" for p in patches.REGISTRY} - {"dmlshim.patches.dispatcher"}
TOOLS = {"dmlshim.check", "dmlshim.conformance"}


def test_the_registry_imports_every_fix_statically():
    """``patches/__init__.py`` names every patch module in ``from . import`` (a list
    ``python -m dmlshim generate`` writes from the folder): a reader follows REGISTRY to each
    fix; nothing is loaded by name, and each module declares its own ``PATCH``."""
    tree = ast.parse((ROOT / "patches" / "__init__.py").read_text(encoding="utf-8"))
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.level == 1
                and node.module is None for alias in node.names}
    assert {p.name for p in patches.REGISTRY} == set(generate.patch_modules()) <= imported
    assert not generate.stale(), "run: python -m dmlshim generate"
    calls = [node for node in ast.walk(tree) if isinstance(node, ast.Attribute) and node.attr == "import_module"]
    assert not calls
    assert all(patches.MODULES[p.name].__name__ == f"dmlshim.patches.{p.name}" for p in patches.REGISTRY)


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
