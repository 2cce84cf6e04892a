"""Column vectors of a tile, kept as vectors while compiling.

``x.mean(axis=-1, keepdims=True)`` traces to a row reduction, a broadcast to
an ``(R, 1)`` column and arithmetic on that column before it is broadcast
against the ``(R, C)`` tile. Mosaic GPU has no register layout for an
``(R, 1)`` array (its tiles are 8 columns wide at least), and its layout
search over one either fails or takes minutes. So while compiling, such a
column is held as its ``(R,)`` vector (``Column``): elementwise arithmetic
on columns and scalars runs on the vectors, and a column meeting the tile is
broadcast from the vector along the columns (the tile's row layout, a
broadcast Mosaic GPU has). Anything else gets the ``(R, 1)`` array back.
"""

from __future__ import annotations

import numpy as np
from jax import lax

from pallas_mgpu import layouts

ELEMENTWISE = frozenset({
    "add", "sub", "mul", "div", "max", "min", "pow", "integer_pow", "neg", "abs", "sign",
    "exp", "exp2", "log", "log1p", "expm1", "sqrt", "rsqrt", "cbrt", "tanh", "logistic",
    "sin", "cos", "erf", "square", "reciprocal", "convert_element_type", "select_n",
    "eq", "ne", "lt", "le", "gt", "ge", "and", "or", "not", "nextafter", "rem",
})


class Column:
    """An ``(R, 1)`` value held as its ``(R,)`` vector."""
    __slots__ = ("vector", "shape")

    def __init__(self, vector, shape):
        self.vector, self.shape = vector, tuple(shape)


def materialize(x):
    """The value itself: a ``Column`` becomes its ``(R, 1)`` array."""
    if isinstance(x, Column):
        return lax.broadcast_in_dim(x.vector, x.shape, (0,))
    return x


def as_vector(x, shape):
    """The ``(R,)`` vector of a column (a loop carries columns so)."""
    if isinstance(x, Column):
        return x.vector
    return lax.reshape(x, shape[:1])


def _is_column_shape(shape) -> bool:
    return len(shape) == 2 and shape[1] == 1 and layouts.tile_layout((shape[0], 8)) is not None


def _spread(col: Column, shape):
    """``col`` broadcast along the columns of a tile of ``shape``."""
    vector = layouts.cast_broadcast_operand(col.vector, shape, (0,))
    return lax.broadcast_in_dim(vector, shape, (0,))


def replay(eqn, invals):
    """The equation's result with columns kept as vectors, or None when the
    equation is not one this handles (the caller materializes the columns)."""
    name = eqn.primitive.name
    is_col = [isinstance(x, Column) for x in invals]
    if eqn.primitive.multiple_results or len(eqn.outvars) != 1:
        return None
    out_shape = tuple(eqn.outvars[0].aval.shape)
    if name == "broadcast_in_dim":
        x = invals[0]
        dims = tuple(eqn.params["broadcast_dimensions"])
        if len(invals) != 1:
            return None
        if not is_col[0]:
            if dims == (0,) and np.ndim(x) == 1 and _is_column_shape(out_shape):
                return Column(x, out_shape)
            if dims == () and np.ndim(x) == 0 and _is_column_shape(out_shape):
                return Column(lax.broadcast_in_dim(x, out_shape[:1], ()), out_shape)
            return None
        if dims == (0, 1) and len(out_shape) == 2 and out_shape[0] == x.shape[0]:
            return _spread(x, out_shape) if out_shape[1] != 1 else x
        return None
    if not any(is_col) or name not in ELEMENTWISE:
        return None
    if out_shape == next(x for x in invals if isinstance(x, Column)).shape:
        if all(isinstance(x, Column) or np.ndim(x) == 0 for x in invals):
            vector = eqn.primitive.bind(*[x.vector if isinstance(x, Column) else x
                                          for x in invals], **eqn.params)
            return Column(vector, out_shape)
        return None
    if len(out_shape) == 2 and layouts.tile_layout(out_shape) is not None:
        return eqn.primitive.bind(*[_spread(x, out_shape) if isinstance(x, Column) else x
                                    for x in invals], **eqn.params)
    return None
