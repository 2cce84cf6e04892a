"""concatenate, stack, split and unstack: Triton tensors are joined and cut by gathers.

Triton's own ``tl.cat`` may reorder elements and ``tl.join``/``tl.split`` handle
two halves on the last axis only. A gather along the axis works for any number
of parts, any sizes and any axis (JAX's Triton lowering takes only the
two-part, last-axis cases): each output lane reads its part at a clamped index,
and a select keeps the part whose range holds the lane.
"""

from __future__ import annotations

from pallas_triton import padding
from pallas_triton.emitters import broadcast_expr, in_aval, out_aval, register, reshape_expr


def _lanes(n: int, shape, axis: int) -> str:
    """Lane numbers along ``axis``, broadcastable over a value of ``shape``."""
    return broadcast_expr(f"tl.arange(0, {padding.size(n)})", (n,), shape, (axis,))


def _take(w, x: str, x_shape, axis: int, start: int, out_shape) -> str:
    """``x[..., start : start + out_shape[axis], ...]`` along ``axis`` (lanes clamped)."""
    n = out_shape[axis]
    idx = f"tl.minimum(tl.maximum({_lanes(n, out_shape, axis)} + {start}, 0), {x_shape[axis] - 1})"
    if [d for k, d in enumerate(x_shape) if k != axis] != \
            [d for k, d in enumerate(out_shape) if k != axis]:
        raise AssertionError("parts differ off the joined axis")
    if tuple(x_shape) == tuple(out_shape) and start == 0:
        return x
    return w.bind(f"tl.gather({x}, {w.bind(idx, 'ix')}, {axis})")


def concat(w, parts, shapes, axis: int, out_shape) -> str:
    out, offset = None, 0
    lane = w.bind(_lanes(out_shape[axis], out_shape, axis), "ln")
    for x, shape in zip(parts, shapes):
        piece = _take(w, x, shape, axis, -offset, out_shape)
        if out is None:
            out = piece
        else:
            out = w.bind(f"tl.where({lane} >= {offset}, {piece}, {out})")
        offset += shape[axis]
    return out


@register("concatenate")
def _concatenate(w, eqn, ins):
    axis = eqn.params["dimension"]
    shapes = [v.aval.shape for v in eqn.invars]
    return [concat(w, ins, shapes, axis, out_aval(eqn).shape)]


@register("stack")
def _stack(w, eqn, ins):
    axis = eqn.params["axis"]
    shape = in_aval(eqn).shape
    one = tuple(shape[:axis]) + (1,) + tuple(shape[axis:])
    parts = [w.bind(reshape_expr(w, x, shape, one)) for x in ins]
    return [concat(w, parts, [one] * len(parts), axis, out_aval(eqn).shape)]


@register("split")
def _split(w, eqn, ins):
    axis, shape = eqn.params["axis"], in_aval(eqn).shape
    outs, start = [], 0
    for v in eqn.outvars:
        outs.append(_take(w, ins[0], shape, axis, start, v.aval.shape))
        start += v.aval.shape[axis]
    return outs


@register("unstack")
def _unstack(w, eqn, ins):
    axis, shape = eqn.params["axis"], in_aval(eqn).shape
    one = tuple(shape[:axis]) + (1,) + tuple(shape[axis + 1:])
    outs = []
    for k, v in enumerate(eqn.outvars):
        piece = _take(w, ins[0], shape, axis, k, one)
        outs.append(reshape_expr(w, piece, one, v.aval.shape))
    return outs
