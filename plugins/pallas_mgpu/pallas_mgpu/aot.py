"""Compile-only for NVIDIA GPUs on a machine without one.

With jax-cuda12-plugin + jax-cuda12-pjrt installed (and ``JAX_PLATFORMS=cpu``
on a host without a GPU), XLA compiles device-less for a named GPU (H100 by
default) through a compile-only topology. Without them, the kernel is
lowered for cuda (the ``mosaic_gpu_v2`` custom call holds the Mosaic GPU
module), which checks everything up to the CUDA compiler.
"""

from __future__ import annotations

import functools
import importlib.resources
import importlib.util

import jax

from pallas_frontend.backend_api import BackendUnavailableError

TARGETS = {"h100": "NVIDIA_H100_80GB_HBM3.txtpb"}
CUSTOM_CALL = "mosaic_gpu_v2"


def has_cuda_plugin() -> bool:
    """Whether jax-cuda12-plugin (the CUDA PJRT plugin) is installed."""
    for name in ("jax_plugins.xla_cuda12", "jax_cuda12_plugin"):
        try:
            if importlib.util.find_spec(name) is not None:
                return True
        except ModuleNotFoundError:      # the parent package is absent
            continue
    return False


def describe_mode() -> str:
    if any(d.platform == "gpu" for d in _devices()):
        return "runs on this machine's GPU"
    if has_cuda_plugin():
        return "compile-only: device-less XLA:GPU compile for H100 (no GPU here)"
    return "compile-only: lowers for cuda (mosaic_gpu_v2); install jax-cuda12-plugin/pjrt to compile"


def _devices():
    try:
        return jax.devices()
    except RuntimeError:
        return []


def target_config(name: str = "h100") -> str:
    return importlib.resources.files("pallas_mgpu").joinpath("gpu_targets", TARGETS[name]).read_text()


@functools.cache
def _mesh(name: str):
    from jax.experimental import topologies
    topo = topologies.get_topology_desc(platform="cuda", topology="1x1x1",
                                        target_config=target_config(name))
    return topologies.make_mesh(topo, (1,), ("x",))


def _structs(args, sharding):
    return [jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=sharding) for a in args]


def lower_for_cuda(fn, *args):
    """``jax.jit(fn)`` lowered for cuda (no plugin needed); checks the custom call."""
    lowered = jax.jit(fn).trace(*args).lower(lowering_platforms=("cuda",))
    if CUSTOM_CALL not in lowered.as_text():
        raise AssertionError(f"lowering for cuda produced no {CUSTOM_CALL} custom call")
    return lowered


def compile_for_cuda(fn, *args, target: str = "h100"):
    """Compiles for ``target`` device-less when the CUDA plugin is installed,
    else lowers for cuda (the ``Lowered``: everything short of ptxas)."""
    if any(d.platform == "gpu" for d in _devices()):
        return jax.jit(fn).lower(*args).compile()
    if not has_cuda_plugin():
        return lower_for_cuda(fn, *args)
    try:
        mesh = _mesh(target)
    except Exception as e:
        raise BackendUnavailableError(f"no compile-only CUDA topology for {target}: {e}") from e
    sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
    return jax.jit(fn).trace(*_structs(args, sharding)).lower().compile()
