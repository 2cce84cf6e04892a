"""The reference interpreter as a ``Backend``: runs on every JAX platform."""

from __future__ import annotations

from pallas_frontend import backend_api
from pallas_frontend.interpreter import dynamic_grid, vectorized, wide_dims


class InterpreterBackend(backend_api.Backend):
    name = "interpret"
    distribution = "pallas-frontend"
    api_version = backend_api.API_VERSION
    platforms = ("cpu", "cuda", "rocm", "tpu")
    priority = 0          # the CPU default, and the fallback of last resort elsewhere
    capabilities = frozenset({
        "grid", "blocked", "element", "squeezed", "bounded_slice", "scratch", "aliasing",
        "run_scoped", "debug_print", "debug_check", "semaphores", "float64", "loops",
        "vmap", "jvp", "dynamic_grid", "scalar_prefetch",
        "element_padding",     # pl.Element(n, padding): the conformance suite's halo stencils
    })

    def __init__(self):
        from pallas_frontend import __version__
        self.version = __version__

    def accepts_foreign_primitive(self, prim):
        # Other backends' primitives run here where they registered interpret rules.
        return backend_api.interpretable(prim)

    def lower(self, kernel, ctx, *args):
        # The batched plan is first traced without a trial trace of its body (a
        # whole extra trace of every first call); should tracing it fail (a
        # primitive vmap refuses), nothing was emitted yet: plan again with the
        # trial, which falls back to the sequential loop.
        ctx = _unplaced(ctx)
        try:
            return self._lower(kernel, ctx, args, trial_trace=False)
        except Exception:  # noqa: BLE001 - the checked plan raises any real error again
            return self._lower(kernel, ctx, args, trial_trace=True)

    def _lower(self, kernel, ctx, args, trial_trace):
        split = wide_dims.split_wide_dims(kernel)    # dims past int32 offsets
        if split is not None:
            inner = self._runner(split.kernel, trial_trace)
            return ctx.lower_fun(
                lambda *xs: split.finish_outputs(inner(*split.prepare_operands(xs)), kernel),
                *args)
        return ctx.lower_fun(self._runner(kernel, trial_trace), *args)

    def _runner(self, kernel, trial_trace=True):
        """The kernel as a function of its operands (dynamic grid sizes first)."""
        # index maps at run time (symbolic array dims: ranges known only then)
        if kernel.dynamic_grid_axes or kernel.num_scalar_prefetch or \
                dynamic_grid.has_symbolic_dims(kernel):
            n = len(kernel.dynamic_grid_axes)
            return lambda *xs: dynamic_grid.run(kernel, xs[:n], *xs[n:])
        plan = vectorized.make_plan(kernel, trial_trace=trial_trace)
        return lambda *xs: vectorized.run(plan, *xs)


def _unplaced(ctx):
    """``ctx`` with no backend memory space (e.g. VMEM from a TPU
    ``with_memory_space_constraint``) on its operands' types: a placement
    changes no value, and the body is traced for plain arrays."""
    import dataclasses

    import jax
    avals = [a.update(memory_space=jax.memory.Space.Device)
             if not isinstance(getattr(a, "memory_space", jax.memory.Space.Device),
                               jax.memory.Space) and not isinstance(a, jax.ref.AbstractRef)
             else a for a in ctx.mlir_ctx.avals_in]
    if avals == list(ctx.mlir_ctx.avals_in):
        return ctx
    return dataclasses.replace(ctx, mlir_ctx=ctx.mlir_ctx.replace(avals_in=avals))


@backend_api.hookimpl
def pallas_frontend_backend():
    return InterpreterBackend()
