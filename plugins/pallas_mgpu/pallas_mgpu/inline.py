"""``plgpu.inline_mgpu``: a function written against Mosaic GPU itself
(``jax.experimental.mosaic.gpu``: FragmentedArrays, MLIR, inline PTX) called
from a kernel body, with ``RefType`` / ``Layout`` argument types and
``ShapeDtypeStruct`` results, as in JAX 0.12.

The frontend cannot trace such a function (it needs a Mosaic GPU lowering
context), so the call is recorded as one ``mgpu_op`` equation holding the
function and its types, and the backend replays it with JAX's
``plgpu.inline_mgpu``. It therefore works where JAX's does: when lowering
for cuda. JAX's GPU interpreter refuses it unless
``InterpretParams(inline_mgpu="ignore")``, which skips the call (results
are then uninitialised, as in JAX).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import numpy as np

from pallas_mgpu import _jax_private, ops


@dataclasses.dataclass(frozen=True)
class ShapeDtypeStruct:
    """The type of one array an ``inline_mgpu`` function returns: its shape,
    dtype and register layout (a ``plgpu.Layout``)."""
    shape: tuple[int, ...]
    dtype: Any
    layout: Any

    def __post_init__(self):
        object.__setattr__(self, "shape", tuple(int(d) for d in self.shape))
        object.__setattr__(self, "dtype", np.dtype(self.dtype))

    def to_jax(self):
        """JAX's ``plgpu.ShapeDtypeStruct`` with JAX's layout."""
        from jax.experimental.pallas import mosaic_gpu as plgpu
        return plgpu.ShapeDtypeStruct(self.shape, self.dtype, _layout_to_jax(self.layout))


@dataclasses.dataclass(frozen=True)
class RefType:
    """Marks an ``inline_mgpu`` argument as a Ref (the function gets its memref)."""
    transforms: tuple = ()

    def __post_init__(self):
        object.__setattr__(self, "transforms", tuple(self.transforms))

    def to_jax(self):
        """JAX's ``plgpu.RefType`` with JAX's transforms."""
        from jax.experimental.pallas import mosaic_gpu as plgpu
        return plgpu.RefType(tuple(_to_jax(t) for t in self.transforms))


def _to_jax(x):
    to_jax = getattr(x, "to_jax", None)
    return to_jax() if callable(to_jax) else x


def _layout_to_jax(layout):
    # a Layout member with no parameters, a parameterized/reduced layout, or
    # (written for JAX) already one of JAX's layouts
    return _to_jax(layout)


def _is_layout(t) -> bool:
    from pallas_mgpu.primitives import Layout, ParameterizedLayout, ReducedLayout
    if isinstance(t, (Layout, ParameterizedLayout, ReducedLayout)):
        return True
    return type(t).__module__.startswith("jax.")   # one of JAX's layouts, passed as is


def _is_ref_like(x) -> bool:
    return isinstance(x, _jax_private.transformed_ref_type()) or ops._is_ref(x)


def inline_mgpu(*, arg_types=(), return_type=None):
    """Decorator: ``f(launch_ctx, *args)`` runs as Mosaic GPU code inside the
    kernel. ``arg_types`` has one ``RefType()`` (a Ref argument) or
    ``Layout`` (an array argument, in that register layout) per argument
    leaf; ``return_type`` is a pytree of ``ShapeDtypeStruct``."""
    flat_arg_types, args_tree = jax.tree.flatten(tuple(arg_types))
    flat_ret, ret_tree = jax.tree.flatten(return_type)
    if return_type is not None and not all(isinstance(r, ShapeDtypeStruct) for r in flat_ret):
        raise ValueError("inline_mgpu: return_type must be a pytree of plgpu.ShapeDtypeStruct, "
                         f"got {return_type!r}.")
    for t in flat_arg_types:
        if not (isinstance(t, RefType) or _is_layout(t)):
            raise ValueError(f"inline_mgpu: each arg_types leaf must be plgpu.RefType() or a "
                             f"plgpu.Layout, got {t!r}.")
    out_avals = tuple(jax.core.ShapedArray(r.shape, r.dtype) for r in flat_ret)

    def decorator(fn):
        name = getattr(fn, "__name__", "inline_mgpu function")

        def call(*args):
            flat_args, tree = jax.tree.flatten(tuple(args), is_leaf=_is_ref_like)
            if tree != args_tree:
                raise ValueError(f"inline_mgpu {name}: arguments {tree} do not match arg_types "
                                 f"{args_tree}; pass one argument per arg_types leaf.")
            for k, (a, t) in enumerate(zip(flat_args, flat_arg_types)):
                if isinstance(t, RefType) != _is_ref_like(a):
                    want = "a Ref (arg type RefType())" if isinstance(t, RefType) else \
                        f"an array (arg type {t})"
                    raise ValueError(f"inline_mgpu {name}: argument {k} must be {want}, "
                                     f"got {a!r}.")
            outs = ops.bind("inline_mgpu", *flat_args, out_avals=out_avals, fn=fn,
                            arg_types=tuple(flat_arg_types), args_tree=args_tree,
                            return_type=tuple(flat_ret), ret_tree=ret_tree)
            return jax.tree.unflatten(ret_tree, outs)
        call.__name__ = name
        return call
    return decorator


def _replay_inline_mgpu(*flat_args, fn, arg_types, args_tree, return_type, ret_tree):
    from jax.experimental.pallas import mosaic_gpu as plgpu
    jax_types = jax.tree.unflatten(args_tree, [_to_jax(t) for t in arg_types])
    ret = jax.tree.unflatten(ret_tree, [r.to_jax() for r in return_type]) if return_type else None
    out = plgpu.inline_mgpu(arg_types=jax_types, return_type=ret)(fn)(
        *jax.tree.unflatten(args_tree, flat_args))
    return jax.tree.leaves(out) if return_type else None


ops.ADAPTERS["inline_mgpu"] = _replay_inline_mgpu
