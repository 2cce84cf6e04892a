"""The Mosaic GPU operations of a kernel lowered for an abstract H100, under
JAX's Pallas and under ours: what the lowering tests compare where no
interpreter can run the kernel."""

import re
from collections import Counter

import jax
from jax.experimental.pallas import mosaic_gpu as jax_plgpu

import pallas_mgpu as plgpu
from pallas_mgpu import _jax_private, aot

APIS = {"jax": jax_plgpu, "ours": plgpu}
H100 = jax.sharding.AbstractDevice(device_kind="NVIDIA H100 80GB HBM3", platform="gpu",
                                   num_cores=132)


def h100_ops(build, *avals) -> dict[str, Counter]:
    """{"jax"|"ours": how often each operation occurs} of ``build(api)``
    lowered for cuda on ``avals``. No-op casts are left out: the rebuilt
    kernel's Ref views make a few more."""
    ops = {}
    for api, gpu in APIS.items():
        with jax.sharding.use_abstract_mesh(
                jax.sharding.AbstractMesh((), (), abstract_device=H100)):
            lowered = aot.lower_for_cuda(build(gpu), *avals)
        (module,) = _jax_private.mosaic_gpu_modules(lowered)
        ops[api] = Counter(re.findall(r'"stable_mosaic_gpu\.([a-z_]+\.[a-z_.0-9]+)"\(', module))
        ops[api].pop("memref.cast", None)
        ops[api].pop("builtin.unrealized_conversion_cast", None)
    return ops
