"""Tracing a BlockSpec's index map to the jaxpr a ``BlockMapping`` holds."""

from __future__ import annotations

import inspect
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from pallas_frontend import _jax_compat as jc
from pallas_frontend.primitives import grid_context
from pallas_frontend.specs import BlockSpec, BoundedSlice, PallasTypeError


def _user_fn(fn: Callable) -> Callable:
    """The user's function behind ``fn``: unwrapped (BlockSpec wraps its
    index map as JAX's does) and taken out of a ``functools.partial``."""
    fn = inspect.unwrap(fn)
    return getattr(fn, "func", fn)


def source_of(fn: Callable) -> str:
    """``file:line`` where ``fn`` is defined, or its repr."""
    fn = inspect.unwrap(_user_fn(fn))
    code = getattr(fn, "__code__", None)
    return f"{code.co_filename}:{code.co_firstlineno}" if code else repr(fn)


def _type_str(x) -> str:
    """``f32[4,8]``: a value's (or an aval's) type, as JAX prints it."""
    aval = x if isinstance(x, jc.core.AbstractValue) else jax.typeof(x)
    return aval.str_short(short_dtypes=True)


def _fn_name(fn: Callable) -> str:
    fn = _user_fn(fn)
    return getattr(fn, "__name__", type(fn).__name__)


def trace_index_map(spec: BlockSpec | None, dims, origin: str, num_grid: int,
                     prefetch_avals, prefetch_tree=None, grid_sizes=None, sizes_ref=False
                     ) -> tuple[jc.Jaxpr, str]:
    """The index map as a jaxpr over one int32 per grid axis then the flat
    scalar-prefetch Refs. As in JAX, the map itself is called with the grid
    indices then one argument per prefetch operand (``prefetch_tree``, a tuple
    treedef: a pytree operand arrives as that pytree of Refs). With
    ``sizes_ref`` the last prefetch Ref is not the user's: it holds the traced
    grid sizes (``None`` in ``grid_sizes``), in axis order, for ``pl.num_programs``."""
    n_out = sum(2 if isinstance(d, BoundedSlice) else 1 for d in dims)
    index_map = spec.index_map if spec is not None else None
    if index_map is None:
        def index_map(*_):
            return (0,) * len(dims)
        src = "default index_map (all zeros)"
    else:
        src = f"{_fn_name(index_map)} at {source_of(index_map)}"
    if prefetch_tree is None:
        prefetch_tree = jax.tree.structure(tuple(range(len(prefetch_avals) - sizes_ref)))
    arity = num_grid + len(jax.tree.unflatten(prefetch_tree, [0] * prefetch_tree.num_leaves))
    sizes = tuple(grid_sizes) if grid_sizes is not None else (None,) * num_grid

    def flat_fn(*idx):
        pf_refs, map_sizes = idx[num_grid:], sizes
        if sizes_ref:     # read only where pl.num_programs asks for a traced size
            pf_refs, held = pf_refs[:-1], pf_refs[-1]
            dynamic = [a for a, g in enumerate(sizes) if g is None]
            map_sizes = tuple(g if g is not None else _size_reader(held, dynamic.index(a))
                              for a, g in enumerate(sizes))
        pf = jax.tree.unflatten(prefetch_tree, pf_refs)
        try:
            # pl.program_id / pl.num_programs work in an index map, as in JAX
            with grid_context(idx[:num_grid], map_sizes, None):
                res = index_map(*idx[:num_grid], *pf)
        except TypeError as e:
            if _is_arity_error(e):
                per_pf = " plus one per scalar-prefetch operand" \
                    if len(prefetch_avals) > sizes_ref else ""
                raise TypeError(
                    f"Index map function {src} for {origin} must take {arity} argument(s) "
                    f"(one per grid axis{per_pf}), but calling it with {arity} failed: "
                    f"{e}") from None
            raise
        if not isinstance(res, (tuple, list)):
            res = (res,)
        if len(res) != len(dims):
            block_shape = tuple(spec.block_shape) if spec is not None and \
                spec.block_shape is not None else tuple(d.block_size for d in dims)
            raise ValueError(
                f"Index map function {src} for {origin} must return {len(dims)} values to match "
                f"block_shape={block_shape} (one per array dim). Currently returning "
                f"{len(res)} values: {res}.")
        flat = []
        for i, (v, d) in enumerate(zip(res, dims)):
            if isinstance(d, BoundedSlice):
                if not isinstance(v, jc.Slice):
                    raise TypeError(
                        f"Index map function {src} for {origin} returned {type(v).__name__} at "
                        f"position {i}, whose block dim is pl.BoundedSlice: return pl.ds(start, size).")
                flat += [_as_index(v.start, src, origin, i), _as_index(v.size, src, origin, i)]
            else:
                if isinstance(v, jc.Slice):
                    raise TypeError(
                        f"Index map function {src} for {origin} returned pl.ds(...) at position "
                        f"{i}, but that block dim is {d}; only pl.BoundedSlice dims take slices.")
                flat.append(_as_index(v, src, origin, i))
        return flat

    in_avals = [jc.ShapedArray((), jnp.int32)] * num_grid + list(prefetch_avals)
    jaxpr, _ = jc.trace_kernel_jaxpr(flat_fn, in_avals, traced_for="pallas index_map")
    bad = [c for c in jaxpr.consts if np.ndim(c) > 0]
    if bad:
        raise ValueError(
            f"Index map function {src} for {origin} must not capture constants: captured "
            f"arrays {[_type_str(c) for c in bad]}. Compute indices from the grid "
            "indices, or pass data through scalar prefetch.")
    assert len(jaxpr.outvars) == n_out
    return jaxpr, src


def _size_reader(sizes_ref, k):
    return lambda: sizes_ref[k]


def _as_index(v, src, origin, i):
    try:
        not_jax = not isinstance(v, (int, np.integer)) and jax.typeof(v) is None
    except TypeError:        # a str, None, an object: not a JAX type at all
        not_jax = True
    if isinstance(v, (bool, float)) or not_jax:
        raise PallasTypeError(
            f"Index map function {src} for {origin} must return integer scalars. Output[{i}] "
            f"has type {type(v).__name__} ({v!r}). Return one int32 block index per dim.")
    aval = jax.typeof(v) if not isinstance(v, (int, np.integer)) else None
    if aval is not None and (aval.shape != () or not jnp.issubdtype(aval.dtype, jnp.integer)):
        raise PallasTypeError(
            f"Index map function {src} for {origin} must return integer scalars. Output[{i}] "
            f"has type {aval.str_short()}. Return one int32 block index per dim.")
    _refuse_wide_constant(v, src, origin, i)
    return jnp.asarray(v, jnp.int32)


_INT32 = np.iinfo(np.int32)


def _refuse_wide_constant(v, src, origin, i):
    """A constant outside int32 would wrap when cast (np.int64(2**40) -> 0,
    a valid-looking block): refused, naming it."""
    if isinstance(v, np.ndarray) and v.shape == ():
        v = v[()]
    if not isinstance(v, (int, np.integer)):
        return
    if _INT32.min <= int(v) <= _INT32.max:
        return
    from pallas_frontend.block_indices import BlockIndexError
    raise BlockIndexError(
        f"Index map function {src} for {origin} returned {int(v)} ({type(v).__name__}) as "
        f"output[{i}], which does not fit in int32: index maps compute in int32, and the "
        f"value would wrap to {int(np.asarray(v).astype(np.int32))}, another block. Return "
        "a block index within the array.")


def _is_arity_error(e: TypeError) -> bool:
    """Whether calling the index map failed on its argument count (Python's wording)."""
    msg = str(e)
    return "positional argument" in msg or ("required" in msg and "argument" in msg)
