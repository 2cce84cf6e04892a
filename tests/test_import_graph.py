"""The house rules on imports, checked on the source of every distribution:
no import cycle, counting every import (module level, inside functions and
methods, under ``if TYPE_CHECKING:``, ``importlib.import_module`` of a named
module); the contract's data types (``pallas_frontend.contract``) import no
other frontend module; the rest of the contract (``backend_api`` and the
modules it re-exports) imports no implementation; a plugin imports from the
frontend only ``pallas_frontend.backend_api`` and the public API; no frontend
module is over 450 lines."""

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
# The contract's leaf: the data types. It imports no module of the frontend at
# all (nor the package), not even under TYPE_CHECKING or inside a function.
CONTRACT_LEAF = "pallas_frontend.contract"
# The contract's other modules, and what they may import from the frontend.
CONTRACT_MAY_IMPORT = {
    "pallas_frontend.backend_api": {"pallas_frontend.contract", "pallas_frontend.backend_base",
                                    "pallas_frontend.backend_helpers",
                                    "pallas_frontend.kernel_arrays", "pallas_frontend.hookspecs",
                                    "pallas_frontend.run_gate"},
    "pallas_frontend.backend_base": {"pallas_frontend.contract", "pallas_frontend.backend_helpers",
                                     "pallas_frontend._jax_compat",
                                     "pallas_frontend.device_timing"},
    # the default timing hook: jax and numpy only (a TPU host loads it by file path)
    "pallas_frontend.device_timing": set(),
    "pallas_frontend.backend_helpers": {"pallas_frontend.contract", "pallas_frontend._jax_compat",
                                        "pallas_frontend.axis_binding", "pallas_frontend.frames",
                                        "pallas_frontend.scopes",
                                        "pallas_frontend.grid_analysis",
                                        "pallas_frontend.grid_context"},
    # a body traced inside a kernel gets pl.run_scoped in its flat form
    # (the state discharge rule of a run_scoped equation uses discharge.py)
    "pallas_frontend.scopes": {"pallas_frontend._jax_compat", "pallas_frontend.discharge"},
    # a body traced inside a kernel reads the kernel's axis_index values
    "pallas_frontend.axis_binding": {"pallas_frontend._jax_compat"},
    # a plugin's frames leave tracebacks (kernel_primitive hides its package)
    "pallas_frontend.frames": {"pallas_frontend._jax_compat"},
    "pallas_frontend.grid_context": set(),
    "pallas_frontend.kernel_arrays": {"pallas_frontend.contract", "pallas_frontend._jax_compat",
                                      "pallas_frontend.discharge",
                                      "pallas_frontend.specs"},
    "pallas_frontend.specs": {"pallas_frontend.contract"},
    "pallas_frontend.hookspecs": set(),
    # interpreted runs one at a time: pure Python
    "pallas_frontend.run_gate": set(),
}
# No module of the frontend grows past this many lines (one concept per module).
MAX_MODULE_LINES = 450


def _modules(root: Path) -> dict[str, Path]:
    """Dotted module name -> file, for the package at ``root``."""
    out = {}
    for path in root.rglob("*.py"):
        parts = path.relative_to(root.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _module_constants(tree: ast.Module) -> dict[str, str]:
    """Module-level ``NAME = "string"`` assignments (for ``import_module(NAME)``)."""
    return {t.id: node.value.value for node in tree.body if isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
            for t in node.targets if isinstance(t, ast.Name)}


def _imports(path: Path, module: str, is_package: bool) -> list[tuple[str, list[str], int]]:
    """(imported module, names imported from it, line) of every import in the file:
    module level, inside functions and classes, under ``if TYPE_CHECKING:`` (a
    circle a type checker must untangle is a circle), and ``importlib.import_module``
    of a string literal or of a module-level string constant."""
    tree = ast.parse(path.read_text(), str(path))
    constants = _module_constants(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((a.name, [], node.lineno) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                pkg = module.split(".") if is_package else module.split(".")[:-1]
                pkg = pkg[:len(pkg) - node.level + 1]
                base = ".".join(pkg + ([node.module] if node.module else []))
            found.append((base, [a.name for a in node.names], node.lineno))
        elif isinstance(node, ast.Call) and node.args and (
                getattr(node.func, "attr", None) == "import_module"
                or getattr(node.func, "id", None) in ("import_module", "__import__")):
            arg = node.args[0]
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                found.append((arg.value, [], node.lineno))
            elif isinstance(arg, ast.Name) and arg.id in constants:
                found.append((constants[arg.id], [], node.lineno))
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
    (pkg / "e.py").write_text("import importlib\nHOME = 'planted.d'\n"
                              "def load():\n    return importlib.import_module(HOME)\n")
    (pkg / "f.py").write_text("import importlib\nimportlib.import_module('planted.g')\n")
    (pkg / "g.py").write_text("class C:\n    def m(self):\n        import planted.f\n")
    edges, _ = _graph(pkg)
    # a <-> b (one import inside a function); c -> a (TYPE_CHECKING) is read
    # but closes no circle; f <-> g (import_module of a literal, an import in a method)
    assert _cycles(edges) == [["planted.a", "planted.b"], ["planted.f", "planted.g"]]
    assert edges["planted.c"] == {"planted.a"} and edges["planted.d"] == {"planted.c"}
    assert edges["planted.e"] == {"planted.d"}


def test_the_graph_finds_a_circle_closed_under_type_checking(tmp_path):
    pkg = tmp_path / "typed"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from typed.b import f\n")
    (pkg / "b.py").write_text("from typing import TYPE_CHECKING\n"
                              "if TYPE_CHECKING:\n    from typed.a import X\n")
    assert _cycles(_graph(pkg)[0]) == [["typed.a", "typed.b"]]


# Known cycles, each with its reason (none today: the Triton plugin's
# codegen <-> emitters <-> schedule cycle is gone, issue 14).
_KNOWN_CYCLES: dict[str, str] = {}


@pytest.mark.parametrize("dist", [pytest.param(d, marks=pytest.mark.xfail(reason=_KNOWN_CYCLES[d]))
                                  if d in _KNOWN_CYCLES else d for d in sorted(DISTRIBUTIONS)])
def test_no_import_cycle(dist):
    edges, _ = _graph(DISTRIBUTIONS[dist])
    cycles = _cycles(edges)
    assert not cycles, f"{dist} has import cycles: " + "; ".join(" <-> ".join(c) for c in cycles)


def test_the_contract_leaf_imports_no_frontend_module():
    _, uses = _graph(DISTRIBUTIONS["pallas-frontend"])
    assert CONTRACT_LEAF in uses, f"{CONTRACT_LEAF} is gone: update this test with the contract"
    bad = [f"line {line}: {target}" for target, line in uses[CONTRACT_LEAF]]
    assert not bad, f"{CONTRACT_LEAF} must import no frontend module, but imports: {bad}"


def test_the_contract_imports_no_implementation():
    edges, _ = _graph(DISTRIBUTIONS["pallas-frontend"])
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
                         "pallas_frontend.launch", "pallas_frontend.call_primitive",
                         "pallas_frontend.discovery")], seen


def test_frontend_modules_stay_small():
    big = {str(p.relative_to(REPO)): n for p in DISTRIBUTIONS["pallas-frontend"].rglob("*.py")
           if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES}
    assert not big, (f"modules over {MAX_MODULE_LINES} lines: {big}; split them by concept "
                     "(docs/contributing.md)")


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
