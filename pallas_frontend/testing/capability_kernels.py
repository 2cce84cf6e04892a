"""One small kernel per capability tag the frontend derives
(``backend_api.CAPABILITY_TAGS``), each with a NumPy float64 reference.

``CAPABILITY_KERNELS[tag](rng, **call) -> (fn, operands, expected)``: ``fn``
is jittable; lowering it for a backend that lacks ``tag`` must fail in
``Backend.check``; running it on one that declares ``tag`` must match
``expected``."""

from __future__ import annotations

import contextlib

import jax
import jax.numpy as jnp
import numpy as np

import pallas_frontend as pl

N, B = 256, 128
F32 = jax.ShapeDtypeStruct((N,), jnp.float32)


def _x(rng, *shape, dtype=np.float32):
    return rng.standard_normal(shape or (N,)).astype(dtype)


def _blocked(**call):
    spec = pl.BlockSpec((B,), lambda i: (i,))
    return dict(grid=(N // B,), in_specs=[spec], out_specs=spec, **call)


def _double(x, o):
    o[...] = x[...] * 2


def grid(rng, **call):
    x = _x(rng)
    return pl.pallas_call(_double, F32, **_blocked(**call)), [x], 2.0 * x.astype(np.float64)


blocked = grid


def element(rng, **call):
    x = _x(rng)
    f = pl.pallas_call(_double, F32, grid=(N // B,),
                       in_specs=[pl.BlockSpec((pl.Element(B),), lambda i: (i * B,))],
                       out_specs=pl.BlockSpec((B,), lambda i: (i,)), **call)
    return f, [x], 2.0 * x.astype(np.float64)


def squeezed(rng, **call):
    # the squeezed dim leads, so the block's last two dims stay (8, 128) (Mosaic TPU)
    x = _x(rng, 2, 8, B)
    spec = pl.BlockSpec((None, 8, B), lambda i: (i, 0, 0))
    f = pl.pallas_call(_double, jax.ShapeDtypeStruct((2, 8, B), jnp.float32), grid=(2,),
                       in_specs=[spec], out_specs=spec, **call)
    return f, [x], 2.0 * x.astype(np.float64)


def bounded_slice(rng, **call):
    x = _x(rng)
    spec = pl.BlockSpec((pl.BoundedSlice(B),), lambda i: (pl.ds(i * B, B),))
    f = pl.pallas_call(_double, F32, grid=(N // B,), in_specs=[spec], out_specs=spec, **call)
    return f, [x], 2.0 * x.astype(np.float64)


def scratch(rng, **call):
    def body(x, o, acc):
        acc[...] = x[...] * 2
        o[...] = acc[...]
    x = _x(rng)
    f = pl.pallas_call(body, F32, scratch_shapes=[pl.MemorySpace.DEFAULT((B,), jnp.float32)],
                       **_blocked(**call))
    return f, [x], 2.0 * x.astype(np.float64)


def aliasing(rng, **call):
    x = _x(rng)
    spec = pl.BlockSpec((B,), lambda i: (i,))
    f = pl.pallas_call(_double, F32, grid=(1,), in_specs=[spec], out_specs=spec,
                       input_output_aliases={0: 0}, **call)
    want = x.astype(np.float64)
    want[:B] *= 2           # the block no grid point writes keeps the input's values
    return f, [x], want


def run_scoped(rng, **call):
    def body(x, o):
        def scoped(tmp):
            tmp[...] = x[...] * 2
            o[...] = tmp[...]
        pl.run_scoped(scoped, pl.MemorySpace.DEFAULT((B,), jnp.float32))
    x = _x(rng)
    return pl.pallas_call(body, F32, **_blocked(**call)), [x], 2.0 * x.astype(np.float64)


def debug_print(rng, **call):
    def body(x, o):
        # an int32 value: Mosaic TPU formats only 32-bit integers into placeholders
        pl.debug_print("conformance debug_print {}", pl.program_id(0))
        o[...] = x[...] * 2
    x = _x(rng)
    return pl.pallas_call(body, F32, **_blocked(**call)), [x], 2.0 * x.astype(np.float64)


def debug_check(rng, **call):
    def body(x, o):
        pl.debug_check(jnp.all(x[...] > -1e30), "conformance debug_check")
        o[...] = x[...] * 2
    x = _x(rng)
    with pl.enable_debug_checks(True):
        f = pl.pallas_call(body, F32, **_blocked(**call))

    def checked(*args):
        with pl.enable_debug_checks(True):
            return f(*args)
    return checked, [x], 2.0 * x.astype(np.float64)


def semaphores(rng, **call):
    def body(x, o, sem):
        sem[...] = jnp.zeros((), jnp.int32)
        pl.semaphore_signal(sem, 3)
        pl.semaphore_wait(sem, 2)
        o[...] = x[...] * pl.semaphore_read(sem).astype(jnp.float32)   # 3 - 2 = 1
    x = _x(rng)
    f = pl.pallas_call(body, F32, scratch_shapes=[pl.ANY((), jnp.int32)], **_blocked(**call))
    return f, [x], x.astype(np.float64)


def float64(rng, **call):
    x = rng.standard_normal(N)
    f = pl.pallas_call(_double, jax.ShapeDtypeStruct((N,), jnp.float64), **_blocked(**call))
    return f, [x], 2.0 * x


def loops(rng, **call):
    def body(x, o):
        o[...] = jax.lax.fori_loop(0, 3, lambda i, acc: acc + x[...], jnp.zeros_like(x[...]))
    x = _x(rng)
    return pl.pallas_call(body, F32, **_blocked(**call)), [x], 3.0 * x.astype(np.float64)


def vmap(rng, **call):
    # a 2-D kernel with (8, 128) blocks: vmapped, its blocks are (squeezed, 8, 128),
    # which Mosaic TPU takes (a vmapped 1-D kernel's (squeezed, 128) it refuses)
    x = _x(rng, 3, 8, N)
    spec = pl.BlockSpec((8, B), lambda i: (0, i))
    f = pl.pallas_call(_double, jax.ShapeDtypeStruct((8, N), jnp.float32), grid=(N // B,),
                       in_specs=[spec], out_specs=spec, **call)
    return jax.vmap(f), [x], 2.0 * x.astype(np.float64)


def jvp(rng, **call):
    def body(x, o):
        o[...] = x[...] * x[...]
    f = pl.pallas_call(body, F32, **_blocked(**call))
    x, t = _x(rng), _x(rng)
    x64, t64 = x.astype(np.float64), t.astype(np.float64)
    return (lambda a, b: jax.jvp(f, (a,), (b,))[1]), [x, t], 2 * x64 * t64


def dynamic_grid(rng, **call):
    """The grid's size is an operand: ``n`` blocks, counted from the data."""
    def f(x, flags):
        n = jnp.sum(flags).astype(jnp.int32)
        spec = pl.BlockSpec((B,), lambda i: (i,))
        return pl.pallas_call(_double, F32, grid=(n,), in_specs=[spec], out_specs=spec,
                              **call)(x)
    x = _x(rng)
    # every block active, so every element is written and checked
    flags = np.ones(N // B, np.int32)
    return f, [x, flags], 2.0 * x.astype(np.float64)


CAPABILITY_KERNELS = {
    "grid": grid, "blocked": blocked, "element": element, "squeezed": squeezed,
    "bounded_slice": bounded_slice, "scratch": scratch, "aliasing": aliasing,
    "run_scoped": run_scoped, "debug_print": debug_print, "debug_check": debug_check,
    "semaphores": semaphores, "float64": float64, "loops": loops, "vmap": vmap, "jvp": jvp,
    "dynamic_grid": dynamic_grid,
}


def x64_for(tag: str):
    """The context a tag's kernel must be built and run in."""
    return jax.enable_x64(True) if tag == "float64" else contextlib.nullcontext()
