"""Tiny kernels that find out whether a backend supports a feature the docs
talk about (``tools/doc_claims.py`` runs one per claim tag).

A probe is ``probe(backend) -> None``: it returns when the feature works (and
its result matches NumPy in float64 on fresh random data), and raises the
backend's or the frontend's error when the feature is refused. A wrong result
is an ``AssertionError``, never read as "unsupported".

Backends run where this CPU host can run them: ``interpret`` is the built-in
interpreter, ``tpu`` JAX's TPU interpret mode (``pallas_tpu.InterpretParams``),
``triton`` Triton's interpreter and ``mgpu`` the Mosaic GPU interpret mode, so
a claim about a backend is a claim about the path its docs describe for a
host without the hardware (``check()`` runs on that path as on the device one).
``frontend`` claims are about the frontend itself, whatever the backend.
"""

from __future__ import annotations

import importlib

import numpy as np

ROWS, LANES, BLOCK = 32, 128, 8          # (32, 128) f32 operands in (8, 128) blocks


def _x():
    return np.random.default_rng().standard_normal((ROWS, LANES)).astype(np.float32)


def _options(backend: str, semantics: str = "arbitrary") -> dict:
    """The pallas_call keywords that send a kernel to ``backend`` on this host."""
    if backend == "interpret":
        return {}
    module = importlib.import_module(f"pallas_{backend}")
    options = {"interpret": module.InterpretParams()}
    if backend == "tpu":
        options["compiler_params"] = module.CompilerParams(dimension_semantics=(semantics,))
    return options


def _spec():
    import pallas_frontend as pl
    return pl.BlockSpec((BLOCK, LANES), lambda i: (i, 0))


def _double(x_ref, o_ref):
    o_ref[...] = x_ref[...] * 2


def _close(got, want):
    np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=1e-6, atol=1e-6)


def _traced_grid_call(backend: str, semantics: str = "arbitrary"):
    import jax
    import pallas_frontend as pl

    def f(x, n):   # under jit, n is traced: the grid size is known only at run time
        return pl.pallas_call(_double, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                              grid=(n,), in_specs=[_spec()], out_specs=_spec(),
                              **_options(backend, semantics))(x)
    return f


def traced_grid(backend: str) -> None:
    import jax
    import jax.numpy as jnp
    x = _x()
    _close(jax.jit(_traced_grid_call(backend))(x, jnp.int32(ROWS // BLOCK)), 2.0 * x)


def traced_grid_parallel(backend: str) -> None:
    import jax
    import jax.numpy as jnp
    x = _x()
    _close(jax.jit(_traced_grid_call(backend, "parallel"))(x, jnp.int32(ROWS // BLOCK)), 2.0 * x)


def traced_grid_vmap(backend: str) -> None:
    import jax
    import jax.numpy as jnp
    xs = np.stack([_x(), _x()])
    f = jax.jit(jax.vmap(_traced_grid_call(backend), in_axes=(0, None)))
    _close(f(xs, jnp.int32(ROWS // BLOCK)), 2.0 * xs)


def traced_grid_jvp(backend: str) -> None:
    import jax
    import jax.numpy as jnp
    x, t = _x(), _x()
    call = _traced_grid_call(backend)
    out, tangent = jax.jit(lambda x, t, n: jax.jvp(lambda y: call(y, n), (x,), (t,)))(
        x, t, jnp.int32(ROWS // BLOCK))
    _close(out, 2.0 * x)
    _close(tangent, 2.0 * t)


def none_operand(backend: str) -> None:
    """``pallas_call(...)(x, None)`` with a ``None`` spec: the kernel gets ``None``."""
    import jax
    import pallas_frontend as pl

    def kernel(x_ref, absent, o_ref):
        assert absent is None, f"the None operand reached the kernel as {absent!r}"
        o_ref[...] = x_ref[...] + 1
    x = _x()
    out = pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                         grid=(ROWS // BLOCK,), in_specs=[_spec(), None], out_specs=_spec(),
                         **_options(backend))(x, None)
    _close(out, x + 1.0)


def _semaphores(backend: str, n: int):
    import jax.numpy as jnp
    import pallas_frontend as pl
    if backend == "tpu":
        import pallas_tpu
        return pallas_tpu.SemaphoreType.REGULAR((n,))
    return pl.MemorySpace.ANY((n,), jnp.int32)   # the interpreter's semaphores: int32 Refs


def semaphore_view(backend: str) -> None:
    """Signal and wait on ``sems.at[i]`` with ``i`` traced (the grid index)."""
    import jax
    import pallas_frontend as pl

    def kernel(x_ref, o_ref, sems):
        i = pl.program_id(0)
        pl.semaphore_signal(sems.at[i], 2)
        pl.semaphore_wait(sems.at[i], 2)   # deadlocks (an error) if the view were wrong
        o_ref[...] = x_ref[...] + 1
    x = _x()
    out = pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                         grid=(ROWS // BLOCK,), in_specs=[_spec()], out_specs=_spec(),
                         scratch_shapes=[_semaphores(backend, ROWS // BLOCK)],
                         **_options(backend))(x)
    _close(out, x + 1.0)


def semaphore_read(backend: str) -> None:
    import jax
    import jax.numpy as jnp
    import pallas_frontend as pl

    def kernel(x_ref, o_ref, sems):
        pl.semaphore_signal(sems.at[0], 3)
        o_ref[...] = x_ref[...] + pl.semaphore_read(sems.at[0]).astype(jnp.float32)
        pl.semaphore_wait(sems.at[0], 3)
    x = _x()
    out = pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                         grid=(ROWS // BLOCK,), in_specs=[_spec()], out_specs=_spec(),
                         scratch_shapes=[_semaphores(backend, 1)], **_options(backend))(x)
    _close(out, x + 3.0)


def bounded_slice(backend: str) -> None:
    import jax
    import pallas_frontend as pl
    spec = pl.BlockSpec((pl.BoundedSlice(BLOCK), LANES), lambda i: (pl.ds(i * BLOCK, BLOCK), 0))
    x = _x()
    out = pl.pallas_call(_double, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                         grid=(ROWS // BLOCK,), in_specs=[spec], out_specs=_spec(),
                         **_options(backend))(x)
    _close(out, 2.0 * x)


def indirect_block(backend: str) -> None:
    """An ``Indirect`` block dim in a ``pallas_call`` BlockSpec."""
    import jax
    import pallas_frontend as pl
    spec = pl.BlockSpec((pl.Indirect(BLOCK), LANES), lambda i: (i, 0))
    x = _x()
    out = pl.pallas_call(_double, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                         grid=(ROWS // BLOCK,), in_specs=[spec], out_specs=_spec(),
                         **_options(backend))(x)
    _close(out, 2.0 * x)


def collective_run_scoped(backend: str) -> None:
    """``run_scoped(..., collective_axes=name)``: one buffer shared by a mesh axis."""
    import jax
    import jax.numpy as jnp
    import pallas_frontend as pl
    if backend != "interpret":
        # a kernel for it is backend-specific (mgpu: warpgroup threads); what the
        # frontend's check() asks of a backend is this capability tag
        if "collective_run_scoped" not in pl.get_backend(backend).capabilities:
            raise NotImplementedError(f"{backend} lacks capability collective_run_scoped")
        return

    class Mesh:
        shape = {"x": 2}

    def body(x_ref, o_ref):
        def scope(buf):
            buf[...] = x_ref[...] * 2
            o_ref[...] = buf[...]
        pl.run_scoped(scope, pl.MemorySpace.ANY((ROWS, LANES), jnp.float32), collective_axes="x")
    x = _x()
    out = pl.kernel(body, out_type=jax.ShapeDtypeStruct(x.shape, x.dtype), mesh=Mesh())(x)
    _close(out, 2.0 * x)


def get_global_in_branch(backend: str) -> None:
    """``pl.get_global`` called inside a ``pl.when`` body (not at the kernel's top)."""
    import jax
    import jax.numpy as jnp
    import pallas_frontend as pl

    def kernel(x_ref, o_ref):
        @pl.when(pl.program_id(0) >= 0)
        def _():
            shared = pl.get_global(pl.MemorySpace.ANY((BLOCK, LANES), jnp.float32))
            shared[...] = x_ref[...]
            o_ref[...] = shared[...] * 2
    x = _x()
    out = pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                         grid=(ROWS // BLOCK,), in_specs=[_spec()], out_specs=_spec(),
                         **_options(backend))(x)
    _close(out, 2.0 * x)


def non_identifier_backend_name(backend: str) -> None:
    """A backend named ``my-backend`` passes the frontend's load-time validation."""
    from pallas_frontend import backend_api, discovery
    del backend

    class Dashed(backend_api.Backend):
        name = "my-backend"
        api_version = backend_api.API_VERSION
        platforms = ("cpu",)
    why = discovery._validate(Dashed(), None)   # what loading an entry point runs
    if why is not None:
        raise ValueError(why)


# feature -> (probe, the backends a claim about it may name)
ALL = ("interpret", "tpu", "triton", "mgpu")
PROBES = {
    "traced_grid": (traced_grid, ALL),
    "traced_grid_parallel": (traced_grid_parallel, ("tpu",)),
    "traced_grid_vmap": (traced_grid_vmap, ("interpret",)),
    "traced_grid_jvp": (traced_grid_jvp, ("interpret",)),
    "none_operand": (none_operand, ALL),
    "semaphore_view": (semaphore_view, ("interpret", "tpu")),
    "semaphore_read": (semaphore_read, ("interpret", "tpu")),
    "bounded_slice": (bounded_slice, ALL),
    "indirect_block": (indirect_block, ALL),
    "collective_run_scoped": (collective_run_scoped, ALL),
    "get_global_in_branch": (get_global_in_branch, ("interpret",)),
    "non_identifier_backend_name": (non_identifier_backend_name, ("frontend",)),
}


def supported(backend: str, feature: str) -> tuple[bool, str]:
    """(True, "") when the probe runs and matches NumPy; (False, the error) when
    it is refused. A wrong result raises (AssertionError)."""
    probe, _ = PROBES[feature]
    try:
        probe(backend)
    except AssertionError:
        raise
    except Exception as e:   # the refusal: any error the frontend or backend raises
        return False, f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"
    return True, ""
