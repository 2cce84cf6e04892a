"""Defects the issue-39 round-4 probe (tests/probes/probe_round4_*.py) found in
the frontend, each against NumPy or JAX's own Pallas on fresh random data.

- ``pl.ds(start, size, stride=0)`` on a Ref crashed with a ZeroDivisionError
  from inside JAX's discharge (TPU interpret mode: JAX's callback error); now
  a RefIndexError naming the kernel line, on every interpreter.
- ``name=123`` (or bytes) ran; JAX fails in a regex on it. Now a TypeError
  naming ``name=`` and the kernel.
- a block dim given as a concrete ``jnp.int32(8)`` was refused; JAX takes it.
"""

import jax
import jax.experimental.pallas as jpl
import jax.numpy as jnp
import numpy as np
import pytest

import pallas_frontend as pl
from conftest import rand


def _tpu_interpret():
    pallas_tpu = pytest.importorskip("pallas_tpu")
    return pallas_tpu.InterpretParams()


# TPU interpret mode checks Ref bounds itself when it runs; a zero stride must still
# be refused at trace time (it was JAX's callback error there, naming no kernel)
@pytest.mark.parametrize("interpret", [True, "tpu"])
def test_zero_stride_ds_is_refused_naming_the_line(rng, interpret):
    x = rand(rng, 16, 128)
    interpret = _tpu_interpret() if interpret == "tpu" else interpret

    def k_zero_stride(x_ref, o_ref):
        o_ref[...] = x_ref[pl.ds(0, 16, 0), :]
    with pytest.raises(pl.RefIndexError, match=r"stride=0.*stride below 1") as info:
        pl.pallas_call(k_zero_stride, out_shape=jax.ShapeDtypeStruct((16, 128), jnp.float32),
                       interpret=interpret)(x)
    assert "k_zero_stride" in str(info.value) and "test_round4_probe_fixes.py" in str(info.value)


def test_positive_strides_still_read_the_strided_rows(rng):
    x = rand(rng, 16, 128)

    def k_stride3(x_ref, o_ref):
        o_ref[...] = x_ref[pl.ds(1, 5, 3), :] * 2
    got = pl.pallas_call(k_stride3, out_shape=jax.ShapeDtypeStruct((5, 128), jnp.float32),
                         interpret=True)(x)
    np.testing.assert_allclose(np.asarray(got), x.astype(np.float64)[1:16:3] * 2, rtol=1e-6)


@pytest.mark.parametrize("name", [123, b"k", 1.5])
def test_name_must_be_a_str(rng, name):
    def k_named(x_ref, o_ref):
        o_ref[...] = x_ref[...]
    with pytest.raises(TypeError, match=r"name= must be a str") as info:
        pl.pallas_call(k_named, out_shape=jax.ShapeDtypeStruct((8,), jnp.float32), name=name,
                       interpret=True)(rand(rng, 8))
    assert "k_named" in str(info.value)


def test_concrete_jnp_int_block_dim_as_jax(rng):
    x = rand(rng, 32, 128)

    def call(m):
        def kernel(x_ref, o_ref):
            o_ref[...] = x_ref[...] + m.program_id(0).astype(jnp.float32)
        return m.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((32, 128), jnp.float32),
                             grid=(4,), in_specs=[m.BlockSpec((jnp.int32(8), 128),
                                                              lambda i: (i, 0))],
                             out_specs=m.BlockSpec((np.int64(8), 128), lambda i: (i, 0)),
                             interpret=True)(x)
    want = x.astype(np.float64) + np.repeat(np.arange(4), 8)[:, None]
    np.testing.assert_allclose(np.asarray(call(pl)), want, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(call(jpl)), want, rtol=1e-6)


# A while_loop whose condition reads a Ref its body writes: JAX's discharge gave the
# condition the Ref's value from before the loop (JAX's interpret=True never ends;
# the built-in interpreter neither). The loops below are bounded by a counter too,
# so the old behaviour shows as a wrong count instead of a hang.
def _doubling_kernel(nested):
    def k_while_ref(x_ref, o_ref, n_ref):
        o_ref[...] = x_ref[...]
        n_ref[...] = jnp.zeros_like(n_ref)

        def loop():
            def cond(c):
                return (o_ref[0, 0] < 100.0) & (c < 60)

            def body(c):
                o_ref[...] = o_ref[...] * 2
                n_ref[...] += 1
                return c + 1
            jax.lax.while_loop(cond, body, 0)
        if nested:          # inside pl.when and a fori_loop body
            @pl.when(x_ref[0, 1] > -1e9)
            def _():
                jax.lax.fori_loop(0, 2, lambda i, c: (loop(), c)[1], 0)
        else:
            loop()
    return k_while_ref


@pytest.mark.parametrize("nested", [False, True])
def test_while_condition_sees_the_refs_the_body_writes(rng, nested):
    x = np.abs(rand(rng, 8, 128)) + 0.5
    shapes = (jax.ShapeDtypeStruct((8, 128), jnp.float32),
              jax.ShapeDtypeStruct((8, 128), jnp.int32))
    got, count = pl.pallas_call(_doubling_kernel(nested), out_shape=shapes, interpret=True)(x)
    v, n = x.astype(np.float64), 0
    for _ in range(2 if nested else 1):
        while v[0, 0] < 100.0 and n < 60:
            v, n = v * 2, n + 1
    np.testing.assert_allclose(np.asarray(got), v, rtol=1e-6)
    np.testing.assert_array_equal(np.asarray(count), np.full((8, 128), n))


def test_cli_reader_leaving_early_is_no_traceback():
    """``pallas backends | head -c 10``: the pipe closes under the listing; it was a
    BrokenPipeError traceback, now the shell's SIGPIPE status (141) and nothing on stderr
    from the frontend."""
    import os
    import subprocess
    import sys
    env = {k: v for k, v in os.environ.items() if not k.startswith("PALLAS_FRONTEND_")}
    env["JAX_PLATFORMS"] = "cpu"
    # the reader is gone before the listing is written: its first write meets a closed
    # pipe whatever the listing's size (read 10 bytes and close raced a short listing)
    read_end, write_end = os.pipe()
    os.close(read_end)
    proc = subprocess.Popen([sys.executable, "-m", "pallas_frontend.cli", "backends"],
                            stdout=write_end, stderr=subprocess.PIPE, env=env)
    os.close(write_end)
    _, err = proc.communicate(timeout=120)
    assert "Traceback" not in err.decode(errors="replace"), err.decode(errors="replace")[-800:]
    assert proc.returncode == 141


def test_cli_listing_on_an_ascii_terminal_escapes_a_plugins_message(tmp_path):
    """A plugin whose import error holds non-ASCII text, listed by ``pallas backends``
    where stdout is ASCII-only: a UnicodeEncodeError traceback before, now escaped."""
    import os
    import subprocess
    import sys
    (tmp_path / "fake_uni.py").write_text("raise ImportError('m\\u00f6d\\u00fcl fehlt \\u2211')\n")
    info = tmp_path / "fake_uni-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fake_uni\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[pallas_frontend.backends]\nfakeuni = fake_uni\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PALLAS_FRONTEND_")}
    env.update(JAX_PLATFORMS="cpu", PYTHONIOENCODING="ascii", LC_ALL="C",
               PYTHONPATH=os.pathsep.join([str(tmp_path), env.get("PYTHONPATH", "")]))
    out = subprocess.run([sys.executable, "-m", "pallas_frontend.cli", "backends"], env=env,
                         capture_output=True, text=True, errors="replace", timeout=120)
    assert "Traceback" not in out.stderr, out.stderr[-800:]
    assert out.returncode == 1 and "fakeuni" in out.stdout and "m\\xf6d\\xfcl" in out.stdout
