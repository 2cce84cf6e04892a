"""Values of any static shape: Triton tensors padded to powers of two.

Triton tensors need power-of-two dims. A value whose dim ``n`` is not one is
held in a tensor of ``next_power_of_2(n)`` along that dim; the lanes past
``n`` hold unspecified data and never reach memory or a valid lane:

- loads and stores of a block mask the lanes past the block (writer.address);
- a reduction, scan or arg-reduction over a padded dim first puts its neutral
  element in those lanes, a dot puts 0 in the padded contraction lanes;
- a slice gathers with its indices clamped into the operand;
- a reshape may only add or drop unit dims of a padded value (anything else
  would interleave padding with data) and is refused otherwise.
"""

from __future__ import annotations

import numpy as np

from pallas_triton.jaxpr_text import is_float, is_pow2, literal


def size(n: int) -> int:
    """The tensor size that holds ``n`` lanes."""
    return 1 if n <= 1 else 1 << (int(n) - 1).bit_length()


def shape(dims) -> list[int]:
    return [size(n) for n in dims]


def padded_axes(dims, axes=None) -> list[int]:
    axes = range(len(dims)) if axes is None else axes
    return [a for a in axes if not is_pow2(dims[a])]


def valid_lanes(dims, axis: int) -> str:
    """A boolean tensor, broadcastable to ``shape(dims)``: lane < dims[axis] along ``axis``."""
    lanes = f"(tl.arange(0, {size(dims[axis])}) < {dims[axis]})"
    if len(dims) == 1:
        return lanes
    idx = ", ".join(":" if k == axis else "None" for k in range(len(dims)))
    return f"{lanes}[{idx}]"


def neutral(kind: str, dtype) -> str:
    """The element a reduction of ``kind`` ignores, as a literal of ``dtype``."""
    dtype = np.dtype(dtype)
    if kind in ("add", "or"):
        return literal(0, dtype)
    if kind == "mul" or (kind == "and" and dtype == np.dtype(bool)):
        return literal(1, dtype)
    if kind == "and":                            # all bits set
        return literal(-1 if np.issubdtype(dtype, np.signedinteger) else np.iinfo(dtype).max,
                       dtype)
    if dtype == np.dtype(bool):
        return literal(kind.startswith("min"), dtype)
    if is_float(dtype):
        return literal(-np.inf if kind.startswith("max") else np.inf, dtype)
    info = np.iinfo(dtype)
    return literal(info.min if kind.startswith("max") else info.max, dtype)


def fill_padding(w, x: str, dims, axes, value: str) -> str:
    """``x`` with ``value`` in the padded lanes of ``axes`` (unchanged if none is padded)."""
    for a in padded_axes(dims, axes):
        x = w.bind(f"tl.where({valid_lanes(dims, a)}, {x}, {value})")
    return x


def check_reshape(in_dims, out_dims) -> None:
    if all(is_pow2(n) for n in (*in_dims, *out_dims)):
        return
    if [n for n in in_dims if n != 1] != [n for n in out_dims if n != 1]:
        from pallas_triton.errors import unsupported
        raise unsupported(
            f"a reshape from {tuple(in_dims)} to {tuple(out_dims)}: Triton pads a dim that is "
            "not a power of two to one, so a reshape may only add or drop unit dims of such "
            "a value (make the block dims powers of two, or reshape outside the kernel)")
