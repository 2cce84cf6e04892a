"""The one place pallas_triton reaches into JAX beyond its public API.

Lowering has no public way to ask which GPU the program is lowered for; JAX's
lowering-rule context knows (its module's device assignment, or the client it
lowers for, which is a compile-only client under a topology mesh), and so does
the context mesh of ``jax.set_mesh``.
"""

from __future__ import annotations


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
