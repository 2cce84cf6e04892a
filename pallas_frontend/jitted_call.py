"""The callable ``pallas_call`` returns.

JAX's ``pallas_call`` returns a jitted function, and code written for it calls
``.lower(*args)`` (then ``.compile()``), ``.trace(*args)`` or
``.eval_shape(*args)`` on the result. These are methods of a class, never
attributes of a function: ``functools.wraps`` copies a function's attributes
onto its wrappers (``jax.vmap``'s among them), and ``jax.make_jaxpr`` traces a
function that has a ``trace`` attribute through it, so a vmapped call would be
traced unbatched.
"""

from __future__ import annotations

import functools

import jax

from pallas_frontend import _jax_compat as jc


class JittedCall:
    """``fn`` (the launch) with a jitted function's AOT methods; it unwraps
    (``inspect.unwrap``) to ``kernel``, the user's kernel body."""

    def __init__(self, fn, kernel):
        self._fn = fn
        self._jitted = None
        functools.update_wrapper(self, fn, updated=())
        self.__wrapped__ = kernel

    @jc.api_boundary     # this frame too leaves the tracebacks (the user's line stays)
    def __call__(self, *args):
        return self._fn(*args)

    def _jit(self):
        if self._jitted is None:
            self._jitted = jax.jit(self._fn)
        return self._jitted

    def lower(self, *args, **kwargs):
        """``jax.jit`` of the call, lowered for ``args`` (arrays or ShapeDtypeStructs)."""
        return self._jit().lower(*args, **kwargs)

    def trace(self, *args, **kwargs):
        """``jax.jit`` of the call, traced for ``args``."""
        return self._jit().trace(*args, **kwargs)

    def eval_shape(self, *args, **kwargs):
        """The shapes and dtypes of the call's outputs for ``args``."""
        return self._jit().eval_shape(*args, **kwargs)
