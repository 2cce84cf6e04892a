"""Ref operands of ``pallas_mgpu.kernel``: ``jax.new_ref`` buffers and the GMEM
semaphores of ``alloc_semaphore``, which outlive one kernel.

JAX's ``plgpu.kernel`` takes a ``jax.Ref`` operand as it is and updates it in
place. The frontend's ``pallas_call`` takes arrays, so a Ref operand travels
as its current value, in an input aliased to one extra output, and is written
back with that output once the kernel has run. The body gets that output's Ref
in the operand's place (it starts as the operand's value), so an interpreter
that copies its inputs keeps the updates too. A semaphore Ref keeps its kind in its memory space (an int32 Ref of
memory space ``SemaphoreType.REGULAR(shape)``, as a semaphore scratch buffer
is traced), and the backend hands JAX's kernel a Ref of JAX's semaphore dtype
holding the same counts (``jax_ref``), so JAX lowers the same kernel as for
its own ``alloc_semaphore``.
"""

from __future__ import annotations

import operator

import jax
import numpy as np

import pallas_frontend as pf

from pallas_mgpu.memory import GMEM
from pallas_mgpu.multi_gpu import SemaphoreArray, SemaphoreType


def alloc_semaphore(shape: tuple[int, ...] = ()) -> jax.Ref:
    """A Ref of ``shape`` GMEM semaphores, each starting at 0, made outside a
    kernel and passed to ``pallas_mgpu.kernel`` as an operand (the only kind of
    semaphore that keeps its count from one kernel to the next; a semaphore
    used by one kernel only is a ``SemaphoreType.REGULAR`` scratch buffer).
    Call it inside ``jax.jit`` (a Ref in a memory space exists only there, as
    for JAX's). Nothing synchronizes devices here: the first kernel using it on
    several devices must not pass ``CompilerParams(skip_device_barrier=True)``."""
    import jax.numpy as jnp
    shape = _semaphore_shape(shape)
    return jax.new_ref(jnp.zeros(shape, jnp.int32), memory_space=SemaphoreType.REGULAR(shape))


def _semaphore_shape(shape) -> tuple[int, ...]:
    """``shape`` as a tuple of sizes: an int, or a tuple or list of ints (anything
    with ``__index__``, as JAX takes shapes). A float is not rounded and a string
    is not split into its characters: both are refused, as JAX refuses them."""
    fix = "Give the number of semaphores per dimension as ints, e.g. alloc_semaphore((2,))."
    if isinstance(shape, (int, np.integer)) and not isinstance(shape, bool):
        shape = (shape,)
    if not isinstance(shape, (tuple, list)):
        raise TypeError(f"alloc_semaphore: shape must be an int or a tuple of ints, got "
                        f"{shape!r} (a {type(shape).__name__}). {fix}")
    sizes = []
    for k, d in enumerate(shape):
        try:
            if isinstance(d, bool):
                raise TypeError
            sizes.append(operator.index(d))
        except TypeError:
            raise TypeError(f"alloc_semaphore: shape {tuple(shape)!r} has {d!r} (a "
                            f"{type(d).__name__}) at dimension {k}; a size is an int (floats "
                            f"are not rounded). {fix}") from None
    if any(d < 0 for d in sizes):
        raise ValueError(f"alloc_semaphore: shape {tuple(sizes)} has a negative size. {fix}")
    return tuple(sizes)


def is_ref(x) -> bool:
    try:
        return isinstance(jax.typeof(x), jax.ref.AbstractRef)
    except TypeError:
        return False


def _is_jax_semaphore_dtype(dtype) -> bool:
    from jax.experimental import pallas as jax_pl
    return jax.numpy.issubdtype(dtype, jax_pl.semaphore)


def memory_space(ref):
    """The memory space the kernel's Ref of the operand ``ref`` is traced in."""
    aval = jax.typeof(ref)
    if isinstance(aval.memory_space, SemaphoreArray) or _is_jax_semaphore_dtype(aval.dtype):
        return SemaphoreType.REGULAR(tuple(aval.shape))
    return GMEM


def read(ref):
    """The value of the Ref operand ``ref`` the kernel starts from (int32 counts
    for a semaphore made by JAX's own ``alloc_semaphore``)."""
    value = ref[...]
    if _is_jax_semaphore_dtype(value.dtype):
        return jax.lax.convert_element_type(value, np.int32)
    return value


def write_back(ref, value) -> None:
    if _is_jax_semaphore_dtype(jax.typeof(ref).dtype):
        value = jax.lax.convert_element_type(value, _jax_semaphore_dtype())
    ref[...] = value


def _jax_semaphore_dtype():
    from jax.experimental.pallas import mosaic_gpu as jax_plgpu
    return jax_plgpu.SemaphoreType.REGULAR.get_array_aval().dtype


def jax_ref(space, value):
    """The Ref JAX's ``plgpu.kernel`` gets for an operand traced in ``space``:
    for semaphores one of JAX's semaphore dtype in GMEM, as JAX's
    ``alloc_semaphore`` makes it, holding the counts ``value``."""
    if isinstance(space, SemaphoreArray):
        from jax.experimental.pallas import mosaic_gpu as jax_plgpu
        counts = jax.lax.convert_element_type(value, _jax_semaphore_dtype())
        return jax.new_ref(counts, memory_space=jax_plgpu.GMEM)
    return jax.new_ref(value)


def jax_ref_value(space, ref):
    """What the kernel left in ``jax_ref``'s Ref, as the int32 counts again."""
    value = ref[...]
    if isinstance(space, SemaphoreArray):
        return jax.lax.convert_element_type(value, np.int32)
    return value


def call_with_refs(launch, out_type, args):
    """Runs the kernel on ``args`` with each Ref leaf passed as its value and
    written back afterwards. ``launch(out_type_, in_specs, out_specs, aliases,
    body_refs)`` is the kernel's ``pallas_call``; ``body_refs`` maps the Refs
    it gives its body to the ones the user's body takes."""
    leaves, tree = jax.tree.flatten(tuple(args))
    ref_at = [k for k, a in enumerate(leaves) if is_ref(a)]
    values = [read(a) if k in ref_at else a for k, a in enumerate(leaves)]
    whole = pf.BlockSpec(memory_space=GMEM)
    spaces = {k: pf.BlockSpec(memory_space=memory_space(leaves[k])) for k in ref_at}
    in_specs = [spaces.get(k, whole) for k in range(len(leaves))]
    user_tuple = isinstance(out_type, (tuple, list))
    user_outs = tuple(out_type) if user_tuple else (out_type,)
    extras = tuple(jax.ShapeDtypeStruct(np.shape(values[k]), values[k].dtype) for k in ref_at)
    out_specs = (*jax.tree.map(lambda _: whole, user_outs), *(spaces[k] for k in ref_at))
    n_user_leaves = len(jax.tree.leaves(user_outs))
    aliases = {k: n_user_leaves + j for j, k in enumerate(ref_at)}
    n_args, n_outs = len(args), len(user_outs)

    def body_refs(refs):
        # the body updates the aliased output, which starts as the operand's
        # value: an interpreter that copies inputs keeps the updates too
        ins, outs = refs[:n_args], refs[n_args:n_args + n_outs]
        first_extra = n_args + n_outs
        extra = refs[first_extra:first_extra + len(extras)]
        rest = refs[first_extra + len(extras):]
        flat = jax.tree.leaves(tuple(ins), is_leaf=lambda x: x is None)
        for j, k in enumerate(ref_at):
            flat[k] = extra[j]
        return (*jax.tree.unflatten(tree, flat), *outs, *rest)

    outs = launch(user_outs + extras, tuple(jax.tree.unflatten(tree, in_specs)), out_specs,
                  aliases, body_refs)(*jax.tree.unflatten(tree, values))
    outs = tuple(outs)
    for k, new in zip(ref_at, outs[n_outs:]):
        write_back(leaves[k], new)
    return outs[:n_outs] if user_tuple else outs[0]
