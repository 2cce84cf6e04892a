"""Value ops that move data across vector lanes and sublanes: ``roll``,
``bitcast`` and ``einshape``, with the meaning of JAX's ``pltpu`` functions
of the same names.

Each is a pure primitive owned by ``tpu``: its JAX implementation (also its
lowering off TPU) is what the frontend's reference interpreter runs; the
evaluator replays it on TPU as the ``pltpu`` function (Mosaic's
``tpu.dynamic_rotate``, ``tpu.bitcast``, tile-preserving reshapes).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from pallas_frontend.backend_api import (
    def_pure_primitive, kernel_primitive, register_interpret_rule)

from pallas_tpu import _jax_private

OWNER = "tpu"

roll_p = kernel_primitive("tpu_roll", owner=OWNER)
bitcast_p = kernel_primitive("tpu_bitcast", owner=OWNER)


# --- roll ----------------------------------------------------------------------------

def _roll_impl(x, shift, *, axis, stride, stride_axis):
    # pltpu.roll is jnp.roll: element i moves to (i + shift) mod n. With a
    # stride, slice j along stride_axis is rolled by shift + j * stride.
    if stride is None:
        return jnp.roll(x, shift, axis)
    parts = jnp.split(x, x.shape[stride_axis], stride_axis)
    return jnp.concatenate([jnp.roll(p, shift + j * stride, axis) for j, p in enumerate(parts)],
                           stride_axis)


def _roll_abstract_eval(x, shift, *, axis, stride, stride_axis):
    if shift.shape != () or not jnp.issubdtype(shift.dtype, jnp.integer):
        raise TypeError(f"pallas_tpu.roll: shift must be an integer scalar, got {shift}")
    return jax.core.ShapedArray(x.shape, x.dtype)


def_pure_primitive(roll_p, impl=_roll_impl, abstract_eval=_roll_abstract_eval)
register_interpret_rule(roll_p)


def _axis(axis: int, ndim: int, what: str) -> int:
    if not -ndim <= axis < ndim:
        raise ValueError(f"pallas_tpu.roll: {what}={axis} is out of range for rank {ndim}")
    return axis % ndim


def roll(x, shift, axis: int, *, stride: int | None = None, stride_axis: int | None = None):
    """``jnp.roll(x, shift, axis)`` on TPU vregs: element ``i`` moves to
    ``(i + shift) mod n``. ``shift`` may be traced; a negative one is taken
    modulo ``n`` here (Mosaic's rotate takes amounts in [0, n)). With
    ``stride``, slice ``j`` along ``stride_axis`` is rolled by ``shift + j * stride``."""
    x = jnp.asarray(x)
    axis = _axis(int(axis), x.ndim, "axis")
    if (stride is None) != (stride_axis is None):
        raise ValueError("pallas_tpu.roll: stride and stride_axis go together.")
    if stride is not None:
        stride_axis = _axis(int(stride_axis), x.ndim, "stride_axis")
        if stride_axis == axis or stride < 0:
            raise ValueError("pallas_tpu.roll: stride must be >= 0 along another axis than axis.")
        stride = int(stride)
    n = x.shape[axis]
    if isinstance(shift, (int, np.integer)):
        shift = jnp.int32(int(shift) % n)
    else:
        shift = lax.rem(lax.rem(jnp.asarray(shift, jnp.int32), jnp.int32(n)) + jnp.int32(n),
                        jnp.int32(n))
    return roll_p.bind(x, shift, axis=axis, stride=stride, stride_axis=stride_axis)


# --- bitcast -------------------------------------------------------------------------------

def _bits(dtype) -> int:
    # in bits: int4's numpy itemsize is a whole byte, and int4 packs 8 to a 32-bit word
    return jax.dtypes.itemsize_bits(dtype)


def _bitcast_shape(shape, src, dst, dim):
    shape = list(shape)
    if shape[dim] * _bits(src) % _bits(dst):
        raise ValueError(f"pallas_tpu.bitcast: dim {dim} of size {shape[dim]} cannot be packed "
                         f"or unpacked from {jnp.dtype(src)} to {jnp.dtype(dst)}")
    shape[dim] = shape[dim] * _bits(src) // _bits(dst)
    return tuple(shape)


def _bitcast_impl(x, *, dtype, dim):
    # With the scaled dim moved last, the bitcast is numpy's ``view``:
    # consecutive elements along it are packed into (unpacked from) one.
    src, dst = _bits(x.dtype), _bits(dtype)
    y = jnp.moveaxis(x, dim, -1)
    if src < dst:
        y = y.reshape(*y.shape[:-1], y.shape[-1] * src // dst, dst // src)
        y = lax.bitcast_convert_type(y, dtype)
    else:
        y = lax.bitcast_convert_type(y, dtype)
        if src > dst:
            y = y.reshape(*y.shape[:-2], y.shape[-2] * y.shape[-1])
    return jnp.moveaxis(y, -1, dim)


def _bitcast_abstract_eval(x, *, dtype, dim):
    return jax.core.ShapedArray(_bitcast_shape(x.shape, x.dtype, dtype, dim), dtype)


def _bitcast_batch(args, dims, *, dtype, dim):
    # As the installed JAX batches its own bitcast, which kernels and tests rely
    # on. JAX 0.12 bitcasts each example along its own dim `dim` (a batch axis
    # after it moves to the front first). JAX 0.10-0.11 (whose bitcast has no
    # `dim`) bitcast the batched array's second minor, the batch axis left where
    # it is: when that axis is one of the last two, examples are mixed, and
    # JAX 0.10's test_bitcast_vmap(1) expects exactly that.
    [x], [b] = args, dims
    if not _jax_private.bitcast_takes_dim() and dim == x.ndim - 3:
        return bitcast_p.bind(x, dtype=dtype, dim=x.ndim - 2), b
    if b > dim:
        x, b = jnp.moveaxis(x, b, 0), 0
    return bitcast_p.bind(x, dtype=dtype, dim=dim + 1), b


def_pure_primitive(bitcast_p, impl=_bitcast_impl, abstract_eval=_bitcast_abstract_eval,
                   batch_rule=_bitcast_batch)
register_interpret_rule(bitcast_p)


def bitcast(x, ty=None, dim: int = -2, *, dtype=None):
    """Reinterprets the bits of ``x`` as ``ty`` (JAX's name; ``dtype=`` is taken
    too), keeping the rank: dim ``dim``
    (the second minor, by default, or the minormost) scales by the ratio of the
    bit widths. Along the second minor dim, ``out[a, b]`` packs ``x[k*a + i, b]``
    for ``i < k`` (the first in the low bits); along the minormost it is numpy's
    ``view``. Mosaic takes the minormost only between equal widths on TensorCore."""
    if (ty is None) == (dtype is None):
        raise TypeError("pallas_tpu.bitcast(x, ty): give the target dtype once, as ty "
                        "(JAX's name) or dtype=.")
    x = jnp.asarray(x)
    dtype = jnp.dtype(ty if dtype is None else dtype)
    if x.ndim < 1 or (x.ndim < 2 and dim not in (-1, 0)):
        raise ValueError("pallas_tpu.bitcast: a 1-D array can only be bitcast along dim=-1.")
    if dim not in (-1, -2, x.ndim - 1, x.ndim - 2):
        raise ValueError(f"pallas_tpu.bitcast: dim must be the second minor or the minormost "
                         f"dim, got {dim} for rank {x.ndim}")
    dim = dim % x.ndim
    _bitcast_shape(x.shape, x.dtype, dtype, dim)      # raises early, at the user's line
    return bitcast_p.bind(x, dtype=dtype, dim=dim)


# --- einshape ----------------------------------------------------------------------------

einshape_p = kernel_primitive("tpu_einshape", owner=OWNER)


def _parse_side(side: str) -> list[tuple[str, ...]]:
    """``"a(bc)d"`` -> ``[("a",), ("b", "c"), ("d",)]``."""
    groups, i = [], 0
    side = side.replace(" ", "")
    while i < len(side):
        if side[i] == "(":
            j = side.find(")", i)
            if j < 0 or "(" in side[i + 1:j]:
                raise ValueError(f"pallas_tpu.einshape: unbalanced parentheses in {side!r}")
            groups.append(tuple(side[i + 1:j]))
            i = j + 1
        else:
            groups.append((side[i],))
            i += 1
    for g in groups:
        for name in g:
            if not name.isalpha():
                # Like JAX's: no "1" (expand/squeeze) and no other symbols.
                raise ValueError(f"pallas_tpu.einshape: dimension names are letters, got {name!r}")
        if not g:
            raise ValueError(f"pallas_tpu.einshape: empty group in {side!r}")
    return groups


def _resolve(equation: str, shape, sizes: dict) -> tuple:
    """-> (left-hand groups, every name's size, permutation, output shape)."""
    if equation.count("->") != 1:
        raise ValueError("pallas_tpu.einshape: the equation needs exactly one '->'")
    lhs, rhs = (_parse_side(s) for s in equation.split("->"))
    names = [n for g in lhs for n in g]
    out_names = [n for g in rhs for n in g]
    if len(set(names)) != len(names) or sorted(names) != sorted(out_names):
        raise ValueError(f"pallas_tpu.einshape: {equation!r} must name each dimension once "
                         "on each side")
    if len(lhs) != len(shape):
        raise ValueError(f"pallas_tpu.einshape: {equation!r} has {len(lhs)} input dims, "
                         f"the array has shape {tuple(shape)}")
    dim = {}
    for group, size in zip(lhs, shape):
        unknown = [n for n in group if n not in sizes]
        known = int(np.prod([sizes[n] for n in group if n in sizes], dtype=np.int64))
        if len(group) == 1:
            unknown, known = [group[0]], 1
        # the messages start as JAX's do (its tests match them)
        if len(unknown) > 1:
            raise ValueError(f"pallas_tpu.einshape: Ambiguous split for {list(group)} with size "
                             f"{size}. Unknowns: {unknown}. Provide sizes via kwargs.")
        if not unknown and known != size:
            raise ValueError(f"pallas_tpu.einshape: Size mismatch for group {list(group)}: "
                             f"expected {size}, got {known}")
        if unknown and size % known:
            raise ValueError(f"pallas_tpu.einshape: Cannot split size {size} with known sizes "
                             f"{known}")
        for n in group:
            dim[n] = size // known if n in unknown else int(sizes[n])
    perm = tuple(names.index(n) for n in out_names)
    out_shape = tuple(int(np.prod([dim[n] for n in g], dtype=np.int64)) for g in rhs)
    return lhs, dim, perm, out_shape


def _einshape_impl(x, *, equation, sizes):
    lhs, dim, perm, out_shape = _resolve(equation, x.shape, dict(sizes))
    split = tuple(dim[n] for g in lhs for n in g)
    return lax.transpose(x.reshape(split), perm).reshape(out_shape)


def _einshape_abstract_eval(x, *, equation, sizes):
    return jax.core.ShapedArray(_resolve(equation, x.shape, dict(sizes))[3], x.dtype)


def_pure_primitive(einshape_p, impl=_einshape_impl, abstract_eval=_einshape_abstract_eval)
register_interpret_rule(einshape_p)


def _einshape_transpose(ct, x, *, equation, sizes):
    """The cotangent goes back through the inverse einshape (right side to left)."""
    lhs, dim, _, _ = _resolve(equation, x.aval.shape, dict(sizes))
    left, right = equation.split("->")
    split = tuple(sorted((n, dim[n]) for g in _parse_side(right) if len(g) > 1 for n in g))
    return [einshape_p.bind(ct, equation=f"{right}->{left}", sizes=split)]


_jax_private.def_linear(einshape_p, _einshape_transpose)
_jax_private.register_einshape_with_jax_fuser(einshape_p)


def einshape(equation: str, x, **sizes: int):
    """Reshapes and transposes ``x`` as ``equation`` says (``pltpu.einshape``):
    groups ``(bc)`` on the left split a dim (row-major), on the right merge
    dims; the order of names on the right is a transpose. ``sizes`` give the
    split sizes that cannot be inferred. On TPU, Mosaic moves whole vregs
    where the change preserves (8, 128) tiles."""
    x = jnp.asarray(x)
    lhs, dim, _, _ = _resolve(equation, x.shape, sizes)
    # Every split size is resolved here: Mosaic's side infers nothing on its own.
    split_sizes = tuple(sorted((n, dim[n]) for g in lhs if len(g) > 1 for n in g))
    return einshape_p.bind(x, equation=equation, sizes=split_sizes)
