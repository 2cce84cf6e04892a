"""Block-range checks at scale: affine index maps are checked in closed form,
others point by point in bounded chunks; both must find exactly the first bad
block that a brute-force NumPy model finds. Large grids lower without per-point
tables (memory measured in a subprocess; no timing assertions)."""

import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pallas_frontend as pl
from pallas_frontend import block_indices
from pallas_frontend.interpreter import execute

BLOCK = 4


def _model_first_bad(terms, grid, nblocks):
    """Brute force over every grid point in row-major order, dim by dim."""
    for d, fn in enumerate(terms):
        for point in np.ndindex(*grid):
            v = fn(*point)
            if not 0 <= v < nblocks[d]:
                return d, point, v
    return None


def _lower_with(terms, grid, shape):
    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...] * 2.0

    def index_map(*idx):
        return tuple(fn(*idx) for fn in terms)

    block = (BLOCK,) * len(shape)
    f = pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(shape, jnp.float32), grid=grid,
                       in_specs=[pl.BlockSpec(block, index_map)],
                       out_specs=pl.BlockSpec(block, lambda *idx: (0,) * len(shape)))
    return jax.eval_shape(f, jax.ShapeDtypeStruct(shape, jnp.float32))


def _check_against_model(terms, grid, shape):
    nblocks = [-(-n // BLOCK) for n in shape]
    expected = _model_first_bad(terms, grid, nblocks)
    if expected is None:
        _lower_with(terms, grid, shape)
        return
    d, point, v = expected
    with pytest.raises(pl.BlockIndexError) as info:
        _lower_with(terms, grid, shape)
    assert f"returned block index {v} for dim {d} at grid point {point}," in str(info.value)


def _affine_term(c0, coefs):
    return lambda *idx: c0 + sum(c * i for c, i in zip(coefs, idx))


def _nonaffine_term(c0, coefs, kind):
    base = _affine_term(c0, coefs)
    if kind == "floordiv":
        return lambda *idx: base(*idx) // 2
    if kind == "mod":
        return lambda *idx: base(*idx) % 3 + idx[0] // 2
    return lambda *idx: jnp.maximum(base(*idx), idx[-1] - 1) if isinstance(idx[0], jax.Array) \
        else max(base(*idx), idx[-1] - 1)


@st.composite
def problems(draw, affine: bool):
    rank = draw(st.integers(1, 2))
    axes = draw(st.integers(1, 3))
    grid = tuple(draw(st.integers(1, 5)) for _ in range(axes))
    shape = tuple(BLOCK * draw(st.integers(1, 6)) - draw(st.integers(0, BLOCK - 1))
                  for _ in range(rank))
    terms = []
    for _ in range(rank):
        c0 = draw(st.integers(-3, 6))
        coefs = tuple(draw(st.integers(-2, 2)) for _ in range(axes))
        if affine:
            terms.append(_affine_term(c0, coefs))
        else:
            kind = draw(st.sampled_from(["floordiv", "mod", "max"]))
            terms.append(_nonaffine_term(c0, coefs, kind))
    return terms, grid, shape


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problems(affine=True))
def test_affine_maps_checked_in_closed_form_match_brute_force(problem):
    _check_against_model(*problem)


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(problem=problems(affine=False))
def test_nonaffine_maps_checked_in_chunks_match_brute_force(monkeypatch_chunks, problem):
    _check_against_model(*problem)


@pytest.fixture
def monkeypatch_chunks():
    # Chunks of 3 points: every multi-point grid is checked in several chunks.
    old = block_indices._CHUNK_POINTS
    block_indices._CHUNK_POINTS = 3
    yield
    block_indices._CHUNK_POINTS = old


def test_affine_detection():
    from pallas_frontend.affine_maps import affine_outputs

    def outs(fn, grid):
        jaxpr = jax.make_jaxpr(fn)(*([jnp.int32(0)] * len(grid)))
        return affine_outputs(jaxpr, grid)

    got = outs(lambda i, j: (2 * i - j + 3, j * 4, jnp.int32(7)), (5, 6))
    assert [(a.const, a.coefs) for a in got] == [(3, (2, -1)), (0, (0, 4)), (7, (0, 0))]
    assert outs(lambda i: (i // 2,), (8,)) is None
    assert outs(lambda i: (i * i,), (8,)) is None
    # An intermediate leaving int32 would wrap: not treated as affine.
    assert outs(lambda i: ((i + 2) * (1 << 29) - (1 << 30),), (8,)) is None


def test_first_outside_matches_enumeration():
    from pallas_frontend.affine_maps import Affine
    rng = np.random.default_rng(0)
    for _ in range(300):
        n = int(rng.integers(1, 4))
        grid = tuple(int(g) for g in rng.integers(1, 6, n))
        a = Affine(int(rng.integers(-5, 10)), tuple(int(c) for c in rng.integers(-3, 4, n)))
        lo, hi = sorted(int(v) for v in rng.integers(-4, 12, 2))
        values = a.over(grid)
        bad = np.argwhere((values < lo) | (values > hi))
        want = tuple(int(i) for i in bad[0]) if len(bad) else None
        assert a.first_outside(grid, lo, hi) == want
        assert a.bounds(grid) == (int(values.min()), int(values.max()))


def test_nonaffine_map_on_grid_without_tables_runs_like_numpy(monkeypatch, rng):
    # Pairs of blocks swapped (non-affine); with the table limit lowered, the
    # interpreter evaluates the index maps inside its loop.
    monkeypatch.setattr(execute, "MAX_TABLE_POINTS", 4)
    n, b = 96, 8
    x = rng.standard_normal(n).astype(np.float32)

    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...] * 3.0 + pl.program_id(0).astype(jnp.float32)

    swap = lambda i: (i // 2 * 2 + (1 - i % 2),)  # noqa: E731
    f = pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((n,), jnp.float32), grid=(n // b,),
                       in_specs=[pl.BlockSpec((b,), swap)],
                       out_specs=pl.BlockSpec((b,), lambda i: (i,)))
    got = np.asarray(jax.jit(f)(x))
    xs = x.astype(np.float64).reshape(-1, b)
    want = np.stack([xs[i // 2 * 2 + (1 - i % 2)] * 3.0 + i for i in range(n // b)]).reshape(-1)
    np.testing.assert_allclose(got, want, rtol=1e-6)


_BIG_GRID_SCRIPT = textwrap.dedent("""
    import json, resource, sys
    limit = int(sys.argv[4]) << 30
    resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))
    import jax, jax.numpy as jnp
    import pallas_frontend as pl
    block, affine = int(sys.argv[2]), sys.argv[3] == "affine"
    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...] + 1.0
    def build(points):
        index = (lambda i: (i,)) if affine else (lambda i: (jnp.minimum(i, points - 1),))
        n = points * block
        return n, pl.pallas_call(
            kernel, out_shape=jax.ShapeDtypeStruct((n,), jnp.float32), grid=(points,),
            in_specs=[pl.BlockSpec((block,), index)],
            out_specs=pl.BlockSpec((block,), lambda i: (i,)))
    n, warm = build(8)  # imports and caches everything a lowering needs
    jax.jit(warm).lower(jax.ShapeDtypeStruct((n,), jnp.float32))
    points = int(sys.argv[1])
    bad_index = (lambda i: (i + 1,)) if affine else (lambda i: (jnp.minimum(i + 1, points),))
    n, f = build(points)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    text = jax.jit(f).lower(jax.ShapeDtypeStruct((n,), jnp.float32)).as_text()
    bad = pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((n,), jnp.float32),
                         grid=(points,), in_specs=[pl.BlockSpec((block,), bad_index)],
                         out_specs=pl.BlockSpec((block,), lambda i: (i,)))
    try:
        jax.eval_shape(bad, jax.ShapeDtypeStruct((n,), jnp.float32))
        caught = ""
    except pl.BlockIndexError as e:
        caught = str(e)
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"grown_mib": (after - before) / 1024, "hlo_chars": len(text),
                      "caught": caught}))
""")


def _run_big(points, block, kind, limit_gib=4):
    proc = subprocess.run([sys.executable, "-c", _BIG_GRID_SCRIPT, str(points), str(block), kind,
                           str(limit_gib)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    import json
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_ten_million_point_affine_grid_lowers_without_per_point_tables():
    out = _run_big(10**7, 1, "affine")
    # Per-point tables alone would be >= 80 MB per operand and a 40 MB constant.
    assert out["grown_mib"] < 64, out
    assert out["hlo_chars"] < 200_000, out
    assert f"block index {10**7} for dim 0 at grid point ({10**7 - 1},)" in out["caught"]


def test_billion_point_affine_grid_lowers_in_bounded_memory():
    out = _run_big(10**9, 1, "affine", limit_gib=3)
    assert out["grown_mib"] < 64, out
    assert f"block index {10**9} for dim 0 at grid point ({10**9 - 1},)" in out["caught"]


def test_large_nonaffine_grid_is_checked_in_bounded_chunks():
    # 2^22 points of a non-affine map: checked in chunks, run by the table-free loop.
    points = 1 << 22
    out = _run_big(points, 1, "nonaffine")
    assert out["grown_mib"] < 256, out
    assert f"block index {points} for dim 0 at grid point ({points - 1},)" in out["caught"]
