"""The import-swapped copy of a kernel library and the static part of the port
check (``tools/ecosystem.py``).

- ``swapped_copy(src, package, dest)``: the library's package copied to
  ``dest`` with only its Pallas imports rewritten to ours (the rewriting of
  ``tools/jax_ops_copy.py``: JAX's public Pallas modules -> our distributions,
  ``jax.experimental.pallas.ops`` -> the swapped copy of JAX's kernels).
  Returns the files the swap changed: the library's Pallas files.
- ``missing_names(path)``: every ``alias.NAME`` a Pallas file uses, for each
  alias bound to one of JAX's Pallas modules, that JAX's module has and ours
  lacks (and the ones JAX's installed module lacks too: a library newer than
  the installed jax).
"""

from __future__ import annotations

import ast
import importlib
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import jax_ops_copy  # noqa: E402  (the import rewriting shared with tools/jax_ops.py)
import jax_suite  # noqa: E402

# modules that are left as they are: no copy of them exists on our side
UNSWAPPED = ("jax.experimental.pallas.fuser", "jax._src.pallas")


def swapped_copy(src: Path, package: str, dest: Path) -> list[str]:
    """Copies ``src/package`` to ``dest/package``; returns the package-relative
    paths of the .py files whose Pallas imports were rewritten."""
    target = dest / package
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(src / package, target,
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc", ".git"))
    changed = []
    for path in sorted(target.rglob("*.py")):
        text = path.read_text(errors="replace")
        new = jax_ops_copy.rewrite(text)
        if new != text:
            path.write_text(new)
            changed.append(str(path.relative_to(dest)))
    return changed


def _module_of(node: ast.AST) -> dict[str, str]:
    """{alias: JAX module} for one import statement naming a Pallas module."""
    out = {}
    if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
        for a in node.names:
            full = f"{node.module}.{a.name}"
            if full in jax_suite.OUR_MODULES:
                out[a.asname or a.name] = full
    elif isinstance(node, ast.Import):
        for a in node.names:
            if a.name in jax_suite.OUR_MODULES and a.asname:
                out[a.asname] = a.name
    return out


def pallas_aliases(tree: ast.AST) -> dict[str, str]:
    aliases: dict[str, str] = {}
    for node in ast.walk(tree):
        aliases.update(_module_of(node))
    return aliases


def used_names(source: str) -> dict[str, set[str]]:
    """{JAX module: names used as ``alias.NAME``} in one file."""
    tree = ast.parse(source)
    aliases = pallas_aliases(tree)
    used: dict[str, set[str]] = {}
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                and node.value.id in aliases):
            used.setdefault(aliases[node.value.id], set()).add(node.attr)
    return used


def _load(name: str):
    try:
        return importlib.import_module(name)
    except Exception:   # a module that does not import here has no names
        return None


def missing_names(source: str) -> tuple[list[str], list[str]]:
    """(names JAX has and ours lacks, names JAX's installed module lacks too),
    each spelled ``our_module.NAME``."""
    ours_missing, both_missing = [], []
    for jax_mod, names in sorted(used_names(source).items()):
        ours_name = jax_suite.OUR_MODULES[jax_mod]
        theirs, ours = _load(jax_mod), _load(ours_name)
        for n in sorted(names):
            if ours is not None and hasattr(ours, n):
                continue
            label = f"{ours_name}.{n}"
            (ours_missing if theirs is not None and hasattr(theirs, n) else
             both_missing).append(label)
    return ours_missing, both_missing


def unswapped_imports(source: str) -> list[str]:
    """Pallas modules the swap leaves to JAX (private modules, the fuser)."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module:
            mods = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            mods = [a.name for a in node.names]
        else:
            continue
        found.update(u for m in mods for u in UNSWAPPED if m == u or m.startswith(u + "."))
    return sorted(found)
