"""Skip markers for tests of what an older JAX of the window (0.10-0.12) lacks: each
feature probed as pallas_mgpu probes it (``_jax_private``), the reason naming the JAX
release that has it, in the one line pallas_mgpu itself says."""

import pytest
from jax.experimental.pallas import mosaic_gpu as jax_plgpu

from pallas_mgpu import _jax_private


def needs_jax(since: str | None, what: str):
    """Skip the test where ``since`` (the first JAX release with ``what``) is set."""
    return pytest.mark.skipif(since is not None,
                              reason=_jax_private.needs_newer_jax(what, since or ""))


def plgpu_op(name: str):
    """For a test of ``plgpu.<name>``."""
    return needs_jax(_jax_private.plgpu_lacks(name), f"plgpu.{name}")


def params_field(cls_name: str, field: str):
    """For a test that sets ``field`` of ``CompilerParams`` / ``InterpretGPUParams``."""
    return needs_jax(_jax_private.missing_param_field(cls_name, field), f"{cls_name}({field}=)")


# JAX's own GPU interpret mode API in jax.experimental.pallas.mosaic_gpu (tests that
# call JAX's functions directly, beside ours)
JAX_PUBLIC_GPU_INTERPRET = needs_jax(
    None if hasattr(jax_plgpu, "InterpretGPUParams") else "0.11",
    "jax.experimental.pallas.mosaic_gpu.InterpretGPUParams")
# kernels compiled with warpgroup semantics (JAX's default from 0.11; 0.10's layout
# inference cannot take many of them)
WARPGROUP_LOWERING = needs_jax(
    None if _jax_private.warpgroup_semantics_is_jax_default() else "0.11",
    "Mosaic GPU lowering with warpgroup semantics (its layout inference)")


class _JaxPlgpu:
    """JAX's ``jax.experimental.pallas.mosaic_gpu`` for tests that compare ours with
    JAX's, with the GPU interpret mode API JAX 0.10 keeps outside it (the same
    objects ``pallas_mgpu`` hands JAX) filled in, and its functions called as in
    JAX 0.12 (JAX 0.10's ``load`` takes a required index), as ours calls them."""

    def __getattr__(self, name):
        if name in ("InterpretGPUParams", "force_gpu_interpret_mode", "set_gpu_interpret_mode"):
            return getattr(_jax_private.gpu_interpret_api(), name)
        if name == "load":
            return _jax_private.plgpu_function(name)
        return getattr(jax_plgpu, name)


jplgpu = _JaxPlgpu()

# JAX's GPU interpreter running try_cluster_cancel (and so dynamic_scheduling_loop)
JAX_INTERPRETS_CLUSTER_CANCEL = needs_jax(
    None if _jax_private.gpu_interpreter_has_cluster_cancel() else "0.11",
    "try_cluster_cancel in JAX's GPU interpret mode")

# JAX's plgpu.CompilerParams and InterpretGPUParams as JAX 0.12 has them (fields and
# defaults), which ours mirror
_LACKED = {**_jax_private.fields_jax_lacks("CompilerParams"),
           **_jax_private.fields_jax_lacks("InterpretGPUParams")}
# those a 0.12 patch release added (collective_id, 0.12.1): a JAX 0.12.0.1 has every
# other field and default, so the comparisons run there without these
PATCH_FIELDS_LACKED = {n for n, since in _LACKED.items() if since.startswith("0.12.")}
JAX_PARAMS_AS_IN_012 = needs_jax(
    max((v for n, v in _LACKED.items() if n not in PATCH_FIELDS_LACKED), default=None),
    "plgpu.CompilerParams / InterpretGPUParams with JAX 0.12's fields and defaults "
    f"(this JAX lacks {', '.join(sorted(_LACKED))})")
