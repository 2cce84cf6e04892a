"""Skip markers for pallas_tpu tests of what an older JAX of the window
(0.10-0.12) lacks: each feature probed once on JAX itself, the reason the one
line pallas_tpu says for it (naming the JAX release that has it)."""

import pytest
from jax.experimental.pallas import tpu as jax_pltpu

from pallas_frontend.jax_window import JAX_VERSION
from pallas_tpu import _jax_private


def needs_jax(since: str, present: bool, what: str):
    """Skip the test where this JAX lacks ``what`` (first in JAX ``since``)."""
    return pytest.mark.skipif(not present, reason=_jax_private.needs_newer_jax(what, since))


def skip_unless(marker) -> None:
    """Inside a test: skip this run of it (one parameter combination) as
    ``marker`` would skip the whole test."""
    if marker.mark.args[0]:
        pytest.skip(marker.mark.kwargs["reason"])


ANNOTATE = needs_jax("0.11", hasattr(jax_pltpu, "annotate"),
                     "JAX's pltpu.annotate (Mosaic access assumptions)")
BITCAST_DIM = needs_jax("0.12", _jax_private.bitcast_takes_dim(),
                        "JAX's pltpu.bitcast along the minormost dim (dim=-1)")
EINSHAPE_RULES = needs_jax("0.11", _jax_private.jax_einshape_has_rules(),
                           "a VJP and fuser rules for JAX's pltpu.einshape")
ASYNC_PREFETCH = needs_jax("0.11", hasattr(jax_pltpu, "emit_pipeline_with_async_prefetch"),
                           "JAX's pltpu.emit_pipeline_with_async_prefetch")

# JAX 0.11's Mosaic refuses JAX's own prefetch of a whole-operand block (an s32[1]
# operand's layout); JAX 0.12 compiles it (ours compiles it on every JAX)
JAX_PREFETCHES_WHOLE_OPERAND = needs_jax(
    "0.12", JAX_VERSION >= (0, 12),
    "JAX's own async prefetch of a whole-operand block compiled for v5e")


def tensorcore_mesh(T, axis_name: str = "core", num_cores: int = 1):
    """A mesh of ``num_cores`` TensorCores from ours or JAX's ``pltpu`` (``T``):
    JAX 0.10 spells it ``create_tensorcore_mesh``."""
    if hasattr(T, "TensorCoreMesh"):
        return T.TensorCoreMesh(axis_name=axis_name, num_cores=num_cores)
    return T.create_tensorcore_mesh(axis_name, num_cores=num_cores)


def jax_pltpu_has(name: str):
    """Skip where JAX's ``pltpu`` lacks ``name`` (ours replays it as JAX's on TPU)."""
    return needs_jax(_jax_private.PLTPU_SINCE[name], hasattr(jax_pltpu, name),
                     f"pallas_tpu.{name} on TPU (JAX's pltpu.{name})")
