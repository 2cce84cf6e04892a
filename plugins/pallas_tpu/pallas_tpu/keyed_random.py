"""Keyed sampling over the core's PRNG: ``to_pallas_key`` and ``sample_block``,
JAX's ``pltpu`` names.

A Pallas key is two uint32 words (key data of shape ``(1, 2)``), as JAX's
``pltpu.to_pallas_key`` makes them from any JAX key. ``sample_block`` folds
the index of each tile into the key (the tile's row-major number in the whole
array, JAX's ``fold_in`` for Pallas keys: one threefry round) and lets the
user's ``jax.random`` sampler draw the tile from the core's PRNG seeded with
the tile key. So a block's samples do not depend on the block shape or the
grid order, only on the tile grid; on a TPU the words seed the hardware PRNG
exactly as JAX's ``sample_block`` does.

One primitive, ``seeded_random_bits`` (seed with two words, draw a block of
bits), carries the draw. On a TPU it is replayed as JAX's ``prng_seed`` +
``prng_random_bits``; the interpreters (the built-in one and TPU interpret
mode, where JAX's PRNG returns zeros) run a threefry stream keyed by the two
words instead: the same bits on both, other bits than the hardware's.

Given the key's words (an array or Ref of its data, or two scalars), the
sampler is traced once per tile shape with a key of this module's PRNG
implementation; its key operations (``random_bits``, ``fold_in``,
``wrap``/``unwrap``) are then evaluated here on the two words, so the kernel
jaxpr holds only arrays (scalars that Mosaic keeps in SMEM). Given a typed
key (e.g. ``key_ref[...]`` of a key operand, see key_operands.py), the tile
key is ``jax.random.fold_in`` of it and the sampler draws from that key: the
same words, and on a TPU JAX's lowering of its Pallas keys.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.extend import random as jex_random
from jax.interpreters import mlir

from pallas_frontend.backend_api import (
    def_pure_primitive, kernel_primitive, lowering_kernel, register_interpret_rule)
from pallas_tpu import key_operands

OWNER = "tpu"
_KEY_SHAPE = (1, 2)
_FOLD_IN_ROTATION = 13      # the threefry round JAX's Pallas keys fold data in with

seeded_random_bits_p = kernel_primitive("tpu_seeded_random_bits", owner=OWNER)


# --- the draw ------------------------------------------------------------------------------

def _software_bits(k0, k1, *, shape):
    # a threefry2x32 stream keyed by the two words: the interpreters' stand-in
    # for the hardware generator (uniform, independent per key)
    key = jax.random.wrap_key_data(jnp.stack([k0, k1]), impl="threefry2x32")
    return jax.random.bits(key, shape, jnp.uint32)


def _seeded_bits_abstract_eval(k0, k1, *, shape):
    for what, w in (("k0", k0), ("k1", k1)):
        if w.shape != () or w.dtype != jnp.uint32:
            raise TypeError(f"pallas_tpu seeded_random_bits: {what} must be a uint32 scalar, "
                            f"got {w.dtype}{list(w.shape)}")
    return jax.core.ShapedArray(shape, jnp.dtype(jnp.uint32))


def _seeded_bits_batch(args, dims, *, shape):
    # the built-in interpreter runs grid points side by side: one stream per key
    size = next(a.shape[d] for a, d in zip(args, dims) if d is not None)
    k0, k1 = (jnp.broadcast_to(a, (size,)) if d is None else jnp.moveaxis(a, d, 0)
              for a, d in zip(args, dims))
    return jax.vmap(lambda a, b: _software_bits(a, b, shape=shape))(k0, k1), 0


def_pure_primitive(seeded_random_bits_p, impl=_software_bits,
                   abstract_eval=_seeded_bits_abstract_eval, batch_rule=_seeded_bits_batch)
register_interpret_rule(seeded_random_bits_p)

_software_bits_lowering = mlir.lower_fun(_software_bits, multiple_results=False)
_outside_draws = threading.local()


def _lower_draw(ctx, k0, k1, *, shape):
    # JAX's Pallas keys draw from the core's PRNG, which only a kernel has: outside one,
    # JAX finds no XLA rule for the draw. Ours refuses the same way (JAX's own tests
    # expect it), with the fix spelled out.
    if not lowering_kernel() and not getattr(_outside_draws, "on", False):
        platforms = "/".join(ctx.module_context.platforms)
        raise NotImplementedError(
            f"MLIR translation rule for primitive '{seeded_random_bits_p.name}' not found for "
            f"platform {platforms}: a Pallas key (pltpu.to_pallas_key) draws random bits only "
            "inside a kernel, from the core's PRNG. Outside a kernel, sample with the JAX key "
            "the Pallas key was made from.")
    return _software_bits_lowering(ctx, k0, k1, shape=shape)


mlir.register_lowering(seeded_random_bits_p, _lower_draw)


@contextlib.contextmanager
def draws_outside_kernels():
    """Within it, a Pallas key draws outside a kernel too, from the interpreters' software
    stream (the bits ours' interpreters give inside one): for reference computations."""
    before = getattr(_outside_draws, "on", False)
    _outside_draws.on = True
    try:
        yield
    finally:
        _outside_draws.on = before


def seeded_random_bits(k0, k1, shape) -> jax.Array:
    """uint32 bits of ``shape`` from the PRNG seeded with the words ``k0, k1``."""
    return seeded_random_bits_p.bind(jnp.asarray(k0).astype(jnp.uint32),
                                     jnp.asarray(k1).astype(jnp.uint32),
                                     shape=tuple(int(d) for d in shape))


def _replay_on_tpu(eqn, invals):
    from pallas_tpu import interpret_mode
    if interpret_mode.active():        # JAX's interpreter would give zeros
        return seeded_random_bits_p.bind(*invals, **eqn.params)
    from jax.experimental.pallas import tpu as jax_pltpu
    jax_pltpu.prng_seed(*invals)
    bits = jax_pltpu.prng_random_bits(eqn.params["shape"])
    return lax.bitcast_convert_type(bits, jnp.uint32)


def _register():
    from pallas_tpu import evaluate
    evaluate.register_rule(seeded_random_bits_p, _replay_on_tpu)


_register()


# --- the key -------------------------------------------------------------------------------

def _fold_in_words(k0, k1, data):
    k1 = k1 + jnp.asarray(data).astype(jnp.uint32)
    k0 = k0 + k1
    k1 = k0 ^ ((k1 << np.uint32(_FOLD_IN_ROTATION)) | (k1 >> np.uint32(32 - _FOLD_IN_ROTATION)))
    return k0, k1


def _impl_seed(seed):
    return jnp.broadcast_to(jnp.asarray(seed).astype(jnp.uint32), _KEY_SHAPE)


def _impl_split(key, shape):
    raise NotImplementedError("a Pallas key cannot be split: use jax.random.fold_in to derive "
                              "new keys.")


def _impl_random_bits(key, bit_width, shape):
    if bit_width != 32:
        raise ValueError(f"Pallas keys draw 32-bit words only (asked for {bit_width} bits).")
    return seeded_random_bits(key[0, 0], key[0, 1], shape)


def _impl_fold_in(key, data):
    k0, k1 = _fold_in_words(key[0, 0], key[0, 1], data)
    return jnp.stack([k0, k1]).reshape(_KEY_SHAPE)


PALLAS_KEY_IMPL = jex_random.define_prng_impl(
    key_shape=_KEY_SHAPE, seed=_impl_seed, split=_impl_split, random_bits=_impl_random_bits,
    fold_in=_impl_fold_in, name="pallas_tpu", tag="pl")
key_operands.register_pallas_impl(PALLAS_KEY_IMPL)


def to_pallas_key(key: jax.Array) -> jax.Array:
    """A Pallas key (two uint32 words) drawn from ``key``, a typed or legacy
    uint32 JAX key; a batch of keys gives a batch. The words are JAX's
    ``pltpu.to_pallas_key`` words for the same key."""
    key = jnp.asarray(key) if not isinstance(key, jax.Array) else key
    typed = jnp.issubdtype(key.dtype, jax.dtypes.prng_key)
    batch_dims = key.ndim if typed else key.ndim - 1

    def words(k):
        return jax.random.bits(k, _KEY_SHAPE, jnp.uint32)

    for _ in range(batch_dims):
        words = jax.vmap(words)
    return jax.random.wrap_key_data(words(key), impl=PALLAS_KEY_IMPL)


def _key_words(key):
    """``(k0, k1)`` uint32 scalars of a Pallas key given as a typed key, its
    data (``(1, 2)`` or ``(2,)``), a Ref holding that data, or a pair of scalars."""
    if isinstance(key, (tuple, list)) and len(key) == 2:
        return tuple(jnp.asarray(k).astype(jnp.uint32) for k in key)
    if isinstance(jax.typeof(key), jax.ref.AbstractRef) or hasattr(key, "transforms"):
        shape = key.shape
        if tuple(shape) == _KEY_SHAPE:
            return key[0, 0].astype(jnp.uint32), key[0, 1].astype(jnp.uint32)
        if tuple(shape) == (2,):
            return key[0].astype(jnp.uint32), key[1].astype(jnp.uint32)
    else:
        key = jnp.asarray(key) if not isinstance(key, jax.Array) else key
        if jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
            if key.shape != ():
                raise ValueError(f"pallas_tpu.sample_block: global_key must be one key, got a "
                                 f"batch of shape {key.shape}.")
            key = jax.random.key_data(key)
        if tuple(key.shape) in (_KEY_SHAPE, (2,)) and jnp.issubdtype(key.dtype, jnp.integer):
            flat = key.reshape(2)
            return flat[0].astype(jnp.uint32), flat[1].astype(jnp.uint32)
    raise TypeError(
        f"pallas_tpu.sample_block: global_key must be a Pallas key (pltpu.to_pallas_key), its "
        f"uint32 words of shape (1, 2) (jax.random.key_data of it, or a Ref holding them, e.g. "
        f"in SMEM) or a pair of uint32 scalars; got {jax.typeof(key)}.")


# --- the sampler, evaluated on the words -----------------------------------------------------

class _Words:
    """A Pallas key inside the evaluated sampler: its two words."""

    def __init__(self, k0, k1):
        self.k0, self.k1 = k0, k1


def _is_key(aval) -> bool:
    return jnp.issubdtype(getattr(aval, "dtype", None), jax.dtypes.prng_key) \
        if hasattr(aval, "dtype") else False


def _is_ref_like(x) -> bool:
    return isinstance(jax.typeof(x), jax.ref.AbstractRef) or hasattr(x, "transforms")


def _sub_jaxpr(params):
    for name in ("jaxpr", "call_jaxpr", "fun_jaxpr"):
        if name in params:
            return params[name]
    return None


def _eval(jaxpr, consts, args):
    env = {}

    def read(atom):
        return atom.val if isinstance(atom, jax.extend.core.Literal) else env[atom]

    for v, x in zip(jaxpr.constvars, consts):
        env[v] = x
    for v, x in zip(jaxpr.invars, args):
        env[v] = x
    for eqn in jaxpr.eqns:
        invals = [read(a) for a in eqn.invars]
        outs = _eval_equation(eqn, invals)
        for v, x in zip(eqn.outvars, outs):
            env[v] = x
    return [read(a) for a in jaxpr.outvars]


def _eval_equation(eqn, invals):
    name = eqn.primitive.name
    if not any(isinstance(x, _Words) for x in invals) and \
            not any(_is_key(v.aval) for v in eqn.outvars):
        out = eqn.primitive.bind(*invals, **eqn.primitive.get_bind_params(eqn.params))
        return out if eqn.primitive.multiple_results else [out]
    if name == "random_wrap":
        data = invals[0]
        return [data if isinstance(data, _Words) else _Words(*_key_words(data))]
    if name == "random_unwrap":
        w = invals[0]
        return [jnp.stack([w.k0, w.k1]).reshape(_KEY_SHAPE)]
    if name == "random_bits":
        if eqn.params["bit_width"] != 32:
            raise ValueError(f"pallas_tpu.sample_block: the sampler asked for "
                             f"{eqn.params['bit_width']}-bit draws; the TPU PRNG gives 32-bit "
                             f"words (use a 32-bit dtype).")
        w = invals[0]
        return [seeded_random_bits(w.k0, w.k1, eqn.params["shape"])]
    if name == "random_fold_in":
        w, data = invals
        return [_Words(*_fold_in_words(w.k0, w.k1, data))]
    if name == "random_split":
        _impl_split(None, None)
    inner = _sub_jaxpr(eqn.params)
    if inner is not None:
        closed = inner if hasattr(inner, "consts") else None
        jaxpr = closed.jaxpr if closed is not None else inner
        return _eval(jaxpr, closed.consts if closed is not None else (), invals)
    raise NotImplementedError(f"pallas_tpu.sample_block: the sampler uses its key in "
                              f"{name!r}; only random_bits and fold_in are supported on Pallas "
                              f"keys.")


def _is_dynamic(x) -> bool:
    return isinstance(x, (jax.Array, np.ndarray)) or hasattr(x, "aval")


def _draw_tile(sampler_fn, words, tile, kwargs):
    leaves, tree = jax.tree.flatten(kwargs)
    dynamic = [i for i, x in enumerate(leaves) if _is_dynamic(x)]

    def traced(data, *dyn):
        values = list(leaves)
        for i, x in zip(dynamic, dyn):
            values[i] = x
        key = jax.random.wrap_key_data(data, impl=PALLAS_KEY_IMPL)
        return sampler_fn(key, shape=tile, **jax.tree.unflatten(tree, values))

    specs = [jax.ShapeDtypeStruct(_KEY_SHAPE, jnp.uint32)]
    specs += [jax.ShapeDtypeStruct(jnp.shape(leaves[i]), jnp.result_type(leaves[i]))
              for i in dynamic]
    closed, out_shape = jax.make_jaxpr(traced, return_shape=True)(*specs)
    outs = _eval(closed.jaxpr, closed.consts, [_Words(*words), *(leaves[i] for i in dynamic)])
    return jax.tree.unflatten(jax.tree.structure(out_shape), outs)


def _check_sizes(block_size, tile_size, total_size):
    if not (len(block_size) == len(tile_size) == len(total_size)):
        raise ValueError(f"pallas_tpu.sample_block: block_size {block_size}, tile_size "
                         f"{tile_size} and total_size {total_size} must have the same length.")
    for b, t in zip(block_size, tile_size):
        if t <= 0 or b % t:
            raise ValueError(f"pallas_tpu.sample_block: tile_size {tile_size} must divide "
                             f"block_size {block_size} in every dimension.")


def sample_block(sampler_fn, global_key, block_size: Sequence[int], tile_size: Sequence[int],
                 total_size: Sequence[int], block_index=None, **kwargs) -> jax.Array:
    """The ``block_size`` block at ``block_index`` (default: the program ids of
    the first ``len(block_size)`` grid axes) of a ``total_size`` array drawn by
    ``sampler_fn`` (``jax.random.uniform``, ``normal``, ``bits``, ...) from
    ``global_key``, one ``tile_size`` tile at a time: the same values whatever
    the block shape, as long as ``tile_size`` divides it. ``kwargs`` go to the
    sampler. ``global_key``: a Pallas key (``to_pallas_key``), its words
    (``jax.random.key_data`` of it, shape ``(1, 2)``; or a Ref holding them)
    or a pair of uint32 scalars."""
    block_size = tuple(int(d) for d in block_size)
    tile_size = tuple(int(d) for d in tile_size)
    total_size = tuple(int(d) for d in total_size)
    _check_sizes(block_size, tile_size, total_size)
    if block_index is None:
        import pallas_frontend as pl
        block_index = tuple(pl.program_id(axis) for axis in range(len(block_size)))
    if len(block_index) != len(block_size):
        raise ValueError(f"pallas_tpu.sample_block: block_index has {len(block_index)} entries "
                         f"for a {len(block_size)}-d block.")
    # a typed key (e.g. read from a Ref of keys) is folded and drawn from as a
    # key: compiled for TPU, JAX's Mosaic lowering holds a Pallas key as its two
    # words and cannot unwrap it into an array
    typed = _is_key(global_key) and not _is_ref_like(global_key)
    if typed and global_key.shape != ():
        raise ValueError(f"pallas_tpu.sample_block: global_key must be one key, got a "
                         f"batch of shape {global_key.shape}.")
    k0, k1 = (None, None) if typed else _key_words(global_key)
    tiles_per_block = [b // t for b, t in zip(block_size, tile_size)]
    tiles_in_total = [-(-n // t) for n, t in zip(total_size, tile_size)]

    def tile_number(within):
        # row-major number of the tile in the whole array's (rounded-up) tile grid
        number = jnp.uint32(0)
        for axis, (i, b) in enumerate(zip(within, block_index)):
            tile = jnp.asarray(b).astype(jnp.uint32) * np.uint32(tiles_per_block[axis]) + \
                np.uint32(i)
            number = number * np.uint32(tiles_in_total[axis]) + tile
        return number

    def assemble(axis, within):
        if axis == len(block_size):
            if typed:
                tile_key = jax.random.fold_in(global_key, tile_number(within))
                return sampler_fn(tile_key, shape=tile_size, **kwargs)
            words = _fold_in_words(k0, k1, tile_number(within))
            return _draw_tile(sampler_fn, words, tile_size, kwargs)
        parts = [assemble(axis + 1, within + (i,)) for i in range(tiles_per_block[axis])]
        return parts[0] if len(parts) == 1 else jnp.concatenate(parts, axis=axis)

    return assemble(0, ())
