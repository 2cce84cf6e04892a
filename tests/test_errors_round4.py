"""Issue 39 #4, the hostile probe's unhelpful messages (round 4).

Interpreted kernels under JAX transformations: the TPU and Mosaic GPU
interpreters run a kernel through ordered host callbacks, and JAX refused
their launch (``Ordered IO effects not supported in vmap``, ``IO effect not
supported in vmap-of-cond``, ``Effects not supported in AD of checkpoint``).
A launch now carries the frontend's own ordered effect, which JAX allows in
every transformation, so these run (checked against NumPy), and a missing
backward kernel gets the frontend's message, as on the other backends.
``jax.export`` of an interpreter that runs through host callbacks is refused
naming the kernel and what exports, where JAX said only 'serialization of
host_callbacks is not yet implemented'."""

import inspect
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import pallas_frontend as pl

HERE = os.path.abspath(__file__)
BACKENDS = ["interpret", "triton", "tpu", "mgpu"]


def _interpret(backend):
    if backend == "interpret":
        return True
    mod = pytest.importorskip(f"pallas_{backend}")
    return mod.InterpretParams()


def doubles(x_ref, o_ref):
    o_ref[...] = x_ref[...] * 2.0


def _call(backend, shape=(8, 128)):
    return pl.pallas_call(doubles, out_shape=jax.ShapeDtypeStruct(shape, jnp.float32),
                          interpret=_interpret(backend))


def _with_vjp(call):
    """``call`` with a backward kernel: the gradient of 2x is the kernel on g."""
    @jax.custom_vjp
    def f(a):
        return call(a)
    f.defvjp(lambda a: (call(a), None), lambda _, g: (call(g),))
    return f


def _kernel_line():
    return f"{HERE}:{inspect.getsourcelines(doubles)[1]}"


@pytest.mark.parametrize("backend", BACKENDS)
def test_vmap_of_while_loop_with_batched_trip_counts_runs(backend, rng):
    f = _call(backend)
    xs = rng.standard_normal((3, 8, 128)).astype(np.float32)
    trips = np.array([1, 3, 2])

    def loop(a, n):
        return jax.lax.while_loop(lambda c: c[0] < n, lambda c: (c[0] + 1, f(c[1])), (0, a))[1]
    got = jax.vmap(loop)(jnp.asarray(xs), jnp.asarray(trips))
    want = xs.astype(np.float64) * (2.0 ** trips)[:, None, None]
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-6)


@pytest.mark.parametrize("backend", BACKENDS)
def test_vmap_of_cond_with_a_batched_predicate_runs(backend, rng):
    f = _call(backend)
    xs = rng.standard_normal((3, 8, 128)).astype(np.float32)
    pred = rng.standard_normal(3) > 0
    got = jax.vmap(lambda p, a: jax.lax.cond(p, f, lambda a: -a, a))(jnp.asarray(pred),
                                                                     jnp.asarray(xs))
    want = np.where(pred[:, None, None], 2.0 * xs.astype(np.float64), -xs.astype(np.float64))
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-6)


@pytest.mark.parametrize("backend", BACKENDS)
def test_grad_through_checkpoint_with_a_backward_kernel_runs(backend, rng):
    f = _with_vjp(_call(backend))
    x = rng.standard_normal((8, 128)).astype(np.float32)
    # d/dx sum(f(x) * x) = f'(x)^T x + f(x) = 2x + 2x
    policy = jax.checkpoint_policies.nothing_saveable
    got = jax.grad(jax.checkpoint(lambda a: (f(a) * a).sum(), policy=policy))(jnp.asarray(x))
    np.testing.assert_allclose(np.asarray(got), 4.0 * x.astype(np.float64), rtol=1e-6)
    got = jax.jit(jax.grad(jax.checkpoint(lambda a: f(a).sum())))(jnp.asarray(x))
    np.testing.assert_allclose(np.asarray(got), np.full(x.shape, 2.0), rtol=0)


@pytest.mark.parametrize("backend", BACKENDS)
def test_grad_through_checkpoint_without_a_backward_kernel_says_to_write_one(backend, rng):
    f = _call(backend)
    x = jnp.asarray(rng.standard_normal((8, 128)), jnp.float32)
    with pytest.raises(NotImplementedError) as err:
        jax.grad(jax.checkpoint(lambda a: f(a).sum()))(x)
    msg = str(err.value)
    assert "'doubles'" in msg and _kernel_line() in msg, msg
    assert "needs a backward kernel" in msg and "jax.custom_vjp" in msg, msg
    assert "Effects not supported" not in msg


@pytest.mark.parametrize("backend", BACKENDS)
def test_launches_keep_their_order_and_results_in_one_program(backend, rng):
    f = _call(backend)
    x = rng.standard_normal((8, 128)).astype(np.float32)
    got = jax.jit(lambda a: f(f(a)) + f(a))(jnp.asarray(x))
    np.testing.assert_allclose(np.asarray(got), 6.0 * x.astype(np.float64), rtol=1e-6)


@pytest.mark.parametrize("backend", BACKENDS)
def test_jit_over_explicitly_sharded_arrays_runs(backend, rng):
    """JAX's TPU and GPU interpreters refused it ('pallas_call requires all mesh
    axes to be Manual' / 'sharded ref can only be sliced along unsharded axes');
    the built-in and Triton interpreters ran it."""
    from jax.sharding import AxisType, NamedSharding, PartitionSpec
    if len(jax.devices()) < 4:
        pytest.skip("needs 4 devices (XLA_FLAGS=--xla_force_host_platform_device_count=4)")
    mesh = jax.make_mesh((4,), ("d",), axis_types=(AxisType.Explicit,))
    x = rng.standard_normal((32, 128)).astype(np.float32)
    xs = jax.device_put(jnp.asarray(x), NamedSharding(mesh, PartitionSpec("d")))
    got = jax.jit(_call(backend, (32, 128)))(xs)
    np.testing.assert_allclose(np.asarray(got), 2.0 * x.astype(np.float64), rtol=1e-6)


# --- jax.export -----------------------------------------------------------------------------

def _export(f, x):
    return jax.export.export(jax.jit(f))(x)


def test_export_of_the_built_in_interpreter_round_trips(rng):
    pytest.importorskip("flatbuffers", reason="jax.export serialization needs flatbuffers")
    x = rng.standard_normal((8, 128)).astype(np.float32)
    exp = jax.export.deserialize(_export(_call("interpret"), jnp.asarray(x)).serialize())
    np.testing.assert_allclose(np.asarray(exp.call(jnp.asarray(x))), 2.0 * x.astype(np.float64))


@pytest.mark.parametrize("backend,hw,params", [
    ("triton", "['cuda', 'rocm']", "pallas_triton.CompilerParams"),
    ("tpu", "['tpu']", "pallas_tpu.CompilerParams"),
    ("mgpu", "['cuda']", "pallas_mgpu.CompilerParams"),
])
def test_export_of_a_callback_interpreter_names_the_kernel_and_what_exports(backend, hw, params):
    f = _call(backend)
    with pytest.raises(NotImplementedError) as err:
        _export(f, jnp.ones((8, 128), jnp.float32))
    msg = str(err.value)
    assert msg.startswith(f"jax.export cannot serialize the pallas_call kernel 'doubles' "
                          f"({_kernel_line()}) for platform 'cpu': backend '{backend}'"), msg
    assert "host callbacks" in msg and f"platforms={hw}" in msg and params in msg, msg
    assert "interpret=True" in msg


def test_the_advice_exports_for_the_tpu():
    pltpu = pytest.importorskip("pallas_tpu")
    f = pl.pallas_call(doubles, out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
                       compiler_params=pltpu.CompilerParams())
    exp = jax.export.export(jax.jit(f), platforms=["tpu"])(jnp.ones((8, 128), jnp.float32))
    assert exp.platforms == ("tpu",)
    assert "tpu_custom_call" in exp.mlir_module()


def prints(x_ref, o_ref):
    pl.debug_print("x0 = {}", x_ref[0, 0])
    o_ref[...] = x_ref[...] * 2.0


def test_export_of_a_kernel_that_prints_names_the_print():
    f = pl.pallas_call(prints, out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
                       interpret=True)
    with pytest.raises(NotImplementedError) as err:
        _export(f, jnp.ones((8, 128), jnp.float32))
    msg = str(err.value)
    line = inspect.getsourcelines(prints)[1]
    assert f"kernel 'prints' ({HERE}:{line})" in msg and "pl.debug_print" in msg, msg


# --- pl.autotune's arguments ----------------------------------------------------------------

def add_block(x, *, block=8):
    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...] + 1.0
    spec = pl.BlockSpec((block,), lambda i: (i,))
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                          grid=(x.shape[0] // block,), in_specs=[spec], out_specs=spec)(x)


def _tuner_line():
    return f"pl.autotune of add_block ({HERE}:{inspect.getsourcelines(add_block)[1]})"


@pytest.mark.parametrize("options,words", [
    (dict(configs={"block": 8}), ["configs is one dict", "configs=[{'block': 8}]"]),
    (dict(configs=[8, 16]), ["configs[0] is 8 (of type int)", "dict of keyword arguments"]),
    (dict(configs=[("block", 8)]), ["configs[0] is ('block', 8) (of type tuple)"]),
    (dict(configs="block=8"), ["configs='block=8' is of type str", "list of dicts"]),
    (dict(configs=None), ["configs=None is of type NoneType", "list of dicts"]),
    (dict(configs=[{"blok": 8}, {"block": 16}]),
     ["configs[0] sets 'blok', which the function does not take", "did you mean 'block'?"]),
    (dict(configs=[{"block": "8"}]), ["configs[0]['block'] = '8' is of type str, not a number",
                                      "default for block is 8"]),
    (dict(configs=[{"block": [8]}]), ["configs[0]['block'] = [8] is of type list"]),
    (dict(configs=[]), ["configs is empty", "at least one dict"]),
    (dict(configs=[{"block": 8}], name=3), ["name=3 is of type int", "a string"]),
    (dict(configs=[{"block": 8}], key="shape"), ["key='shape' is not callable"]),
    (dict(configs=[{"block": 8}], reference=np.ones(16)), ["reference=array(", "not callable"]),
    (dict(configs=[{"block": 8}], tolerance="1e-3"), ["tolerance='1e-3' must be a number >= 0"]),
    (dict(configs=[{"block": 8}], measure="no"), ["measure='no' is of type str", "True or False"]),
    (dict(configs=[{"block": 8}], backend=3), ["backend=3 is of type int", "backend's name"]),
    (dict(configs=[{"block": 8}], cache=3), ["cache=3 is not a path", "False to keep choices"]),
    (dict(configs=[{"block": 8}], cache=None), ["cache=None is not a path"]),
])
def test_autotune_arguments_are_refused_when_the_tuner_is_made(options, words):
    with pytest.raises((TypeError, ValueError)) as err:
        pl.autotune(add_block, **options)          # refused here: nothing is called
    msg = str(err.value)
    assert msg.startswith(_tuner_line()), msg
    for w in words:
        assert w in msg, (w, msg)


def test_autotune_cache_that_is_a_directory_is_refused(tmp_path):
    with pytest.raises(ValueError) as err:
        pl.autotune(add_block, configs=[{"block": 8}], cache=tmp_path)
    assert str(err.value).startswith(_tuner_line())
    assert f"cache={str(tmp_path)!r} is a directory" in str(err.value)


def test_autotune_of_something_not_callable_says_what_to_pass():
    with pytest.raises(TypeError, match=r"the function to tune is 3 \(of type int\), not a "
                                        r"callable; pass the function"):
        pl.autotune(3, configs=[{"block": 8}])


def test_a_generator_of_configs_and_a_kwargs_function_are_taken(rng):
    x = rng.standard_normal(16).astype(np.float32)
    tuned = pl.autotune(add_block, configs=({"block": b} for b in (8, 16)), cache=False)
    np.testing.assert_allclose(np.asarray(tuned(jnp.asarray(x))), x.astype(np.float64) + 1)

    def by_kwargs(x, **kw):
        return add_block(x, **kw)
    tuned = pl.autotune(by_kwargs, configs=[{"block": 4}], cache=False)   # names not checked
    np.testing.assert_allclose(np.asarray(tuned(jnp.asarray(x))), x.astype(np.float64) + 1)


def fails_for_strings(x, *, block):
    return x[: x.shape[0] // block]


def test_a_candidate_that_fails_is_reported_with_the_users_line():
    tuned = pl.autotune(fails_for_strings, configs=[{"block": "8"}], cache=False)
    with pytest.raises(RuntimeError) as err:
        tuned(jnp.ones(16))
    line = inspect.getsourcelines(fails_for_strings)[1] + 1
    assert "no candidate lowers" in str(err.value)
    assert f"block='8': TypeError: " in str(err.value)
    assert f"(at {HERE}:{line}: return x[: x.shape[0] // block])" in str(err.value)


@pytest.mark.parametrize("bad", ["a\x00b.json", "/tmp/" + "x" * 300 + ".json"])
def test_autotune_cache_that_no_file_can_have_is_refused(bad):
    with pytest.raises(ValueError) as err:                 # was a raw OSError / ValueError
        pl.autotune(add_block, configs=[{"block": 8}], cache=bad)
    msg = str(err.value)
    assert msg.startswith(_tuner_line()) and "cannot name a file" in msg, msg


def test_cache_variable_too_long_for_a_file_name_is_a_config_error_not_a_crash(monkeypatch):
    import subprocess
    import sys
    from pallas_frontend import env_config
    from pallas_frontend.env_config import ConfigError
    long = "/tmp/" + "x" * 300 + ".json"
    monkeypatch.setenv(env_config.ENV_AUTOTUNE_CACHE, long)
    with pytest.raises(ConfigError, match="cannot name a file .*File name too long"):
        env_config.autotune_cache_path()
    # at import: a warning, as for every bad setting (it was an OSError from import)
    done = subprocess.run([sys.executable, "-W", "always", "-c", "import pallas_frontend"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "ConfigWarning" in done.stderr and "cannot name a file" in done.stderr


def test_autotune_cache_warnings_name_the_users_line(tmp_path):
    import warnings
    bad = tmp_path / "bad.json"
    bad.write_bytes(b"\xff\xfe not utf-8")
    blocker = tmp_path / "file"
    blocker.write_text("")
    x = jnp.ones(16, jnp.float32)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tuned = pl.autotune(add_block, configs=[{"block": 8}], cache=bad)
        tuned.best_config(x); read = _here()                                    # noqa: E702
        tuned = pl.autotune(add_block, configs=[{"block": 8}], cache=blocker / "a.json",
                            measure=True)
        tuned(x); written = _here()                                             # noqa: E702
    got = {(w.filename, w.lineno): str(w.message) for w in caught
           if "autotune cache" in str(w.message)}
    assert "not UTF-8 text" in got.get((HERE, read), ""), got        # was autotuning.py:133
    assert "cannot be written" in got.get((HERE, written), ""), got
    assert "Point cache= (or PALLAS_FRONTEND_AUTOTUNE_CACHE)" in got[(HERE, written)]


def _here():
    return inspect.currentframe().f_back.f_lineno
