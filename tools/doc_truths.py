"""Where the true values of the docs' numbers come from (``tools/doc_facts.py``
holds each against a page): pyproject files, tox.ini, constants and defaults read
from the source without importing it, a generated page, and, where only running
says it, a small run (the conformance suite's size, a semaphore's start value)."""

from __future__ import annotations

import ast
import configparser
import functools
import inspect
import math
import operator
import re
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _pyproject(path: str = "pyproject.toml") -> dict:
    return tomllib.loads((REPO / path).read_text())["project"]


def _lower_bound(requirement: str) -> str:
    return re.search(r">=\s*([\d.]+)", requirement)[1]


def _dependency(project: dict, name: str, extra: str | None = None) -> str:
    reqs = project["dependencies"] if extra is None else project["optional-dependencies"][extra]
    return next(r for r in reqs if re.match(rf"{re.escape(name)}\b", r))


def api_version() -> tuple[int, int]:
    text = (REPO / "pallas_frontend" / "contract.py").read_text()
    found = re.search(r"^API_VERSION: tuple\[int, int\] = \((\d+), (\d+)\)", text, re.M)
    major, minor = found.groups()
    return int(major), int(minor)


def api_history() -> set[str]:
    """The minors the contract's comment says what they added ("1.1: ...")."""
    text = (REPO / "pallas_frontend" / "contract.py").read_text()
    return set(re.findall(r"# .*?\b(\d+\.\d+): ", text)) | set(re.findall(r"; (\d+\.\d+): ", text))


def python_min() -> str:
    return _lower_bound(_pyproject()["requires-python"])


def python_of_matrix() -> str:
    """The Python the test matrix runs on: .python-version's (pyenv), major.minor."""
    return ".".join((REPO / ".python-version").read_text().split(".")[:2])


def jax_window() -> tuple[str, str]:
    """(oldest, first unsupported) JAX series of the frontend's requirement."""
    requirement = _dependency(_pyproject(), "jax")
    upper = re.search(r"<\s*([\d.]+)", requirement)[1]
    return _lower_bound(requirement), upper


def jax_series_span() -> tuple[str, str]:
    """(oldest, newest) JAX series the requirement admits: below <0.13 the newest is
    0.12; below <0.12.1 (a patch release left out) it is 0.12 too."""
    lo, hi = jax_window()
    parts = [int(p) for p in hi.split(".")]
    newest = parts[:2] if len(parts) > 2 and any(parts[2:]) else [parts[0], parts[1] - 1]
    return lo, ".".join(map(str, newest))


def jax_series_in_window(stated: str) -> str | None:
    """A JAX series a page names must lie in the supported window."""
    lo, hi = jax_window()
    key = lambda v: tuple(int(p) for p in v.split("."))  # noqa: E731
    return None if key(lo) <= key(stated) < key(hi) else \
        f"JAX {stated} is outside the window jax>={lo},<{hi}"


def dist_version(dist: str) -> str:
    path = "pyproject.toml" if dist == "pallas-frontend" else \
        f"plugins/{dist.replace('-', '_')}/pyproject.toml"
    return _pyproject(path)["version"]


def frontend_bound() -> tuple[str, str]:
    """(lower, upper) of the plugins' pallas-frontend requirement."""
    req = _dependency(_pyproject("plugins/pallas_triton/pyproject.toml"), "pallas-frontend")
    return re.search(r">=([\d.]+),<([\d.]+)", req).groups()


def plugin_bound() -> tuple[str, str]:
    req = _dependency(_pyproject(), "pallas-triton", "triton")
    return re.search(r">=([\d.]+),<([\d.]+)", req).groups()


def tox_envs() -> list[str]:
    ini = configparser.ConfigParser(interpolation=None)
    ini.read(REPO / "tox.ini")
    return [e.strip() for e in ini["tox"]["envlist"].split(",")]


def frontend_envs() -> list[str]:
    """The envlist's envs that run the frontend's tests/ folder."""
    ini = configparser.ConfigParser(interpolation=None)
    ini.read(REPO / "tox.ini")
    # (the JAX-window envs, jax010-* and jax011-*, come from one generative section)
    return [e for e in tox_envs() if ini.has_section(f"testenv:{e}") and re.search(
        r"pytest .*--dist loadfile tests\b", ini[f"testenv:{e}"].get("commands", ""))]


def plugin_count() -> int:
    return len([p for p in (REPO / "plugins").glob("pallas_*") if (p / "pyproject.toml").is_file()])


def jax_ops_cpu_rows() -> str:
    return re.search(r"\*\*Rows where JAX works: (\d+)",
                     (REPO / "docs" / "jax-ops.md").read_text())[1]


def jax_ops_compiled_cells() -> str:
    line = re.search(r"\*\*TPU v5e: JAX compiles.*", (REPO / "docs" / "jax-ops.md").read_text())[0]
    return str(sum(int(n) for n in re.findall(r"JAX compiles (\d+)", line)))


def jax_suite_totals() -> tuple[str, str]:
    row = re.search(r"\| \*\*total\*\* \| \*\*(\d+)\*\* \| \*\*\d+\*\* \| \*\*\d+\*\* \| "
                    r"\*\*(\d+)\*\*", (REPO / "docs" / "jax-suite.md").read_text())
    return row[1], row[2]


def import_timeout_default() -> str:
    text = (REPO / "pallas_frontend" / "env_config.py").read_text()
    return f"{float(re.search(r'^DEFAULT_IMPORT_TIMEOUT = ([\d.]+)', text, re.M)[1]):g}"


def progress_every() -> str:
    text = (REPO / "tools" / "run_tests.py").read_text()
    return f"{float(re.search(r'--every.*?default=([\d.]+)', text)[1]):g}"


def slowest_default() -> str:
    text = (REPO / "tools" / "run_tests.py").read_text()
    return re.search(r'--slowest.*?default=(\d+)', text)[1]


def constant(path: str, name: str):
    """The value of a module-level ``NAME = <literal expression>`` of a source file,
    read without importing it (a plugin's imports may need a GPU stack)."""
    tree = ast.parse((REPO / path).read_text())
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else \
            [node.target] if isinstance(node, ast.AnnAssign) and node.value else []
        for target in targets:
            if isinstance(target, ast.Name) and target.id == name:
                return _literal(node.value)
            if isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple):
                for element, value in zip(target.elts, node.value.elts):
                    if isinstance(element, ast.Name) and element.id == name:
                        return _literal(value)
    raise LookupError(f"{path} assigns no {name}")


def _literal(node: ast.expr):
    ops = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
           ast.FloorDiv: operator.floordiv, ast.LShift: operator.lshift, ast.Pow: operator.pow}
    if isinstance(node, ast.BinOp) and type(node.op) in ops:
        return ops[type(node.op)](_literal(node.left), _literal(node.right))
    return ast.literal_eval(node)


def source_default(path: str, function: str, parameter: str):
    """A keyword default of a function in a source file (a path under the repo, or
    ``jax:`` and a path under the installed jax package), read without importing."""
    if path.startswith("jax:"):
        import importlib.util
        root = Path(importlib.util.find_spec("jax").origin).parent
        text = (root / path[4:]).read_text()
    else:
        text = (REPO / path).read_text()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.FunctionDef) and node.name == function:
            args = node.args
            positional = args.posonlyargs + args.args
            pairs = list(zip(positional[len(positional) - len(args.defaults):], args.defaults))
            pairs += [(a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None]
            for arg, default in pairs:
                if arg.arg == parameter:
                    return _literal(default)
    raise LookupError(f"{path}: no default for {function}({parameter}=...)")


def pallas_frontend_default(function: str, parameter: str):
    """The default of a parameter of a public ``pallas_frontend`` callable."""
    import pallas_frontend
    target = getattr(pallas_frontend, function)
    return inspect.signature(target).parameters[parameter].default


@functools.cache
def conformance_test_count() -> int:
    """The tests the conformance suite (``pallas_frontend.testing``) collects for any
    backend: each test function once, a parametrized one once per value."""
    import importlib
    count = 0
    for file in sorted((REPO / "pallas_frontend" / "testing").glob("test_*.py")):
        module = importlib.import_module(f"pallas_frontend.testing.{file.stem}")
        for name, fn in vars(module).items():
            if not (name.startswith("test_") and callable(fn)):
                continue
            sizes = [len(list(mark.args[1])) for mark in getattr(fn, "pytestmark", [])
                     if mark.name == "parametrize"]
            count += math.prod(sizes) if sizes else 1
    return count


@functools.cache
def jax_pallas_names() -> tuple[int, int]:
    """(JAX's public ``jax.experimental.pallas`` names, how many pallas_frontend has)."""
    import types
    import warnings
    import jax.experimental.pallas as jax_pallas
    import pallas_frontend
    names = [n for n in dir(jax_pallas) if not n.startswith("_")
             and not isinstance(getattr(jax_pallas, n), types.ModuleType)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return len(names), sum(hasattr(pallas_frontend, n) for n in names)


def jax_triton_style_calls() -> int:
    """docs/jax-ops.md's CPU rows of JAX's Triton-style GPU kernels (gpu.*, not *_mgpu),
    a forward and its grad counted once."""
    text = (REPO / "docs" / "jax-ops.md").read_text().split("## ", 2)[1]
    return len({re.sub(r" grad$", "", name) for name in
                re.findall(r"^\| (gpu\.[^ |]+(?: grad)?) \| \w+ \| ok \| ok \|", text, re.M)
                if "mgpu" not in name})


_DOT_PATHS = "plugins/pallas_mgpu/pallas_mgpu/dot_paths.py"


def dot_tiles() -> dict[str, str]:
    """The tiles dot_paths.py accepts: WGMMA's m and n steps, mma.sync's m and n (one warp)."""
    text = (REPO / _DOT_PATHS).read_text()
    wgmma = re.search(r"if m % (\d+) == 0 and n % (\d+) == 0 and \(lhs_dtype", text)
    mma = re.search(r"if m % \((\d+) \* w\) == 0 and n % \((\d+) \* \(4 // w\)\) == 0", text)
    return {"wgmma_m": wgmma[1], "wgmma_n": wgmma[2], "mma_m": mma[1], "mma_n": mma[2]}


def tox_setenv(name: str) -> str:
    ini = configparser.ConfigParser(interpolation=None)
    ini.read(REPO / "tox.ini")
    return re.search(rf"^\s*{name}\s*=\s*(\S+)", ini["testenv"]["setenv"], re.M)[1]


def jax_ops_jax_version() -> str:
    """The jax release docs/jax-ops.md (generated) was run with."""
    return re.search(r"^jax ([\d.]+)\.$", (REPO / "docs" / "jax-ops.md").read_text(), re.M)[1]


def tpu_sc_names() -> int:
    import types
    import jax.experimental.pallas.tpu_sc as tpu_sc
    return len([n for n in dir(tpu_sc) if not n.startswith("_")
                and not isinstance(getattr(tpu_sc, n), types.ModuleType)])


def jax_names_provided(jax_module: str, plugin: str) -> int:
    """How many public names of a JAX Pallas module the plugin has."""
    import importlib
    import types
    import warnings
    jax_mod, ours = importlib.import_module(jax_module), importlib.import_module(plugin)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return sum(hasattr(ours, n) for n in dir(jax_mod) if not n.startswith("_")
                   and not isinstance(getattr(jax_mod, n), types.ModuleType))


@functools.cache
def interpreter_semaphore_start() -> int:
    """The value the built-in interpreter's semaphores start at, read by running two
    kernels: a scratch semaphore and a ``pl.get_global`` one, each read before any signal."""
    import jax
    import jax.numpy as jnp
    import pallas_frontend as pl

    def scratch_kernel(o_ref, sem):
        o_ref[0] = pl.semaphore_read(sem)

    def global_kernel(o_ref):
        o_ref[0] = pl.semaphore_read(pl.get_global(pl.ANY((), jnp.int32)))

    out = jax.ShapeDtypeStruct((1,), jnp.int32)
    starts = {int(pl.pallas_call(scratch_kernel, out_shape=out, interpret=True,
                                 scratch_shapes=[pl.ANY((), jnp.int32)])()[0]),
              int(pl.pallas_call(global_kernel, out_shape=out, interpret=True)()[0])}
    return starts.pop() if len(starts) == 1 else -1


def gpu_aot_conformance_cases() -> int:
    """The conformance kernels plugins/pallas_triton/tests/gpu_aot_cases.py compiles: the
    entries of the first dict literal of its cases()."""
    tree = ast.parse((REPO / "plugins/pallas_triton/tests/gpu_aot_cases.py").read_text())
    cases = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "cases")
    return len(next(n for n in ast.walk(cases) if isinstance(n, ast.Dict)).keys)


def sparse_core_info(chip: str):
    """JAX's SparseCore facts of one chip (``v5p``, ``v6e``, ``tpu7x``)."""
    from jax.experimental.pallas import tpu as pltpu
    version = {"v5p": "TPU_V5P", "v6e": "TPU_V6E", "tpu7x": "TPU_7X"}[chip]
    return pltpu.get_tpu_info_for_chip(getattr(pltpu.ChipVersion, version), 1).sparse_core
