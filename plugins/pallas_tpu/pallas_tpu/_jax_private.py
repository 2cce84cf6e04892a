"""The only module of pallas_tpu that touches JAX internals (``jax._src``).

``AbstractDevice``: JAX's ``emit_pipeline`` asks the *context* mesh which TPU
it targets; on a CPU host (AOT compilation, TPU interpret mode) we must name
one ourselves, and JAX has no public constructor for it.
"""

from __future__ import annotations


def abstract_tpu_device(device_kind: str = "TPU v5 lite", num_cores: int = 1):
    from jax._src.mesh import AbstractDevice
    return AbstractDevice(device_kind=device_kind, num_cores=num_cores, platform="tpu")


def transformed_ref(ref, transforms):
    """``ref`` viewed through ``transforms`` (indexers recorded at trace time).

    Rebuilt directly rather than by ``ref.at[...]``: re-indexing validates
    constant starts at trace time, which would turn an out-of-bounds slice
    into a trace-time error where TPU interpret mode reports it when it runs
    (and honours ``out_of_bounds_reads``)."""
    from jax._src.state.types import TransformedRef
    if isinstance(ref, TransformedRef):
        return TransformedRef(ref.ref, (*ref.transforms, *transforms))
    return TransformedRef(ref, tuple(transforms))
