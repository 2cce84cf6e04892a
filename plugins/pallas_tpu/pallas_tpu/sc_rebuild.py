"""A SparseCore kernel (``pl.kernel`` over a ``VectorSubcoreMesh`` or
``ScalarSubcoreMesh``) rebuilt as JAX's, for JAX's SparseCore lowering.

The frontend hands the backend a ``pallas_call`` whose named grid is the mesh
and whose ``CompilerParams.kernel_type`` says which subcores run it
(``sc_mesh``). Here it becomes ``jax.experimental.pallas.kernel`` over JAX's
mesh of the same axes and sizes, with the same operands (in HBM), outputs,
scratch and params; the body replays the kernel jaxpr (``evaluate``), the
program ids being ``lax.axis_index`` of the mesh axes. Ours' SparseCore
primitives (``sc_primitives``, ``sc_vector_ops``) are replayed as the
``jax.experimental.pallas.tpu_sc`` call of the same meaning; the result is
the kernel JAX would have built, so Mosaic gets the same module.

JAX's mesh reads the chip (``get_sparse_core_info``) from the context: a TPU
host's device, or the abstract device of the mesh a device-less compile runs
under (``aot.compile_for_tpu(..., topology="v6e:2x2")``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import types

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from pallas_frontend.backend_api import KernelIR

from pallas_tpu import (_jax_private, evaluate, layout_ops, primitives, rebuild, sc_mesh,
                        sc_primitives, sc_vector_ops, view_parts)
from pallas_tpu.memory import SemaphoreKind
from pallas_tpu.spaces import block_memory_space, scratch_type_of_aval

def kernel_kind(kernel: KernelIR) -> str | None:
    """``"SC_VECTOR_SUBCORE"`` / ``"SC_SCALAR_SUBCORE"`` for a SparseCore kernel, else None."""
    return sc_mesh.sparsecore_kind(kernel.compiler_params)


def is_sparsecore(kernel: KernelIR) -> bool:
    return kernel_kind(kernel) is not None


def jax_mesh(kernel: KernelIR):
    """JAX's mesh with the kernel's axes (names and sizes)."""
    from jax.experimental.pallas import tpu_sc as plsc
    names, sizes = kernel.grid_names, kernel.grid
    if kernel_kind(kernel) == "SC_VECTOR_SUBCORE":
        return plsc.VectorSubcoreMesh(core_axis_name=names[0], subcore_axis_name=names[1],
                                      num_cores=sizes[0], num_subcores=sizes[1])
    return plsc.ScalarSubcoreMesh(axis_name=names[0], num_cores=sizes[0])


def jax_params(kernel: KernelIR):
    """JAX's CompilerParams: ours' fields; the axis semantics and kernel type
    are the mesh's (JAX's ``pl.kernel`` sets them from its mesh)."""
    params = kernel.compiler_params.to_jax(0)
    return dataclasses.replace(params, dimension_semantics=None)


def _refuse_unsupported(kernel: KernelIR) -> None:
    where = f"SparseCore kernel '{kernel.name}'"
    if kernel.num_scalar_prefetch or kernel.dynamic_grid_axes:
        raise NotImplementedError(f"{where}: scalar prefetch and dynamic grids do not apply to "
                                  "a mesh kernel; pass the values as operands.")
    if kernel.input_output_aliases:
        raise NotImplementedError(
            f"{where}: Ref arguments (aliased operands) are not rebuilt for JAX's SparseCore "
            "lowering yet; pass arrays and return the results as outputs.")
    if kernel.num_batch_axes:
        raise NotImplementedError(f"{where}: vmap of a SparseCore kernel is not supported; "
                                  "loop over the batch outside the kernel.")


def build_sparsecore_kernel(kernel: KernelIR, out_avals):
    """JAX's ``pl.kernel`` equivalent to ``kernel``; call it on the flat operands."""
    from jax.experimental import pallas as pl
    _refuse_unsupported(kernel)
    jaxpr, names = kernel.jaxpr, kernel.grid_names
    used = _used_vars(jaxpr.jaxpr)

    def body(*refs):
        # an id the body never reads is not asked for: JAX's module has no trace of it
        ids = [lax.axis_index(n) if v in used else 0
               for n, v in zip(names, jaxpr.jaxpr.invars)]
        evaluate.eval_jaxpr(jaxpr.jaxpr, jaxpr.consts, *ids, *refs)
    body.__name__ = kernel.name

    call = pl.kernel(
        body, out_type=tuple(rebuild._out_shapes(kernel, out_avals)), mesh=jax_mesh(kernel),
        scratch_types=[scratch_type_of_aval(a) for a in kernel.scratch_avals],
        compiler_params=jax_params(kernel), cost_estimate=rebuild._cost_estimate(kernel),
        name=kernel.name, metadata=dict(kernel.metadata) or None)

    def run(*args):
        with _scopes_closed_where_freed():
            return list(call(*args))
    return run


@contextlib.contextmanager
def _scopes_closed_where_freed():
    """``evaluate`` opens a ``pl.run_scoped`` at a scoped allocation and keeps
    it open to the end of the enclosing body. Here each scope closes where its
    buffers are freed (a ``sync_copy``'s semaphore right after the copy), as
    JAX's own kernel scopes them: Mosaic's regions then nest as in JAX's
    module. Values made inside and read after leave through the scope. An
    allocation never freed is the body's own ``jax.empty_ref``, made in place
    as JAX makes it. (Also in force while the kernel is rebuilt: ``_bitcast``.)"""
    original = evaluate._open_scope

    def open_scope(jaxpr, k, env):
        eqns = jaxpr.eqns
        if not _is_freed(eqns, k):
            ref = _own_allocation(eqns[k])
            if ref is None:                      # no TPU space of its own: ours' scope
                return original(jaxpr, k, env)
            env[eqns[k].outvars[0]] = ref
            return evaluate._eval_from(jaxpr, k + 1, env)
        end = k
        while end < len(eqns) and eqns[end].primitive.name == "empty_ref" \
                and _is_freed(eqns, end):
            end += 1
        allocated = {e.outvars[0] for e in eqns[k:end]}
        last = max(i for i in range(end, len(eqns)) if eqns[i].primitive.name == "free_ref"
                   and eqns[i].invars[0] in allocated)
        resume = last + 1
        defined = {v for e in eqns[k:last] for v in e.outvars}
        later = [v for e in eqns[resume:] for v in e.invars] + list(jaxpr.outvars)
        leaving = list(dict.fromkeys(v for v in later if not _is_literal(v) and v in defined))
        inner = types.SimpleNamespace(
            eqns=eqns[:end] + _hoist_view_indices(eqns[end:last], env), outvars=leaving)
        env.update(zip(leaving, original(inner, k, env)))
        return evaluate._eval_from(jaxpr, resume, env)

    bitcast_rule = evaluate._RULES[layout_ops.bitcast_p]
    evaluate._open_scope = open_scope
    evaluate._RULES[layout_ops.bitcast_p] = _bitcast
    try:
        yield
    finally:
        evaluate._open_scope = original
        evaluate._RULES[layout_ops.bitcast_p] = bitcast_rule


def _is_freed(eqns, k: int) -> bool:
    """Whether the allocation ``eqns[k]`` is a ``pl.run_scoped`` buffer: the
    frontend ends each scope with a ``free_ref``; a ``jax.empty_ref`` of the
    body's own has none (it lives to the end of the body)."""
    ref = eqns[k].outvars[0]
    return any(e.primitive.name == "free_ref" and e.invars[0] is ref for e in eqns[k + 1:])


def _own_allocation(eqn):
    """A body's own ``jax.empty_ref`` as JAX's kernel makes it (Mosaic's
    ``alloca`` where it stands, no region around the rest of the body); None
    for a Ref with no memory space of JAX's VMEM/SMEM kind."""
    ty, space = eqn.params["ty"], eqn.params.get("memory_space")
    if space is None or isinstance(space, SemaphoreKind):
        return None
    target = block_memory_space(space)
    if target is None or getattr(target, "name", None) == "SEMAPHORE":
        return None
    return jax.empty_ref(jax.ShapeDtypeStruct(ty.shape, ty.dtype), memory_space=target)


def _hoist_view_indices(eqns, env) -> list:
    """A ``sync_copy``'s DMAs (a scope holding only DMA starts and waits) with
    the constant integer indices of their views (``x.at[0]``) read from values
    made here, before the scope opens: JAX's view holds such an index as a
    value of the enclosing body, so its module makes the constant once, outside
    the DMA's region, where ours' literal would be made at each use inside."""
    if not eqns or any(e.primitive not in _DMAS for e in eqns):
        return eqns
    made = {}

    def hoisted(atom):
        key = (repr(atom.val), str(atom.aval))
        if key not in made:
            var = _jax_private.fresh_var(atom.aval)
            env[var] = jnp.asarray(atom.val, atom.aval.dtype)
            made[key] = var
        return made[key]
    out = []
    for e in eqns:
        # the operands' positions, unflattened as the DMA's parts are
        parts = jax.tree.unflatten(e.params["tree"], list(range(len(e.invars))))
        at = {i for i in _indexer_positions(parts) if _is_literal(e.invars[i])}
        out.append(e.replace(invars=[hoisted(v) if i in at else v
                                     for i, v in enumerate(e.invars)]) if at else e)
    return out


_DMAS = (primitives.dma_start_p, primitives.dma_wait_p)


def _indexer_positions(parts):
    """The operand positions that are whole indices of the views' indexers,
    those of a view used as an index (``x.at[idx.at[0]]``) included."""
    for t in jax.tree.leaves(parts, is_leaf=_is_ndindexer):
        if _is_ndindexer(t):
            for i in t.indices:
                if isinstance(i, int):
                    yield i
                elif isinstance(i, view_parts.IndexView):
                    yield from _indexer_positions(i.transforms)


def _is_ndindexer(x) -> bool:
    return isinstance(x, _jax_private.ndindexer_type())


def _bitcast(eqn, invals):
    """Before JAX 0.12 ``pltpu.bitcast`` scales the second minor dim only; a
    SparseCore kernel's minormost bitcast is then JAX's ``plsc.bitcast``."""
    x, dim = invals[0], eqn.params["dim"]
    if _jax_private.bitcast_takes_dim() or dim != x.ndim - 1:
        return _jax_private.jax_bitcast(x, eqn.params["dtype"], dim)
    from jax.experimental.pallas import tpu_sc as plsc
    return plsc.bitcast(x, eqn.params["dtype"])


def _used_vars(jaxpr) -> set:
    used = {v for e in jaxpr.eqns for v in e.invars if not _is_literal(v)}
    return used | {v for v in jaxpr.outvars if not _is_literal(v)}


def _is_literal(v) -> bool:
    return not hasattr(v, "aval") or type(v).__name__ == "Literal"


# --- ours' SparseCore primitives, replayed as JAX's -------------------------------------

def _parts(eqn, invals):
    return evaluate._unflatten(eqn, invals)


def _jax_indexer(indexer):
    """An ``ref.at[...]`` whose index is ours' ``plsc.Indices`` (a gather or
    scatter DMA's rows): the same with JAX's."""
    if not any(isinstance(i, sc_mesh.Indices) for i in indexer.indices):
        return indexer
    from jax.experimental.pallas import tpu_sc as plsc
    indices = tuple(plsc.Indices(i.values, i.ignored_value) if isinstance(i, sc_mesh.Indices)
                    else i for i in indexer.indices)
    return dataclasses.replace(indexer, indices=indices)


evaluate.TRANSFORM_RULES[sc_primitives.SubcoreSlice] = \
    lambda t: _jax_private.shared_slice_transform()
evaluate.TRANSFORM_RULES[_jax_private.ndindexer_type()] = _jax_indexer


def _rule(prim):
    return evaluate._rule(evaluate._RULES, prim)


@_rule(sc_primitives.load_expanded_p)
def _load_expanded(eqn, invals):
    from jax.experimental.pallas import tpu_sc as plsc
    ref, mask = _parts(eqn, invals)
    return plsc.load_expanded(ref, mask=mask)


@_rule(sc_primitives.store_p)
def _store(eqn, invals):
    from jax.experimental.pallas import tpu_sc as plsc
    ref, x, mask = _parts(eqn, invals)
    add, compress = eqn.params["add"], eqn.params["compress"]
    if add and compress:
        plsc.addupdate_compressed(ref, x, mask=mask)
    elif add:
        plsc.addupdate(ref, x)
    else:
        plsc.store_compressed(ref, x, mask=mask)
    return []


@_rule(sc_primitives.gather_p)
def _gather(eqn, invals):
    from jax.experimental.pallas import tpu_sc as plsc
    ref, indices, mask = _parts(eqn, invals)
    return plsc.load_gather(ref, list(indices), mask=mask)


@_rule(sc_primitives.scatter_p)
def _scatter(eqn, invals):
    from jax.experimental.pallas import tpu_sc as plsc
    ref, indices, x, mask = _parts(eqn, invals)
    op = plsc.addupdate_scatter if eqn.params["add"] else plsc.store_scatter
    op(ref, list(indices), x, mask=mask)
    return []


@_rule(sc_primitives.fetch_and_add_p)
def _fetch_and_add(eqn, invals):
    from jax.experimental.pallas import tpu_sc as plsc
    ref, value, subcore_id = _parts(eqn, invals)
    return plsc.fetch_and_add(ref, value, subcore_id=subcore_id)


@_rule(sc_primitives.barrier_p)
def _barrier(eqn, invals):
    from jax.experimental.pallas import tpu_sc as plsc
    plsc.subcore_barrier()
    return []


@_rule(sc_vector_ops.cumop_p)
def _cumop(eqn, invals):
    from jax.experimental.pallas import tpu_sc as plsc
    x, mask = invals
    op = {"sum": plsc.cumsum, "max": plsc.cummax}[eqn.params["kind"]]
    return op(x, mask=mask)


@_rule(sc_vector_ops.scan_count_p)
def _scan_count(eqn, invals):
    from jax.experimental.pallas import tpu_sc as plsc
    return list(plsc.scan_count(*invals))


@_rule(sc_vector_ops.sort_p)
def _sort(eqn, invals):
    from jax.experimental.pallas import tpu_sc as plsc
    keys, values, *mask = invals
    return list(plsc.sort_key_val(keys, values, mask=mask[0] if mask else None,
                                  descending=eqn.params["descending"]))


@_rule(sc_vector_ops.mask_reduce_p)
def _mask_reduce(eqn, invals):
    from jax.experimental.pallas import tpu_sc as plsc
    op = {"population_count": plsc.all_reduce_population_count,
          "ffs": plsc.all_reduce_ffs}[eqn.params["kind"]]
    return op(invals[0], reduce=eqn.params["reduce"])


def _jax_format(format):
    from jax.experimental.pallas import tpu_sc as plsc
    return plsc.PackFormat(format.value)


@_rule(sc_vector_ops.pack_p)
def _pack(eqn, invals):
    from jax.experimental.pallas import tpu_sc as plsc
    p = eqn.params
    return plsc.pack(*invals, format=_jax_format(p["format"]),
                     preferred_element_type=p["preferred_element_type"])


@_rule(sc_vector_ops.unpack_p)
def _unpack(eqn, invals):
    from jax.experimental.pallas import tpu_sc as plsc
    p = eqn.params
    return list(plsc.unpack(invals[0], format=_jax_format(p["format"]),
                            preferred_element_type=p["preferred_element_type"]))


@_rule(sc_vector_ops.parallel_loop_p)
def _parallel_loop(eqn, invals):
    from jax.experimental.pallas import tpu_sc as plsc
    p = eqn.params
    lower, upper, step = invals[:3]
    consts, carries = invals[3:3 + p["num_consts"]], invals[3 + p["num_consts"]:]
    # a literal (a NumPy value) closed over by the body would be made inside it;
    # as a JAX array it is an operand of the loop, made before it, as in JAX's
    consts = [jnp.asarray(x) if isinstance(x, (np.ndarray, np.generic)) else x for x in consts]
    loop_body = p["body"]
    jaxpr = getattr(loop_body, "jaxpr", loop_body)
    body_consts = getattr(loop_body, "consts", ())

    def step_fn(i, *carry):
        outs = evaluate.eval_jaxpr(jaxpr, body_consts, *consts, i, *(carry[0] if carry else ()))
        return tuple(outs) if carries else None

    loop = plsc.parallel_loop(lower, upper, step, unroll=p["unroll"],
                              carry=tuple(carries) if carries else None)
    out = loop(step_fn)
    return list(out) if carries else []


def lower(kernel: KernelIR, ctx, *args):
    """The backend's lowering of a SparseCore kernel (no interpreter)."""
    return ctx.lower_fun(build_sparsecore_kernel(kernel, ctx.mlir_ctx.avals_out), *args)
