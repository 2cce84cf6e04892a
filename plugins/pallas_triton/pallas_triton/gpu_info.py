"""What a GPU offers (version, architecture name, compute capability):
host-side queries, the same objects as JAX's ``jax.experimental.pallas.triton``.

They read only the device JAX sees (or take a ``GpuVersion``), nothing of a
kernel, so JAX's own objects serve this backend unchanged: e.g.
``CompilerParams(compute_capability=get_gpu_info_from_version(GpuVersion.H100)
.compute_capability)`` names the target of a device-less compile.
``get_gpu_info()`` on a host without a GPU raises, as JAX's does. JAX has them
from 0.11; under JAX 0.10 importing this module says so in one line.
"""

from __future__ import annotations

from pallas_triton import _jax_compat

_queries = _jax_compat.gpu_queries()
GpuInfo = _queries["GpuInfo"]
GpuVersion = _queries["GpuVersion"]
get_gpu_info = _queries["get_gpu_info"]
get_gpu_info_from_version = _queries["get_gpu_info_from_version"]
is_gpu_device = _queries["is_gpu_device"]
del _queries

__all__ = ["GpuInfo", "GpuVersion", "get_gpu_info", "get_gpu_info_from_version",
           "is_gpu_device"]
