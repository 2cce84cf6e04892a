"""What the rebuilt kernel does where JAX 0.12's TPU interpreter departs from
a TPU. Active only while a kernel is rebuilt with ``InterpretParams``:

- ``semaphore_read``: no rule there; refused with a message (it compiles).
- ``prng_seed`` / ``prng_random_bits``: a no-op and all zeros there. Here a
  threefry stream keyed by the seeds, its state in a hidden SMEM scratch
  buffer: other bits than the hardware's, the same contract (deterministic
  per seed, a new block of bits per call, state kept across grid steps).
- a signal to ``device_id={core_axis: i}``: JAX's interpreter knows core
  axes only of a ``core_map`` mesh, not of a grid (ours runs mesh kernels
  as a grid); the core is passed as ``core_index``, as Mosaic reads it.
- ``debug_check``: JAX's is a checkify check, silent unless the caller
  checkifies; here a failed check raises from a host callback, as in the
  frontend's interpreter and on a TPU. JAX's interpreter keeps its simulated
  memory after a kernel fails (for inspection) and the next kernel then
  reports blocks of the failed run as revisited: the next interpreted kernel
  after such a failure starts by resetting it (``reset_after_failure``).
- an output aliased to an input whose blocks do not tile it (a 128x128 block
  of a 128x16 array: megablox gmm's ``existing_out``): JAX's interpreter pads
  the input to whole blocks and returns the output as that padded buffer, so
  its lowering fails on the output's type. Here the input is passed padded
  and the output declared so, then cut back to its array, the buffer's
  leading corner, which is what the chip writes (``AliasPadding``).
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import threading

import jax
import jax.numpy as jnp
import numpy as np

from pallas_frontend.backend_api import KernelIR

from pallas_tpu import key_operands
from pallas_tpu import primitives as tpu_prims

_active: contextvars.ContextVar = contextvars.ContextVar("pallas_tpu_interpreting", default=None)


class _Interpreting:
    def __init__(self, prng_state, core_axes):
        self.prng_state = prng_state     # int32[2] SMEM Ref: (seed, calls since seeding)
        self.core_axes = core_axes       # grid names run as simulated cores


@contextlib.contextmanager
def interpreting(prng_state=None, core_axes=()):
    token = _active.set(_Interpreting(prng_state, frozenset(core_axes)))
    try:
        yield
    finally:
        _active.reset(token)


def active() -> _Interpreting | None:
    return _active.get()


def uses_prng(kernel: KernelIR) -> bool:
    prims = (tpu_prims.prng_seed_p, tpu_prims.prng_random_bits_p)
    return any(e.primitive in prims for e in kernel.iter_equations())


def prng_state_type():
    from jax.experimental.pallas import tpu as pltpu
    return pltpu.SMEM((2,), jnp.int32)


def _seed_words(seeds) -> list:
    """The int32 seeds, a key given as its words (key data, in order)."""
    out = []
    for s in seeds:
        if jnp.issubdtype(s.dtype, jax.dtypes.prng_key):
            words = jax.random.key_data(s).reshape(-1)
            out += list(jax.lax.bitcast_convert_type(words.astype(jnp.uint32), jnp.int32))
        else:
            out.append(s)
    return out


def prng_seed(seeds) -> None:
    state = active().prng_state
    seeds = _seed_words(seeds)
    seed = seeds[0]
    for s in seeds[1:]:      # several seeds: one int32, order-sensitive
        seed = seed * np.int32(1000003) ^ s
    state[0] = seed
    state[1] = jnp.int32(0)


def prng_random_bits(shape):
    state = active().prng_state
    key = jax.random.fold_in(jax.random.PRNGKey(state[0]), state[1])
    state[1] = state[1] + 1
    bits = jax.random.bits(key, tuple(shape), jnp.uint32)
    return jax.lax.bitcast_convert_type(bits, jnp.int32)


_failure_lock = threading.Lock()
_failed_since_reset = False


def _fail(error: Exception):
    global _failed_since_reset
    with _failure_lock:
        _failed_since_reset = True
    from pallas_tpu._jax_private import RUN_GATE
    RUN_GATE.abandon()      # this run stops here: let the next one in
    raise error


def _raise_if_false(ok, *, message):
    if not bool(ok):
        _fail(AssertionError(message))


def _reset_if_a_kernel_failed():
    global _failed_since_reset
    from jax.experimental.pallas import tpu as pltpu
    with _failure_lock:
        if _failed_since_reset:
            pltpu.reset_tpu_interpret_mode_state()
            _failed_since_reset = False


def reset_after_failure() -> None:
    """Staged before an interpreted kernel: an ordered host callback, so it
    runs before that kernel's own (ordered) callbacks set up JAX's state."""
    from jax.experimental import io_callback
    io_callback(_reset_if_a_kernel_failed, None, ordered=True)


def debug_check(pred, message: str) -> None:
    jax.debug.callback(_raise_if_false, pred, message=message)


def _raise_if_wraps(index, *, limit, message):
    index = int(index)
    if index > limit:
        _fail(IndexError(message.format(index=index)))


def refuse_wrapping_block_index(index, block_size: int, where: str) -> None:
    """A block index read at run time (scalar prefetch) whose element offset
    passes int32 wraps inside JAX's interpreter to an in-range block (2**25 + 1
    blocks of 128 rows read block 1, as JAX's own interpret modes do): refused
    from a host callback, naming it."""
    limit = np.iinfo(np.int32).max // block_size
    jax.debug.callback(functools.partial(
        _raise_if_wraps, limit=limit,
        message=(f"{where} returned block index {{index}}: its element offset "
                 f"({{index}} * block size {block_size}) does not fit in int32 and would wrap "
                 "to another block. Keep block indices within the array.")), index)


def split_core_axes(device_id, core_index):
    """``(device_id, core_index)`` with the core axes of a ``device_id`` dict
    moved to ``core_index`` (see the module docstring)."""
    state = active()
    if state is None or not isinstance(device_id, dict):
        return device_id, core_index
    cores = {k: v for k, v in device_id.items() if k in state.core_axes}
    if not cores:
        return device_id, core_index
    if len(cores) > 1 or core_index is not None:
        raise ValueError(f"pallas_tpu: device_id {device_id} names more than one core "
                         "(several core axes, or a core axis and core_index).")
    rest = {k: v for k, v in device_id.items() if k not in cores}
    return rest or None, next(iter(cores.values()))


class AliasPadding:
    """The aliased input/output pairs whose blocked input JAX's TPU interpreter
    would pad (see the module's notes), and their padded shape."""

    def __init__(self, kernel: KernelIR, is_unwindowed):
        """``is_unwindowed(mapping)``: the operand is passed whole (not padded)."""
        self.shapes: dict[tuple[int, int], tuple[int, ...]] = {}
        for i, o in kernel.input_output_aliases:
            k = i - kernel.num_scalar_prefetch
            if k < 0 or is_unwindowed(kernel.in_mappings[k]):
                continue
            m = kernel.in_mappings[k]
            if key_operands.is_key(m.dtype):   # passed as key data: other trailing dims
                continue
            # JAX's interpreter pads each dim to a multiple of its block's size
            # (a Squeezed dim's block_size is 1)
            sizes = [d.block_size for d in m.block_dims]
            if not all(isinstance(n, int) for n in (*sizes, *m.array_shape)):
                continue
            padded = tuple(-(-n // b) * b for n, b in zip(m.array_shape, sizes))
            if padded != tuple(m.array_shape):
                self.shapes[(i, o)] = padded

    @classmethod
    def needed(cls, kernel: KernelIR, is_unwindowed) -> AliasPadding | None:
        padding = cls(kernel, is_unwindowed)
        return padding if padding.shapes else None

    def out_shapes(self, shapes: list) -> list:
        """``pallas_call``'s out_shape with each such output padded."""
        shapes = list(shapes)
        for (_, o), padded in self.shapes.items():
            s = shapes[o]
            # only the shape changes (a shard_map output keeps its manual axes)
            mat = getattr(s, "manual_axis_type", None)
            kw = {"manual_axis_type": mat} if mat is not None else {}
            shapes[o] = jax.ShapeDtypeStruct(padded, s.dtype, **kw)
        return shapes

    def pad_inputs(self, operands: list, uninitialized: str) -> list:
        """The flat operands with each such input padded as JAX's interpreter
        pads it (its ``uninitialized_memory`` value past the array's end)."""
        operands = list(operands)
        for (i, _), padded in self.shapes.items():
            x = operands[i]
            fill = _uninitialized_value(x.dtype, uninitialized)
            operands[i] = jnp.pad(x, [(0, p - n) for p, n in zip(padded, x.shape)],
                                  constant_values=fill)
        return operands

    def cut_outputs(self, outs: list, out_shapes: list) -> list:
        """Each such output cut back to its array: the padded buffer's leading corner."""
        outs = list(outs)
        for (_, o) in self.shapes:
            outs[o] = outs[o][tuple(slice(0, n) for n in out_shapes[o].shape)]
        return outs


def _uninitialized_value(dtype, uninitialized: str):
    if uninitialized == "zero":
        return 0
    if jnp.issubdtype(dtype, jnp.floating):
        return np.nan
    if jnp.issubdtype(dtype, jnp.integer):
        return jnp.iinfo(dtype).max
    return True                     # bool
