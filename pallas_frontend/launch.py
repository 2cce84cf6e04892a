"""`pallas_call`, `kernel` and the deprecated `core_map`: launching kernels."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

import jax

from pallas_frontend import registry
from pallas_frontend.block_indices import check_block_ranges
from pallas_frontend.call_primitive import pallas_call_p
from pallas_frontend.primitives import enable_debug_checks, take_kernel_failure
from pallas_frontend.specs import CompilerParams, CostEstimate, GridSpec, no_block_spec
from pallas_frontend.tracing import build_kernel_ir, normalize_out_shape, resolve_grid_spec


def pallas_call(
    kernel: Callable[..., None],
    out_shape: Any,
    *,
    grid_spec: GridSpec | None = None,
    grid: Any = (),
    in_specs: Any = no_block_spec,
    out_specs: Any = no_block_spec,
    scratch_shapes: Any = (),
    input_output_aliases: Mapping[int, int] | None = None,
    debug: bool = False,
    interpret: Any = False,
    name: str | None = None,
    compiler_params: Any = None,
    cost_estimate: CostEstimate | None = None,
    metadata: dict[str, str] | None = None,
    backend: str | None = None,
) -> Callable[..., Any]:
    """Returns a function that runs ``kernel`` once per point of ``grid``.

    The kernel receives one Ref per input and output (in the pytree structure
    of the arguments and of ``out_shape``), then the scratch Refs (as keyword
    arguments if ``scratch_shapes`` is a dict). Each Ref holds the block its
    BlockSpec selects at the current grid point. The kernel returns None.

    ``interpret=True`` runs the built-in reference interpreter on any platform;
    ``compiler_params`` of a backend's type choose that backend; ``backend=``
    names one explicitly. On CPU the interpreter is the default.
    """
    gs = resolve_grid_spec(grid_spec, grid, in_specs, out_specs, scratch_shapes)
    if cost_estimate is not None and not isinstance(cost_estimate, CostEstimate):
        raise TypeError(f"cost_estimate must be a pl.CostEstimate, got {type(cost_estimate).__name__}")
    registry.check_params_objects(interpret, compiler_params)
    if compiler_params is not None and not _is_params_dataclass(compiler_params):
        raise TypeError(
            f"compiler_params must be a backend's CompilerParams dataclass (e.g. "
            f"pallas_triton.CompilerParams(...)), got {compiler_params!r}.")
    if metadata is not None and not all(isinstance(k, str) and isinstance(v, str)
                                        for k, v in metadata.items()):
        raise TypeError("metadata must be a dict[str, str].")
    registry.check_interpret_arguments(interpret, compiler_params, backend)
    aliases = dict(input_output_aliases or {})
    normalize_out_shape(out_shape)   # bad shapes are refused here, before any call

    # The debug-checks flag is read while tracing, so it is part of the cache key.
    @functools.partial(jax.jit, inline=True, static_argnums=(0, 1))
    def traced(mode, debug_checks, *args):
        ir, out_tree = build_kernel_ir(
            kernel, args, out_shape, gs, name=name, aliases=aliases,
            compiler_params=compiler_params, cost_estimate=cost_estimate, metadata=metadata,
            debug=debug)
        if gs.num_scalar_prefetch == 0:
            check_block_ranges(ir)
        flat_args = jax.tree.leaves(args)
        outs = pallas_call_p.bind(*flat_args, kernel=ir, interpret=mode, backend=backend)
        return jax.tree.unflatten(out_tree, outs)

    def call(*args):
        # A backend's own interpret mode (e.g. pallas_tpu.force_tpu_interpret_mode)
        # is read at each call and is part of the trace's cache key.
        mode = registry.effective_interpret(interpret, compiler_params)
        take_kernel_failure()
        try:
            return traced(mode, enable_debug_checks.value, *args)
        except jax.errors.JaxRuntimeError as e:
            failure = take_kernel_failure()   # a check that failed in a host callback
            if failure is not None and str(failure) in str(e):
                raise failure from e
            raise

    functools.update_wrapper(call, kernel, assigned=("__name__", "__qualname__", "__doc__"),
                             updated=())
    return call


def _is_params_dataclass(p) -> bool:
    return isinstance(p, CompilerParams) or hasattr(p, "__dataclass_fields__")


def kernel(body: Callable | None = None, out_type: Any = (), *, mesh: Any, scratch_types: Any = (),
           compiler_params: Any = None, interpret: Any = False, cost_estimate=None,
           debug: bool = False, name: str | None = None, metadata=None):
    """Runs ``body(*in_refs, *out_refs, *scratch_refs)`` once per point of ``mesh``.

    Unlike ``pallas_call`` there is no windowing: every Ref is the whole
    array. ``mesh`` is any object with a ``shape`` mapping of axis name to
    size (e.g. a backend's core mesh); its axes become the named grid, so
    ``pl.program_id("x")`` is this program's coordinate. Without ``body`` it
    is a decorator.
    """
    if body is None:
        return functools.partial(kernel, out_type=out_type, mesh=mesh, scratch_types=scratch_types,
                                 compiler_params=compiler_params, interpret=interpret,
                                 cost_estimate=cost_estimate, debug=debug, name=name,
                                 metadata=metadata)
    grid = _mesh_grid(mesh, "pl.kernel")

    def run(*args):
        return pallas_call(
            body, out_type, grid=grid, scratch_shapes=scratch_types,
            compiler_params=compiler_params, interpret=interpret, cost_estimate=cost_estimate,
            debug=debug, name=name or getattr(body, "__name__", None), metadata=metadata,
        )(*args)
    return run



def _mesh_grid(mesh: Any, fn_name: str):
    shape = getattr(mesh, "shape", None)
    if not isinstance(shape, Mapping):
        raise TypeError(f"{fn_name}: mesh must have a `shape` mapping axis names to sizes, "
                        f"got {mesh!r}.")
    return tuple((str(k), int(v)) for k, v in shape.items())


def core_map(mesh: Any, *, compiler_params: Any = None, interpret: Any = False,
             debug: bool = False, cost_estimate=None, name: str | None = None, metadata=None,
             scratch_shapes: Any = ()):
    """Deprecated: use ``pl.kernel``. Runs a zero-argument stateful function on
    every point of ``mesh``; it communicates only through closed-over Refs
    (``jax.new_ref``), which are updated in place."""
    from pallas_frontend import _jax_compat as jc

    def decorator(f):
        jaxpr, _ = jc.trace_kernel_jaxpr(lambda: (f(), [])[1], [], traced_for="pallas core_map")
        refs = list(jaxpr.consts)
        if not all(isinstance(jax.typeof(r), jc.AbstractRef) for r in refs):
            raise ValueError("core_map bodies may close over Refs only (jax.new_ref); "
                             "pass array values in Refs.")
        values = [r[...] for r in refs]
        n = len(refs)

        def body(*all_refs):
            # inputs come first, then the aliased outputs the body updates in place
            jc.eval_jaxpr(jaxpr.with_consts(()), *all_refs[n:2 * n])

        outs = pallas_call(
            body, [jax.ShapeDtypeStruct(v.shape, v.dtype) for v in values],
            grid=_mesh_grid(mesh, "core_map"), scratch_shapes=scratch_shapes,
            input_output_aliases={i: i for i in range(n)}, compiler_params=compiler_params,
            interpret=interpret, debug=debug, cost_estimate=cost_estimate,
            name=name or getattr(f, "__name__", None), metadata=metadata)(*values)
        for r, v in zip(refs, outs):
            r[...] = v
    return decorator
