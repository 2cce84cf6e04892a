"""Differential corpus: every elementwise, reduction, cumulative and cast primitive
(tools/differential_catalogue.py) on every dtype an interpreter declares, on edge
values (NaN of both signs, ±inf, ±0, denormals, integer extremes and overflow
edges) and random ones, run as Pallas kernels on each installed interpreter and
compared bit for bit with the same jnp/lax code jitted by XLA on CPU.

A difference is "declared" where the backend says it differs on purpose: the
``XLA_DIFFERENCES`` of its manifest module (``pallas_triton.manifests``, described
in its README), within the ULP bound given there; any other is "undeclared". A
kernel the backend refuses with its capability error (in ``check()``, or while
running) is "refused"; any other exception is an undeclared "error".

Speed: one kernel and one XLA jit per (interpreter, dtype) with every case of the
dtype as an output of it; a batch that raises runs again without the primitive its
error names, or in halves, until the case that raises is found.

    python tools/differential_corpus.py                 # print the summary
    python tools/differential_corpus.py --write         # also write docs/differential.md
    python tools/differential_corpus.py --interpreters triton --dtypes bfloat16 -v
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import os
import pathlib
import re
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import differential_catalogue as C  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "differential.md"

# interpreter -> (plugin module or None, its interpret option)
INTERPRETERS = {
    "interpret": (None, lambda m: True),
    "triton": ("pallas_triton", lambda m: m.InterpretParams()),
    "tpu": ("pallas_tpu", lambda m: m.InterpretParams()),
    "mgpu": ("pallas_mgpu", lambda m: m.InterpretParams()),
}
# The built-in interpreter takes any dtype: it runs these and every dtype a plugin declares.
BASE_DTYPES = ("float32", "float16", "bfloat16", "float64", "int8", "int16", "int32", "int64",
               "uint8", "uint16", "uint32", "uint64", "bool")
WIDE = {"float64", "int64", "uint64"}          # run with jax_enable_x64 on


class NotInstalled(Exception):
    pass


def interpret_option(name: str):
    module_name, option = INTERPRETERS[name]
    if module_name is None:
        return option(None)
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise NotInstalled(f"{module_name} is not installed here ({e})") from e
    return option(module)


def declared_dtypes(name: str) -> tuple[str, ...]:
    """The dtypes the backend behind interpreter ``name`` declares (``Backend.dtypes``,
    or its check module's list where that is None)."""
    if name == "interpret":
        found = set(BASE_DTYPES)
        for other in INTERPRETERS:
            if other != "interpret":
                try:
                    found |= set(declared_dtypes(other))
                except NotInstalled:
                    pass
        return _ordered(found)
    module_name = INTERPRETERS[name][0]
    try:
        importlib.import_module(module_name)
    except ImportError as e:
        raise NotInstalled(f"{module_name} is not installed here ({e})") from e
    import pallas_frontend.registry as registry
    backend = registry.get_backend(name)
    if backend.dtypes is not None:
        return _ordered(backend.dtypes)
    check = importlib.import_module(f"{module_name}.check")
    listed = getattr(check, "SUPPORTED_DTYPES", None) or getattr(check, "DTYPES")
    return _ordered(listed)


def _ordered(names) -> tuple[str, ...]:
    known = [d for d in BASE_DTYPES if d in names]
    return tuple(known + sorted(set(names) - set(known)))


# --- applicability ---------------------------------------------------------------------

def _abstract(dtype: str):
    dt = jnp.dtype(dtype)
    shapes = {k: jax.ShapeDtypeStruct(C.SHAPE, dt) for k in ("a", "b", "c")}
    for k in ("r1", "s1", "r0", "s0"):
        shapes[k] = jax.ShapeDtypeStruct(C.SHAPE, dt)
    shapes["pred"] = jax.ShapeDtypeStruct(C.SHAPE, jnp.bool_)
    shapes["which"] = jax.ShapeDtypeStruct(C.SHAPE, jnp.int32)
    return shapes


def _binds(jaxpr, primitive: str, dtype) -> bool:
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == primitive and any(
                getattr(v.aval, "dtype", None) == dtype for v in eqn.invars):
            return True
        for p in eqn.params.values():
            inner = getattr(p, "jaxpr", p)
            if hasattr(inner, "eqns") and _binds(inner, primitive, dtype):
                return True
    return False


def applies(case: C.Case, dtype: str) -> bool:
    """Whether ``case``'s function, traced on ``dtype``, binds its primitive on an
    operand of that dtype."""
    try:
        closed = jax.make_jaxpr(case.fn)(_abstract(dtype))
    except Exception:   # noqa: BLE001 - JAX refuses the dtype: the case does not apply
        return False
    return _binds(closed.jaxpr, case.primitive, jnp.dtype(dtype))


ALL_SPECIAL = False        # --all-special: C.FLOAT32_ONLY and C.FLOAT8_MATH everywhere


def cases_for(dtype: str, dtypes) -> list[C.Case]:
    return [c for c in C.CASES + C.cast_cases(dtype, [d for d in dtypes if d != dtype])
            if (ALL_SPECIAL or dtype == "float32" or c.primitive not in C.FLOAT32_ONLY)
            and (ALL_SPECIAL or "float8" not in dtype or c.primitive not in C.FLOAT8_MATH)
            and _in_mode(_x64(dtype, c), lambda c=c: applies(c, dtype))]


# --- running ---------------------------------------------------------------------------

KEYS = ("a", "b", "c", "pred", "which", "r1", "s1", "r0", "s0")


def _outputs(cases, ops):
    return [jnp.broadcast_to(c.fn(ops), C.SHAPE) for c in cases]


def reference(cases, ops):
    return [np.asarray(y) for y in jax.jit(lambda o: _outputs(cases, o))(ops)]


def pallas(cases, ops, interpret, out_dtypes):
    import pallas_frontend as pl

    def body(*refs):
        vals = {k: r[...] for k, r in zip(KEYS, refs)}
        for o, y in zip(refs[len(KEYS):], _outputs(cases, vals)):
            o[...] = y
    call = pl.pallas_call(body, out_shape=[jax.ShapeDtypeStruct(C.SHAPE, d) for d in out_dtypes],
                          interpret=interpret)
    return [np.asarray(y) for y in jax.block_until_ready(call(*[ops[k] for k in KEYS]))]


def _run_split(run, cases):
    """{case name: outputs or the exception}, running ``cases`` in one batch. A batch
    that raises is run again without the cases of the primitive its error names, or
    else in halves, until each error is pinned to its case."""
    try:
        return dict(zip((c.name for c in cases), run(cases)))
    except Exception as e:    # noqa: BLE001 - find the case that raises
        if len(cases) == 1:
            return {cases[0].name: e}
        named = re.findall(r"primitive '(\w+)'", str(e))
        blamed = [c for c in cases if c.primitive in named]
        if blamed and len(blamed) < len(cases):
            rest = [c for c in cases if c not in blamed]
            return {**_run_split(run, blamed), **_run_split(run, rest)}
        half = len(cases) // 2
        return {**_run_split(run, cases[:half]), **_run_split(run, cases[half:])}


# --- comparing -------------------------------------------------------------------------

def _bits(x: np.ndarray) -> np.ndarray:
    if x.dtype == np.bool_ or x.dtype.itemsize == 0:
        return x.astype(np.uint8)
    if x.dtype.name in ("int4", "uint4"):
        return x.astype(np.int8)
    return x.view(f"uint{8 * x.dtype.itemsize}")


def ulps_apart(got: np.ndarray, want: np.ndarray, nan_sign=True) -> np.ndarray:
    """Distance in units in the last place between two float arrays of one dtype
    (NaN vs NaN: 0 where their signs agree or ``nan_sign`` is False; NaN vs a
    number: the largest int64)."""
    sign = np.int64(1) << (8 * got.dtype.itemsize - 1)

    def ordered(x):       # the bit patterns as integers in the order of the floats
        u = _bits(x).astype(np.int64)
        return np.where(u >= sign, sign - u, u)
    d = np.abs(ordered(got) - ordered(want))
    gn, wn = np.isnan(got.astype(np.float32)), np.isnan(want.astype(np.float32))
    same = (not nan_sign) | (np.signbit(got.astype(np.float32)) == np.signbit(want.astype(np.float32)))
    d = np.where(gn | wn, np.where(gn & wn & same, 0, np.iinfo(np.int64).max), d)
    return d


EVERY = "*"          # the key of a backend's declarations for every primitive


def declared() -> dict[str, dict]:
    """{interpreter: {primitive: entry, EVERY: {name: entry}}}: the differences from XLA
    each installed backend declares in its manifest module (``XLA_DIFFERENCES`` and
    ``XLA_DIFFERENCES_EVERY_PRIMITIVE``, described in its README); ``allowance`` reads
    them."""
    out = {}
    for name, (module_name, _) in INTERPRETERS.items():
        if module_name is None:
            continue
        for sub in ("manifests", "manifest"):
            try:
                module = importlib.import_module(f"{module_name}.{sub}")
            except ImportError:
                continue
            out[name] = {**getattr(module, "XLA_DIFFERENCES", {}),
                         EVERY: dict(getattr(module, "XLA_DIFFERENCES_EVERY_PRIMITIVE", {}))}
            break
    return out


@dataclasses.dataclass(frozen=True)
class Allowance:
    """What a backend's declarations let one case's float results differ in (the
    defaults: nothing, bit for bit)."""
    ulps: int = 0                     # finite results within this many ULP
    nan_bits: bool = True             # False: a NaN's sign and payload are free
    inputs_read_as_zero: bool = False  # may be XLA's result on denormals read as +-0
    denormal_ties: bool = False       # results compare with denormals read as +-0
    zero_sign: bool = True            # False: the sign of a zero result is free
    sum_abs_eps: bool = False         # within count * eps * sum(|terms|)
    flushed_results: bool = False     # a denormal here where XLA gives +-0
    fields: tuple = ()                # the declarations that gave it, for the report

    def __bool__(self):
        return bool(self.fields)


ENTRY_FIELDS = {"why", "ulps", "nan_bits", "sum_abs_eps", "scalar_operand", "scalar_bounds",
                "denormal_ties", "flushed_results"}
EVERY_FIELDS = {"why", "inputs_read_as_zero", "nan_bits", "except"}


def allowance(entries: dict, case: C.Case, dtype: str) -> Allowance:
    """The one reader of a backend's declarations (``declared()[interpreter]``): what
    they allow ``case`` on ``dtype``. A field it does not know raises, so that nothing
    a manifest declares goes unread."""
    entry = entries.get(case.primitive, {})
    every = {k: v for k, v in entries.get(EVERY, {}).items()
             if case.primitive not in v.get("except", ())}
    for where, fields, known in [(case.primitive, entry, ENTRY_FIELDS)] + [
            (f"{EVERY}{k}", v, EVERY_FIELDS) for k, v in every.items()]:
        unknown = set(fields) - known
        if unknown:
            raise ValueError(f"declared difference {where!r} has fields this tool does not "
                             f"read: {sorted(unknown)} (tools/differential_corpus.py allowance)")
    got: dict = {}
    names = []
    if dtype in entry.get("ulps", {}):
        got["ulps"] = entry["ulps"][dtype]
        names.append(f"within {got['ulps']} ulp")
    if entry.get("nan_bits", True) is False:
        got["nan_bits"] = False
        names.append("NaN bits free")
    for key in ("denormal_ties", "sum_abs_eps"):
        if entry.get(key):
            got[key] = True
            names.append(key.replace("_", " "))
    if dtype in entry.get("flushed_results", {}):
        got["flushed_results"] = True
        names.append("XLA's flushed results")
    if case.scalars and dtype in entry.get("scalar_operand", {}).get("dtypes", ()):
        got["nan_bits"] = False
        names.append("constant operand: NaN bits free")
    if case.scalars and entry.get("scalar_bounds"):
        got.update(nan_bits=False, zero_sign=False, denormal_ties=True)
        names.append("scalar bounds: NaN bits, zero signs free, denormals as zero")
    for name, e in every.items():
        if e.get("inputs_read_as_zero"):
            got["inputs_read_as_zero"] = True
            names.append("denormal inputs may read as zero")
        if e.get("nan_bits", True) is False and got.get("nan_bits", True):
            got["nan_bits"] = False
            names.append(f"NaN bits free ({name})")
    return Allowance(**got, fields=tuple(names))


def _read_as_zero(x: np.ndarray) -> np.ndarray:
    """``x`` with every denormal replaced by a zero of its sign."""
    tiny = float(jnp.finfo(x.dtype).tiny)
    wide = x.astype(np.float32) if x.dtype.itemsize < 4 else x
    return np.where((wide != 0) & (np.abs(wide) < tiny), np.copysign(0, wide), wide) \
        .astype(x.dtype)


def allowed(a: Allowance, dtype: str, got, refs, abs_terms=None, count=0) -> np.ndarray:
    """Where ``got`` is one of the results ``a`` allows from any reference in ``refs``
    (XLA's, and XLA's on denormals read as zero where ``a`` says so)."""
    ok = np.zeros(got.shape, bool)
    tiny = float(jnp.finfo(got.dtype).tiny)
    wide = got.astype(np.float64)
    for ref in refs:
        ok |= within(got, ref, a.ulps, a.nan_bits)
        if a.denormal_ties:
            ok |= within(_read_as_zero(got), _read_as_zero(ref), a.ulps, a.nan_bits)
        r = ref.astype(np.float64)
        if not a.zero_sign:
            ok |= (wide == 0) & (r == 0)
        if a.flushed_results:
            ok |= (r == 0) & (np.abs(wide) < tiny)
        if a.sum_abs_eps and abs_terms is not None:
            eps = float(jnp.finfo(got.dtype).eps)
            with np.errstate(invalid="ignore"):
                ok |= np.isfinite(r) & (np.abs(wide - r) <= count * eps * abs_terms)
    return ok


@dataclasses.dataclass
class Result:
    interpreter: str
    dtype: str
    case: str
    status: str           # equal | declared | undeclared | refused | error | n/a
    detail: str = ""


def _show(x) -> str:
    """A value, with its bits where the value alone hides them (NaN's sign, -0.0)."""
    x = np.asarray(x)
    if x.dtype.kind in "biu" or x.dtype == np.bool_:
        return repr(x.item())
    text = repr(float(x))
    if np.isnan(float(x)) or float(x) == 0:
        text = ("-" if np.signbit(x.astype(np.float32)) else "+") + text.lstrip("-")
    return f"{text} ({x.dtype.name} {int(_bits(x.reshape(1))[0]):#x})" if np.isnan(
        float(x)) else text


def _describe(ops, case: C.Case, idx, got, want) -> str:
    r, col = idx
    result = f"got {_show(got[r, col])}, XLA {_show(want[r, col])}"
    if case.kind in ("reduction", "cumulative"):
        key = re.search(r"axis(\d)", case.name).group(1)
        src = ("s" if case.primitive in C.SUMS else "r") + key
        return f"{src} line {r if key == '1' else col} (at {col if key == '1' else r}): {result}"
    n = {"unary": 1, "binary": 2}.get(case.kind, 3)
    args = ", ".join(_show(ops[k][r, col]) for k in ("a", "b", "c")[:n])
    if case.name.startswith("select_n"):
        args = f"pred={ops['pred'][r, col]}, which={ops['which'][r, col]}, " + args
    return f"({args}) -> {result}"


def _capability_error(e: BaseException) -> str:
    """The message of the backend's capability error behind ``e`` (raised by check(),
    or while running inside a callback, where JAX wraps it), or ""."""
    from pallas_frontend.backend_api import BackendCapabilityError
    seen, text = set(), ""
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, BackendCapabilityError):
            return (str(e).strip().splitlines() or [""])[0][:300]
        text += str(e) + "\n"
        e = e.__cause__ or e.__context__
    # a callback's exception reaches the caller as text in XLA's runtime error
    m = re.search(r"\w*CapabilityError: ([^\n]*)", text)
    return f"(while running) {m.group(1)[:300]}" if m else ""


def _flushed(ops: dict) -> dict:
    """``ops`` with every denormal float replaced by a zero of its sign."""
    return {k: _read_as_zero(x) if x.dtype.kind == "f" or x.dtype.name == "bfloat16"
            or "float8" in x.dtype.name else x for k, x in ops.items()}


def within(got, want, ulps: int, nan_bits: bool) -> np.ndarray:
    """Where ``got`` is within ``ulps`` of ``want`` (a NaN where ``want`` has one,
    bit for bit unless ``nan_bits`` is False)."""
    ok = ulps_apart(got, want, nan_sign=nan_bits) <= ulps
    if nan_bits:
        both = np.isnan(got.astype(np.float32)) & np.isnan(want.astype(np.float32))
        ok &= ~both | (_bits(got) == _bits(want))
    return ok


def compare(interp, dtype, case, got, want, ops, decl, flushed_reference=None,
            abs_terms=None) -> Result:
    """``got`` (an interpreter's output or exception) against XLA's ``want``, allowing
    what the backend declares (``allowance``). ``flushed_reference()``: XLA's output on
    ``ops`` with denormals read as zero; ``abs_terms()``: XLA's output on the absolute
    values (the sum of |terms| a declared summation-order bound scales with)."""
    if isinstance(got, Exception):
        refusal = _capability_error(got)
        if refusal:
            return Result(interp, dtype, case.name, "refused", refusal)
        first = (str(got).strip().splitlines() or [""])[0][:300]
        return Result(interp, dtype, case.name, "error", f"{type(got).__name__}: {first}")
    assert got.dtype == want.dtype and got.shape == want.shape, (case.name, got.dtype, want.dtype)
    diff = _bits(got) != _bits(want)
    if not diff.any():
        return Result(interp, dtype, case.name, "equal")
    where = np.argwhere(diff)
    floating = jnp.issubdtype(got.dtype, jnp.floating)
    detail = f"{len(where)} of {diff.size} differ"
    if floating:
        d = ulps_apart(got, want, nan_sign=False)[diff]
        finite = d[d < np.iinfo(np.int64).max]
        detail += f" (at most {finite.max()} ulp apart" + (
            f", {d.size - finite.size} NaN where XLA has none or the reverse)" if
            finite.size < d.size else ")") if finite.size else " (NaN vs number)"
    a = allowance(decl.get(interp, {}), case, dtype)
    if floating and a:
        refs = [want]
        if a.inputs_read_as_zero and flushed_reference is not None:
            refs.append(flushed_reference())
        terms, count = None, 0
        if a.sum_abs_eps and abs_terms is not None and case.kind in ("reduction", "cumulative"):
            terms = abs_terms()
            count = C.SHAPE[int(re.search(r"axis(\d)", case.name).group(1))]
        ok = ~diff | allowed(a, dtype, got, refs, terms, count)
        if ok.all():
            return Result(interp, dtype, case.name, "declared",
                          f"{detail}; declared: " + ", ".join(a.fields))
        where = np.argwhere(~ok)
        detail += f"; {len(where)} outside the declared ({', '.join(a.fields)})"
    shown = "; ".join(_describe(ops, case, tuple(i), got, want) for i in where[:3])
    return Result(interp, dtype, case.name, "undeclared", f"{detail}: {shown}")


# --- the corpus ------------------------------------------------------------------------

def _x64(dtype: str, case: C.Case) -> bool:
    return dtype in WIDE or case.target in WIDE


def _in_mode(x64: bool, fn):
    if not x64:
        return fn()
    with jax.enable_x64(True):
        return fn()


def _run_cases(run, dtype, cases):
    """``_run_split`` over ``cases``, those that need 64-bit types with x64 on."""
    out = {}
    for x64 in (False, True):
        group = [c for c in cases if _x64(dtype, c) == x64]
        if group:
            out.update(_in_mode(x64, lambda: _run_split(run, group)))
    return out


@dataclasses.dataclass
class Prepared:
    """One dtype's cases, operands and XLA's results (shared by the interpreters)."""
    dtype: str
    cases: list
    ops: dict
    want: dict            # case name -> XLA's output, or the exception XLA raised
    _flushed: dict = dataclasses.field(default_factory=dict)

    def flushed_reference(self, case: C.Case):
        """XLA's output of ``case`` with denormal inputs read as zero (computed once)."""
        if case.name not in self._flushed:
            ops = _flushed(self.ops)
            self._flushed[case.name] = _in_mode(_x64(self.dtype, case),
                                                lambda: reference([case], ops)[0])
        return self._flushed[case.name]

    def abs_terms(self, case: C.Case) -> np.ndarray:
        """``case`` on the absolute values of the float operands, in float64 (for a sum:
        the sum of |terms| behind each result)."""
        ops = {k: np.abs(x.astype(np.float64)) if x.dtype.kind == "f"
               or x.dtype.name == "bfloat16" else x for k, x in self.ops.items()}
        return _in_mode(True, lambda: reference([case], ops)[0]).astype(np.float64)


def prepare(dtype: str, all_dtypes, seed: int) -> Prepared:
    cases = cases_for(dtype, all_dtypes)
    rng = np.random.default_rng([seed, _ordered(all_dtypes).index(dtype)])
    ops = C.operands(dtype, rng)
    want = _run_cases(lambda cs: reference(cs, ops), dtype, cases) if cases else {}
    return Prepared(dtype, cases, ops, want)


def run_interpreter(interp: str, mine, p: Prepared, decl, log=None) -> list[Result]:
    """Results of ``p``'s cases on interpreter ``interp``, which declares dtypes ``mine``."""
    if p.dtype not in mine:
        return []
    results, runnable = [], []
    for c in p.cases:
        if c.target is not None and c.target not in mine:
            continue
        if isinstance(p.want[c.name], Exception):
            results.append(Result(interp, p.dtype, c.name, "n/a",
                                  f"XLA on CPU: {str(p.want[c.name]).splitlines()[0][:200]}"))
        else:
            runnable.append(c)
    option = interpret_option(interp)
    start = time.perf_counter()
    run = lambda cs: pallas(cs, p.ops, option, [p.want[c.name].dtype for c in cs])  # noqa: E731
    # a primitive the backend refused on another dtype runs in a kernel of its own first
    # (refused at once, most likely), so that it does not fail the batch of the rest
    refused_before = _REFUSED.setdefault(interp, set())
    alone = [c for c in runnable if c.primitive in refused_before]
    got = {}
    for c in alone:
        got.update(_run_cases(run, p.dtype, [c]))
    got.update(_run_cases(run, p.dtype, [c for c in runnable if c not in alone]))
    for c in runnable:
        if isinstance(got[c.name], Exception) and _capability_error(got[c.name]):
            refused_before.add(c.primitive)
    mine_results = [compare(interp, p.dtype, c, got[c.name], p.want[c.name], p.ops, decl,
                            lambda c=c: p.flushed_reference(c), lambda c=c: p.abs_terms(c))
                    for c in runnable]
    if log:
        counts = {}
        for r in mine_results:
            counts[r.status] = counts.get(r.status, 0) + 1
        log(f"{interp} {p.dtype}: {counts} ({time.perf_counter() - start:.1f} s)",
            [r for r in mine_results if r.status not in ("equal", "n/a")])
    return results + mine_results


_REFUSED: dict[str, set[str]] = {}     # interpreter -> primitives refused on some dtype


def installed_interpreters(names) -> tuple[dict[str, tuple], dict[str, str]]:
    """({interpreter: its declared dtypes}, {interpreter not installed: why})."""
    installed, skipped = {}, {}
    for interp in names:
        try:
            installed[interp] = declared_dtypes(interp)
            interpret_option(interp)
        except NotInstalled as e:
            skipped[interp] = str(e)
    return installed, skipped


def run(interpreters, dtypes=None, seed=0, log=None) -> tuple[list[Result], dict[str, str]]:
    """(results, {interpreter not run: why})."""
    decl = declared()
    installed, skipped = installed_interpreters(interpreters)
    all_dtypes = _ordered(set().union(*installed.values())) if installed else ()
    results = []
    for dtype in all_dtypes:
        if dtypes and dtype not in dtypes:
            continue
        p = prepare(dtype, all_dtypes, seed)
        for interp, mine in installed.items():
            results += run_interpreter(interp, mine, p, decl, log)
    return results, skipped


# --- the page --------------------------------------------------------------------------

STATUSES = ("equal", "declared", "undeclared", "error", "refused", "n/a")


def counts(results) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for r in results:
        row = out.setdefault(r.interpreter, {"cases": 0, **{s: 0 for s in STATUSES}})
        row["cases"] += 1
        row[r.status] += 1
    return out


def page(results, skipped, seed) -> str:
    lines = [
        "# Differential corpus: the interpreters against XLA",
        "",
        "Generated by `python tools/differential_corpus.py --write`; "
        "`tests/test_differential_corpus.py` runs the same corpus in CI (the `all-plugins` "
        "env) and fails on any undeclared difference.",
        "",
        "Each case is one primitive (tools/differential_catalogue.py: every elementwise, "
        "reduction, cumulative and cast primitive `jax.lax` exports, or the reason it is "
        "left out) on one dtype the interpreter's backend declares, run as an output of a "
        "Pallas kernel on 2048 values: every pair of edge values (NaN of both signs, "
        "±inf, ±0, denormals, the largest and smallest values, integer min/max and the "
        "overflow and shift edges) and random ones; reductions and scans along each axis "
        "on lines that hold one edge pattern each (sums and products on values that sum "
        "the same in any order). The result is compared bit for bit with the same jnp/lax "
        "code jitted by XLA on CPU. One kernel and one XLA jit per interpreter and dtype "
        "hold every case as an output; a kernel that raises is split until the case that "
        "raises is found.",
        "",
        "Special functions (`lgamma`, `digamma`, `igammac`, `zeta`, `betainc`, Bessel, "
        "`erf_inv`, ...) run on float32 only and 8-bit floats skip the math functions: "
        "XLA's CPU compile of those costs as much as everything else together "
        "(`--all-special` runs them everywhere).",
        "",
        "- equal: every bit equal.",
        "- declared: differs only where the backend declares a deliberate difference from "
        "XLA (`XLA_DIFFERENCES` and `XLA_DIFFERENCES_EVERY_PRIMITIVE` in its manifest "
        "module, described in its README), as far as the declaration allows: a ULP bound "
        "per dtype, NaN bits, denormal inputs read as zero, which of a denormal and a zero "
        "that compare equal, a summation-order bound (count x eps x sum of |terms|), "
        "results XLA flushes, constant operands and scalar bounds. Every field a "
        "declaration has is read (`allowance` in the tool; an unknown field fails).",
        "- undeclared: differs and nothing declares it (the CI test fails).",
        "- error: the kernel raised while running (undeclared: the CI test fails).",
        "- refused: the backend's `check()` refused the kernel before running it, "
        "with a message.",
        "- n/a: XLA on CPU cannot compile the primitive for that dtype.",
        "",
        f"Seed {seed}. Interpreters: built-in (`interpret=True`), Triton's interpreter "
        "(`pallas_triton.InterpretParams()`), TPU interpret mode "
        "(`pallas_tpu.InterpretParams()`), Mosaic GPU interpret mode "
        "(`pallas_mgpu.InterpretParams()`).",
        "",
        "| interpreter | dtypes | cases | " + " | ".join(STATUSES) + " |",
        "|---|---|---:|" + "---:|" * len(STATUSES),
    ]
    table = counts(results)
    for interp in INTERPRETERS:
        if interp in skipped:
            lines.append(f"| {interp} | not run: {skipped[interp]} |" + " |" * (
                len(STATUSES) + 1))
            continue
        if interp not in table:
            continue
        n_dtypes = len({r.dtype for r in results if r.interpreter == interp})
        row = table[interp]
        lines.append(f"| {interp} | {n_dtypes} | {row['cases']} | "
                     + " | ".join(str(row[s]) for s in STATUSES) + " |")
    shown = [r for r in results if r.status not in ("equal", "n/a")]
    if shown:
        lines += ["", "## Cases that are not equal", "",
                  "| interpreter | dtype | case | status | what |", "|---|---|---|---|---|"]
        for r in sorted(shown, key=lambda r: (r.interpreter, r.status, r.case, r.dtype)):
            what = r.detail.replace("|", "\\|").replace("\n", " ")
            lines.append(f"| {r.interpreter} | {r.dtype} | `{r.case}` | {r.status} | {what} |")
    na = sorted({(r.dtype, r.case) for r in results if r.status == "n/a"})
    if na:
        lines += ["", "## Not compiled by XLA on CPU", "",
                  ", ".join(f"`{c}` {d}" for d, c in na)]
    lines += ["", "## Primitives left out", "",
              "| primitive | why |", "|---|---|"]
    for p, why in sorted(C.NOT_IN_CORPUS.items()):
        if p in C.public_primitives():
            lines.append(f"| `{p}` | {why} |")
    return "\n".join(lines) + "\n"


def read_page_counts(text: str) -> dict[str, dict[str, int]]:
    """The summary table of a written page: {interpreter: {column: count}}."""
    out = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 + len(STATUSES) and cells[0] in INTERPRETERS and cells[2].isdigit():
            out[cells[0]] = {"cases": int(cells[2]),
                             **{s: int(v) for s, v in zip(STATUSES, cells[3:])}}
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--interpreters", nargs="*", default=list(INTERPRETERS))
    ap.add_argument("--dtypes", nargs="*")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--write", action="store_true", help=f"write {PAGE.relative_to(ROOT)}")
    ap.add_argument("--all-special", action="store_true",
                    help="special functions on every float dtype (not float32 only), math "
                         "functions on 8-bit floats")
    ap.add_argument("--json", help="also write the results to this JSON file")
    ap.add_argument("-v", "--verbose", action="store_true", help="print every case not equal")
    args = ap.parse_args(argv)
    global ALL_SPECIAL
    ALL_SPECIAL = args.all_special
    start = time.perf_counter()
    def log(line, shown):
        print(line, flush=True)
        for r in shown if args.verbose else ():
            print(f"  {r.interpreter} {r.dtype} {r.case}: {r.status}: {r.detail}", flush=True)
    results, skipped = run(args.interpreters, args.dtypes, args.seed, log=log)
    for interp, why in skipped.items():
        print(f"{interp}: not run: {why}")
    for interp, row in counts(results).items():
        print(interp, row)
    print(f"{time.perf_counter() - start:.0f} s")
    if args.write:
        PAGE.write_text(page(results, skipped, args.seed))
    if args.json:
        import json
        pathlib.Path(args.json).write_text(json.dumps(
            {"seed": args.seed, "skipped": skipped,
             "results": [dataclasses.asdict(r) for r in results]}, indent=0))
    bad = sum(r.status in ("undeclared", "error") for r in results)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
