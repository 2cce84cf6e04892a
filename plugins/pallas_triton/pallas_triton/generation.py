"""The generated kernel of a KernelIR, cached on everything the generated code depends on."""

from __future__ import annotations

import functools

from pallas_frontend import backend_api
from pallas_triton.params import CompilerParams, InterpretParams


def _compiler_params(kernel, interpret_params=None) -> CompilerParams:
    if isinstance(interpret_params, InterpretParams) and interpret_params.compiler_params:
        return interpret_params.compiler_params
    p = kernel.compiler_params
    return p if isinstance(p, CompilerParams) else CompilerParams()


@functools.lru_cache(maxsize=256)
def _generate_cached(fingerprint, kernel, target, precision):
    del fingerprint  # the cache key; kernel objects are compared by identity otherwise
    from pallas_triton import primitives  # noqa: F401  (registers the Triton primitives)
    from pallas_triton import structured  # noqa: F401  (registers the statement emitters)
    from pallas_triton.codegen import generate
    return generate(kernel, target=target, dot_input_precision=precision)


def generate_source(kernel: backend_api.KernelIR, *, target: str = "interpret",
                    params: CompilerParams | None = None):
    """The generated kernel (source and launch facts), cached by a hash of KernelIR+params."""
    from pallas_triton.fingerprint import kernel_fingerprint
    from pallas_triton import host_floats
    params = params or _compiler_params(kernel)
    # under the interpreter the code follows XLA on this host's CPU (host_floats.py)
    key = kernel_fingerprint(kernel, (target, params, host_floats.for_target(target)))
    gen = _generate_cached(key, _Keyed(kernel, key), target, params.dot_input_precision)
    return gen


class _Keyed:
    """Lets lru_cache key on the fingerprint while passing the kernel through."""
    def __init__(self, kernel, key):
        self.kernel, self.key = kernel, key

    def __hash__(self):
        return hash(self.key)

    def __eq__(self, other):
        return isinstance(other, _Keyed) and other.key == self.key

    def __getattr__(self, name):
        return getattr(self.kernel, name)
