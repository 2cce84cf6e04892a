"""The house rules on imports, checked on the source of every distribution:
no import cycle (module-level and function-level imports both count; only
``if TYPE_CHECKING:`` blocks, which never run, are left out), the contract
(``backend_api``, ``specs``) imports no implementation, and a plugin imports
from the frontend only ``pallas_frontend.backend_api`` and the public API."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import pallas_frontend

REPO = Path(__file__).resolve().parents[1]
DISTRIBUTIONS = {
    "pallas-frontend": REPO / "pallas_frontend",
    "pallas-triton": REPO / "plugins" / "pallas_triton" / "pallas_triton",
    "pallas-tpu": REPO / "plugins" / "pallas_tpu" / "pallas_tpu",
    "pallas-mgpu": REPO / "plugins" / "pallas_mgpu" / "pallas_mgpu",
    "pallas-example-backend": REPO / "examples" / "example_backend" / "src" /
                              "pallas_example_backend",
}
# A plugin may use these modules of the frontend, and the names in pallas_frontend.__all__.
PLUGIN_MAY_IMPORT = {"pallas_frontend", "pallas_frontend.backend_api"}
# The contract's own modules, and what they may import from the frontend.
CONTRACT_MAY_IMPORT = {
    "pallas_frontend.backend_api": {"pallas_frontend._jax_compat", "pallas_frontend.specs",
                                    "pallas_frontend.hookspecs", "pallas_frontend.grid_analysis",
                                    "pallas_frontend.kernel_arrays"},
    "pallas_frontend.specs": set(),
    "pallas_frontend.hookspecs": set(),
}


def _modules(root: Path) -> dict[str, Path]:
    """Dotted module name -> file, for the package at ``root``."""
    out = {}
    for path in root.rglob("*.py"):
        parts = path.relative_to(root.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(path: Path, module: str, is_package: bool) -> list[tuple[str, list[str], int]]:
    """(imported module, names imported from it, line) of every import that can run."""
    found = []

    def visit(node):
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.extend((a.name, [], node.lineno) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                pkg = module.split(".") if is_package else module.split(".")[:-1]
                pkg = pkg[:len(pkg) - node.level + 1]
                base = ".".join(pkg + ([node.module] if node.module else []))
            found.append((base, [a.name for a in node.names], node.lineno))
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text(), str(path)))
    return found


def _graph(root: Path) -> tuple[dict[str, set[str]], dict[str, list[tuple[str, int]]]]:
    """Edges between the modules of one distribution, and every import of the frontend."""
    mods = _modules(root)
    edges: dict[str, set[str]] = {m: set() for m in mods}
    frontend_uses: dict[str, list[tuple[str, int]]] = {m: [] for m in mods}
    for mod, path in mods.items():
        for target, names, line in _imports(path, mod, path.name == "__init__.py"):
            targets = [f"{target}.{n}" for n in names if f"{target}.{n}" in mods] or [target]
            for t in targets:
                # A module's own ancestor packages are initialised before it
                # anyway: importing a name from them is no edge of a cycle.
                if t in mods and t != mod and not mod.startswith(t + "."):
                    edges[mod].add(t)
            if target.split(".")[0] == "pallas_frontend":
                frontend_uses[mod].extend(
                    (f"{target}.{n}" if f"{target}.{n}" in _FRONTEND_MODULES else target, line)
                    for n in (names or [""]))
    return edges, frontend_uses


_FRONTEND_MODULES = set(_modules(DISTRIBUTIONS["pallas-frontend"]))


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def strong(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            strong(v)
    return out


def test_the_graph_finds_a_planted_cycle(tmp_path):
    pkg = tmp_path / "planted"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from planted import b\n")
    (pkg / "b.py").write_text("def f():\n    from planted.a import x\n")
    (pkg / "c.py").write_text("from typing import TYPE_CHECKING\n"
                              "if TYPE_CHECKING:\n    from planted import a\n")
    (pkg / "d.py").write_text("from . import c\n")
    edges, _ = _graph(pkg)
    assert _cycles(edges) == [["planted.a", "planted.b"]]
    assert edges["planted.c"] == set() and edges["planted.d"] == {"planted.c"}


# Known cycles, each with its reason (none today: the Triton plugin's
# codegen <-> emitters <-> schedule cycle is gone, issue 14).
_KNOWN_CYCLES: dict[str, str] = {}


@pytest.mark.parametrize("dist", [pytest.param(d, marks=pytest.mark.xfail(reason=_KNOWN_CYCLES[d]))
                                  if d in _KNOWN_CYCLES else d for d in sorted(DISTRIBUTIONS)])
def test_no_import_cycle(dist):
    edges, _ = _graph(DISTRIBUTIONS[dist])
    cycles = _cycles(edges)
    assert not cycles, f"{dist} has import cycles: " + "; ".join(" <-> ".join(c) for c in cycles)


def test_the_contract_imports_no_implementation():
    edges, uses = _graph(DISTRIBUTIONS["pallas-frontend"])
    for mod, allowed in CONTRACT_MAY_IMPORT.items():
        bad = {t for t in edges[mod] if t not in allowed}
        assert not bad, f"{mod} imports {sorted(bad)}; the contract must stay a leaf"
    # and what the contract reaches transitively is no interpreter, registry or tracing
    seen, todo = set(), ["pallas_frontend.backend_api"]
    while todo:
        m = todo.pop()
        if m not in seen:
            seen.add(m)
            todo.extend(edges[m])
    assert not [m for m in seen if m.startswith("pallas_frontend.interpreter")
                or m in ("pallas_frontend.registry", "pallas_frontend.tracing",
                         "pallas_frontend.launch", "pallas_frontend.call_primitive")], seen


@pytest.mark.parametrize("dist", sorted(d for d in DISTRIBUTIONS if d != "pallas-frontend"))
def test_plugins_import_only_the_contract_and_the_public_api(dist):
    _, uses = _graph(DISTRIBUTIONS[dist])
    public = set(pallas_frontend.__all__) | {"__version__"}
    bad = []
    for mod, imports in uses.items():
        for target, line in imports:
            if target in PLUGIN_MAY_IMPORT:
                continue
            parent, _, name = target.rpartition(".")
            if parent == "pallas_frontend" and name in public:
                continue
            bad.append(f"{mod}:{line} imports {target}")
    assert not bad, f"{dist} reaches into the frontend: " + "; ".join(bad)
