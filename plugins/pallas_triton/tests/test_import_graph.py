"""The plugin's modules form no import cycle (lazy, function-level imports included),
and it reaches the frontend only through backend_api and the public API."""

import ast
from pathlib import Path

import pallas_triton

PACKAGE = Path(pallas_triton.__file__).parent
ALLOWED_FRONTEND = {"pallas_frontend", "pallas_frontend.backend_api"}


def _imports(path):
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
            out.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return out


def _graph():
    modules = {f"pallas_triton.{p.stem}": p for p in PACKAGE.glob("*.py") if p.stem != "__init__"}
    return {name: {m for m in _imports(path) if m in modules} for name, path in modules.items()}


def test_no_import_cycle():
    graph = _graph()
    state = {}

    def visit(node, stack):
        state[node] = "open"
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                raise AssertionError("import cycle: " + " -> ".join(stack + [node, nxt]))
            if nxt not in state:
                visit(nxt, stack + [node])
        state[node] = "done"
    for node in sorted(graph):
        if node not in state:
            visit(node, [])


def test_frontend_reached_only_through_its_contract():
    for path in PACKAGE.glob("*.py"):
        for m in _imports(path):
            if m.startswith("pallas_frontend"):
                root = m if m in ALLOWED_FRONTEND else m.rsplit(".", 1)[0]
                assert root in ALLOWED_FRONTEND, f"{path.name} imports {m}"
            assert not m.startswith("jax._src") or path.name == "_jax_compat.py", (path.name, m)
