"""tools/ecosystem.py (the port check for kernel libraries, docs/ecosystem.md)
on a tiny library written here, so that CI needs neither network nor the real
libraries: the swapped copy changes only the Pallas imports, a kernel runs
from the original under JAX and from the copy under ours on the same random
input, a wrong result and a name ours lacks are reported as such, and an
absent source is a skip with the reason."""

from __future__ import annotations

import json
import sys
import textwrap
import types
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
import ecosystem  # noqa: E402
import ecosystem_page  # noqa: E402
import ecosystem_scan  # noqa: E402

KERNEL = '''\
import jax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from fakelib import helpers

def affine(x, *, interpret):
    def body(x_ref, o_ref):
        o_ref[...] = x_ref[...] * helpers.SCALE + 1.0
    spec = pl.BlockSpec((8, 128), lambda i: (i, 0))
    return pl.pallas_call(body, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                          grid=(x.shape[0] // 8,), in_specs=[spec], out_specs=spec,
                          interpret=interpret)(x)

def memory_space():
    return pltpu.VMEM
'''

CATALOG = '''\
import numpy as np
from ecosystem_cases import Case, Library

def _inputs(rng):
    return (rng.standard_normal((16, 128)).astype(np.float32),)

def _call(mod, args, run):
    return mod.affine(args[0], interpret=True)

def _call_off(mod, args, run):     # ours differs from JAX by a constant
    return _call(mod, args, run) + (1.0 if run.ours else 0.0)

LIBRARIES = (Library(name="fakelib", repo="example/fakelib", env="PALLAS_FAKELIB_SRC",
                     package="fakelib", requires="nothing",
                     cases=(Case("affine", "fakelib.kern", _inputs, _call, kind="gpu",
                                 modes=("interpret",),
                                 reference=lambda args: [3.0 * args[0].astype(float) + 1.0]),
                            Case("affine off", "fakelib.kern", _inputs, _call_off, kind="gpu",
                                 modes=("interpret",))),
                     not_run={"the rest": "nothing else here"}),)
'''


def _fake_library(root: Path) -> Path:
    pkg = root / "src" / "fakelib"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "helpers.py").write_text("SCALE = 3.0\n")
    (pkg / "kern.py").write_text(KERNEL)
    return root / "src"


def _catalog(root: Path) -> Path:
    path = root / "catalog.py"
    path.write_text(CATALOG)
    return path


def test_the_copy_swaps_only_the_pallas_imports(tmp_path):
    src = _fake_library(tmp_path)
    changed = ecosystem_scan.swapped_copy(src, "fakelib", tmp_path / "copy")
    assert changed == ["fakelib/kern.py"]
    new = (tmp_path / "copy" / "fakelib" / "kern.py").read_text()
    assert "import pallas_frontend as pl" in new and "import pallas_tpu as pltpu" in new
    assert "jax.experimental" not in new
    # everything but the two import lines is the library's own text
    old_lines, new_lines = KERNEL.splitlines(), new.splitlines()
    assert [a for a, b in zip(old_lines, new_lines) if a != b] == [
        "from jax.experimental import pallas as pl",
        "from jax.experimental.pallas import tpu as pltpu"]
    assert (tmp_path / "copy" / "fakelib" / "helpers.py").read_text() == "SCALE = 3.0\n"


def test_a_name_jax_has_and_ours_lacks_is_named(monkeypatch):
    mods = {"jax.experimental.pallas.tpu": types.SimpleNamespace(VMEM=1, fancy_pipeline=2),
            "pallas_tpu": types.SimpleNamespace(VMEM=1),
            "jax.experimental.pallas": types.SimpleNamespace(pallas_call=1, BlockSpec=1),
            "pallas_frontend": types.SimpleNamespace(pallas_call=1, BlockSpec=1)}
    monkeypatch.setattr(ecosystem_scan, "_load", mods.get)
    source = KERNEL + "\ndef f():\n    return pltpu.fancy_pipeline, pltpu.newer_than_jax\n"
    assert ecosystem_scan.missing_names(source) == (["pallas_tpu.fancy_pipeline"],
                                                    ["pallas_tpu.newer_than_jax"])
    assert ecosystem.missing_from_error(
        "AttributeError: module 'pallas_mgpu' has no attribute 'warp_map'") == \
        ["pallas_mgpu.warp_map"]


def test_an_absent_source_is_skipped_with_the_reason(tmp_path, monkeypatch):
    lib = ecosystem.load_catalog(_catalog(tmp_path)).LIBRARIES[0]
    monkeypatch.delenv(lib.env, raising=False)
    assert ecosystem.find_source(lib, {}) == (None, "source not given (--src fakelib=PATH or "
                                                    "PALLAS_FAKELIB_SRC)")
    monkeypatch.setenv(lib.env, str(tmp_path / "nowhere"))
    assert ecosystem.find_source(lib, {})[1] == "no package `fakelib` under the given source"
    out = tmp_path / "page.md"
    assert ecosystem.main(["--catalog", str(_catalog(tmp_path)), "--out", str(out)]) == 0
    assert "Skipped in the last run: no package `fakelib` under the given source." in \
        out.read_text()


def test_kernels_run_on_both_sides_and_are_compared(tmp_path, monkeypatch):
    src = _fake_library(tmp_path)
    out, results = tmp_path / "page.md", tmp_path / "results.json"
    # relative --work and --src, as typed in a shell (before: every row failed)
    monkeypatch.chdir(tmp_path)
    status = ecosystem.main(["--catalog", str(_catalog(tmp_path)), "--src",
                             f"fakelib={src.relative_to(tmp_path)}", "--work", "work",
                             "--json", str(results), "--out", str(out)])
    res = json.loads(results.read_text())["fakelib"]
    same, off = res["rows"]
    assert same["jax"]["status"] == off["jax"]["status"] == "ok", res["rows"]
    assert same["ours"]["status"] == "ok" and same["rel"] <= 1e-6, same
    assert same["ref_jax"] <= 1e-6 and same["ref_ours"] <= 1e-6, same     # NumPy's 3x + 1
    assert off["ours"]["status"] == "wrong", off
    assert "max rel diff from JAX" in off["ours"]["error"]
    assert status == 1     # a kernel JAX runs that ours does not run right
    # the run really computed: JAX's saved output is 3x + 1 of the seeded input
    saved = np.load(tmp_path / "work" / "fakelib" / "outputs" / "jax-affine-interpret.npz")
    x = np.random.default_rng(res["seed"]).standard_normal((16, 128)).astype(np.float32)
    np.testing.assert_allclose(saved["arr_0"], 3.0 * x + 1.0, rtol=1e-6, atol=1e-6)
    assert ecosystem_page.summary(res)["modes"]["interpret"] == {"tried": 2, "jax": 2, "ours": 1}
    page = out.read_text()
    assert "kernels tried 2, working under JAX 2, **under ours 1 of those**" in page
    assert "- the rest: nothing else here" in page


def test_blackwell_kernels_compile_for_a_b200_the_rest_for_an_h100():
    """--h100 adds a device-less compile after each cuda lowering, for the GPU
    the kernel is written for (an H100 cannot take tcgen05/TMEM code)."""
    case = lambda kind: types.SimpleNamespace(kind=kind, modes=("interpret", "cuda"))  # noqa
    assert ecosystem._modes(case("mgpu"), True) == ("interpret", "cuda", "H100")
    assert ecosystem._modes(case("blackwell"), True) == ("interpret", "cuda", "B200")
    assert ecosystem._modes(case("blackwell"), False) == ("interpret", "cuda")
    assert "B200" in ecosystem_page.MODES


def test_b200_compiles_get_a_worker_of_their_own():
    keys = ["a|interpret", "a|cuda", "a|H100", "b|cuda", "b|B200", "c|v5e"]
    assert ecosystem._worker_groups(keys) == [["a|interpret", "a|cuda", "a|H100", "b|cuda",
                                               "c|v5e"], ["b|B200"]]
    assert ecosystem._worker_groups(["a|cuda"]) == [["a|cuda"]]
