"""TPU interpret mode asks the chip's compiler first: each kernel is also
compiled, without a device, for a TPU chip (v5e unless
``InterpretParams(chip_checks="v6e")`` names another) by libtpu's Mosaic, and a
kernel it refuses (a memory access it cannot prove aligned, a VMEM budget
exceeded, ...) fails on CPU with Mosaic's reason, the operand and the line.

One verdict per kernel and chip: the compile (~0.1 s) runs once per distinct
kernel in a process. Only Mosaic's own refusals count; any other failure of
the device-less compile (a kernel for several devices, a feature this path
lacks) leaves the kernel to run, so the check raises no false alarm of its own.
"""

from __future__ import annotations

import collections
import hashlib
import importlib.util
import re
import threading

import numpy as np

from pallas_frontend.backend_api import (BackendCapabilityError, KernelIR,
                                         required_capabilities, source_line)
from pallas_tpu.memory import MemorySpace, SemaphoreKind
from pallas_tpu.params import topology_of

DEFAULT_CHIP = "v5e"
_MIB = 1 << 20
_CACHE_SIZE = 4096
# A kernel that talks to other devices cannot compile as a one-chip program.
_MULTI_DEVICE_TAGS = ("remote_dma", "multi_device", "collective_run_scoped")

_verdicts: collections.OrderedDict[str, str | None] = collections.OrderedDict()
_lock = threading.Lock()


def simulated_cores(kernel: KernelIR, interpret) -> int:
    """The TensorCores the kernel is written for: its "core_parallel" grid
    axes (a TensorCoreMesh), or the cores interpret mode simulates."""
    cores = 1
    sem = getattr(kernel.compiler_params, "dimension_semantics", None) or ()
    user_grid = kernel.grid[kernel.num_batch_axes:]
    for d, size in zip(sem, user_grid):
        if str(getattr(d, "value", d)) == "core_parallel" and isinstance(size, int):
            cores *= size
    return max(cores, getattr(interpret, "num_cores_or_threads", 1) or 1)


def unchecked_reason(kernel: KernelIR, avals_in, interpret=None) -> str | None:
    """Why the device-less compile does not run for ``kernel``, or None."""
    if importlib.util.find_spec("libtpu") is None:
        return "libtpu is not installed"
    if (cores := simulated_cores(kernel, interpret)) > 1 and not isinstance(
            getattr(interpret, "chip_checks", True), str):
        return (f"it is written for {cores} TensorCores and a v5e has one: name the chip "
                "it is for (InterpretParams(chip_checks='v5p')) to check it")
    shapes = [a.shape for a in avals_in if hasattr(a, "shape")]
    shapes += [m.block_shape for m in kernel.mappings]
    if any(not isinstance(d, (int, np.integer)) for s in shapes for d in s):
        return "symbolic (jax.export) shapes are sized only at run time"
    aliased = {o for _, o in kernel.input_output_aliases}
    for o, mapping in enumerate(kernel.out_mappings):
        placed = getattr(mapping, "array_memory_space", None)
        # libtpu 0.0.42.1 aborts the whole process (SIGABRT, no exception) compiling
        # such a call on its own: XLA cannot copy a semaphore result out ('Unsupported
        # source memory space ... sflag', or 'MemorySpaceIsShared(destination...)
        # sflag' for a DMA semaphore core_map passes), nor an aliased SMEM one (a Ref
        # in SMEM that core_map passes) that is not the call's first output
        if placed is MemorySpace.SEMAPHORE or isinstance(placed, SemaphoreKind) or (
                placed is MemorySpace.SMEM and o in aliased):
            return (f"an output placed in {placed.name} is compiled only inside its "
                    "program")
    needs = required_capabilities(kernel)
    if tag := next((t for t in _MULTI_DEVICE_TAGS if t in needs), None):
        return f"it needs {tag!r}, which a one-chip program has not"
    return _aborting_reduction(kernel, _chip_of(interpret))


def _chip_of(interpret) -> str:
    chip = getattr(interpret, "chip_checks", True)
    return chip if isinstance(chip, str) else DEFAULT_CHIP


# libtpu builds newer than 0.0.42.1 abort the whole process (SIGABRT in the compiler's
# latency table: 'Operation not supported: kVectorMaxIndexReduceBf16') compiling a
# bfloat16 argmax/argmin for these chips; 0.0.42.1, and v4 and v6e, compile it
_BF16_INDEX_REDUCTION_ABORTS = frozenset({"v5e", "v5p"})


def _aborting_reduction(kernel: KernelIR, chip: str) -> str | None:
    if chip.split(":")[0] not in _BF16_INDEX_REDUCTION_ABORTS:    # "v5e" or "v5e:2x2"
        return None
    for eqn in kernel.iter_equations():
        if eqn.primitive.name in ("argmax", "argmin") and any(
                str(getattr(getattr(v, "aval", None), "dtype", "")) == "bfloat16"
                for v in eqn.invars):
            return (f"libtpu's compiler aborts the process on a bfloat16 {eqn.primitive.name} "
                    f"for {chip} ({source_line(eqn)})")
    return None


def check(kernel: KernelIR, ctx, interpret, off_hint: str) -> None:
    """Raises ``BackendCapabilityError`` when Mosaic would refuse ``kernel`` on
    the chip ``interpret`` (our InterpretParams) names, a v5e by default;
    ``ctx``: the interpreted call's LoweringContext (operand types)."""
    from pallas_tpu import semaphore_operands
    chip = _chip_of(interpret)
    # typed as the compiled call has them (semaphores passed between kernels)
    ctx = semaphore_operands.typed_lowering_context(kernel, ctx)
    avals_in, avals_out = ctx.mlir_ctx.avals_in, ctx.mlir_ctx.avals_out
    if unchecked_reason(kernel, avals_in, interpret) is not None:
        return
    key = _fingerprint(kernel, avals_in, chip)
    with _lock:
        known = key in _verdicts
        verdict = _verdicts.get(key)
    if not known:     # two threads may both compile a new kernel: the same verdict
        verdict = _compile_verdict(kernel, avals_in, avals_out, topology_of(chip))
        with _lock:
            _verdicts[key] = verdict
            if len(_verdicts) > _CACHE_SIZE:
                _verdicts.popitem(last=False)
    if verdict is not None:
        raise BackendCapabilityError(
            f"Backend 'tpu' (Mosaic): kernel '{kernel.name}' ({kernel.source}) runs in TPU "
            f"interpret mode but would not compile for a {chip} chip: {verdict} {off_hint}")


def _fingerprint(kernel: KernelIR, avals_in, chip: str) -> str:
    """Everything the compile depends on, as text: the kernel's dump (grid,
    blocks, spaces, compiler params, jaxpr), its index maps and operand types."""
    parts = [chip, kernel.pretty(), repr(kernel.metadata), repr(kernel.cost_estimate)]
    parts += [str(m.index_map) for m in kernel.mappings]
    parts += [str(a) for a in avals_in]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def _compile_verdict(kernel: KernelIR, avals_in, avals_out, topology: str) -> str | None:
    """Mosaic's refusal of ``kernel``, explained, or None (compiled, or failed
    for a reason that is not Mosaic's)."""
    import jax

    from pallas_tpu import aot, rebuild
    specs = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in avals_in]
    try:
        with rebuild.dynamic_shapes_export(kernel):
            # the check's compile is no compile of the user's: JAX's debug output stays off
            build = rebuild.build_pallas_call(kernel.replace(debug=False), avals_out, None)
            aot.compile_for_tpu(lambda *args: build(*args), *specs, topology=topology)
    except Exception as e:    # noqa: BLE001 - sorted below: only Mosaic's refusals count
        return _explain(kernel, str(e))
    return None


_MOSAIC_FAILED = re.compile(r"Mosaic failed to compile TPU kernel[^:]*:\s*(?P<reason>[^\n]*)")
_OP_LINE = re.compile(r'"tpu\.(?P<op>\w+)"\((?P<args>[^)]*)\)')
_VMEM_OOM = re.compile(r"Scoped allocation with size (?P<size>[\d.]+\w) and limit "
                       r"(?P<limit>[\d.]+\w) exceeded scoped vmem limit by (?P<over>[\d.]+\w)")


def _explain(kernel: KernelIR, text: str) -> str | None:
    if m := _VMEM_OOM.search(text):
        return _explain_vmem(kernel, m)
    if m := _MOSAIC_FAILED.search(text):
        return _explain_mosaic(kernel, m.group("reason").strip(), text)
    return None


def _explain_mosaic(kernel: KernelIR, reason: str, text: str) -> str:
    op = _OP_LINE.search(text)
    operand, line = None, None
    if op:
        operand = _operand_of(kernel, op.group("args"))
        line = _access_line(kernel, op.group("op"), operand)
    where = f" at {line}" if line else ""
    what = f" ({op.group('op')} of {operand[0]})" if op and operand else (
        f" ({op.group('op')})" if op else "")
    reason = reason.rstrip(".")
    if not line:      # not a Ref access we can point at
        return f"Mosaic refuses it{what}: {reason}."
    hint = ""
    if "cannot statically prove" in reason:
        hint = (" Make the offset a provable multiple (pl.multiple_of(start, 128) for a "
                "lane offset, 8 for a sublane offset), or copy the window with "
                "pltpu.async_copy from a pallas_tpu.ANY operand.")
    return f"Mosaic refuses the access{what}{where}: {reason}.{hint}"


def _operand_of(kernel: KernelIR, args: str):
    """(origin, mapping) of the kernel Ref a Mosaic op's first ``%argN`` is:
    Mosaic's kernel takes the program ids, then the prefetch, input, output
    and scratch Refs."""
    m = re.match(r"\s*%arg(\d+)", args)
    if not m:
        return None
    k = int(m.group(1)) - len(kernel.grid) - kernel.num_scalar_prefetch
    mappings = list(kernel.in_mappings) + list(kernel.out_mappings)
    if 0 <= k < len(mappings):
        return mappings[k].origin, mappings[k]
    if 0 <= k - len(mappings) < len(kernel.scratch_avals):
        return f"scratch_shapes[{k - len(mappings)}]", None
    return None


_LOADS = {"vector_load": ("get", "load"), "load": ("get", "load"),
          "vector_store": ("swap", "store", "masked_swap"), "store": ("swap", "store")}


def _access_line(kernel: KernelIR, mosaic_op: str, operand) -> str | None:
    """``file:line`` of the kernel's first Ref access of the kind Mosaic
    refused with a run-time index, on that operand when it is known."""
    prims = _LOADS.get(mosaic_op)
    if prims is None:
        return None
    ref_var = None
    if operand is not None and operand[1] is not None:
        pos = kernel.num_index_operands + kernel.num_scalar_prefetch + list(
            kernel.mappings).index(operand[1])
        ref_var = kernel.jaxpr.jaxpr.invars[pos] if hasattr(kernel.jaxpr, "jaxpr") else None
    candidates = []
    for eqn in kernel.iter_equations():
        if eqn.primitive.name not in prims or not any(
                not hasattr(v, "val") for v in eqn.invars[1:]):
            continue
        candidates.append(eqn)
        if ref_var is not None and eqn.invars[0] is ref_var:
            return source_line(eqn) or None
    return (source_line(candidates[0]) or None) if candidates else None


def _explain_vmem(kernel: KernelIR, m) -> str:
    """The scoped-VMEM overflow, with the blocks that take the most of it."""
    from pallas_tpu.check import _VMEM_SPACES
    uses = []
    for b in kernel.mappings:
        if b.memory_space not in _VMEM_SPACES:
            continue
        size = int(np.prod(b.block_shape, dtype=np.int64)) * np.dtype(b.dtype).itemsize
        uses.append((2 * size, f"{b.origin} block {tuple(b.block_shape)} "
                               f"{np.dtype(b.dtype).name}: 2 buffers of {size / _MIB:g} MiB"))
    for i, a in enumerate(kernel.scratch_avals):
        inner = getattr(a, "inner_aval", a)
        if hasattr(inner, "shape"):
            size = int(np.prod(inner.shape, dtype=np.int64)) * np.dtype(inner.dtype).itemsize
            uses.append((size, f"scratch_shapes[{i}] {tuple(inner.shape)}: {size / _MIB:g} MiB"))
    uses.sort(key=lambda u: -u[0])
    biggest = "; ".join(u[1] for u in uses[:3])
    return (f"its VMEM does not fit: Mosaic's scoped allocation of {m.group('size')} "
            f"exceeds the scoped VMEM limit of {m.group('limit')} by {m.group('over')} "
            f"(libtpu: 'exceeded scoped vmem limit'). Pipelined operands are double-buffered"
            + (f"; the largest: {biggest}" if biggest else "")
            + ". Use smaller blocks, or raise the limit with pallas_tpu.CompilerParams("
            "vmem_limit_bytes=...) up to the chip's VMEM.")
