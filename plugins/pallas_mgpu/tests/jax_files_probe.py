"""Compiles JAX's own Mosaic GPU kernel files device-less for H100, once as
JAX ships them and once with only their Pallas imports swapped to ours
(``tools/jax_ops_copy.py``), in THIS process: run it in a subprocess
(``python jax_files_probe.py CASE...``), since a Mosaic GPU compile without
libdevice aborts the process. Prints one JSON line per (case, side):
compiled or the error, and how many Mosaic GPU kernel calls were lowered."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

TOOLS = Path(__file__).resolve().parents[3] / "tools"


def _cases(mod_of):
    import jax
    import jax.numpy as jnp

    def hopper(side):
        mod = mod_of(side, "gpu.hopper_matmul_mgpu")
        cfg = mod.TuningConfig(tile_m=128, tile_n=128, tile_k=64, max_concurrent_steps=2)
        return (lambda a, b: mod.matmul(a, b, None, cfg)), [((512, 512), jnp.float16)] * 2

    def attention(side, grad=False, causal=False):
        mod = mod_of(side, "gpu.attention_mgpu")
        bwd = dict(block_q_dkv=64, block_kv_dkv=64, block_q_dq=64, block_kv_dq=64) if grad else {}
        cfg = mod.TuningConfig(block_q=64, block_kv=64, max_concurrent_steps=2, causal=causal,
                               **bwd)
        fwd = lambda q, k, v: mod.attention(q, k, v, cfg)   # noqa: E731
        fn = jax.grad(lambda *a: fwd(*a).astype(jnp.float32).sum(), argnums=(0, 1, 2)) \
            if grad else fwd
        return fn, [((1, 256, 2, 64), jnp.float16)] * 3

    def ragged_dot(side):
        mod = mod_of(side, "gpu.ragged_dot_mgpu")

        def fn(lhs, rhs, sizes):
            return mod.ragged_dot(lhs, rhs, group_sizes=sizes, block_m=64, block_n=64,
                                  block_k=64, max_concurrent_steps=2, grid_block_n=1)
        return fn, [((512, 256), jnp.float16), ((4, 256, 256), jnp.float16), ((4,), jnp.int32)]

    return {"hopper_matmul": hopper, "attention": attention,
            "attention_causal": lambda side: attention(side, causal=True),
            "attention_grad": lambda side: attention(side, grad=True),
            "ragged_dot": ragged_dot}


def main(argv=None):
    names = sys.argv[1:] if argv is None else argv
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    sys.path.insert(0, str(TOOLS))
    import jax
    import jax_ops_copy
    from jax.experimental import topologies

    from pallas_mgpu import aot

    def mod_of(side, name):
        return jax_ops_copy.ours_ops().load(name) if side == "ours" else \
            jax_ops_copy.jax_ops(name)
    cases = _cases(mod_of)
    topo = topologies.get_topology_desc(platform="cuda", topology="1x1x1",
                                        target_config=aot.target_config("h100"))
    mesh = topologies.make_mesh(topo, (1,), ("x",))
    sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
    for name in names:
        for side in ("jax", "ours"):
            result = {"case": name, "side": side}
            try:
                fn, shapes = cases[name](side)
                args = [jax.ShapeDtypeStruct(s, d, sharding=sharding) for s, d in shapes]
                # the kernels ask the context mesh for the GPU (its SM count)
                with jax.set_mesh(mesh):
                    lowered = jax.jit(fn).trace(*args).lower()
                    result["kernels"] = lowered.as_text().count("custom_call @mosaic_gpu")
                    lowered.compile()
                result["compiled"] = True
            except Exception as e:  # reported; the test asserts
                result.update(compiled=False, error=f"{type(e).__name__}: {str(e)[:600]}")
            print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
