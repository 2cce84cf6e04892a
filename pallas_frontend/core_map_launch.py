"""The deprecated `core_map`: a zero-argument body over the Refs it closes
over, run on every point of a mesh, launched as one `pallas_call` whose
operands are those Refs' values and whose outputs alias the Refs it writes."""

from __future__ import annotations

from typing import Any

import jax

from pallas_frontend import axis_binding, captured_scalars
from pallas_frontend import _jax_compat as jc
from pallas_frontend.grid_analysis import refs_written
from pallas_frontend.launch import (_mesh_compiler_params, _mesh_grid, _mesh_specs,
                                    _scalar_space, pallas_call)
from pallas_frontend.specs import MemoryRef


def core_map(mesh: Any, *, compiler_params: Any = None, interpret: Any = False,
             debug: bool = False, cost_estimate=None, name: str | None = None, metadata=None,
             scratch_shapes: Any = ()):
    """Deprecated: use ``pl.kernel``. Runs a zero-argument stateful function on
    every point of ``mesh``; it communicates through closed-over Refs
    (``jax.new_ref``, updated in place) and may read closed-over scalars."""
    # A backend's mesh that maps *inside* a kernel body (e.g. Mosaic GPU's warps)
    # records the map itself.
    if callable(getattr(mesh, "core_map", None)):
        return mesh.core_map(compiler_params=compiler_params, interpret=interpret,
                             debug=debug, cost_estimate=cost_estimate, name=name,
                             metadata=metadata, scratch_shapes=scratch_shapes)
    grid = _mesh_grid(mesh, "core_map")
    compiler_params = _mesh_compiler_params(mesh, compiler_params)

    def decorator(f):
        with axis_binding.bound_kernel_axes(grid):   # the body may ask lax.axis_index(name)
            jaxpr, _ = jc.trace_kernel_jaxpr(lambda: (f(), [])[1], [],
                                             traced_for="pallas core_map")
        # scalars (a traced grid size) go in the mesh's scalar space, as JAX's (hoist)
        consts = list(jaxpr.consts)
        is_ref = captured_scalars.core_map_refs(consts, f)
        refs = [c for c, r in zip(consts, is_ref) if r]
        if not refs:
            _refuse_empty_core_map(f)
        values = [r[...] for r in refs]
        # each in its Ref's own space where the mesh reads one off the Ref's type
        specs = _mesh_specs(mesh, values, [jax.typeof(r) for r in refs])
        if isinstance(specs, list):
            values = [_core_map_operand(mesh, v, s.memory_space, interpret)
                      for v, s in zip(values, specs)]
        n = len(refs)
        # only written Refs come back, as JAX's: an output aliasing a read-only Ref
        # let XLA copy it (into VMEM around fusible_matmul's kernel: with that program
        # a v5e gave wrong values); a body that visibly writes none (a print) passes all
        written = _written(jaxpr, is_ref)
        out_of = [k for k in range(n) if written[k]] or list(range(n))

        def body(*all_refs):
            # inputs, then outputs: a written Ref is used through its aliased output
            by_ref = list(all_refs[:n])
            for j, k in enumerate(out_of):
                by_ref[k] = all_refs[n + j]
            ref_args = iter(by_ref)
            jc.eval_jaxpr(jc.with_consts(jaxpr, ()),
                          *[next(ref_args) if r else c for c, r in zip(consts, is_ref)])

        body.__wrapped__ = f       # source_of() reports the user's body's file:line
        placed = specs if isinstance(specs, list) else [None] * n
        with captured_scalars.accepting(_scalar_space(mesh)):
            outs = pallas_call(
                body, [_core_map_out_shape(mesh, values[k], placed[k]) for k in out_of],
                grid=grid, scratch_shapes=scratch_shapes, in_specs=specs,
                out_specs=[specs[k] for k in out_of] if isinstance(specs, list) else specs,
                input_output_aliases={k: j for j, k in enumerate(out_of)},
                compiler_params=compiler_params, interpret=interpret, debug=debug,
                cost_estimate=cost_estimate, name=name or getattr(f, "__name__", None),
                metadata=metadata)(*values)
        for k, v in zip(out_of, outs):
            refs[k][...] = v
    return decorator


def _written(jaxpr, is_ref) -> list[bool]:
    """For each Ref a core_map body captures (``is_ref`` over its jaxpr's
    constants), whether the body may write it: its write effects name it, or
    it is used with no effect naming it (a primitive that declares none)."""
    plain = getattr(jaxpr, "jaxpr", jaxpr)
    refs = [v for v, r in zip(plain.constvars, is_ref) if r]
    written = refs_written(jaxpr, refs, 0)
    named = {id(getattr(e, "input", None)) for e in jaxpr.effects}
    used = {id(v) for e in plain.eqns for v in e.invars}
    return [k in written or (id(v) not in named and id(v) in used) for k, v in enumerate(refs)]


def _core_map_operand(mesh: Any, value, space, interpret):
    """A Ref's value as core_map passes it: a mesh may place one whose space
    is not its default there (``core_map_operand``), as JAX's core_map does."""
    place = getattr(mesh, "core_map_operand", None)
    if place is None or space is getattr(mesh, "default_memory_space", None):
        return value
    return place(value, space, interpret=interpret)


def _core_map_out_shape(mesh: Any, value, spec):
    """The output a Ref's new value comes back as: placed in the Ref's own
    space where that is not the mesh's default (so the body's output Ref is
    the Ref's type, as the aliased input is: one buffer)."""
    from pallas_frontend.specs import MemorySpace
    space = getattr(spec, "memory_space", None)
    if space is None or space is MemorySpace.ANY or \
            space is getattr(mesh, "default_memory_space", None):
        return jax.ShapeDtypeStruct(value.shape, value.dtype)
    return MemoryRef(tuple(value.shape), value.dtype, space)


def _refuse_empty_core_map(f) -> None:
    """A core_map body that closes over no Ref can have no effect (it returns
    nothing): JAX fails to lower it; ours says so while tracing."""
    from pallas_frontend.index_maps import source_of
    raise ValueError(
        f"core_map body {getattr(f, '__name__', 'body')} at {source_of(f)} closes over no Ref, "
        "so nothing it does reaches the program (JAX: \"Attempted to lower core_map without discharging.\"). A "
        "core_map body communicates only through the Refs it closes over (jax.new_ref, "
        "run_state's Refs): use them, or call pl.kernel, which takes and returns arrays.")
