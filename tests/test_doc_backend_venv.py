"""The backend-author guide is enough: `pallas-looped` is built from the files
in docs/backend-authors.md alone, outside this repository, in a NEW virtual
environment next to the frontend. It must be listed, lower kernels itself and
pass the conformance suite; and the suite must catch its faulty variants (one
ignoring input_output_aliases, one computing float64 in float32, one
unavailable on this machine).

The venv is made by ``fresh_venv`` (uv when on PATH; the frontend and the
backend with --no-deps, the backend editable so that the variants can rewrite it).
"""

import re

import pytest

from fresh_venv import REPO, make, run as _run

GUIDE = REPO / "docs" / "backend-authors.md"
MODULE = "pallas_looped/__init__.py"


def guide_files() -> dict[str, str]:
    """``<!-- file: PATH -->`` followed by a fenced block -> {PATH: contents}."""
    pattern = re.compile(r"<!-- file: (\S+) -->\n```[a-z]*\n(.*?)```", re.S)
    return dict(pattern.findall(GUIDE.read_text()))


# made once: one xdist worker runs the whole module (--dist loadfile)
@pytest.fixture(scope="module")
def looped(tmp_path_factory):
    root = tmp_path_factory.mktemp("looped")
    project = root / "pallas-looped"
    files = guide_files()
    assert set(files) == {MODULE, "pyproject.toml"}, sorted(files)
    for rel, text in files.items():
        (project / rel).parent.mkdir(parents=True, exist_ok=True)
        (project / rel).write_text(text)
    py, bindir, env = make(root, extra=["setuptools"], editable=[project])
    return py, bindir, env, root, project


def _suite(looped, *extra):
    py, bindir, env, root, project = looped
    return _run([str(py), "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rfs", "--pyargs",
                 "pallas_frontend.testing", "--pallas-backend=looped", *extra],
                ok=False, env=env, cwd=root)


def _variant(looped, old: str, new: str):
    """Rewrites the (editable) backend module; returns a function restoring it."""
    path = looped[4] / MODULE
    text = path.read_text()
    assert old in text, old
    path.write_text(text.replace(old, new))
    return lambda: path.write_text(text)


def test_listed_and_lowering_on_its_own(looped):
    py, bindir, env, root, project = looped
    out = _run([str(bindir / "pallas"), "backends"], env=env, cwd=root).stdout
    line = next(ln for ln in out.splitlines() if ln.startswith("looped "))
    assert "pallas-looped" in line and "yes, natively (cpu)" in line
    code = """
import sys, numpy as np, jax, jax.numpy as jnp
import pallas_frontend as pl, pallas_looped
from pallas_frontend import registry
calls = []
real = registry.get_backend("interpret").lower
registry.get_backend("interpret").lower = lambda *a: calls.append(1) or real(*a)
def body(x, o):
    o[...] = x[...] * 3
x = np.random.default_rng().standard_normal(1000).astype(np.float32)
f = pl.pallas_call(body, jax.ShapeDtypeStruct((1000,), jnp.float32), grid=(8,),
                   in_specs=[pl.BlockSpec((128,), lambda i: (i,))],
                   out_specs=pl.BlockSpec((128,), lambda i: (i,)),
                   compiler_params=pallas_looped.CompilerParams())
np.testing.assert_allclose(f(x), 3 * x.astype(np.float64), rtol=1e-6)
print("interpreter calls:", len(calls))
"""
    assert _run([str(py), "-c", code], env=env, cwd=root).stdout.split() == \
        ["interpreter", "calls:", "0"]


def test_conformance_suite_passes(looped):
    out = _suite(looped)
    last = out.stdout.strip().splitlines()[-1]
    assert out.returncode == 0 and " passed" in last and "failed" not in last, out.stdout[-4000:]


def test_suite_catches_a_backend_ignoring_aliases(looped):
    restore = _variant(looped, "start = operands[aliased[k]] if k in aliased else jnp.zeros(",
                       "start = jnp.zeros(")
    try:
        out = _suite(looped, "-k", "alias")
    finally:
        restore()
    assert out.returncode == 1, out.stdout[-3000:]
    assert "FAILED" in out.stdout and "test_aliased_output_keeps_what_no_grid_point_writes" \
        in out.stdout


def test_suite_catches_float64_computed_in_float32(looped):
    restore = _variant(looped, "ins = [_padded(x, m) for x, m in zip(operands",
                       "ins = [_padded(x.astype(jnp.float32).astype(x.dtype), m) for x, m in "
                       "zip(operands")
    try:
        out = _suite(looped, "-k", "float64")
    finally:
        restore()
    assert out.returncode == 1, out.stdout[-3000:]
    assert "test_float64_is_computed_in_float64" in out.stdout


def test_unavailable_backend_fails_the_run_unless_allowed(looped):
    restore = _variant(looped, "    def lower(self, kernel, ctx, *args):",
                       "    def is_available(self):\n        return False, 'no device here'\n\n"
                       "    def lower(self, kernel, ctx, *args):")
    try:
        failed = _suite(looped, "-k", "vector_add or contract")
        allowed = _suite(looped, "-k", "vector_add or contract", "--pallas-allow-unavailable")
    finally:
        restore()
    assert failed.returncode == 1 and "no device here" in failed.stdout, failed.stdout[-3000:]
    assert allowed.returncode == 0, allowed.stdout[-3000:]
