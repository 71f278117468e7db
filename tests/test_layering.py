"""Layers of the code import in one direction (docs/engine.md, "Layers of the code").

``core`` (errors, configuration, engine contract, descriptor, register map)
is the bottom and imports nothing above it; then ``hdl`` (the generators),
``boards`` (boards as data, build flows), ``sim`` (simulated boards) and
``host`` (import, IR, compiler, driver, CLI) on top. Every import counts,
also one written inside a function: an import hidden there to dodge a cycle
is still a cycle.
"""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

#: Bottom to top: a package may import its own modules and those of the packages before it.
LAYERS = ("core", "hdl", "boards", "sim", "host")


def _module_name(path):
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules():
    return {_module_name(p): p for layer in LAYERS for p in (ROOT / layer).rglob("*.py")}


def _imports(module, path, modules):
    """``fpgacnn`` modules (without the prefix) that ``module`` imports anywhere in its source."""
    tree = ast.parse(path.read_text(), str(path))
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = package[:len(package) - (node.level - 1)]
            target = ".".join([*base, *(node.module.split(".") if node.module else [])])
            for alias in node.names:
                full = f"{target}.{alias.name}" if target else alias.name
                found.add(full if full in modules else target)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("fpgacnn."):
            found.add(node.module[len("fpgacnn."):])
        elif isinstance(node, ast.Import):
            found.update(a.name[len("fpgacnn."):] for a in node.names
                         if a.name.startswith("fpgacnn."))
    return {name for name in found if name in modules and name != module}


@pytest.fixture(scope="module")
def graph():
    modules = _modules()
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def test_every_package_imports_only_downwards(graph):
    rank = {layer: i for i, layer in enumerate(LAYERS)}
    upward = sorted(f"{m} imports {t}" for m, targets in graph.items() for t in targets
                    if rank[t.split(".")[0]] > rank[m.split(".")[0]])
    assert not upward, "imports against the layering:\n" + "\n".join(upward)


def test_no_import_cycles(graph):
    # Depth-first search with colours; report the first cycle found, as a path.
    state, stack = {}, []

    def visit(m):
        state[m] = "open"
        stack.append(m)
        for t in sorted(graph[m]):
            if state.get(t) == "open":
                return stack[stack.index(t):] + [t]
            if t not in state:
                cycle = visit(t)
                if cycle:
                    return cycle
        stack.pop()
        state[m] = "done"
        return None

    for m in sorted(graph):
        if m not in state:
            cycle = visit(m)
            assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_core_is_the_bottom(graph):
    # The contract's layer reads nothing but itself (and the standard library / amaranth).
    assert all(t.startswith("core") for m, ts in graph.items() if m.startswith("core") for t in ts)
    assert {"core.errors", "core.config", "core.contract", "core.descriptor", "core.regmap"} <= set(graph)


def test_the_checker_sees_hidden_imports(tmp_path):
    # An import inside a function is an edge like any other.
    path = tmp_path / "x.py"
    path.write_text("def f():\n    from ..host import accelerator\n")
    modules = {"hdl.x": path, "host.accelerator": path}
    assert _imports("hdl.x", path, modules) == {"host.accelerator"}
