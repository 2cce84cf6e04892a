"""Plugins cannot hurt a program that does not use them (issue 11): selection
imports only what it may choose, a plugin's import that raises anything is
reported and not propagated, built-in names are reserved, and `pallas
backends` reports what it finds without crashing."""

import json
import subprocess
import sys

import pytest

from fake_dists import backend_source, discovering, make_dist, run_code, site_env

HANGS = "import time\ntime.sleep(3600)\n"
EXITS = "import sys\nsys.exit(3)\n"

# A kernel run three ways; each result is checked against NumPy in float64.
RUN_KERNELS = """
    import sys
    import numpy as np
    import jax, jax.numpy as jnp
    import pallas_frontend as pl

    def add(**call):
        return pl.pallas_call(lambda x, y, o: o.__setitem__(..., x[...] + y[...]),
                              jax.ShapeDtypeStruct((256,), jnp.float32), grid=(4,),
                              in_specs=[pl.BlockSpec((64,), lambda i: (i,))] * 2,
                              out_specs=pl.BlockSpec((64,), lambda i: (i,)), **call)

    rng = np.random.default_rng()
    x, y = (rng.standard_normal(256).astype(np.float32) for _ in range(2))
    want = x.astype(np.float64) + y
    calls = [dict(interpret=True), dict()]
    if len(sys.argv) > 1:
        import pf_good
        calls.append(dict(compiler_params=pf_good.Params()))
    for call in calls:
        np.testing.assert_allclose(np.asarray(add(**call)(x, y)), want, rtol=1e-6, atol=1e-6)
    plugins = sorted(m for m in sys.modules
                     if m.startswith(("pf_", "pallas_triton", "pallas_tpu", "pallas_mgpu")))
    print("imported:", " ".join(plugins))
"""


@pytest.fixture
def hostile(tmp_path):
    make_dist(tmp_path, "pallas-good", "1.2.0", "pf_good", backend_source("good"), "good")
    make_dist(tmp_path, "pallas-hangs", "0.1", "pf_hangs", HANGS, "hangs")
    make_dist(tmp_path, "pallas-exits", "0.1", "pf_exits", EXITS, "exits")
    return tmp_path


def test_kernels_that_need_no_plugin_import_none(hostile):
    out = run_code(hostile, RUN_KERNELS, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().splitlines()[-1] == "imported:"


def test_compiler_params_import_only_their_plugin(hostile):
    out = run_code(hostile, RUN_KERNELS, "with-params", timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().splitlines()[-1] == "imported: pf_good"


def _cli(site, *args, env=None):
    return subprocess.run([sys.executable, "-m", "pallas_frontend.cli", *args],
                          env=site_env(site, env), capture_output=True, text=True, timeout=300)


def test_plugin_calling_sys_exit_is_reported_not_propagated(tmp_path):
    make_dist(tmp_path, "pallas-exits", "0.1", "pf_exits", EXITS, "exits")
    out = _cli(tmp_path, "backends", "--json")
    assert out.returncode == 1, out.stderr[-3000:]       # a load error: non-zero exit
    rows = {r["name"]: r for r in json.loads(out.stdout)}
    assert rows["exits"]["load error"] == "loading it raised: SystemExit: 3"
    assert rows["interpret"]["available"].startswith("yes")
    assert _cli(tmp_path, "backends", "--allow-load-errors").returncode == 0


def _cli_here(monkeypatch, capsys, site, *args):
    """`pallas ARGS` in this process, discovering the fake distributions of ``site``:
    (exit code, stdout)."""
    from pallas_frontend import cli
    capsys.readouterr()
    with discovering(monkeypatch, site):
        code = cli.main(list(args))
    return code, capsys.readouterr().out


def test_long_load_error_is_printed_whole(tmp_path, monkeypatch, capsys):
    words = " ".join(f"word{i}" for i in range(60))
    make_dist(tmp_path, "pallas-wordy", "0.1", "pf_wordy", f"raise RuntimeError({words!r})\n",
              "wordy")
    code, out = _cli_here(monkeypatch, capsys, tmp_path, "backends")
    assert code == 1
    assert "..." not in out
    table = " ".join(out.split())
    assert words in table        # wrapped onto several lines, but every word there, in order


def test_keyboard_interrupt_raised_by_a_plugin_import_is_its_failure(tmp_path):
    # No SIGINT arrived: the plugin's own `raise KeyboardInterrupt` is a broken plugin,
    # reported and skipped (issue 39). A real Ctrl-C still interrupts:
    # test_plugin_broken_exceptions.py::test_a_real_ctrl_c_while_a_plugin_loads_still_interrupts
    make_dist(tmp_path, "pallas-ctrlc", "0.1", "pf_ctrlc", "raise KeyboardInterrupt\n", "ctrlc")
    out = run_code(tmp_path, """
        import warnings
        warnings.simplefilter("ignore")
        from pallas_frontend import registry
        try:
            print("ctrlc" in registry.backends(), "interpret" in registry.backends())
            print(registry.load_failures()["ctrlc"].reason)
        except KeyboardInterrupt:
            print("interrupted")
    """)
    assert out.stdout.splitlines() == [
        "False True", "loading it raised: KeyboardInterrupt:  (raised by the plugin's own "
        "code, not a Ctrl-C)"], out.stderr[-2000:]


def test_raising_is_available_is_reported_in_its_row(tmp_path, monkeypatch, capsys):
    body = "def is_available(self): raise RuntimeError('probe exploded')"
    make_dist(tmp_path, "pallas-probe", "0.1", "pf_probe", backend_source("probe", body=body),
              "probe")
    code, out = _cli_here(monkeypatch, capsys, tmp_path, "backends")
    assert code == 0 and "probe exploded" in out, out
    code, out = _cli_here(monkeypatch, capsys, tmp_path, "backends", "--json")
    rows = {r["name"]: r for r in json.loads(out)}
    assert rows["probe"]["available"] == "no: is_available() raised RuntimeError: probe exploded"
    code, out = _cli_here(monkeypatch, capsys, tmp_path, "doctor")   # no traceback: it returns
    assert "probe exploded" in out


IMPOSTOR = """
    import pallas_frontend as pl
    from pallas_frontend import backend_api

    class Impostor(backend_api.Backend):
        name = {name!r}
        api_version = backend_api.API_VERSION
        platforms = ("cpu", "cuda", "rocm", "tpu")
        def lower(self, kernel, ctx, *args):
            raise RuntimeError("the impostor ran")

    @backend_api.hookimpl
    def pallas_frontend_backend():
        return Impostor()
"""


@pytest.mark.parametrize("allow", [None, "interpret"])
def test_builtin_names_are_reserved(tmp_path, allow):
    # "a-..." sorts before pallas-frontend: the old code let it replace the built-in.
    make_dist(tmp_path, "a-impostor", "9.9", "pf_impostor", IMPOSTOR.format(name="interpret"),
              "interpret")
    make_dist(tmp_path, "a-triton-fork", "9.9", "pf_triton_fork", IMPOSTOR.format(name="triton"),
              "triton")
    env = {"PALLAS_FRONTEND_BACKENDS": allow} if allow else None
    out = run_code(tmp_path, RUN_KERNELS + """
    from pallas_frontend import registry
    print(type(registry.get_backend("interpret")).__module__)
    for f in registry.load_failures().values():
        print("failure:", f.origin.distribution, f.reason)
    """, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.strip().splitlines()
    assert "pallas_frontend.interpreter.backend" in lines
    assert not any("pf_impostor" in ln for ln in lines if ln.startswith("imported:"))
    failures = [ln for ln in lines if ln.startswith("failure:")]
    assert any("a-impostor" in ln and "reserved for pallas-frontend" in ln for ln in failures)
    assert any("a-triton-fork" in ln and "reserved for pallas-triton" in ln for ln in failures)


def test_platform_default_imports_candidates_by_declared_priority(tmp_path):
    make_dist(tmp_path, "pallas-hi", "1.0", "pf_hi",
              backend_source("hi", platforms=("vx_accel",), priority=5), "hi",
              declares=("hi.platforms.vx_accel", "hi.priority.5"))
    make_dist(tmp_path, "pallas-lo", "1.0", "pf_lo", HANGS, "lo",
              declares=("lo.platforms.vx_accel", "lo.priority.1"))
    make_dist(tmp_path, "pallas-elsewhere", "1.0", "pf_elsewhere", HANGS, "elsewhere",
              declares=("elsewhere.platforms.other_accel", "elsewhere.priority.50"))
    out = run_code(tmp_path, """
        import sys
        from pallas_frontend import registry
        b = registry.select_backend(platform="vx_accel", interpret=False, compiler_params=None,
                                    backend=None)
        print(b.name, sorted(m for m in sys.modules if m.startswith("pf_")))
    """, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip() == "hi ['pf_hi']"
