"""Run as a subprocess: compiles kernels written with the seed API for a GPU, device-less.

``python gpu_aot_cases.py H100`` prints one JSON object: per case the custom
kernels in XLA:GPU's thunk sequence and the facts read from the kernel's TTIR;
plus whether a corrupted TTIR was refused. Heavy XLA:GPU compiles stay out of
the pytest process this way.
"""

import dataclasses
import json
import re
import sys

import jax
import jax.numpy as jnp

import pallas_triton as pt
from pallas_frontend.testing import kernels as CK
from pallas_triton import aot, gpu_launch

import gpu_kernels as GK  # noqa: E402  (this directory)
import kernels as K  # noqa: E402
import prefetch_kernels as PK  # noqa: E402

F32 = jnp.float32


def _s(*shape, dtype=F32):
    return jax.ShapeDtypeStruct(shape, dtype)


def cases():
    """name -> (fn, operand structs, num_warps, expected programs). Grids counted by hand."""
    def conf(builder, *args, warps):
        params = pt.CompilerParams(num_warps=warps, num_stages=2)
        return lambda *xs: builder(*args, compiler_params=params)(*xs)
    out = {
        "vector_add": (conf(CK.vector_add, 1024, 128, warps=4), [_s(1024), _s(1024)], 4, 8),
        "ragged_add": (conf(CK.vector_add, 1000, 128, warps=2), [_s(1000), _s(1000)], 2, 8),
        "blocked_matmul": (conf(CK.blocked_matmul, 128, 256, 384, 128, 128, 128, warps=8),
                           [_s(128, 384), _s(384, 256)], 8, 2),
        "scratch_matmul": (conf(CK.scratch_matmul, 128, 256, 384, 64, 128, 128, warps=4),
                           [_s(128, 384), _s(384, 256)], 4, 4),
        "softmax": (conf(CK.softmax, 32, 64, 8, warps=4), [_s(32, 64)], 4, 4),
        "layer_norm": (conf(CK.layer_norm, 32, 64, 8, 1e-5, warps=4),
                       [_s(32, 64), _s(64), _s(64)], 4, 4),
        "transpose_2d": (conf(CK.transpose_2d, 256, 384, 128, 128, warps=4), [_s(256, 384)], 4, 6),
        "aliased_scale": (conf(CK.aliased_scale, 1024, 256, warps=4), [_s(1), _s(1024)], 4, 4),
    }
    seed = pt.CompilerParams(num_warps=4, num_stages=3)
    out["seed_add"] = (lambda x, y: K.add(x, y, block=1024, compiler_params=seed),
                       [_s(4096), _s(4096)], 4, 4)
    out["seed_matmul_bf16"] = (
        lambda a, b: K.matmul(a, b, bm=64, bn=64, bk=32, compiler_params=seed),
        [_s(256, 128, dtype=jnp.bfloat16), _s(128, 192, dtype=jnp.bfloat16)], 4, 12)
    out["seed_softmax"] = (lambda x: K.softmax(x, compiler_params=seed), [_s(64, 1000)], 4, 64)
    for name, (fn, structs, warps, programs) in GK.aot_cases().items():
        out[name] = (fn, structs, warps, programs)
    out.update(PK.aot_cases())          # scalar prefetch: index maps read data in the kernel
    return out


def _ttir_func(ttir):
    return re.search(r"tt\.func public @(\w+)", ttir).group(1)


def main(gpu, only=None):
    report = {"gpu": gpu, "cases": {}}
    specs = {}
    orig = gpu_launch.launch_spec

    def recording(kernel, target, params):
        spec = orig(kernel, target, params)
        specs.setdefault("current", []).append(spec)
        return spec
    gpu_launch.launch_spec = recording
    for name, (fn, structs, warps, programs) in cases().items():
        if only and name not in only:
            continue
        specs["current"] = []
        try:
            thunks = aot.launched_kernels(jax.jit(fn), *structs, gpu=gpu)
        except Exception as e:  # noqa: BLE001  (reported to the parent test)
            report["cases"][name] = {"error": f"{type(e).__name__}: {e}"[:2000]}
            continue
        report["cases"][name] = {
            "thunks": thunks, "num_warps": warps, "programs": programs,
            "ttir_funcs": [_ttir_func(s.ttir) for s in specs["current"]],
            "targets": [list(s.target) for s in specs["current"]]}
    # A corrupted TTIR must be refused by XLA, not launched.
    gpu_launch.launch_spec = lambda k, t, p: dataclasses.replace(
        orig(k, t, p), ttir=orig(k, t, p).ttir.replace("tt.func", "tt.fucn", 1))
    fn, structs, _, _ = cases()["vector_add"]
    try:
        aot.compile_for_gpu(jax.jit(fn), *structs, gpu=gpu)
        report["corrupted"] = "compiled"
    except Exception as e:  # noqa: BLE001
        report["corrupted"] = f"{type(e).__name__}: {e}"[:500]
    print("REPORT " + json.dumps(report))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:] or None)
