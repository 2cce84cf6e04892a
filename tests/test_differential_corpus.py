"""The differential corpus (tools/differential_corpus.py) in CI: every elementwise,
reduction, cumulative and cast primitive on every dtype each installed interpreter
declares, on edge and random values, bit for bit against XLA on CPU.

An undeclared difference (or a crash) fails, except the defects issue 32 lists
that are still being fixed (``PENDING``: each entry must still show, or the test
fails until it is dropped). The seed is ``PALLAS_DIFFERENTIAL_SEED`` (default 0,
the seed docs/differential.md was written with: then the page's counts must be
the run's, so a change that moves them regenerates the page).
"""

from __future__ import annotations

import fnmatch
import os
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
import differential_catalogue as C  # noqa: E402
import differential_corpus as D  # noqa: E402

SEED = int(os.environ.get("PALLAS_DIFFERENTIAL_SEED", "0"))

# Defects of issue 32 being fixed elsewhere: (interpreter, case pattern, dtype pattern)
# -> the defect. Not declarations (nothing here is deliberate): each is an xfail that
# names it, and an entry that no longer shows fails the test until it is dropped.
PENDING: dict[tuple[str, str, str], str] = {}


# --- the catalogue ---------------------------------------------------------------------

def _covered() -> set[str]:
    return {c.primitive for c in C.CASES} | {"convert_element_type", "bitcast_convert_type"}


def test_every_public_primitive_is_a_case_or_left_out_with_a_reason():
    unlisted = C.public_primitives() - _covered() - set(C.NOT_IN_CORPUS)
    assert not unlisted, (f"jax.lax exports primitives the corpus neither runs nor lists "
                          f"in NOT_IN_CORPUS (tools/differential_catalogue.py): {sorted(unlisted)}")
    both = _covered() & set(C.NOT_IN_CORPUS)
    assert not both, f"both a case and left out: {sorted(both)}"


def test_the_interpreters_primitive_tables_are_covered():
    """Every primitive the built-in interpreter's fast paths and each installed
    backend's code generator name is a case or left out with a reason."""
    from pallas_frontend.interpreter import rowwise
    tables = {"interpret": rowwise._ELEMENTWISE | rowwise._REDUCTIONS | rowwise._CUMULATIVE}
    try:
        import pallas_triton.codegen  # noqa: F401 - fills the emitter table
        from pallas_triton import emitters
        tables["triton"] = {n for n in emitters.EMITTERS if not n.startswith("triton_")}
    except ImportError:
        pass
    for name, table in tables.items():
        unlisted = table - _covered() - set(C.NOT_IN_CORPUS)
        assert not unlisted, f"{name}'s primitives neither run nor left out: {sorted(unlisted)}"


@pytest.mark.parametrize("case", C.CASES, ids=lambda c: c.name)
def test_each_case_binds_its_primitive(case):
    assert any(D.applies(case, d) for d in ("float32", "int32", "uint32", "bool")), (
        f"{case.name} binds no {case.primitive} on any dtype")


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_float_inputs_hold_every_edge_value(dtype):
    ops = C.operands(dtype, np.random.default_rng(SEED))
    a, b = ops["a"].reshape(-1), ops["b"].reshape(-1)
    for x in (a, b):
        bits = D._bits(x)
        wide = x.astype(np.float32)
        nan = np.isnan(wide)
        assert (nan & np.signbit(wide)).any() and (nan & ~np.signbit(wide)).any()
        assert np.isposinf(wide).any() and np.isneginf(wide).any()
        assert ((wide == 0) & np.signbit(wide)).any() and ((wide == 0) & ~np.signbit(wide)).any()
        sub = (wide != 0) & (np.abs(wide) < float(jnp.finfo(jnp.dtype(dtype)).tiny))
        assert sub.any() and (sub & np.signbit(wide)).any()
        assert (bits == D._bits(np.array([jnp.finfo(jnp.dtype(dtype)).max], x.dtype))[0]).any()
    # every pair of edge values in (a, b)
    s = C.specials(dtype)
    pairs = {(int(p), int(q)) for p, q in zip(D._bits(a), D._bits(b))}
    sb = D._bits(s)
    assert all((int(p), int(q)) in pairs for p in sb for q in sb)


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int32", "uint32"])
def test_integer_inputs_hold_the_extremes_and_shift_edges(dtype):
    ops = C.operands(dtype, np.random.default_rng(SEED))
    info = np.iinfo(dtype)
    a = ops["a"]
    for v in (info.min, info.max, 0, 1, info.bits, info.bits - 1):
        assert (a == v).any(), v
    if info.min < 0:
        assert (a == -1).any()
    assert (ops["r1"] == info.min).all(1).any() and (ops["r1"] == info.max).all(1).any()


def test_ulps_apart_counts_units_in_the_last_place():
    x = np.array([1.0, -0.0, 0.0, -1.0, np.nan], np.float32)
    y = np.nextafter(x, np.float32(np.inf)).astype(np.float32)
    y[4] = np.float32(np.nan)
    np.testing.assert_array_equal(D.ulps_apart(x, y)[:4], [1, 1, 1, 1])
    assert D.ulps_apart(x, y)[4] == 0
    assert D.ulps_apart(np.float32([np.nan]), -np.float32([np.nan]))[0] > 10 ** 9


def test_declared_differences_come_from_each_backends_manifest():
    decl = D.declared()
    try:
        from pallas_triton import manifests
    except ImportError:
        pytest.skip("pallas_triton is not installed here")
    assert decl["triton"] == {**manifests.XLA_DIFFERENCES,
                              D.EVERY: manifests.XLA_DIFFERENCES_EVERY_PRIMITIVE}
    # every field of every declaration is one the tool reads (an unknown one raises)
    for dtype in ("float32", "bfloat16", "float16", "float64"):
        for case in C.CASES:
            D.allowance(decl["triton"], case, dtype)


def test_an_unknown_declared_field_is_refused():
    case = next(c for c in C.CASES if c.name == "exp")
    with pytest.raises(ValueError, match="fields this tool does not read: .'ulp_bound'."):
        D.allowance({"exp": {"ulp_bound": 3}}, case, "float32")
    with pytest.raises(ValueError, match="does not read"):
        D.allowance({D.EVERY: {"x": {"nan_sign": False}}}, case, "float32")


def _case(name):
    return next(c for c in C.CASES if c.name == name)


def test_every_primitive_declarations_apply_to_each_case_but_their_exceptions():
    every = {D.EVERY: {"nans": {"nan_bits": False, "except": ("neg",)},
                       "daz": {"inputs_read_as_zero": True}}}
    exp, neg = D.allowance(every, _case("exp"), "float32"), D.allowance(every, _case("neg"), "float32")
    assert not exp.nan_bits and exp.inputs_read_as_zero
    assert neg.nan_bits and neg.inputs_read_as_zero


def test_each_declared_field_allows_only_its_difference():
    """A planted difference of each kind is 'declared' only under the field that
    declares it (and 'undeclared' without it)."""
    f32 = np.float32
    tiny = np.finfo(f32).tiny
    want = np.array([[np.nan, 0.0, 1.0, 0.0]], f32)
    cases = {
        # field -> (case, got, entry)
        "nan_bits": ("exp", np.array([[-np.nan, 0.0, 1.0, 0.0]], f32), {"nan_bits": False}),
        "denormal_ties": ("reduce_max[axis1]", np.array([[np.nan, 0.0, 1.0, tiny / 4]], f32),
                          {"denormal_ties": True}),
        "flushed_results": ("logistic", np.array([[np.nan, 0.0, 1.0, tiny / 8]], f32),
                            {"flushed_results": {"float32": "why"}}),
        "scalar_bounds": ("clamp[scalar bounds]", np.array([[-np.nan, -0.0, 1.0, 0.0]], f32),
                          {"scalar_bounds": True}),
        "scalar_operand": ("max[constant]", np.array([[-np.nan, 0.0, 1.0, 0.0]], f32),
                           {"scalar_operand": {"dtypes": ("float32",)}}),
    }
    ops = {k: np.zeros((1, 4), f32) for k in D.KEYS}
    for field, (name, got, entry) in cases.items():
        case = next(c for c in C.CASES if c.name == name)
        r = D.compare("triton", "float32", case, got, want, ops, {"triton": {case.primitive: entry}})
        assert r.status == "declared", (field, r.detail)
        r = D.compare("triton", "float32", case, got, want, ops, {"triton": {}})
        assert r.status == "undeclared", (field, r.detail)


def test_a_sum_is_held_to_count_eps_sum_of_abs_terms():
    case = _case("reduce_sum[axis1]")
    ops = C.operands("float32", np.random.default_rng(SEED))
    p = D.Prepared("float32", [case], ops, {})
    want = D.reference([case], ops)[0]
    terms = p.abs_terms(case)
    bound = C.SHAPE[1] * np.finfo(np.float32).eps * terms
    finite = np.isfinite(want) & (terms > 0) & (bound < np.abs(want) * 1e-3)
    assert finite.any()
    got = want.copy()
    got[finite] = (want[finite].astype(np.float64) + bound[finite] * 0.9).astype(np.float32)
    decl = {"triton": {"reduce_sum": {"sum_abs_eps": True}}}
    r = D.compare("triton", "float32", case, got, want, ops, decl, abs_terms=lambda: terms)
    assert r.status == "declared", r.detail
    got[finite] = (want[finite].astype(np.float64) + bound[finite] * 3).astype(np.float32)
    r = D.compare("triton", "float32", case, got, want, ops, decl, abs_terms=lambda: terms)
    assert r.status == "undeclared", r.detail


def test_a_declared_bound_is_held_to():
    """A difference within the declared ULP bound is 'declared'; one past it, or on a
    primitive or dtype the entry does not name, is 'undeclared'."""
    ops = C.operands("float32", np.random.default_rng(SEED))
    case = next(c for c in C.CASES if c.name == "exp")
    want = np.asarray(jax.jit(case.fn)(ops))
    finite = np.flatnonzero(np.isfinite(want.reshape(-1)) & (want.reshape(-1) > 1))
    got = want.copy()
    got.reshape(-1)[finite[:5]] = np.nextafter(want.reshape(-1)[finite[:5]], np.float32(np.inf))
    decl = {"interpret": {"exp": {"ulps": {"float32": 1}}}}
    assert D.compare("interpret", "float32", case, got, want, ops, decl).status == "declared"
    decl2 = {"interpret": {"exp": {"ulps": {"float16": 1}}}}
    assert D.compare("interpret", "float32", case, got, want, ops, decl2).status == "undeclared"
    got.reshape(-1)[finite[0]] = np.nextafter(got.reshape(-1)[finite[0]], np.float32(np.inf))
    r = D.compare("interpret", "float32", case, got, want, ops, decl)
    assert r.status == "undeclared" and "1 outside the declared (within 1 ulp)" in r.detail, r.detail


def test_a_planted_difference_is_found():
    """A case whose interpreter result differs in one bit is 'undeclared', with the
    input, both results and their bits named."""
    ops = C.operands("float32", np.random.default_rng(SEED))
    case = next(c for c in C.CASES if c.name == "neg")
    want = np.asarray(jax.jit(case.fn)(ops))
    got = want.copy()
    got.reshape(-1)[0] = np.float32(np.nan)          # -(NaN) is -NaN: flip its sign
    r = D.compare("interpret", "float32", case, got, want, ops, {})
    assert r.status == "undeclared" and "1 of 2048 differ" in r.detail
    assert "got +nan" in r.detail and "XLA -nan" in r.detail, r.detail


# --- the corpus on each interpreter ------------------------------------------------------

_prepared: dict[str, D.Prepared] = {}


def _all():
    return D.installed_interpreters(D.INTERPRETERS)


def _pending(r: D.Result):
    return next((why for (i, c, d), why in PENDING.items() if i == r.interpreter
                 and fnmatch.fnmatchcase(r.case, c) and fnmatch.fnmatchcase(r.dtype, d)), None)


def _computes_as_the_pages_host() -> bool:
    """Whether XLA and NumPy here compute as on the host docs/differential.md was written
    on (Intel with AVX512-FP16 and AVX512-BF16, NumPy's AVX-512 loops). On an AMD or
    AVX2 host, or with those paths forced (docs/contributing.md, "Other processors"),
    XLA's and NumPy's results equal Triton's interpreter's in other cases (issue 39:
    9 declared cases equal with both held to AVX2); the built-in, TPU and Mosaic GPU
    interpreters compute through XLA and keep their counts."""
    try:
        from pallas_triton import host_floats
    except ImportError:
        return True
    simd = np.show_config(mode="dicts").get("SIMD Extensions", {}).get("found", [])
    avx512_loops = any(s in simd for s in ("X86_V4", "AVX512_SKX"))
    return avx512_loops and host_floats.xla_cpu_floats() == host_floats.AVX512_FP16_HOST


def _equal_or_declared(row):
    """``row`` with its equal and declared counts as one (None stays None)."""
    if row is None:
        return None
    out = {k: v for k, v in row.items() if k not in ("equal", "declared")}
    out["equal or declared"] = row.get("equal", 0) + row.get("declared", 0)
    return out


@pytest.mark.parametrize("interp", list(D.INTERPRETERS))
def test_corpus_has_no_undeclared_difference(interp):
    installed, skipped = _all()
    if interp in skipped:
        pytest.skip(skipped[interp])
    all_dtypes = D._ordered(set().union(*installed.values()))
    decl = D.declared()
    results = []
    for dtype in installed[interp]:
        if dtype not in _prepared:
            _prepared[dtype] = D.prepare(dtype, all_dtypes, SEED)
        results += D.run_interpreter(interp, installed[interp], _prepared[dtype], decl)
    row = D.counts(results)[interp]
    print(f"{interp} (seed {SEED}): {row}")
    bad = [r for r in results if r.status in ("undeclared", "error")]
    unexpected = [r for r in bad if _pending(r) is None]
    assert not unexpected, "undeclared differences from XLA:\n" + "\n".join(
        f"  {r.dtype} {r.case}: {r.status}: {r.detail}" for r in unexpected)
    shown = {_pending(r) for r in bad}
    gone = [f"{k}: {why}" for k, why in PENDING.items() if k[0] == interp and why not in shown]
    assert not gone, f"pending defects that no longer show (drop their entries): {gone}"
    if SEED == 0 and not skipped and D.PAGE.exists():
        on_page = D.read_page_counts(D.PAGE.read_text()).get(interp)
        if interp == "triton" and not _computes_as_the_pages_host():
            # which cases are equal and which declared is the host's; nothing else is
            on_page, row = _equal_or_declared(on_page), _equal_or_declared(row)
        assert on_page == row, (f"docs/differential.md is not current for {interp}: page "
                                f"{on_page}, run {row}; python tools/differential_corpus.py "
                                "--write")
    if bad:
        pytest.xfail(f"{len(bad)} cases of defects being fixed (issue 32): "
                     + "; ".join(sorted(shown)))
