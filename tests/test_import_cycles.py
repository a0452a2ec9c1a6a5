"""No import cycles inside ``dmlshim/`` (issue 21), and no imports up into the top-level
package from below it (issue 26; docs/internals.md, "Layers").

Every ``import``/``from ... import`` counts, relative ones and those inside functions
too: a lazy import only hides a cycle until someone moves it to the top.  Importing an
ancestor package is not an edge of the cycle walk (Python runs it first anyway), so
upward imports have a test of their own.
"""
import ast
from pathlib import Path

import dmlshim

ROOT = Path(dmlshim.__file__).parent


def _modules():
    """``{dotted module name: path}`` for every ``.py`` file under ``dmlshim/``."""
    modules = {}
    for path in ROOT.rglob("*.py"):
        parts = ("dmlshim",) + path.relative_to(ROOT).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join(parts)] = path
    return modules


def _imports(name, path):
    """``(node, module)`` for every import statement in ``name``'s source: the module an
    ``import`` names (one pair per name), or the one a ``from ... import`` takes names
    from, relative levels resolved."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - node.level + 1]
                yield node, ".".join(base + ([node.module] if node.module else []))
            else:
                yield node, node.module


def _imported(name, path, modules):
    """The dmlshim modules that ``name`` imports anywhere in its source."""
    found = set()
    for node, module in _imports(name, path):
        found.add(module)
        if isinstance(node, ast.ImportFrom):
            found.update(f"{module}.{alias.name}" for alias in node.names)   # submodules
    edges = set()
    for module in found:
        while module and module not in modules:     # dmlshim.x.func -> dmlshim.x
            module = module.rpartition(".")[0]
        if module and module != name and not name.startswith(module + "."):
            edges.add(module)
    return edges


def _find_cycle(graph):
    """One cycle as a list of module names (first == last), or None."""
    state = {}                                      # name -> "open" | "done"

    def visit(node, stack):
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                cycle = visit(nxt, stack)
                if cycle:
                    return cycle
        stack.pop()
        state[node] = "done"
        return None

    for node in sorted(graph):
        if node not in state:
            cycle = visit(node, [])
            if cycle:
                return cycle
    return None


def test_the_walk_sees_relative_lazy_and_submodule_imports():
    graph = {name: _imported(name, path, _modules()) for name, path in _modules().items()}
    assert "dmlshim.emulation.routing" in graph["dmlshim.emulation.rules"]       # from . import routing
    assert "dmlshim.patches._wrap" in graph["dmlshim.patches.auto"]              # from ._wrap import ...
    assert "dmlshim.errors" in graph["dmlshim"]                                  # inside a function
    assert _find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _find_cycle({"a": {"b"}, "b": set()}) is None


def test_no_import_cycles():
    modules = _modules()
    graph = {name: _imported(name, path, modules) for name, path in modules.items()}
    cycle = _find_cycle(graph)
    assert cycle is None, ("import cycle in dmlshim/: " + " -> ".join(cycle)
                           + "; move what both sides need to the lower module, or pass it in")


def _upward(name, path, modules):
    """``name``'s imports of the top-level package itself: ``import dmlshim``, or ``from
    dmlshim import X`` / ``from .. import X`` where X is no submodule (so it is defined in
    dmlshim/__init__.py), as ``"line N: X"``."""
    found = []
    for node, module in _imports(name, path):
        if module != "dmlshim":
            continue
        names = ["dmlshim"] if isinstance(node, ast.Import) else \
            [a.name for a in node.names if f"dmlshim.{a.name}" not in modules]
        found += [f"line {node.lineno}: {n}" for n in names]
    return found


def _below_the_top(modules, graph):
    """The modules below dmlshim/__init__.py: those it imports, directly or not, and every
    module of a subpackage.  The commands it never imports (``check``, ``doctor``,
    ``__main__`` ...) use the public API from above."""
    below, todo = set(), ["dmlshim"]
    while todo:
        for module in graph[todo.pop()] - below:
            below.add(module)
            todo.append(module)
    below.update(name for name in modules if name.count(".") > 1 or modules[name].name == "__init__.py")
    below.discard("dmlshim")
    return below


def test_the_upward_walk_sees_plain_relative_and_lazy_imports(tmp_path):
    modules = {"dmlshim": tmp_path / "__init__.py", "dmlshim.trace": tmp_path / "trace.py",
               "dmlshim.patches": tmp_path / "patches" / "__init__.py"}
    path = tmp_path / "patches" / "x.py"
    path.parent.mkdir()
    path.write_text("import dmlshim\nfrom .. import trace, activate\n"
                    "def f():\n    from dmlshim import settings\n    import dmlshim.trace\n")
    assert _upward("dmlshim.patches.x", path, modules) == [
        "line 1: dmlshim", "line 2: activate", "line 4: settings"]
    graph = {"dmlshim": {"dmlshim.trace"}, "dmlshim.trace": set(), "dmlshim.check": {"dmlshim"},
             "dmlshim.patches": set(), "dmlshim.patches.x": set()}
    assert _below_the_top(dict.fromkeys(graph, tmp_path / "m.py"), graph) == {
        "dmlshim.trace", "dmlshim.patches.x"}


def test_no_module_below_the_top_imports_the_top_level_package():
    modules = _modules()
    graph = {name: _imported(name, path, modules) for name, path in modules.items()}
    upward = {name: found for name in sorted(_below_the_top(modules, graph))
              if (found := _upward(name, modules[name], modules))}
    assert not upward, ("modules below dmlshim/__init__.py import it: " + str(upward)
                        + "; pass what they need down (patches.Context, an argument) or move it "
                          "to a lower module")


def _private_imports(name, path, modules):
    """The private names ``name`` takes from another module of its package (not from the
    package, not a submodule): ``from .x import _y`` and ``x._y`` of a ``from . import x``,
    as ``"line N: x._y"``."""
    package = name.rpartition(".")[0]
    siblings, found = {}, []
    for node, module in _imports(name, path):
        if not isinstance(node, ast.ImportFrom):
            continue
        for alias in node.names:
            if module == package and f"{package}.{alias.name}" in modules:
                siblings[alias.asname or alias.name] = alias.name          # from . import x
            elif module.startswith(package + ".") and module in modules and alias.name.startswith("_") \
                    and f"{module}.{alias.name}" not in modules:
                found.append(f"line {node.lineno}: {module.rpartition('.')[2]}.{alias.name}")
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                and node.value.id in siblings and node.attr.startswith("_") and not node.attr.startswith("__"):
            found.append(f"line {node.lineno}: {siblings[node.value.id]}.{node.attr}")
    return found


def test_the_private_walk_sees_from_imports_and_attributes(tmp_path):
    modules = {"dmlshim.patches": tmp_path / "__init__.py", "dmlshim.patches.a": tmp_path / "a.py",
               "dmlshim.patches._select": tmp_path / "_select.py", "dmlshim.patches.x": tmp_path / "x.py"}
    path = tmp_path / "x.py"
    path.write_text("from . import a, _select\nfrom .a import _write, public\nfrom ._select import on_cpu\n"
                    "a._helper(); _select._chains; _select.on_cpu; a.__name__\n")
    assert sorted(_private_imports("dmlshim.patches.x", path, modules)) == [
        "line 2: a._write", "line 4: _select._chains", "line 4: a._helper"]


def test_no_fix_module_imports_another_fix_modules_private_names():
    """A helper two fixes share is public (or lives in a shared module: ``_select``), so that
    changing one fix's internals cannot break another (issue 40)."""
    modules = _modules()
    private = {name: found for name in sorted(modules) if name.startswith("dmlshim.patches.")
               if (found := _private_imports(name, modules[name], modules))}
    assert not private, ("patch modules import each other's private names: " + str(private)
                         + "; make the helper public, or move it to a shared module (_select)")


def _imports_under(package, modules, graph):
    """``{module: the dmlshim modules it imports}`` for every module of ``package``."""
    return {name: graph[name] for name in modules if name == package or name.startswith(package + ".")}


def _reaching(found, packages):
    """``found``'s imports of a module of one of ``packages``, as ``{module: [imported]}``."""
    return {name: sorted(m for m in imported if any(m == p or m.startswith(p + ".") for p in packages))
            for name, imported in found.items()
            if any(m == p or m.startswith(p + ".") for m in imported for p in packages)}


def test_the_emulator_and_the_laws_import_no_fix():
    """The emulator models the device, not the cure: it reads DirectML's laws (``dmlshim.laws``),
    never a fix's code, so a wrong law shows as the emulator disagreeing with the real binary
    instead of the fix and the emulator agreeing (issue 40).  The laws import neither."""
    modules = _modules()
    graph = {name: _imported(name, path, modules) for name, path in modules.items()}
    emulation = _reaching(_imports_under("dmlshim.emulation", modules, graph), ("dmlshim.patches",))
    laws = _reaching(_imports_under("dmlshim.laws", modules, graph), ("dmlshim.patches", "dmlshim.emulation"))
    assert not emulation, f"the emulator imports fixes: {emulation}; move the law to dmlshim/laws/"
    assert not laws, f"the laws import fixes or the emulator: {laws}"


_LOADED = """
import importlib.machinery, importlib.util, sys
# the dmlshim package made but not run: its __init__ imports the patches for activate()
spec = importlib.machinery.PathFinder.find_spec("dmlshim", [sys.argv[1]])
sys.modules["dmlshim"] = importlib.util.module_from_spec(spec)
import dmlshim.laws.broadcast, dmlshim.laws.empty, dmlshim.laws.integers, dmlshim.laws.nan, dmlshim.laws.norms, dmlshim.laws.pooling
laws = sorted(m for m in sys.modules if m.startswith(("dmlshim.patches", "dmlshim.emulation")))
from dmlshim.emulation import rules
rules.default_rules(declared=False)         # every rule made but the patch modules' own
print(laws, sorted(m for m in sys.modules if m.startswith("dmlshim.patches")))
"""


def test_importing_the_emulator_loads_no_fix():
    """The same, as Python runs it: importing the laws and the emulator, and making its own
    rules, loads no module of ``dmlshim.patches`` (the laws no emulator module either)."""
    import subprocess
    import sys
    result = subprocess.run([sys.executable, "-c", _LOADED, str(ROOT.parent)], capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["[]", "[]"], result.stdout


def _names_used(code):
    """The global names a function's code (nested functions and lambdas included) reads."""
    names = set(code.co_names)
    for const in code.co_consts:
        if hasattr(const, "co_names"):
            names |= _names_used(const)
    return names


def test_a_declared_rule_uses_no_fix_code():
    """A rule a patch module declares beside its fix (``emulated_rules()``) is a law of the
    device: its functions read torch, the laws, the emulator and each other, never the fix
    they sit beside, so the emulator still cannot agree with a fix by sharing its code."""
    from dmlshim import patches
    from dmlshim.emulation import rules
    modules = [m for m in patches.MODULES.values() if hasattr(m, "emulated_rules")]
    assert len(rules.declared_rules()) == sum(len(m.emulated_rules()) for m in modules)   # all reach it
    for module in modules:
        parts = [f for rule in module.emulated_rules() for f in (rule.when, rule.replace, rule.message, rule.bind)
                 if callable(f) and getattr(f, "__module__", None) == module.__name__]
        law = {f.__name__ for f in parts} | {"emulated_rules"}
        for part in parts:
            for name in _names_used(part.__code__):
                value = vars(module).get(name)
                home = getattr(value, "__module__", None) or getattr(value, "__name__", "")
                if value is None or name in law or not str(home).startswith("dmlshim."):
                    continue
                assert home.startswith(("dmlshim.laws", "dmlshim.emulation")) and home != module.__name__, \
                    f"{module.__name__}: rule function {part.__name__} reads {name} ({home}), the fix's code"
