"""The reference interpreter as a ``Backend``: runs on every JAX platform."""

from __future__ import annotations

from pallas_frontend import backend_api
from pallas_frontend.interpreter import dynamic_grid, vectorized


class InterpreterBackend(backend_api.Backend):
    name = "interpret"
    distribution = "pallas-frontend"
    api_version = backend_api.API_VERSION
    platforms = ("cpu", "cuda", "rocm", "tpu")
    priority = 0          # the CPU default, and the fallback of last resort elsewhere
    capabilities = frozenset({
        "grid", "blocked", "element", "squeezed", "bounded_slice", "scratch", "aliasing",
        "run_scoped", "debug_print", "debug_check", "semaphores", "float64", "loops",
        "vmap", "jvp", "dynamic_grid",
    })

    def __init__(self):
        from pallas_frontend import __version__
        self.version = __version__

    def accepts_foreign_primitive(self, prim):
        # Other backends' primitives run here where they registered interpret rules.
        return backend_api.interpretable(prim)

    def lower(self, kernel, ctx, *args):
        if kernel.dynamic_grid_axes or kernel.num_scalar_prefetch:   # index maps at run time
            n = len(kernel.dynamic_grid_axes)
            return ctx.lower_fun(lambda *xs: dynamic_grid.run(kernel, xs[:n], *xs[n:]), *args)
        plan = vectorized.make_plan(kernel)
        return ctx.lower_fun(lambda *xs: vectorized.run(plan, *xs), *args)


@backend_api.hookimpl
def pallas_frontend_backend():
    return InterpreterBackend()
