"""Device-less XLA:GPU compiles: a jitted program compiled for a named NVIDIA GPU.

Needs ``jax-cuda12-plugin`` and ``jax-cuda12-pjrt`` at jaxlib's version (the
XLA:GPU compiler) but no GPU: a compile-only topology is built from a
``GpuTargetConfigProto`` (XLA's own description of a GPU; the H100 and A100
ones ship in ``target_configs/``). On a machine without a GPU set
``JAX_PLATFORMS=cpu`` so the CUDA plugin registers without probing a device.
"""

from __future__ import annotations

import glob
import importlib.util
import os
import re
import tempfile
from pathlib import Path

from pallas_frontend.backend_api import BackendUnavailableError

TARGET_CONFIGS = {
    "H100": "NVIDIA_H100_80GB_HBM3.txtpb",
    "A100": "NVIDIA_A100_SXM4_80GB.txtpb",
}
_CONFIG_DIR = Path(__file__).parent / "target_configs"


def cuda_compiler_installed() -> bool:
    """Whether the XLA:GPU compiler (jax-cuda12/13 plugin) is importable."""
    return any(importlib.util.find_spec(m) is not None
               for m in ("jax_cuda12_plugin", "jax_cuda13_plugin"))


def target_config(gpu: str) -> str:
    """The GpuTargetConfigProto text for ``gpu`` ("H100", "A100") or a .txtpb path."""
    if os.path.isfile(gpu):
        return Path(gpu).read_text()
    try:
        return (_CONFIG_DIR / TARGET_CONFIGS[gpu.upper()]).read_text()
    except KeyError:
        raise ValueError(f"no GPU target config for {gpu!r}: use one of "
                         f"{sorted(TARGET_CONFIGS)} or the path of a GpuTargetConfigProto "
                         "(.txtpb)") from None


def _cuda_compiler_install() -> str:
    """The pip command for the CUDA PJRT plugin at exactly the installed jaxlib's version."""
    import importlib.metadata as md
    try:
        v = md.version("jaxlib")
    except md.PackageNotFoundError:
        return "pip install jax-cuda12-plugin jax-cuda12-pjrt"
    return f"pip install jax-cuda12-plugin=={v} jax-cuda12-pjrt=={v}"


def compile_only_mesh(gpu: str = "H100"):
    """A one-device mesh of a compile-only CUDA topology for ``gpu``."""
    if not cuda_compiler_installed():
        raise BackendUnavailableError(
            "compiling for a GPU without one needs the XLA:GPU compiler: "
            f"{_cuda_compiler_install()} (the CUDA plugin at jaxlib's version; and set "
            "JAX_PLATFORMS=cpu on a machine without a GPU)")
    from jax.experimental import topologies
    topo = topologies.get_topology_desc(platform="cuda", topology="1x1x1",
                                        target_config=target_config(gpu))
    return topologies.make_mesh(topo, (1,), ("x",))


def placed(args, mesh):
    """``args`` (arrays or ShapeDtypeStructs) as ShapeDtypeStructs on ``mesh``."""
    import jax
    sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
    return [jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=sharding) for a in args]


def compile_for_gpu(fn, *args, gpu: str = "H100", dump_dir: str | None = None):
    """``jax.jit(fn)`` compiled by XLA:GPU for ``gpu`` without a device."""
    import jax
    mesh = compile_only_mesh(gpu)
    options = {"xla_dump_to": dump_dir} if dump_dir else None
    lowered = jax.jit(fn).trace(*placed(args, mesh)).lower()
    return lowered.compile(options) if options else lowered.compile()


_THUNK = re.compile(r"kCustomKernel\s+(?:\[[^]]*\]\s+)?(\S+)\s+grid:?\s*\[(\d+),\s*(\d+),\s*(\d+)\]"
                    r".*?threads:?\s*\[(\d+),\s*(\d+),\s*(\d+)\]")


def launched_kernels(fn, *args, gpu: str = "H100") -> list[dict]:
    """The custom kernels XLA:GPU's thunk sequence launches for ``fn``: name, grid, threads."""
    with tempfile.TemporaryDirectory() as d:
        compile_for_gpu(fn, *args, gpu=gpu, dump_dir=d)
        text = "".join(Path(p).read_text() for p in
                       sorted(glob.glob(os.path.join(d, "*thunk_sequence.txt"))))
    return [{"name": m.group(1), "grid": tuple(map(int, m.group(2, 3, 4))),
             "threads": tuple(map(int, m.group(5, 6, 7)))} for m in _THUNK.finditer(text)]


__all__ = ["TARGET_CONFIGS", "compile_for_gpu", "compile_only_mesh", "cuda_compiler_installed",
           "launched_kernels", "placed", "target_config"]
