"""pallas-example-backend: the smallest real pallas_frontend backend.

It lowers every kernel by delegating to the reference interpreter, and adds
one backend-specific primitive, ``accumulate(ref, value)``, with an interpret
rule. It imports only ``pallas_frontend.backend_api`` and the public API.
"""

from __future__ import annotations

import dataclasses

import pallas_frontend as pl
from pallas_frontend import backend_api

__version__ = "0.1.0"
NAME = "example"


@dataclasses.dataclass(frozen=True)
class CompilerParams(pl.CompilerParams):
    """Passing these to ``pallas_call`` selects this backend."""
    BACKEND = NAME
    unroll: bool = False     # a stand-in for a real compiler option


# --- a backend-specific primitive: ref[...] += value -----------------------------

accumulate_p = backend_api.kernel_primitive("example_accumulate", owner=NAME,
                                            multiple_results=True)
accumulate_p.def_effectful_abstract_eval(
    lambda ref, value: ([], backend_api.ref_effects(reads=[0], writes=[0])))


def accumulate(ref, value) -> None:
    """Adds ``value`` to the whole of ``ref`` (only this backend can lower it)."""
    accumulate_p.bind(ref, value)


def _accumulate_interpret(ctx, ref_value, value):
    # discharge rule: the new value of the Ref operand, and no outputs
    return (ref_value + value, None), []


backend_api.register_interpret_rule(accumulate_p, _accumulate_interpret)


class ExampleBackend(backend_api.Backend):
    name = NAME
    distribution = "pallas-example-backend"
    version = __version__
    api_version = (1, 0)
    platforms = ("cpu",)
    priority = 10
    compiler_params_type = CompilerParams
    pip_extra = "example"
    # It lowers through the reference interpreter, so it has what that has; vmap's
    # batched kernels use a squeezed leading dim, so "vmap" needs "squeezed".
    capabilities = frozenset({"grid", "blocked", "squeezed", "scratch", "aliasing", "vmap",
                              "jvp", "float64"})
    # Manifests read by pallas_frontend.testing (see docs/backend-authors.md).
    # Nothing to declare: it passes the whole suite. A real backend lists
    # e.g. {"test_jvp_*": "no jvp lowering yet (issue #12)"}.
    conformance_unsupported: dict[str, str] = {}
    conformance_xfail: dict[str, str] = {}

    def lower(self, kernel, ctx, *args):
        # Reuse the reference semantics: an honest backend would emit its own code here.
        interpreter = pl.get_backend("interpret")
        return interpreter.lower(kernel, ctx, *args)


@backend_api.hookimpl
def pallas_frontend_backend():
    return ExampleBackend()
