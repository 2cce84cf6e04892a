"""The Mosaic GPU operations of a kernel lowered for an abstract H100, under
JAX's Pallas and under ours: what the lowering tests compare where no
interpreter can run the kernel."""

import re
from collections import Counter

import jax
from jax_window import jplgpu as jax_plgpu  # JAX's plgpu (with 0.10's GPU interpret API)

import pallas_mgpu as plgpu
from pallas_mgpu import _jax_private, aot

APIS = {"jax": jax_plgpu, "ours": plgpu}
H100 = jax.sharding.AbstractDevice(device_kind="NVIDIA H100 80GB HBM3", platform="gpu",
                                   num_cores=132)
# no-op casts: the rebuilt kernel's Ref views and branches make a few more
NO_OP_CASTS = ("memref.cast", "builtin.unrealized_conversion_cast")


def lowered_module(fn, *avals) -> str:
    """The one Mosaic GPU module of ``fn`` lowered for cuda on ``avals``
    (a device-less lowering: no compiler runs)."""
    with jax.sharding.use_abstract_mesh(jax.sharding.AbstractMesh((), (), abstract_device=H100)):
        lowered = aot.lower_for_cuda(fn, *avals)
    (module,) = _jax_private.mosaic_gpu_modules(lowered)
    return module


def sharded_lowered_module(fn, *avals, axis="x") -> str:
    """As ``lowered_module``, with ``fn`` under ``shard_map`` on a one-device
    H100 mesh whose axis is ``axis`` (for kernels that read the mesh)."""
    spec = jax.sharding.PartitionSpec()
    mesh = jax.sharding.AbstractMesh((1,), (axis,), abstract_device=H100)
    f = jax.shard_map(fn, mesh=mesh, in_specs=spec, out_specs=spec, check_vma=False)
    sharding = jax.sharding.NamedSharding(mesh, spec)
    args = [jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=sharding) for a in avals]
    with jax.sharding.use_abstract_mesh(mesh):
        lowered = jax.jit(f).trace(*args).lower(lowering_platforms=("cuda",))
    (module,) = _jax_private.mosaic_gpu_modules(lowered)
    return module


def mosaic_ops(module: str) -> Counter:
    """How often each operation occurs in a Mosaic GPU module, no-op casts left out."""
    ops = Counter(re.findall(r'"stable_mosaic_gpu\.([a-z_]+\.[a-z_.0-9]+)"\(', module))
    for cast in NO_OP_CASTS:
        ops.pop(cast, None)
    return ops


def h100_ops(build, *avals, apis=APIS) -> dict[str, Counter]:
    """{side: mosaic_ops} of ``build(apis[side])`` lowered for cuda on ``avals``."""
    return {side: mosaic_ops(lowered_module(build(api), *avals)) for side, api in apis.items()}
