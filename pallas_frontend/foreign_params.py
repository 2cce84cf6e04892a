"""Refusing JAX Pallas's own params objects, with a pointer to ours.

Code ported from ``jax.experimental.pallas`` often still passes
``pltpu.CompilerParams(...)`` or ``pltpu.InterpretParams()`` from JAX. No
backend of pallas_frontend owns those types, so they would otherwise fail
later with a "no backend" error; this names the replacement instead.
Only module names are compared: nothing of JAX's Pallas is imported.
"""

from __future__ import annotations

from typing import Any

# JAX's private module of a params type -> (its public name, our replacement, extra)
_JAX_PARAMS = {
    "jax._src.pallas.mosaic.core": ("jax.experimental.pallas.tpu", "pallas_tpu", "tpu"),
    "jax._src.pallas.mosaic.interpret": ("jax.experimental.pallas.tpu", "pallas_tpu", "tpu"),
    "jax._src.pallas.triton.core": ("jax.experimental.pallas.triton", "pallas_triton", "triton"),
    "jax._src.pallas.mosaic_gpu.core": ("jax.experimental.pallas.mosaic_gpu", "pallas_mgpu", "mgpu"),
}


def _owner(value: Any) -> tuple[str, str, str] | None:
    module = type(value).__module__ or ""
    for prefix, owner in _JAX_PARAMS.items():
        if module == prefix or module.startswith(prefix + "."):
            return owner
    return None


def check_not_jax_params(argument: str, value: Any) -> None:
    """Raises TypeError when ``value`` is one of JAX Pallas's params objects."""
    owner = _owner(value)
    if owner is None:
        return
    public, ours, extra = owner
    kind = type(value).__name__
    raise TypeError(
        f"{argument}={public}.{kind}(...) is JAX Pallas's own params object; pallas_frontend "
        f"takes its backends' types instead: use {ours}.{kind}(...) (import {ours}). "
        f"Install it with `pip install -e plugins/{ours}` from a checkout, or "
        f"`pip install \"pallas-frontend[{extra}]\"`. See docs/migration.md.")
