"""Property: the vectorized interpreter equals the sequential one, element for
element (NaN where the sequential path leaves NaN), on random kernels."""

from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pallas_frontend as pl
from fast_interp_helpers import run_both

# One drawn rule per array dim: how its block index (or element offset) follows the grid.
#   ("const", c) | ("axis", a) | ("rev", a) | ("sum", a, b) | ("scaled", a, k)


@st.composite
def dim_specs(draw, n, grid, tiled_bias):
    """(BlockDim or int, rule) for one array dim of extent ``n``."""
    kind = draw(st.sampled_from(["blocked", "blocked", "blocked", "element", "squeezed"]))
    axes = st.integers(0, len(grid) - 1) if grid else st.nothing()
    rules = [st.tuples(st.just("const"), st.integers(0, 8))]
    if grid:
        rules += [st.tuples(st.just("axis"), axes)] * (2 + tiled_bias) + [
                  st.tuples(st.just("rev"), axes),
                  st.tuples(st.just("sum"), axes, axes),
                  st.tuples(st.just("scaled"), axes, st.integers(1, 3))]
    rule = draw(st.one_of(*rules))
    if kind == "squeezed":
        return pl.Squeezed(), rule, n
    size = draw(st.integers(1, n + 1))           # may overhang, need not divide
    if kind == "element":
        pad = (draw(st.integers(0, 2)), draw(st.integers(0, 2)))
        return pl.Element(size, pad), rule, n + pad[0] + pad[1]
    return size, rule, -(-n // size)             # number of blocks


def _value(rule, idx, modulus):
    kind = rule[0]
    if kind == "const":
        v = jnp.int32(rule[1])
    elif kind == "axis":
        v = idx[rule[1]]
    elif kind == "rev":
        v = 7 - idx[rule[1]]
    elif kind == "sum":
        v = idx[rule[1]] + idx[rule[2]]
    else:
        v = idx[rule[1]] * rule[2]
    return v % modulus                            # always in range


@st.composite
def operand(draw, grid, tiled_bias=0):
    ndim = draw(st.integers(1, 3))
    shape = tuple(draw(st.integers(1, 9)) for _ in range(ndim))
    dims = [draw(dim_specs(n, grid, tiled_bias)) for n in shape]
    block = tuple(d for d, _, _ in dims)
    rules = [(r, m) for _, r, m in dims]

    def index_map(*idx):
        return tuple(_value(r, idx, m) for r, m in rules)
    return shape, pl.BlockSpec(block, index_map)


def _visible_shape(spec):
    out = []
    for d in spec.block_shape:
        if isinstance(d, pl.Squeezed) or d is None:
            continue
        out.append(d.block_size if isinstance(d, pl.Element) else d)
    return tuple(out)


# Random kernels per run (fresh ones each run: not derandomized); each compiles
# both interpreters, about a quarter second. PALLAS_PARITY_EXAMPLES=500 for a
# longer hunt.
EXAMPLES = int(os.environ.get("PALLAS_PARITY_EXAMPLES", "60"))


@settings(max_examples=EXAMPLES, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.data())
def test_vectorized_equals_sequential(data):
    grid = tuple(data.draw(st.lists(st.integers(1, 4), min_size=0, max_size=3), label="grid"))
    x_shape, x_spec = data.draw(operand(grid), label="x")
    o_shape, o_spec = data.draw(operand(grid, tiled_bias=6), label="o")
    dims = data.draw(st.sampled_from([None, "parallel"]), label="dimension_semantics")
    o_vis = _visible_shape(o_spec)
    x_vis = _visible_shape(x_spec)

    def kernel(x_ref, init_ref, o_ref):
        del init_ref  # o_ref starts as init's values (aliased)
        tag = sum((pl.program_id(a) + 1.0) * 10.0 ** a for a in range(len(grid)))
        xv = x_ref[...] if x_vis == o_vis else jnp.broadcast_to(
            x_ref[(0,) * len(x_vis)], o_vis)
        o_ref[...] = o_ref[...] * 0.5 + xv + tag

    params = None
    if dims and grid:
        # Narrowing only: a params object that declares every axis parallel changes nothing.
        params = _Params(dimension_semantics=("parallel",) * len(grid))
    call = pl.pallas_call(kernel, jax.ShapeDtypeStruct(o_shape, jnp.float32), grid=grid,
                          in_specs=[x_spec, o_spec], out_specs=o_spec,
                          input_output_aliases={1: 0}, compiler_params=params)
    rng = np.random.default_rng(data.draw(st.integers(0, 2**31 - 1), label="seed"))
    x = jnp.asarray(rng.standard_normal(x_shape), jnp.float32)
    init = jnp.asarray(rng.standard_normal(o_shape), jnp.float32)
    seq, vec, _ = run_both(call, x, init)
    np.testing.assert_array_equal(vec[0], seq[0])


import dataclasses  # noqa: E402


@dataclasses.dataclass(frozen=True)
class _Params(pl.CompilerParams):
    dimension_semantics: tuple = ()
