"""What Mosaic TPU cannot take, rejected before any lowering work."""

from __future__ import annotations

import numpy as np

import pallas_frontend as pf
from pallas_frontend.backend_api import BackendCapabilityError, BlockMapping, KernelIR

from pallas_tpu import key_operands
from pallas_tpu.memory import MemorySpace

# Mosaic's vector layouts cover these; 64-bit types and complex numbers have none.
# The float8 types are the three Mosaic loads, casts and feeds to the MXU on a
# v5e (libtpu 0.0.42.1 and 0.0.50 alike). Still refused: float8_e4m3fnuz,
# e5m2fnuz, e4m3 and e3m4 (Mosaic cannot even load them), float8_e8m0fnu and
# float4_e2m1fn (copied, never cast or multiplied), int2/uint2 (libtpu aborts
# the process compiling a kernel that copies them).
SUPPORTED_DTYPES = frozenset({
    "float32", "bfloat16", "float16", "int32", "int16", "int8", "uint32", "uint16", "uint8",
    "bool", "float8_e4m3fn", "float8_e5m2", "float8_e4m3b11fnuz", "int4", "uint4",
})

LANES, SUBLANES = 128, 8      # a v5e's vreg: 8 sublanes of 128 lanes of 32 bits
RANK1_CHUNK = SUBLANES * LANES   # a rank-1 block may be any multiple of this

# PALLAS_TPU_CHIP_CHECKS values that turn the chip checks of TPU interpret mode off
CHIP_CHECKS_OFF_VALUES = ("0", "false", "no", "off")

_VMEM_SPACES = (None, pf.MemorySpace.DEFAULT, MemorySpace.VMEM)

# How to run a kernel the chip would refuse in TPU interpret mode anyway.
CHIP_CHECKS_OFF = ("TPU interpret mode refuses what the chip would; to run it in the "
                   "interpreter anyway pass interpret=pallas_tpu.InterpretParams("
                   "chip_checks=False) or set PALLAS_TPU_CHIP_CHECKS=0.")


def _shown(dims) -> tuple:
    return tuple(None if isinstance(d, pf.Squeezed) else d.block_size for d in dims)


def _bits(dtype) -> int:
    from jax import dtypes
    # JAX's lowering stores bool as int32 (BOOL_MEMREF_TYPE)
    return 32 if np.dtype(dtype) == np.bool_ else dtypes.itemsize_bits(dtype)


def narrow_rows_problem(m: BlockMapping) -> str | None:
    """Types narrower than 16 bits (int8, float8, int4; not bool, stored as
    int32): where the array's second-minor dim is a multiple of the type's
    large row tile, 8 * (32 // bits) (32 for 8-bit types, 64 for 4-bit ones),
    libtpu 0.0.42.1 (JAX 0.10's, on a v5e) tiles the array's rows by it and
    refuses a block whose rows are not a multiple of it ("Failed to set window
    params ... block shape is not divisible by tiling evenly nor matches the full
    shape");
    libtpu 0.0.50 (JAX 0.12's) compiles such a block. Checked in TPU interpret
    mode only, so that a kernel that passes runs on every libtpu of the window."""
    dims, shape = m.block_dims, m.array_shape
    if (len(dims) < 2 or m.memory_space not in _VMEM_SPACES or key_operands.is_key(m.dtype)
            or any(isinstance(d, pf.BoundedSlice) for d in dims)):
        return None
    bits = _bits(m.dtype)
    if bits >= 16:
        return None
    tile = SUBLANES * (32 // bits)
    rows, full = dims[-2].block_size, shape[-2]
    if full % tile or not rows % tile or rows == full:
        return None
    return (f"a {np.dtype(m.dtype).name} block in an array whose dim {len(dims) - 2} "
            f"({full}) is a multiple of {tile} = {SUBLANES} * (32 // {bits}) must have a "
            f"multiple of {tile} rows there, or all {full}; it has {rows}. libtpu 0.0.42.1 "
            "(JAX 0.10's) tiles such an array's rows by that and refuses the block; "
            "newer libtpu compiles it")


def block_shape_problem(m: BlockMapping) -> str | None:
    """Why JAX's TPU lowering refuses the VMEM block shape of ``m``
    (``_check_block_mappings`` in jax/_src/pallas/mosaic/lowering.py), or None.

    Rank >= 2: the last two block dims divisible by 8 and 128, or equal to the
    array's (a squeezed dim counts as 1). This does not depend on the dtype:
    Mosaic tiles a (8, 128) bfloat16 or int8 block with a smaller tiling (a
    v5e compiles both). Rank 1: the block equals the array, or is a multiple of
    8 * 128, or a power of 2 of at least 128 * (32 // bits) (256 for 16-bit
    types, 512 for 8-bit ones)."""
    if m.memory_space not in _VMEM_SPACES or not m.block_dims:
        return None
    if key_operands.is_key(m.dtype) or any(isinstance(d, pf.BoundedSlice) for d in m.block_dims):
        return None     # key operands and BoundedSlice dims: refused or checked elsewhere
    dims, shape = m.block_dims, m.array_shape
    if len(dims) >= 2:
        bad = [(axis, unit) for axis, unit in ((-2, SUBLANES), (-1, LANES))
               if dims[axis].block_size % unit and dims[axis].block_size != shape[axis]]
        if not bad:
            return None
        which = ", ".join(f"dim {len(dims) + a} is {dims[a].block_size} of {shape[a]}"
                          for a, _ in bad)
        return (f"the last two dimensions of a block must be divisible by {SUBLANES} and "
                f"{LANES} respectively, or equal to the array's ({which}). Pick multiples "
                f"of ({SUBLANES}, {LANES}), the full dims, a leading squeezed dim (None) "
                "instead of a 1-sized trailing one, or memory_space=pallas_tpu.ANY and "
                "copy by hand")
    size, full = dims[0].block_size, shape[0]
    bits = _bits(m.dtype)
    min_tiling = LANES * max(1, 32 // bits)
    chunk = RANK1_CHUNK
    if size == full or size % chunk == 0 or (size >= min_tiling and size & (size - 1) == 0):
        return None
    return (f"a rank-1 block must equal the array's dim ({full}), be a multiple of "
            f"{chunk} ({SUBLANES} * {LANES}), or be a power of 2 of at least {min_tiling} "
            f"(128 * (32 // {bits}) for {np.dtype(m.dtype).name}); it is {size}")


def check_block_shape(kernel: KernelIR, m: BlockMapping, interpreting: bool = False) -> None:
    """Refuses a block shape that JAX's TPU lowering (so the chip) refuses,
    naming the operand, the rule and the kernel's line; in TPU interpret mode
    also one that an older libtpu of the JAX window refuses (``narrow_rows_problem``)."""
    problem = block_shape_problem(m)
    rule = "Mosaic's tiling rule, as JAX's TPU lowering checks it"
    if problem is None and interpreting:
        problem, rule = narrow_rows_problem(m), "Mosaic's tiling of narrow types"
    if problem is None:
        return
    raise BackendCapabilityError(
        f"Backend 'tpu' (Mosaic) cannot take the block shape {_shown(m.block_dims)} of "
        f"{m.origin} (array {np.dtype(m.dtype).name}{list(m.array_shape)}) in kernel "
        f"'{kernel.name}' ({kernel.source}): in VMEM {problem} ({rule})."
        + (f" {CHIP_CHECKS_OFF}" if interpreting else ""))


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
    # left in HBM (ANY), the kernel copies the keys to SMEM itself (core_map kernels)
    in_hbm = m.memory_space in (MemorySpace.ANY, MemorySpace.HBM, pf.MemorySpace.ANY)
    if key_operands.is_pallas_key(m.dtype) and not (in_smem or in_hbm):
        raise BackendCapabilityError(
            f"Backend 'tpu' (Mosaic) reads the Pallas keys of {m.origin} in kernel "
            f"'{kernel.name}' ({kernel.source}) from SMEM only: give it "
            "pl.BlockSpec(memory_space=pallas_tpu.SMEM), or leave it in HBM "
            "(memory_space=pallas_tpu.ANY) and copy it to SMEM in the kernel.")
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
    """What the Mosaic compiler refuses, when compiling for a TPU."""
    for m in kernel.mappings:
        check_block_shape(kernel, m)
        check_element_blocks(kernel, m)
        check_key_operands(kernel, m)


def check_for_chip(kernel: KernelIR) -> None:
    """In TPU interpret mode (which, like JAX's, runs blocks of any shape):
    the block shapes the chip would refuse, so that they fail on CPU first.
    Off with ``InterpretParams(chip_checks=False)`` or ``PALLAS_TPU_CHIP_CHECKS=0``."""
    for m in kernel.mappings:
        check_block_shape(kernel, m, interpreting=True)


def chip_checks_enabled(interpret) -> bool:
    """Whether TPU interpret mode with ``interpret`` checks the chip's rules."""
    import os
    if os.environ.get("PALLAS_TPU_CHIP_CHECKS", "1").strip().lower() in CHIP_CHECKS_OFF_VALUES:
        return False
    return getattr(interpret, "chip_checks", True) is not False


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
