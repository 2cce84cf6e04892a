"""Generated kernels for the differential test of the interpreters
(tests/test_differential.py): each example is drawn from its own seed and
builds the same kernel for ``pallas_frontend`` and for JAX's own
``jax.experimental.pallas``, with a NumPy reference computed independently.

Families: elementwise ops on ragged 2-D grids (every dtype, with NaN, ±inf,
-0.0 and extreme integers mixed into the data); a revisiting output block
accumulated over the inner grid axis; writes to an input Ref carried across
grid points; an aliased output whose unvisited blocks keep the input.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

DTYPES = ("float32", "float16", "bfloat16", "int8", "int16", "int32", "uint8", "uint32", "bool")
FLOAT_OPS = ("add", "sub", "mul", "div", "max", "min", "neg", "abs", "exp", "log", "sqrt",
             "tanh", "where_gt", "eq")
INT_OPS = ("add", "sub", "mul", "div", "rem", "max", "min", "neg", "abs", "and", "or", "xor",
           "where_gt", "eq")
BOOL_OPS = ("and", "or", "xor", "not", "eq")
UNARY = {"neg", "abs", "exp", "log", "sqrt", "tanh", "not"}
# Blocks of (32, 128) tile every dtype on TPU and are powers of two (Triton).
BLOCK = (32, 128)
# masked loads: blocks of 128 elements, windows of 64 starting anywhere in the block
MASKED = (128, 64)
SENTINEL = -7


def np_dtype(name: str):
    return jnp.dtype(name)


@dataclasses.dataclass(frozen=True)
class Example:
    index: int
    family: str
    dtype: str
    op: str
    shape: tuple[int, int]
    operands: tuple[np.ndarray, ...]

    def __str__(self):
        return f"#{self.index} {self.family} {self.op} {self.dtype}{list(self.shape)}"


def _values(rng, dtype: str, shape) -> np.ndarray:
    dt = np_dtype(dtype)
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if jnp.issubdtype(dt, jnp.integer):
        info = jnp.iinfo(dt)
        x = rng.integers(int(info.min), int(info.max), size=shape, endpoint=True, dtype=np.int64)
        return x.astype(dt)
    x = rng.standard_normal(shape) * rng.choice([1.0, 4.0, 100.0])
    specials = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, 1.0, -1.0])
    mask = rng.random(shape) < 0.08
    x[mask] = rng.choice(specials, size=int(mask.sum()))
    return x.astype(dt)


def _in_range(rng, x, target: str):
    """``x`` with the values a cast to ``target`` leaves undefined replaced: NaN,
    infinities and out-of-range floats going to an integer type (XLA defines no
    result for them)."""
    if target == "bool" or "int" not in target or x.dtype == np.bool_ \
            or not np.issubdtype(x.dtype, np.inexact) and "float" not in str(x.dtype) \
            and str(x.dtype) != "bfloat16":
        return x
    info = jnp.iinfo(np_dtype(target))
    lo, hi = max(float(info.min), -6e4), min(float(info.max), 6e4)   # f16's range too
    wide = x.astype(np.float64)
    bad = ~np.isfinite(wide) | (wide <= lo - 1) | (wide >= hi + 1)
    wide[bad] = rng.uniform(lo, hi, size=int(bad.sum()))
    out = wide.astype(x.dtype)
    back = out.astype(np.float64)      # rounding to x's dtype may leave the range again
    out[(back <= lo - 1) | (back >= hi + 1)] = 0
    return out


def draw(index: int, base_seed: int) -> Example:
    rng = np.random.default_rng([base_seed, index])
    family = rng.choice(["elementwise"] * 5 + ["revisit", "input_write", "aliasing",
                                                "masked_load", "cast"])
    if family == "elementwise":
        dtype = str(rng.choice(DTYPES))
        ops = BOOL_OPS if dtype == "bool" else INT_OPS if "int" in dtype else FLOAT_OPS
        op = str(rng.choice(ops))
        if op == "neg" and dtype.startswith("uint"):
            op = "add"
    elif family == "revisit":
        dtype, op = str(rng.choice(["float32", "int32"])), "sum"
    elif family == "input_write":
        dtype, op = str(rng.choice(["float32", "int32"])), "running_sum"
    elif family == "cast":
        dtype = str(rng.choice(DTYPES))
        op = "to_" + str(rng.choice([d for d in DTYPES if d != dtype]))
    elif family == "masked_load":
        dtype = str(rng.choice(["float32", "int32"]))
        op = f"window_{int(rng.integers(0, MASKED[0]))}_{int(rng.integers(0, MASKED[0]))}"
    else:
        dtype = str(rng.choice(DTYPES))
        op = "not" if dtype == "bool" else "add_one"
    # ragged: neither dim a multiple of the block (except where a family needs whole blocks)
    rows = int(rng.integers(1, 4)) * BLOCK[0] + int(rng.choice([0, 5, 17]))
    cols = int(rng.integers(1, 4)) * BLOCK[1] + int(rng.choice([0, 3, 77]))
    if family == "masked_load":
        rows, cols = 1, MASKED[0] * int(rng.integers(2, 6))
    if family in ("input_write", "aliasing"):
        rows, cols = int(rng.integers(2, 5)) * BLOCK[0], BLOCK[1] * int(rng.integers(1, 3))
    n_in = 1 if op in UNARY or family != "elementwise" else 2
    shape = (cols,) if family == "masked_load" else (rows, cols)
    operands = tuple(_values(rng, dtype, shape) for _ in range(n_in))
    if family == "cast":
        operands = (_in_range(rng, operands[0], op[3:]),)
    if op in ("div", "rem") and "int" in dtype:
        # divisors 0 and -1 (XLA defines x / 0 = -1, x % 0 = x, MIN / -1 = MIN)
        b = operands[1].copy()
        pick = rng.random(b.shape)
        b[pick < 0.1] = 0
        b[(pick >= 0.1) & (pick < 0.2)] = np.array(-1).astype(b.dtype)
        operands = (operands[0], b)
    return Example(index, str(family), dtype, op, (rows, cols), operands)


# --- the kernel, for either Pallas ------------------------------------------------

def _apply(op, a, b=None):
    fns = {
        "add": lambda: a + b, "sub": lambda: a - b, "mul": lambda: a * b,
        "div": lambda: a / b if jnp.issubdtype(a.dtype, jnp.floating) else jax.lax.div(a, b),
        "rem": lambda: jax.lax.rem(a, b),
        "max": lambda: jnp.maximum(a, b), "min": lambda: jnp.minimum(a, b), "neg": lambda: -a,
        "abs": lambda: jnp.abs(a), "exp": lambda: jnp.exp(a), "log": lambda: jnp.log(a),
        "sqrt": lambda: jnp.sqrt(a), "tanh": lambda: jnp.tanh(a),
        "where_gt": lambda: jnp.where(a > b, a, b), "eq": lambda: a == b,
        "and": lambda: a & b, "or": lambda: a | b, "xor": lambda: a ^ b, "not": lambda: ~a,
    }
    return fns[op]()


def out_dtype(ex: Example) -> str:
    if ex.family == "cast":
        return ex.op[3:]
    return "bool" if ex.op == "eq" else ex.dtype


def build(ex: Example, P, **call):
    """The kernel of ``ex`` built with Pallas module ``P`` (``pallas_frontend`` or
    ``jax.experimental.pallas``) and its ``pallas_call`` keywords."""
    rows, cols = ex.shape
    br, bc = BLOCK
    grid = (pl_cdiv(rows, br), pl_cdiv(cols, bc))
    dt = np_dtype(ex.dtype)
    if ex.family == "cast":
        def body(x, o):
            o[...] = x[...].astype(o.dtype)
        spec = P.BlockSpec(BLOCK, lambda i, j: (i, j))
        return P.pallas_call(body, jax.ShapeDtypeStruct(ex.shape, np_dtype(out_dtype(ex))),
                             grid=grid, in_specs=[spec], out_specs=spec, **call)
    if ex.family == "elementwise":
        def body(*refs):
            *ins, o = refs
            o[...] = _apply(ex.op, *[r[...] for r in ins])
        spec = P.BlockSpec(BLOCK, lambda i, j: (i, j))
        return P.pallas_call(body, jax.ShapeDtypeStruct(ex.shape, np_dtype(out_dtype(ex))),
                             grid=grid, in_specs=[spec] * len(ex.operands), out_specs=spec,
                             **call)
    if ex.family == "revisit":
        def body(x, o):
            @P.when(P.program_id(1) == 0)
            def _():
                o[...] = jnp.zeros_like(o)
            c = P.program_id(1) * bc + jax.lax.broadcasted_iota(jnp.int32, BLOCK, 1)
            o[...] += jnp.where(c < cols, x[...], jnp.zeros((), dt))
        return P.pallas_call(body, jax.ShapeDtypeStruct((rows, bc), dt), grid=grid,
                             in_specs=[P.BlockSpec(BLOCK, lambda i, j: (i, j))],
                             out_specs=P.BlockSpec(BLOCK, lambda i, j: (i, 0)), **call)
    if ex.family == "input_write":
        def body(x, o):
            x[...] = x[...] + x[...]
            o[...] = x[...]
        return P.pallas_call(body, jax.ShapeDtypeStruct((rows, cols * 3), dt),
                             grid=(rows // br, 3 * (cols // bc)),
                             in_specs=[P.BlockSpec(BLOCK, lambda i, j: (i, j // 3))],
                             out_specs=P.BlockSpec(BLOCK, lambda i, j: (i, j)), **call)
    if ex.family == "masked_load":
        return _masked_load(ex, P, **call)
    # aliasing: every other row block updated in place
    def body(x, o):
        o[...] = ~x[...] if ex.dtype == "bool" else x[...] + jnp.ones((), dt)
    spec = P.BlockSpec(BLOCK, lambda i, j: (2 * i, j))
    return P.pallas_call(body, jax.ShapeDtypeStruct(ex.shape, dt),
                         grid=(rows // br // 2, cols // bc), in_specs=[spec], out_specs=spec,
                         input_output_aliases={0: 0}, **call)


def _masked_load(ex, P, **call):
    """A window of the block that runs past its end, read with a mask (Triton's
    load): the start is ``s0 + i * step`` mod the block, traced."""
    import importlib
    ours = P.__name__ == "pallas_frontend"
    tl_load = importlib.import_module(
        "pallas_triton" if ours else "jax.experimental.pallas.triton").load
    block, width = MASKED
    s0, step = (int(v) for v in ex.op.split("_")[1:])
    n = ex.shape[1]

    def body(x, o):
        start = (s0 + P.program_id(0) * step) % block
        valid = start + jax.lax.broadcasted_iota(jnp.int32, (width,), 0) < block
        o[...] = tl_load(x.at[P.ds(start, width)], mask=valid,
                         other=jnp.asarray(SENTINEL, x.dtype))
    return P.pallas_call(body, jax.ShapeDtypeStruct((n // block * width,), np_dtype(ex.dtype)),
                         grid=(n // block,), in_specs=[P.BlockSpec((block,), lambda i: (i,))],
                         out_specs=P.BlockSpec((width,), lambda i: (i,)), **call)


def pl_cdiv(a, b):
    return -(-a // b)


# --- NumPy reference ---------------------------------------------------------------

def _xla_divide(op, a, b):
    """XLA's integer division: truncating; x / 0 is -1 (all ones), x % 0 is x, and
    MIN / -1 wraps to MIN (its remainder 0)."""
    a64, b64 = a.astype(np.int64), b.astype(np.int64)
    safe = np.where(b64 == 0, 1, b64)
    q = np.sign(a64) * np.sign(safe) * (np.abs(a64) // np.abs(safe))
    if op == "div":
        out = np.where(b64 == 0, -1, q)
    else:
        out = np.where(b64 == 0, a64, a64 - q * safe)
    return out.astype(a.dtype)


def numpy_reference(ex: Example) -> np.ndarray:
    dt = np_dtype(ex.dtype)
    xs = ex.operands
    if ex.family == "elementwise":
        if ex.dtype == "bool" or "int" in ex.dtype:
            with np.errstate(over="ignore"):
                a, b = xs[0], xs[1] if len(xs) > 1 else None
                ops = {"add": np.add, "sub": np.subtract, "mul": np.multiply,
                       "max": np.maximum, "min": np.minimum, "and": np.bitwise_and,
                       "or": np.bitwise_or, "xor": np.bitwise_xor, "eq": np.equal}
                if ex.op in ops:
                    return ops[ex.op](a, b)
                if ex.op == "where_gt":
                    return np.where(a > b, a, b)
                if ex.op == "not":
                    return ~a
                if ex.op in ("div", "rem"):
                    return _xla_divide(ex.op, a, b)
                return {"neg": np.negative, "abs": np.abs}[ex.op](a)
        with np.errstate(all="ignore"):
            a = xs[0].astype(np.float64)
            b = xs[1].astype(np.float64) if len(xs) > 1 else None
            ops = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide,
                   "max": np.maximum, "min": np.minimum, "eq": np.equal}
            if ex.op in ops:
                out = ops[ex.op](a, b)
            elif ex.op == "where_gt":
                out = np.where(a > b, a, b)
            else:
                out = {"neg": np.negative, "abs": np.abs, "exp": np.exp, "log": np.log,
                       "sqrt": np.sqrt, "tanh": np.tanh}[ex.op](a)
        return out if ex.op == "eq" else out.astype(dt)
    x = xs[0]
    rows, cols = ex.shape
    if ex.family == "cast":
        target = np_dtype(out_dtype(ex))
        if target == np.bool_:
            return x != 0
        if np.issubdtype(x.dtype, np.integer) or x.dtype == np.bool_:
            return x.astype(target)
        wide = x.astype(np.float64)
        return (np.trunc(wide) if "int" in out_dtype(ex) else wide).astype(target)
    br, bc = BLOCK
    if ex.family == "revisit":
        wide = x.astype(np.float64 if ex.dtype == "float32" else np.int64)
        pad = pl_cdiv(cols, bc) * bc - cols
        with np.errstate(invalid="ignore", over="ignore"):     # inf + -inf, integer wrap
            wide = np.pad(wide, [(0, 0), (0, pad)]).reshape(rows, -1, bc).sum(1)
        return wide.astype(np.float64) if ex.dtype == "float32" else wide.astype(dt)
    if ex.family == "masked_load":
        block, width = MASKED
        s0, step = (int(v) for v in ex.op.split("_")[1:])
        flat, out = x.reshape(-1), []
        for i in range(cols // block):
            start = (s0 + i * step) % block
            for j in range(width):
                out.append(flat[i * block + start + j] if start + j < block else SENTINEL)
        return np.array(out, dtype=dt)
    if ex.family == "input_write":
        blocks = []
        with np.errstate(over="ignore"):
            for jb in range(cols // bc):
                cur = x[:, jb * bc:(jb + 1) * bc].astype(dt)
                for _ in range(3):
                    cur = cur + cur
                    blocks.append(cur)
        return np.concatenate(blocks, axis=1)
    out = x.copy()
    with np.errstate(over="ignore"):
        for r in (2 * i * br for i in range(rows // br // 2)):
            out[r:r + br] = ~x[r:r + br] if ex.dtype == "bool" else x[r:r + br] + dt.type(1)
    return out
