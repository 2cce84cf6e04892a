"""What Mosaic TPU cannot take, rejected before any lowering work."""

from __future__ import annotations

import numpy as np

import pallas_frontend as pf
from pallas_frontend.backend_api import BackendCapabilityError, BlockMapping, KernelIR

from pallas_tpu import key_operands
from pallas_tpu.memory import MemorySpace

# Mosaic's vector layouts cover these; 64-bit types and complex numbers have none.
SUPPORTED_DTYPES = frozenset({
    "float32", "bfloat16", "float16", "int32", "int16", "int8", "uint32", "uint16", "uint8",
    "bool", "float8_e4m3fn", "float8_e5m2", "int4", "uint4",
})

LANES, SUBLANES = 128, 8

_VMEM_SPACES = (None, pf.MemorySpace.DEFAULT, MemorySpace.VMEM)


def check_block_tiling(kernel: KernelIR, m: BlockMapping) -> None:
    """A VMEM block's last two dims must tile (8, 128) unless they span the array."""
    if m.memory_space not in _VMEM_SPACES or not m.block_dims:
        return
    checks = [(-1, LANES)]
    if len(m.block_dims) >= 2:
        checks.append((-2, SUBLANES))
    for axis, unit in checks:
        d = m.block_dims[axis]
        if not isinstance(d, pf.Blocked):
            continue
        full = m.array_shape[axis]
        if d.block_size % unit and d.block_size != full:
            raise BackendCapabilityError(
                f"Backend 'tpu' (Mosaic) cannot take the block shape "
                f"{tuple(x.block_size for x in m.block_dims)} of {m.origin} (array "
                f"{m.dtype}{list(m.array_shape)}) in kernel '{kernel.name}' ({kernel.source}): "
                f"in VMEM the last two block dims must be divisible by {SUBLANES} and {LANES} "
                f"(dim {len(m.block_dims) + axis} is {d.block_size}, array dim {full}), or equal "
                "the array dims. Pick a multiple (e.g. 8/128), the full dim, or "
                "memory_space=pallas_tpu.ANY and copy by hand.")


def check_dtypes(kernel: KernelIR) -> None:
    avals = [(m.origin, m.dtype) for m in kernel.mappings]
    avals += [(f"scratch[{i}]", a.inner_aval.dtype) for i, a in enumerate(kernel.scratch_avals)]
    for origin, dtype in avals:
        if key_operands.is_key(dtype):     # typed PRNG keys: their data is uint32
            continue
        name = np.dtype(dtype).name
        if name not in SUPPORTED_DTYPES:
            raise BackendCapabilityError(
                f"Backend 'tpu' (Mosaic) does not support dtype {name} of {origin} in kernel "
                f"'{kernel.name}' ({kernel.source}). Supported: {', '.join(sorted(SUPPORTED_DTYPES))}."
                + (" Use float32 (enable x64 only outside the kernel)." if name == "float64" else ""))


def check_block_dims(kernel: KernelIR) -> None:
    """JAX 0.12's Mosaic pallas_call has no BoundedSlice block dims (its
    BlockSpec lowering raises a bare ValueError); refuse them here, by name."""
    for m in kernel.mappings:
        for axis, d in enumerate(m.block_dims):
            if isinstance(d, pf.BoundedSlice):
                raise BackendCapabilityError(
                    f"Backend 'tpu' lacks capability 'bounded_slice': Mosaic cannot take the "
                    f"BoundedSlice block dim {axis} of "
                    f"{m.origin} in kernel '{kernel.name}' ({kernel.source}): JAX 0.12's TPU "
                    "pallas_call has no variable-size blocks. Use a Blocked or Element dim "
                    "with a mask, or memory_space=pallas_tpu.ANY and copy the window by hand "
                    "(pltpu.async_copy of x_ref.at[pl.ds(start, size)]).")


def check_element_padding(kernel: KernelIR) -> None:
    """``pl.Element`` block dims with low padding: Mosaic refuses them ("Low
    padding not supported yet") and JAX's TPU interpreter reads such a window
    unshifted, so neither gives the frontend's meaning (an offset into the
    array padded at both ends). High padding compiles and is kept."""
    for m in kernel.mappings:
        for axis, d in enumerate(m.block_dims):
            if isinstance(d, pf.Element) and d.padding[0]:
                raise BackendCapabilityError(
                    f"Backend 'tpu' cannot take the Element block dim {axis} of {m.origin} "
                    f"with padding {d.padding} (low padding {d.padding[0]}) in kernel "
                    f"'{kernel.name}' ({kernel.source}): "
                    "Mosaic supports no low padding of an element window. Pad the operand "
                    "instead (jnp.pad) and shift the index map by the padding.")


def check_element_blocks(kernel: KernelIR, m: BlockMapping) -> None:
    """JAX's TPU lowering takes Element dims only beside Element or squeezed dims."""
    dims = m.block_dims
    if any(isinstance(d, pf.Element) for d in dims) and not all(
            isinstance(d, (pf.Element, pf.Squeezed)) for d in dims):
        raise BackendCapabilityError(
            f"Backend 'tpu' (Mosaic) cannot take the block dims {dims} of {m.origin} in kernel "
            f"'{kernel.name}' ({kernel.source}): when a block has an Element dim, every dim "
            "must be an Element or squeezed (JAX's TPU lowering). Write the other dims as "
            "pl.Element(size) too, their index map returning element offsets (i * size).")


def check_key_operands(kernel: KernelIR, m: BlockMapping) -> None:
    """Where JAX's Mosaic lowering reads typed PRNG keys: a Pallas key as its
    words from SMEM, any other key (threefry) as a vector, so not from SMEM."""
    if not key_operands.is_key(m.dtype):
        return
    in_smem = m.memory_space is MemorySpace.SMEM
    if key_operands.is_pallas_key(m.dtype) and not in_smem:
        raise BackendCapabilityError(
            f"Backend 'tpu' (Mosaic) reads the Pallas keys of {m.origin} in kernel "
            f"'{kernel.name}' ({kernel.source}) from SMEM only: give it "
            "pl.BlockSpec(memory_space=pallas_tpu.SMEM).")
    if not key_operands.is_pallas_key(m.dtype) and in_smem:
        raise BackendCapabilityError(
            f"Backend 'tpu' (Mosaic) cannot read the {m.dtype} keys of {m.origin} in kernel "
            f"'{kernel.name}' ({kernel.source}) from SMEM (JAX's lowering loads their data as "
            "a vector): leave them in VMEM (the default BlockSpec), or pass a Pallas key "
            "(pallas_tpu.to_pallas_key) in SMEM.")


def check_kernel(kernel: KernelIR) -> None:
    check_dtypes(kernel)
    check_element_padding(kernel)


def check_for_mosaic(kernel: KernelIR) -> None:
    """What only the Mosaic compiler refuses: TPU interpret mode (like JAX's)
    runs blocks of any shape, so this runs when compiling for a TPU only."""
    for m in kernel.mappings:
        check_block_tiling(kernel, m)
        check_element_blocks(kernel, m)
        check_key_operands(kernel, m)


def check_shared_vmem_in_interpret(kernel: KernelIR, num_cores: int) -> None:
    """JAX 0.12's TPU interpreter gives every simulated core its own copy of a
    VMEM_SHARED buffer: with more than one core, what one core writes would
    silently be missing on the others."""
    if num_cores <= 1:
        return
    spaces = [(f"scratch_shapes[{i}]", a.memory_space) for i, a in enumerate(kernel.scratch_avals)]
    spaces += [("a run_scoped buffer", e.params.get("memory_space"))
               for e in kernel.iter_equations() if e.primitive.name == "empty_ref"]
    for what, space in spaces:
        if space is MemorySpace.VMEM_SHARED:
            raise BackendCapabilityError(
                f"Backend 'tpu' cannot interpret {what} of kernel '{kernel.name}' "
                f"({kernel.source}) in VMEM_SHARED on {num_cores} simulated cores: JAX's TPU "
                "interpreter allocates it once per core, so the cores would not see each "
                "other's writes. Use one core (num_cores=1), or share data through an "
                "operand in pallas_tpu.ANY / HBM.")
