"""A kernel's cost hint under ``jax.vmap``: the batched launch runs ``batch``
programs where there was one, so every count is multiplied by the batch size
(as JAX's pallas_call does, and JAX's TPU test_cost_analysis_vmap checks); a
symbolic batch size cannot scale an int, so the hint is dropped; a batch run
as one launch per element keeps each launch's own hint."""

import jax
import jax.numpy as jnp
import numpy as np
from jax import export

import pallas_frontend as pl


class PrefetchGridSpec(pl.GridSpec):
    """A scalar-prefetch grid spec as a backend defines one (pallas_tpu's, say)."""

    def __init__(self, num_scalar_prefetch, **kw):
        super().__init__(**kw)
        self.num_scalar_prefetch = num_scalar_prefetch


def _counts(rng):
    return {name: int(rng.integers(1, 10_000)) for name in
            ("flops", "transcendentals", "bytes_accessed", "remote_bytes_transferred")}


def _copy_call(counts, **kw):
    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...] + 1.0
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
                          cost_estimate=pl.CostEstimate(**counts), **kw)


def _launch_costs(fn, *args):
    """The cost hint of every pallas_call launch in ``fn``'s jaxpr, nested ones too."""
    found = []

    def visit(jaxpr):
        for eqn in jaxpr.eqns:
            if eqn.primitive.name == "pallas_call":
                found.append(eqn.params["kernel"].cost_estimate)
            for p in eqn.params.values():
                inner = getattr(p, "jaxpr", p)
                if hasattr(inner, "eqns"):
                    visit(inner)
    visit(jax.make_jaxpr(fn)(*args).jaxpr)
    return found


def _as_dict(cost):
    return {name: getattr(cost, name) for name in
            ("flops", "transcendentals", "bytes_accessed", "remote_bytes_transferred")}


def test_vmap_multiplies_every_count_by_the_batch(rng):
    counts = _counts(rng)
    batch = int(rng.integers(2, 7))
    x = jnp.asarray(rng.standard_normal((batch, 8, 128)), jnp.float32)
    (cost,) = _launch_costs(jax.vmap(_copy_call(counts)), x)
    assert _as_dict(cost) == {k: v * batch for k, v in counts.items()}
    # the kernel still computes what it did, per element
    np.testing.assert_array_equal(jax.vmap(_copy_call(counts))(x), np.asarray(x) + 1.0)


def test_nested_vmap_multiplies_by_both_batches(rng):
    counts = _counts(rng)
    outer, inner = (int(b) for b in rng.integers(2, 5, size=2))
    x = jnp.zeros((outer, inner, 8, 128), jnp.float32)
    (cost,) = _launch_costs(jax.vmap(jax.vmap(_copy_call(counts))), x)
    assert _as_dict(cost) == {k: v * outer * inner for k, v in counts.items()}


def test_unbatched_call_keeps_its_hint(rng):
    counts = _counts(rng)
    (cost,) = _launch_costs(_copy_call(counts), jnp.zeros((8, 128), jnp.float32))
    assert _as_dict(cost) == counts


def test_symbolic_batch_drops_the_hint(rng):
    counts = _counts(rng)
    (b,) = export.symbolic_shape("b")
    seen = []

    def fn(x):
        seen.extend(_launch_costs(jax.vmap(_copy_call(counts)), x))
        return jax.vmap(_copy_call(counts))(x)
    export.export(jax.jit(fn), platforms=["cpu"])(jax.ShapeDtypeStruct((b, 8, 128), jnp.float32))
    assert seen == [None]


def test_batched_prefetch_runs_per_element_launches_with_their_own_hint(rng):
    counts = _counts(rng)
    batch = int(rng.integers(2, 5))

    def kernel(s_ref, x_ref, o_ref):
        o_ref[...] = x_ref[...] * 2.0

    call = pl.pallas_call(
        kernel, out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
        grid_spec=PrefetchGridSpec(
            num_scalar_prefetch=1, grid=(1,),
            in_specs=[pl.BlockSpec((8, 128), lambda i, s: (s[0], 0))],
            out_specs=pl.BlockSpec((8, 128), lambda i, s: (0, 0))),
        cost_estimate=pl.CostEstimate(**counts))
    s = jnp.zeros((batch, 1), jnp.int32)     # batched prefetch: one launch per element
    x = jnp.asarray(rng.standard_normal((batch, 8, 128)), jnp.float32)
    costs = _launch_costs(jax.vmap(call), s, x)
    assert costs and all(_as_dict(c) == counts for c in costs)
    np.testing.assert_array_equal(jax.vmap(call)(s, x), np.asarray(x) * 2.0)
