"""``BufferedRef`` and ``BufferType``: the multiple-buffered VMEM window of one
operand of a software pipeline (``emit_pipeline(..., allocations=...)``).

A ``BufferedRef`` is a frozen dataclass registered as a pytree, with JAX
0.12's field names and methods, so the two ways JAX code uses it work here:
as a scratch type (``scratch_shapes=[BufferedRef.input(spec, dtype)]``,
``pl.run_scoped(f, make_allocations(...))``), whose window and semaphore
fields become Refs; and as a base class whose ``copy_in``/``wait_in``/
``copy_out``/``wait_out`` a library overrides (vLLM's TPU kernels do) to
move blocks its own way. The pipeline (``pipeline_schedule.py``) only calls
these methods; the DMAs are ``pallas_tpu.make_async_copy``.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import pallas_frontend as pf
from pallas_tpu import hijax_refs, key_operands, spaces
from pallas_tpu.memory import ANY, HBM, SMEM, VMEM, MemorySpace, SemaphoreType


class BufferType(enum.Enum):
    """Whether a pipeline operand is read, written, or both."""
    INPUT = 1
    OUTPUT = 2
    INPUT_OUTPUT = 3
    MANUAL = 4

    @property
    def is_input(self) -> bool:
        """Whether operands of this type are read."""
        return self in (BufferType.INPUT, BufferType.INPUT_OUTPUT)

    @property
    def is_output(self) -> bool:
        """Whether operands of this type are written."""
        return self in (BufferType.OUTPUT, BufferType.INPUT_OUTPUT)


def _static(**kw):
    return dataclasses.field(metadata=dict(static=True), **kw)


def buffer_counts(buffer_count, buffer_type: BufferType) -> tuple[int, int]:
    """(slots filled by input DMAs, slots drained by output DMAs)."""
    if not (buffer_type.is_input or buffer_type.is_output):
        raise ValueError(f"BufferedRef: no buffer counts for {buffer_type}.")
    if isinstance(buffer_count, (int, np.integer)):
        n = int(buffer_count)
        if buffer_type is BufferType.INPUT_OUTPUT:
            counts = (n, 1)       # an int buffers the reads; the write-back is synchronous
        else:
            counts = (n if buffer_type.is_input else 0, n if buffer_type.is_output else 0)
    elif (buffer_type is BufferType.INPUT_OUTPUT and isinstance(buffer_count, tuple)
          and len(buffer_count) == 2 and all(isinstance(c, int) for c in buffer_count)):
        counts = buffer_count
    else:
        raise ValueError(f"BufferedRef: buffer_count must be an int (or an (in, out) pair of "
                         f"ints for INPUT_OUTPUT), got {buffer_count!r} for {buffer_type}.")
    if (buffer_type.is_input and counts[0] < 1) or (buffer_type.is_output and counts[1] < 1):
        raise ValueError(f"BufferedRef: buffer_count must be at least 1, got {buffer_count!r}.")
    return counts


def _kernel_block_shape(spec) -> tuple[int, ...]:
    if spec.block_shape is None:
        raise ValueError("BufferedRef: the BlockSpec needs a block_shape.")
    return tuple(_dim_size(d) for d in spec.block_shape
                 if not (d is None or isinstance(d, pf.Squeezed)))


def _dim_size(d) -> int:
    return int(d) if isinstance(d, (int, np.integer)) else d.block_size


def _check_bounded(index):
    if not isinstance(index, pf.Slice):
        raise ValueError("Must return a pl.ds from the index_map for a BoundedSlice "
                         f"dimension (its start and size), got {index!r}.")


def _space_of(ref):
    # a view (ref.at[...]) carries its base Ref's space; a traced Ref only on its type
    base = getattr(ref, "ref", None)
    if base is not None and hasattr(ref, "transforms"):
        return _space_of(base)
    return getattr(jax.typeof(ref), "memory_space", None)


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class BufferedRef:
    """The window buffers, DMA semaphores and slot counters of one operand.

    Slot fields count DMAs issued/awaited (int32 scalars, carried by the
    pipeline loop); the slot in use is the count modulo ``buffer_count``.
    ``window_ref`` is None for an operand already in the buffer's memory
    space: the pipeline then views the operand itself (``bind_existing_ref``).
    """
    _spec: Any = _static()
    _buffer_type: BufferType = _static()
    _in_buffer_count: int = _static()
    _out_buffer_count: int = _static()
    _grid_rank: int | None = _static()
    window_ref: Any
    copy_in_slot: Any
    wait_in_slot: Any
    copy_out_slot: Any
    wait_out_slot: Any
    next_fetch: Any
    sem_recvs: Any
    sem_sends: Any
    tiling: Any = _static(default=None)
    is_trivial_windowing: bool = _static(default=False)
    has_allocated_buffer: bool = _static(default=False)
    prefetched_count: int = _static(default=0)
    await_prefetch: bool = _static(default=False)
    output_wait_read_only: bool = _static(default=False)

    # --- construction --------------------------------------------------------------
    @classmethod
    def create(cls, spec, dtype_or_type, buffer_type, buffer_count, grid_rank=None,
               use_lookahead=False, source_memory_space=ANY, tiling=None,
               is_trivial_windowing=False, prefetched_count=0):
        """A BufferedRef for ``spec``'s blocks of dtype ``dtype_or_type`` (or an
        array type's dtype), or an unbuffered view when the operand already
        lives where the blocks go (``source_memory_space``)."""
        dtype = getattr(dtype_or_type, "dtype", dtype_or_type)
        if not key_operands.is_key(dtype):    # a key dtype stays one: its Ref loads keys
            dtype = np.dtype(dtype)
        space = VMEM if spec.memory_space is None else spec.memory_space
        space = spaces.tpu_space(space)     # e.g. a PRNG key's space: SMEM, as in JAX
        if not isinstance(space, MemorySpace) or space not in (VMEM, SMEM, HBM):
            raise ValueError(f"BufferedRef: blocks can be buffered in VMEM, SMEM or HBM, "
                             f"not {space}.")
        if space is source_memory_space or space is HBM:
            if space is HBM and source_memory_space not in (ANY, HBM):
                raise ValueError(f"BufferedRef: an HBM block spec needs an HBM/ANY source, "
                                 f"got {source_memory_space}.")
            return cls(spec, buffer_type, 0, 0, None, None, None, None, None, None, None,
                       None, None, is_trivial_windowing=is_trivial_windowing)
        if use_lookahead and grid_rank is None:
            raise ValueError("BufferedRef: use_lookahead needs grid_rank.")
        n_in, n_out = buffer_counts(buffer_count, buffer_type)
        total = n_in + n_out - int(buffer_type is BufferType.INPUT_OUTPUT)
        if is_trivial_windowing:
            # JAX's trivial windowing: one unsliced buffer, the operand's own shape
            if not hasattr(dtype_or_type, "shape"):
                raise ValueError("BufferedRef: is_trivial_windowing needs the operand's type "
                                 "(an array, Ref or ShapeDtypeStruct), not a dtype.")
            shape = tuple(dtype_or_type.shape)
        else:
            block = _kernel_block_shape(spec)
            # a 1-D block's slots lie end to end, as in JAX
            shape = (total * block[0],) if len(block) == 1 else (total, *block)
        # an operand of a hijax type: its blocks in a buffer of that type
        window = (None if prefetched_count > 0 else
                  hijax_refs.HijaxBuffer(dtype_or_type.update(shape=shape), space)
                  if hijax_refs.is_hijax_type(dtype_or_type) else space(shape, dtype))
        if prefetched_count > n_in and not is_trivial_windowing:
            raise ValueError(f"BufferedRef: prefetched_count={prefetched_count} exceeds the "
                             f"{n_in} input buffers.")
        sems = SemaphoreType.DMA((total,))
        skip_sems = is_trivial_windowing
        return cls(spec, buffer_type, n_in, n_out, grid_rank if use_lookahead else None,
                   window, None, None, None, None, None,
                   None if buffer_type is BufferType.OUTPUT or skip_sems else sems,
                   None if buffer_type is BufferType.INPUT or skip_sems else sems,
                   tiling=tiling, is_trivial_windowing=is_trivial_windowing,
                   has_allocated_buffer=True, prefetched_count=prefetched_count)

    @classmethod
    def input(cls, spec, dtype_or_type, buffer_count=2, **kwargs):
        """A buffer that fetches ``spec``'s blocks in (``create`` with ``BufferType.INPUT``)."""
        return cls.create(spec, dtype_or_type, BufferType.INPUT, buffer_count, **kwargs)

    @classmethod
    def output(cls, spec, dtype_or_type, buffer_count=2, **kwargs):
        """A buffer that writes ``spec``'s blocks back (``BufferType.OUTPUT``)."""
        return cls.create(spec, dtype_or_type, BufferType.OUTPUT, buffer_count, **kwargs)

    @classmethod
    def input_output(cls, spec, dtype_or_type, buffer_count=(2, 1), **kwargs):
        """Read and written: ``in + out - 1`` slots."""
        return cls.create(spec, dtype_or_type, BufferType.INPUT_OUTPUT, buffer_count, **kwargs)

    # --- what it is ----------------------------------------------------------------
    spec = property(lambda self: self._spec,
        doc='The block spec whose blocks this buffers.')
    buffer_type = property(lambda self: self._buffer_type,
        doc='Read, written, both, or manual (a ``BufferType``).')
    in_buffer_count = property(lambda self: self._in_buffer_count,
        doc='How many slots fetch blocks in (0 for an output or an unbuffered view).')
    out_buffer_count = property(lambda self: self._out_buffer_count,
        doc='How many slots write blocks back (0 for an input or an unbuffered view).')
    is_input = property(lambda self: self._buffer_type.is_input,
        doc='Whether blocks are fetched in.')
    is_output = property(lambda self: self._buffer_type.is_output,
        doc='Whether blocks are written back.')
    is_input_output = property(lambda self: self._buffer_type is BufferType.INPUT_OUTPUT,
        doc='Whether blocks are fetched in and written back.')
    is_manual = property(lambda self: self._buffer_type is BufferType.MANUAL,
        doc='Whether the caller moves the blocks itself.')
    use_lookahead = property(lambda self: self._grid_rank is not None,
        doc='Whether fetch indices are tracked ahead of the step (``next_fetch``).')
    block_shape = property(lambda self: self._spec.block_shape,
        doc="The spec's block shape.")
    compute_index = property(lambda self: self._spec.index_map,
        doc="The spec's index map: grid indices to block indices.")

    @property
    def is_buffered(self) -> bool:
        """Whether it owns slots (False for a view of an operand already in place)."""
        return self._in_buffer_count > 0 or self._out_buffer_count > 0

    @property
    def has_indirect(self) -> bool:
        """Whether a block dim is ``pl.Indirect``."""
        return any(isinstance(d, pf.Indirect) for d in (self.block_shape or ()))

    @property
    def buffer_count(self) -> int:
        """The number of slots (an input-output buffer shares one)."""
        if not self.is_buffered:
            raise ValueError("BufferedRef: an unbuffered view has no buffer count.")
        return (self._in_buffer_count + self._out_buffer_count
                - int(self._buffer_type is BufferType.INPUT_OUTPUT))

    # --- slots ---------------------------------------------------------------------
    def _slot(self, count):
        assert count is not None, "initialize_slots() first"
        return jax.lax.rem(count, jnp.int32(self.buffer_count))

    cumulative_copy_in = property(lambda self: self.copy_in_slot,
        doc='DMAs started into the buffer so far (an int32 scalar).')
    cumulative_wait_in = property(lambda self: self.wait_in_slot,
        doc='DMAs into the buffer awaited so far.')
    cumulative_copy_out = property(lambda self: self.copy_out_slot,
        doc='Write-backs started so far.')
    cumulative_wait_out = property(lambda self: self.wait_out_slot,
        doc='Write-backs awaited so far.')
    current_copy_in_slot = property(lambda self: self._slot(self.copy_in_slot),
        doc='The slot the next fetch goes to.')
    current_wait_in_slot = property(lambda self: self._slot(self.wait_in_slot),
        doc='The slot the next wait on a fetch is for.')
    current_copy_out_slot = property(lambda self: self._slot(self.copy_out_slot),
        doc='The slot the next write-back reads.')
    current_wait_out_slot = property(lambda self: self._slot(self.wait_out_slot),
        doc='The slot the next wait on a write-back is for.')

    @property
    def next_fetch_indices(self):
        """The grid indices of the next block to fetch (with ``use_lookahead``)."""
        if not self.use_lookahead:
            raise ValueError("BufferedRef: fetch indices exist only with use_lookahead.")
        return self.next_fetch

    def initialize_slots(self):
        """This buffer with every slot counter at zero (before the pipeline's first step)."""
        if self.window_ref is None and self.prefetched_count > 0:
            raise ValueError(
                "Expected external window buffer to be bound for prefetched input "
                f"(prefetched_count={self.prefetched_count}), but window_ref is None: pass "
                "bref.with_window_ref(prefetched_vmem_ref) in the allocations.")
        zero = lambda on: jnp.int32(0) if on else None
        return dataclasses.replace(
            self, copy_in_slot=zero(self.is_input), wait_in_slot=zero(self.is_input),
            copy_out_slot=zero(self.is_output), wait_out_slot=zero(self.is_output),
            next_fetch=None if self._grid_rank is None
            else tuple(jnp.int32(0) for _ in range(self._grid_rank)))

    def _advance(self, name, on, predicate):
        if not (self.is_buffered and on):
            return self
        count = getattr(self, name)
        new = (count + 1 if predicate else count) if isinstance(predicate, bool) \
            else jax.lax.select(predicate, count + 1, count)
        return dataclasses.replace(self, **{name: new})

    def advance_copy_in_slot(self, predicate=True):
        """This buffer with the copy-in counter advanced where ``predicate`` holds."""
        return self._advance("copy_in_slot", self.is_input, predicate)

    def advance_wait_in_slot(self, predicate=True):
        """This buffer with the wait-in counter advanced where ``predicate`` holds."""
        return self._advance("wait_in_slot", self.is_input, predicate)

    def advance_copy_out_slot(self, predicate=True):
        """This buffer with the copy-out counter advanced where ``predicate`` holds."""
        return self._advance("copy_out_slot", self.is_output, predicate)

    def advance_wait_out_slot(self, predicate=True):
        """This buffer with the wait-out counter advanced where ``predicate`` holds."""
        return self._advance("wait_out_slot", self.is_output, predicate)

    def with_spec(self, spec):
        """This buffer for another block spec."""
        return dataclasses.replace(self, _spec=spec)

    def with_next_fetch(self, next_fetch=None):
        """This buffer with its lookahead fetch indices replaced."""
        return dataclasses.replace(self, next_fetch=next_fetch)

    def with_window_ref(self, window_ref):
        """This buffer over another window buffer (e.g. one prefetched by the caller)."""
        return dataclasses.replace(self, window_ref=window_ref)

    def with_slot_index(self, copy_in_slot=None, copy_out_slot=None, wait_in_slot=None,
                        wait_out_slot=None):
        """This buffer with the given slot counters replaced (None keeps one)."""
        given = dict(copy_in_slot=copy_in_slot, copy_out_slot=copy_out_slot,
                     wait_in_slot=wait_in_slot, wait_out_slot=wait_out_slot)
        return dataclasses.replace(self, **{k: v for k, v in given.items() if v is not None})

    # --- windows -------------------------------------------------------------------
    @property
    def current_ref(self):
        """The block the body sees at this step."""
        if self.window_ref is None:
            raise ValueError("BufferedRef: window_ref is None (not allocated or not bound).")
        if not self.is_buffered or self.is_trivial_windowing:
            return self.window_ref
        return self._window_ref_at(self.current_copy_out_slot if self.is_output
                                   else self.current_wait_in_slot)

    def _window_ref_at(self, slot, window_slice=None):
        if self.is_trivial_windowing:
            return self.window_ref
        if self.window_ref.ndim > 1:
            return self.window_ref.at[(slot, *(window_slice or ()))]
        n = self.window_ref.shape[0] // self.buffer_count
        if window_slice is None:
            return self.window_ref.at[pf.ds(slot * n, n)]
        return self.window_ref.at[pf.ds(slot * n + window_slice[0].start, window_slice[0].size)]

    def compute_slice(self, grid_indices):
        """Indexers of the block at ``grid_indices`` in an operand of the
        buffer's own memory space (static sizes: the kernel's block shape)."""
        out = []
        for d, i in zip(self.block_shape, self.compute_index(*grid_indices), strict=True):
            if d is None or isinstance(d, pf.Squeezed):
                out.append(i)
            elif isinstance(d, pf.Element):
                out.append(pf.ds(i, d.block_size))
            elif isinstance(d, pf.BoundedSlice):
                _check_bounded(i)
                out.append(pf.ds(i.start, d.block_size))
            else:
                out.append(pf.ds(i * _dim_size(d), _dim_size(d)))
        return tuple(out)

    def get_dma_slice(self, src_ty, grid_indices):
        """Indexers of the block at ``grid_indices`` in the source operand."""
        shape = tuple(src_ty.shape)
        if not shape:
            return ()
        out = []
        for d, i, n in zip(self.block_shape, self.compute_index(*grid_indices), shape,
                           strict=True):
            if d is None or isinstance(d, pf.Squeezed) or isinstance(d, pf.Indirect):
                out.append(i)
            elif isinstance(d, pf.BoundedSlice):
                _check_bounded(i)
                out.append(pf.ds(i.start, i.size))
            elif isinstance(d, pf.Element):
                out.append(pf.ds(i, d.block_size))
            else:
                size = _dim_size(d)
                if n % size:
                    raise NotImplementedError(
                        f"BufferedRef: block size {size} does not divide the operand's dim "
                        f"of {n} (shape {shape}); pad the operand to a multiple of the block.")
                out.append(pf.ds(i * size, size))
        return tuple(out)

    def _to_window_slice(self, dma_slice):
        # an Indirect dim's DMA index is its indices: the whole block dim
        return tuple(pf.ds(0, d.block_size if isinstance(d, pf.Indirect) else s.size)
                     for s, d in zip(dma_slice, self.block_shape)
                     if not (d is None or isinstance(d, pf.Squeezed)))

    def bind_existing_ref(self, window_ref, indices):
        """An unbuffered operand: view the block of the operand itself."""
        if self.is_buffered or self.has_allocated_buffer:
            return self
        if self.is_trivial_windowing:
            return dataclasses.replace(self, window_ref=window_ref)
        return dataclasses.replace(self, window_ref=window_ref.at[self.compute_slice(indices)])

    def unbind_refs(self):
        """An unbuffered view with its operand view dropped (buffers are kept)."""
        if self.is_buffered or self.has_allocated_buffer:
            return self
        return dataclasses.replace(self, window_ref=None)

    # --- DMAs ----------------------------------------------------------------------
    def _src_and_window(self, ref, slot, grid_indices):
        if self.is_trivial_windowing:
            return ref, self.window_ref
        dma = self.get_dma_slice(ref, grid_indices)
        return ref.at[dma], self._window_ref_at(slot, self._to_window_slice(dma))

    def copy_in(self, src_ref, grid_indices):
        """Starts the DMA of the block at ``grid_indices`` into the copy-in slot."""
        from pallas_tpu.primitives import make_async_copy
        if not self.is_buffered:
            return
        slot = self.current_copy_in_slot
        src, dst = self._src_and_window(src_ref, slot, grid_indices)
        make_async_copy(src, dst, self.sem_recvs.at[slot]).start()

    def wait_in(self, src_ref, grid_indices):
        """Waits for the DMA into the wait-in slot."""
        from pallas_tpu.primitives import make_async_copy
        if not self.is_buffered:
            return
        slot = self.current_wait_in_slot
        src, dst = self._src_and_window(src_ref, slot, grid_indices)
        make_async_copy(src, dst, self.sem_recvs.at[slot]).wait()

    def _copy_out_at(self, slot, dst_ref, grid_indices):
        from pallas_tpu.primitives import make_async_copy
        dst, src = self._src_and_window(dst_ref, slot, grid_indices)
        return make_async_copy(src, dst, self.sem_sends.at[slot])

    def copy_out(self, dst_ref, grid_indices):
        """Starts the write-back of the copy-out slot (synchronous with one buffer)."""
        if not self.is_buffered:
            return
        copy = self._copy_out_at(self.current_copy_out_slot, dst_ref, grid_indices)
        copy.start()
        if self._out_buffer_count == 1:
            copy.wait()

    def wait_out(self, dst_ref, grid_indices):
        """Waits for the write-back from the wait-out slot."""
        if self.is_buffered and self._out_buffer_count > 1:
            self._copy_out_at(self.current_wait_out_slot, dst_ref, grid_indices).wait()


def source_space(ref):
    """The memory space of a pipeline operand (a Ref or a view of one)."""
    return _space_of(ref)
