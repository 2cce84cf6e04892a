"""The SparseCore CPU model: runs a SparseCore kernel on the host.

Selected by the backend for a kernel whose ``CompilerParams.kernel_type`` is
a SparseCore one, under ``interpret=pltpu.InterpretParams()``. The kernel
jaxpr is evaluated equation by equation on NumPy buffers, inside one host
callback, with the machine laid out as on the chip:

- every program of the mesh (core x subcore) runs in its own thread, all at
  once, so subcores interleave as on the chip and ``subcore_barrier`` is a
  real barrier of the subcores of one SparseCore (a program that never
  reaches it makes the others fail after ``sc_eval.BARRIER_TIMEOUT_S``, naming it);
- HBM operands are shared by every program; VMEM_SHARED scratch is one
  buffer per SparseCore; VMEM and SMEM scratch (and semaphores) one per
  program, so ``fetch_and_add(..., subcore_id=s)`` reaches subcore ``s``'s SMEM;
- an atomic (``addupdate*``, ``fetch_and_add``) holds one lock;
- reads and writes check their bounds, and an out-of-range index (a slice,
  a gather lane, a scatter lane) is an error naming the op and the index;
- memory nobody wrote reads as NaN (floats) or the lowest integer;
- a DMA lands when it starts (``wait`` has nothing left to wait for); an
  indirect one (``src.at[idx_ref]``, ``dst.at[idx]``, ``plsc.Indices``) moves
  row ``k`` to/from row ``idx[k]``, skipping rows whose index is ignored;
- before anything runs, ``sc_check`` refuses what JAX's SparseCore lowering
  refuses (loads from HBM, scalar loads outside SMEM, ...), in JAX's words;
- scalar control code (a pipeline's schedule) is computed by NumPy where its
  result is XLA's bit for bit (``sc_host_ops``), the rest bound by JAX.

The op semantics are documented in ``sc_primitives`` and ``sc_vector_ops``.
"""

from __future__ import annotations

import threading

import jax
import numpy as np

from pallas_tpu import sc_mesh
from pallas_tpu.memory import MemorySpace
from pallas_tpu.sc_eval import Evaluator
from pallas_tpu.sc_views import Buf, poison



def is_sparsecore_kernel(kernel) -> bool:
    """Whether ``kernel`` was launched over a SparseCore mesh."""
    return sc_mesh.sparsecore_kind(kernel.compiler_params) is not None


class Program:
    """What one program (one subcore of one SparseCore) sees."""

    def __init__(self, machine, core: int, subcore: int):
        self.machine, self.core, self.subcore = machine, core, subcore
        self.scratch: list[Buf] = []


class Machine:
    """The SparseCores of one kernel run: programs, barriers, shared buffers."""

    def __init__(self, kernel, vector: bool):
        grid = tuple(kernel.grid)
        self.num_cores = grid[0]
        self.num_subcores = grid[1] if vector else 1
        self.barriers = [threading.Barrier(self.num_subcores)
                         for _ in range(self.num_cores)]
        self.programs = {}

    def program(self, core, subcore) -> Program:
        return self.programs[(core, subcore)]


def _poison_for(ref_aval) -> np.ndarray:
    """A scratch buffer for ``ref_aval``, of its stored type: a semaphore
    Ref's ``dtype`` is JAX's semaphore dtype, its ``inner_aval`` int32."""
    inner = getattr(ref_aval, "inner_aval", ref_aval)
    return poison(inner.shape, inner.dtype)


def run_on_host(kernel, *arrays):
    """Runs ``kernel`` on NumPy ``arrays`` (its operands); returns its outputs."""
    if kernel.dynamic_grid_axes if hasattr(kernel, "dynamic_grid_axes") else False:
        raise NotImplementedError("SparseCore CPU model: a grid sized at run time is not modelled.")
    vector = kernel.compiler_params.kernel_type.name == "SC_VECTOR_SUBCORE"
    machine = Machine(kernel, vector)
    ins = [Buf(np.array(a)) for a in arrays]
    aliased = {o: i for i, o in kernel.input_output_aliases}
    outs = []
    for k, m in enumerate(kernel.out_mappings):
        data = np.array(arrays[aliased[k]]) if k in aliased else poison(m.array_shape, m.dtype)
        outs.append(Buf(data))
    shared = []            # per core: VMEM_SHARED scratch by scratch index
    for _ in range(machine.num_cores):
        shared.append({j: Buf(_poison_for(s), MemorySpace.VMEM_SHARED, j)
                       for j, s in enumerate(kernel.scratch_avals) if _space(s) is MemorySpace.VMEM_SHARED})
    for c in range(machine.num_cores):
        for s in range(machine.num_subcores):
            prog = machine.programs[(c, s)] = Program(machine, c, s)
            prog.scratch = [shared[c][j] if j in shared[c] else
                            Buf(_poison_for(a), _space(a), j)
                            for j, a in enumerate(kernel.scratch_avals)]
    errors = []

    def run(prog):
        try:
            ids = [np.int32(prog.core), np.int32(prog.subcore)][:len(kernel.grid)]
            Evaluator(prog).eval_jaxpr(kernel.jaxpr, [*ids, *ins, *outs, *prog.scratch])
        except BaseException as e:     # noqa: BLE001 -- reported after every thread ends
            errors.append((prog, e))
            for b in machine.barriers:
                b.abort()
    threads = [threading.Thread(target=run, args=(p,), daemon=True)
               for p in machine.programs.values()]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    real = [(p, e) for p, e in errors if not isinstance(e, threading.BrokenBarrierError)]
    if real or errors:
        prog, err = (real or errors)[0]
        raise RuntimeError(f"SparseCore CPU model, kernel {kernel.name} "
                           f"(core {prog.core}, subcore {prog.subcore}): "
                           f"{type(err).__name__}: {err}") from err
    return [b.data for b in outs]


def _space(aval):
    return getattr(aval, "memory_space", None)


def lower(kernel, ctx, *args):
    """The backend's lowering of a SparseCore kernel run in the CPU model."""
    from pallas_tpu import sc_check
    sc_check.check(kernel)       # what JAX's SparseCore lowering refuses, refused here
    shapes = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in kernel.out_avals]

    def host(*arrays):
        return run_on_host(kernel, *[np.asarray(a) for a in arrays])

    def fun(*xs):
        return jax.pure_callback(host, shapes, *xs)
    return ctx.lower_fun(fun, *args)
