"""The one place pallas_triton reaches into JAX beyond its public API, and where
the JAX releases of the window (0.10-0.12) differ for it (probed by feature).

Lowering has no public way to ask which GPU the program is lowered for; JAX's
lowering-rule context knows (its module's device assignment, or the client it
lowers for, which is a compile-only client under a topology mesh), and so does
the context mesh of ``jax.set_mesh``.
"""

from __future__ import annotations

import functools

# JAX's GPU queries, which ``pallas_triton`` re-exports (``gpu_info``); JAX has them
# in ``jax.experimental.pallas.triton`` from 0.11.
GPU_QUERIES = ("GpuInfo", "GpuVersion", "get_gpu_info", "get_gpu_info_from_version",
               "is_gpu_device")


def jax_version() -> str:
    import jax
    return jax.__version__


def needs_newer_jax(what: str, since: str) -> str:
    """The one line ours says where this JAX lacks ``what``."""
    return f"{what} needs JAX {since} or newer; this is JAX {jax_version()}."


def gpu_queries() -> dict:
    """JAX's GPU queries by name; where this JAX lacks them, one line naming the
    release that has them."""
    from jax.experimental.pallas import triton as jax_triton
    if not all(hasattr(jax_triton, name) for name in GPU_QUERIES):
        raise NotImplementedError(needs_newer_jax(
            "pallas_triton's GPU queries (" + ", ".join(GPU_QUERIES) + ")", "0.11"))
    return {name: getattr(jax_triton, name) for name in GPU_QUERIES}


def lowering_devices(mlir_ctx) -> tuple:
    """The devices JAX lowers the current program for, or () when it does not say."""
    module_ctx = getattr(mlir_ctx, "module_context", None)
    axis_ctx = getattr(module_ctx, "axis_context", None)
    devices = getattr(axis_ctx, "device_assignment", None)
    if devices:
        return tuple(devices)
    mesh = getattr(axis_ctx, "mesh", None)          # SPMDAxisContext (shard_map)
    if mesh is not None and hasattr(mesh, "devices"):
        return tuple(mesh.devices.flat)
    client = getattr(module_ctx, "backend", None)
    if client is not None and getattr(client, "platform", None) in ("cuda", "rocm", "gpu"):
        try:
            return tuple(client.devices())
        except Exception:  # noqa: BLE001  (a client that cannot list devices)
            return ()
    return ()


def context_mesh_devices() -> tuple:
    """The devices of the concrete mesh set with ``jax.set_mesh``, or ()."""
    try:
        from jax._src import mesh as mesh_lib
        mesh = mesh_lib.get_concrete_mesh()
    except Exception:  # noqa: BLE001  (moved in another JAX version)
        return ()
    devices = getattr(mesh, "devices", None)
    return tuple(devices.flat) if devices is not None and devices.size else ()


@functools.cache
def xla_keeps_wide_bfloat16_reduce_precision(exponent_bits: int = 8,
                                             mantissa_bits: int = 23) -> bool:
    """Whether XLA on the CPU takes a bfloat16 ``reduce_precision`` to this format (one
    at least bfloat16's own) as the identity (a signalling NaN keeps its bits) rather
    than computing it in float32 (the NaN comes out quiet): to float32's format jaxlib
    0.10 keeps it, 0.11 on quiets it; to bfloat16's own (8, 7) 0.12.1 keeps it. Asked
    once per process and format; False without a CPU device."""
    import jax
    import numpy as np
    from jax import lax
    try:
        cpu = jax.devices("cpu")[0]
    except RuntimeError:
        return False
    with jax.ensure_compile_time_eval():
        x = jax.device_put(np.full(16, 0x7F81, np.uint16).view(jax.numpy.bfloat16), cpu)
        r = jax.jit(lambda v: lax.reduce_precision(v, exponent_bits, mantissa_bits))(x)
        return bool(np.asarray(r).view(np.uint16)[0] == 0x7F81)


@functools.cache
def polynomial_steps_are_fmuladd() -> bool:
    """Whether this JAX lowers ``lax.polynomial`` (for CPU) as one ``fmuladd`` per
    Horner step (JAX 0.12.1 on: float32/float64 one fma; 16-bit floats an fma in
    float32 rounded to the type each step) rather than a multiply and an add, which
    XLA may fuse or not (host_floats). Asked once, of a bfloat16 polynomial jitted for
    CPU (jax.export would not do: it lowers fmuladd as a multiply and an add)."""
    import jax
    from jax import lax
    if not hasattr(lax, "polynomial"):
        return False
    fn = jax.jit(lambda v: lax.polynomial(v, [0.5, 2.0, 3.0]))
    arg = jax.ShapeDtypeStruct((2,), jax.numpy.bfloat16)
    return "stablehlo.fma" in fn.trace(arg).lower(lowering_platforms=("cpu",)).as_text()
