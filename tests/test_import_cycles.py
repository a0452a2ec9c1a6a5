"""No import cycles inside ``dmlshim/`` (issue 21; docs/internals.md, "Layers").

Every ``import``/``from ... import`` counts, relative ones and those inside functions
too: a lazy import only hides a cycle until someone moves it to the top.  Importing an
ancestor package is not an edge (Python runs it first anyway).
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


def _imported(name, path, modules):
    """The dmlshim modules that ``name`` imports anywhere in its source."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module
            found.add(module)
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
