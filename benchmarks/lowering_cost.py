"""What it costs to get a kernel ready: lowering huge grids, and the matmul first call.

    python benchmarks/lowering_cost.py

1. ``jax.jit(f).lower`` of an elementwise kernel over 10^6, 10^7 and 10^9 grid
   points (affine index maps: range checks, grid analysis and block views in
   closed form), each in a fresh process: seconds and the growth of the peak
   resident memory during the lowering.
2. First call of the blocked matmul (k on the grid) against XLA's ``a @ b``:
   trace, lower and compile separately, JAX's caches cleared, best of 5.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

_LOWER = """
import json, resource, sys, time
import jax, jax.numpy as jnp
import pallas_frontend as pl
def build(points):
    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...] * 2.0
    spec = pl.BlockSpec((1,), lambda i: (i,))
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((points,), jnp.float32),
                          grid=(points,), in_specs=[spec], out_specs=spec)
jax.jit(build(8)).lower(jax.ShapeDtypeStruct((8,), jnp.float32))   # imports, discovery
points = int(sys.argv[1])
f = build(points)
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t = time.perf_counter()
jax.jit(f).lower(jax.ShapeDtypeStruct((points,), jnp.float32))
dt = time.perf_counter() - t
grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
print(json.dumps({"seconds": dt, "grown_mib": grown}))
"""


def big_grids():
    print("| grid points | lower (s) | peak memory growth (MiB) |\n|---|---|---|")
    for points in (10**6, 10**7, 10**9):
        out = subprocess.run([sys.executable, "-c", _LOWER, str(points)], capture_output=True,
                             text=True, check=True).stdout
        r = json.loads(out.strip().splitlines()[-1])
        print(f"| {points:.0e} | {r['seconds']:.3f} | {r['grown_mib']:.1f} |", flush=True)


def first_calls():
    import jax

    import cpu_kernels as K
    import pallas_frontend as pl

    def phases(make, args):
        jax.clear_caches()
        t0 = time.perf_counter()
        traced = jax.jit(make()).trace(*args)
        t1 = time.perf_counter()
        lowered = traced.lower()
        t2 = time.perf_counter()
        lowered.compile()
        return t1 - t0, t2 - t1, time.perf_counter() - t2

    print("\n| matmul n | ours trace / lower / compile (s) | XLA trace / lower / compile (s) "
          "| ours / XLA |\n|---|---|---|---|")
    for n in (512, 1024, 2048):
        build, ref, args = K.matmul(n)
        best = {}
        for name, make in (("ours", lambda: build(pl)), ("xla", lambda: ref)):
            phases(make, args)
            best[name] = min((phases(make, args) for _ in range(5)), key=sum)
        o, x = best["ours"], best["xla"]
        print(f"| {n} | {' / '.join(f'{v:.3f}' for v in o)} | "
              f"{' / '.join(f'{v:.3f}' for v in x)} | {sum(o) / sum(x):.1f}x |", flush=True)


if __name__ == "__main__":
    big_grids()
    first_calls()
