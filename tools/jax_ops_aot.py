"""The compile-only columns of docs/jax-ops.md: JAX's shipped kernels compiled
for devices this machine does not have, under JAX and (imports swapped) ours.

- TPU kernels: AOT for one chip of a v5e:2x2 topology (libtpu; the collective
  all_gather over its four chips), the real Mosaic TPU compiler.
- Triton-style GPU kernels: compiled device-less by XLA:GPU for an H100 and an
  A100 (jax-cuda12-plugin/pjrt at jaxlib's version; ../shared gpu_paths.md).
- Mosaic GPU kernels: compiled device-less by XLA:GPU for an H100 (the
  multi-GPU collectives for two H100s of one host; the Blackwell ones,
  tcgen05, for a B200).

A cell is "ok" when ``jit(...).trace(...).lower().compile()`` succeeds and the
lowered program holds at least one Pallas kernel custom call (so nothing was
quietly compiled for the host). Each (target, side) runs in its own worker
process (``--worker``): a compile that aborts its process costs one row, and
the rest go on in a fresh worker.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import importlib.util
import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import worker_rows

HERE = Path(__file__).resolve().parent

# target -> (platform, the case kinds compiled for it)
TARGETS = {"v5e": ("tpu", ("tpu",)), "H100": ("cuda", ("gpu", "mgpu", "mgpu_multi")),
           "A100": ("cuda", ("gpu",)),
           "B200": ("cuda", ("blackwell",))}
# XLA's description of a GPU the plugins do not ship (Apache-2.0, from XLA's tree)
_EXTRA_CONFIGS = {"B200": HERE / "gpu_target_configs" / "NVIDIA_B200.txtpb"}
TPU_TOPOLOGY = "v5e:2x2"
_KERNEL_CALL = re.compile(r"custom_call @(tpu_custom_call|__gpu\$xla\.gpu\.triton|mosaic_gpu\w*)")
_INSTALL = threading.Lock()     # the GPU targets' workers start at once: one install


def cuda_site() -> Path:
    """Where the XLA:GPU compiler is installed for the GPU workers when this
    interpreter lacks it (``tools/install_cuda_compiler.py --target``)."""
    import jaxlib
    default = Path.home() / ".cache" / "pallas-frontend" / f"xla-cuda12-{jaxlib.__version__}"
    return Path(os.environ.get("PALLAS_JAX_OPS_CUDA_SITE", default))


def _worker_env(platform: str) -> dict:
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    env.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=4")
    if platform == "cuda" and importlib.util.find_spec("jax_cuda12_plugin") is None:
        site = cuda_site()
        with _INSTALL:
            if not (site / "jax_cuda12_plugin").exists():
                subprocess.run([sys.executable, str(HERE / "install_cuda_compiler.py"),
                                "--target", str(site)], check=True)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), env.get("PYTHONPATH")]))
    return env


# --- in the worker ---------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Target:
    """What a case's ``call`` gets for a compile-only run."""
    name: str
    platform: str
    mesh: object          # one device of the target
    all_devices: object   # every device of the topology (axis "x")


def make_target(name: str) -> Target:
    import jax
    import numpy as np
    from jax.experimental import topologies
    platform = TARGETS[name][0]
    if platform == "tpu":
        topo = topologies.get_topology_desc(topology_name=TPU_TOPOLOGY, platform="tpu")
    else:
        from pallas_triton import aot        # the vendored XLA GPU target descriptions
        config = aot.target_config(str(_EXTRA_CONFIGS.get(name, name)))
        one, two = (topologies.get_topology_desc(platform="cuda", topology=t,
                                                 target_config=config)
                    for t in ("1x1x1", "1x2x1"))    # two GPUs of one host: the collectives
        return Target(name, platform, jax.sharding.Mesh(np.array(one.devices), ("x",)),
                      jax.sharding.Mesh(np.array(two.devices), ("x",)))
    devices = np.array(topo.devices)
    return Target(name, platform, jax.sharding.Mesh(devices[:1], ("x",)),
                  jax.sharding.Mesh(devices, ("x",)))


def compile_row(case, size: str, grad: bool, target: Target, ours: bool, seed: int = 0) -> int:
    """Compiles one row for ``target``; returns the number of Pallas kernel calls."""
    import jax
    import numpy as np

    from jax_ops import _float_argnums
    from jax_ops_copy import jax_ops, ours_ops
    args = case.inputs(np.random.default_rng(seed), size)
    mesh = target.all_devices if case.sharded else target.mesh
    P = jax.sharding.PartitionSpec
    specs = [P("x") if case.sharded and i == 0 else P() for i in range(len(args))]
    structs = [jax.ShapeDtypeStruct(a.shape, a.dtype,
                                    sharding=jax.sharding.NamedSharding(mesh, s))
               for a, s in zip(args, specs)]
    mod = ours_ops().load(case.module) if ours else jax_ops(case.module)

    def fwd(*xs):
        return case.call(mod, xs, target)
    fn = fwd
    if grad:
        def loss(*xs):
            return sum(jax.numpy.sum(o.astype(np.float32)) for o in jax.tree.leaves(fwd(*xs)))
        fn = jax.grad(loss, argnums=_float_argnums(args))
    with jax.set_mesh(mesh):    # the chip/GPU kind the kernels' lowering asks the context for
        lowered = jax.jit(fn).trace(*structs).lower()
        kernels = len(_KERNEL_CALL.findall(lowered.as_text()))
        if not kernels:
            raise AssertionError("the lowered program holds no Pallas kernel call")
        lowered.compile()
    return kernels


def _worker_main(target_name: str, side: str, keys: list[str]) -> int:
    for k, v in (("TPU_ACCELERATOR_TYPE", "v5litepod-4"), ("TPU_WORKER_HOSTNAMES", "localhost"),
                 ("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")):
        os.environ.setdefault(k, v)
    sys.path.insert(0, str(HERE))
    import warnings
    warnings.simplefilter("ignore", DeprecationWarning)   # JAX's GPU ops point to tokamax
    import jax_ops_cases
    from jax_ops import _error_line
    cases = {c.name: c for c in jax_ops_cases.CASES}
    target = make_target(target_name)
    for key in keys:
        name, size, grad = json.loads(key)
        print("START " + key, flush=True)
        t0 = time.perf_counter()
        try:
            cell = {"status": "ok", "kernels": compile_row(cases[name], size, grad, target,
                                                            side == "ours")}
        except Exception as e:     # the row records it; the next row goes on
            cell = {"status": "fail", "error": _error_line(e)}
        cell["seconds"] = round(time.perf_counter() - t0, 1)
        print("ROW " + json.dumps([key, cell]), flush=True)
    return 0


# --- in the parent ---------------------------------------------------------------

def _run_worker(target: str, side: str, keys: list[str], log) -> dict:
    """{key: cell} for ``keys``; restarts the worker past a row that killed it."""
    argv = lambda todo: [sys.executable, str(Path(__file__).resolve()), "--worker",  # noqa: E731
                         target, side, *todo]
    return worker_rows.run_rows(argv, keys, env=_worker_env(TARGETS[target][0]),
                                cwd=str(HERE.parent), log=lambda k, c: log(target, side, k, c),
                                cannot_start=f"no compile-only {target} here")


def rows_key(name: str, size: str, grad: bool) -> str:
    return json.dumps([name, size, grad])


def compile_columns(cases, sizes, targets, jobs: int = 2, log=None) -> dict:
    """{target: {rows_key: {"jax": cell, "ours": cell}}} for the cases of each target's kinds."""
    log = log or (lambda *a: None)
    tasks = []
    for target in targets:
        keys = [rows_key(c.name, s, g) for c in cases if c.kind in TARGETS[target][1]
                for s in sizes for g in ((False, True) if c.grad else (False,))]
        if keys:
            tasks += [(target, side, keys) for side in ("jax", "ours")]
    result: dict = {t: {} for t in targets}
    with concurrent.futures.ThreadPoolExecutor(max(1, jobs)) as pool:
        futures = {pool.submit(_run_worker, t, side, keys, log): (t, side)
                   for t, side, keys in tasks}
        for fut in concurrent.futures.as_completed(futures):
            t, side = futures[fut]
            for key, cell in fut.result().items():
                result[t].setdefault(key, {})[side] = cell
    return result


if __name__ == "__main__":
    if sys.argv[1:2] == ["--worker"]:
        sys.exit(_worker_main(sys.argv[2], sys.argv[3], sys.argv[4:]))
    sys.exit("run tools/jax_ops.py (this module is its compile-only part)")
