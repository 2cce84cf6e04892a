"""GPU check script for pallas_triton.

On a CUDA/ROCm machine it
1. runs the conformance suite with ``--pallas-backend triton`` and the plugin's GPU-only
   tests (``tests/test_gpu_launch.py``: launch and numerics vs the interpreter and XLA),
   each in a subprocess,
2. times add, matmul (bf16 and f32, 4096^2 and 8192^2), softmax, layer norm and
   flash-attention forward: pallas_triton (autotuned over a few Configs) against
   XLA (``jnp``) and against JAX's deprecated Pallas Triton backend running the
   same kernel source, printing GB/s or TFLOP/s and the ratios in one table.
On a machine without a GPU it lists the rows it would time, says it skips them,
compiles every kernel for sm_90 (codegen end to end) and runs the autotuner on a
small add under Triton's interpreter, so CI keeps this script working.

Usage: python benchmarks/gpu_triton.py
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import subprocess
import sys
import time
from collections.abc import Callable

os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import pallas_triton as pt  # noqa: E402
from pallas_triton.autotune import Config  # noqa: E402

KERNELS_PATH = os.path.join(os.path.dirname(__file__), "..", "plugins", "pallas_triton",
                            "tests", "kernels.py")


def load_kernels(pallas_module=None):
    """The plugin's test kernels; with ``pallas_module`` they are rebound to it (the
    same source then runs on JAX's own Pallas)."""
    name = "kernels" if pallas_module is None else f"kernels_on_{pallas_module.__name__}"
    spec = importlib.util.spec_from_file_location(name, KERNELS_PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if pallas_module is not None:
        module.pl = pallas_module
    return module


K = load_kernels()
P = pt.CompilerParams


@dataclasses.dataclass(frozen=True)
class Row:
    """One line of the table: a kernel on given inputs and how to count its work."""
    name: str
    kernel: str                         # a function of kernels.py
    shapes: tuple[tuple[int, ...], ...]
    dtype: str
    metric: str                         # "GB/s" or "TFLOP/s"
    work: Callable[..., float]          # bytes or flops for the given shapes
    configs: tuple[Config, ...]         # autotuner candidates: block kwargs + CompilerParams
    xla: Callable

    def args(self, rng):
        return [jnp.asarray(rng.standard_normal(s), self.dtype) for s in self.shapes]


def _matmul_row(n, dtype):
    configs = (Config({"bm": 128, "bn": 128, "bk": 64}, P(num_warps=8, num_stages=3)),
               Config({"bm": 128, "bn": 256, "bk": 64}, P(num_warps=8, num_stages=3)),
               Config({"bm": 64, "bn": 128, "bk": 32}, P(num_warps=4, num_stages=4)))
    return Row(f"matmul {dtype} {n}^2", "matmul", ((n, n), (n, n)), dtype, "TFLOP/s",
               lambda shapes, _: 2.0 * n ** 3, configs,
               lambda a, b: jnp.dot(a, b, preferred_element_type=jnp.float32))


def _layer_norm_xla(x, w, b, eps=1e-5):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) * jax.lax.rsqrt(var + eps) * w + b


def _attention_xla(q, k, v):
    s = (q.astype(jnp.float32) @ k.astype(jnp.float32).T) / np.sqrt(q.shape[-1])
    return (jax.nn.softmax(s, axis=-1) @ v.astype(jnp.float32)).astype(q.dtype)


# bytes moved: every operand read once, the output written once (output = first operand's shape)
def _io_bytes(shapes, itemsize):
    return (sum(np.prod(s) for s in shapes) + np.prod(shapes[0])) * itemsize


ROWS = (
    Row("add f32 2^24", "add", ((1 << 24,), (1 << 24,)), "float32", "GB/s", _io_bytes,
        (Config({"block": 1024}, P(num_warps=4)), Config({"block": 4096}, P(num_warps=8))),
        jnp.add),
    _matmul_row(4096, "bfloat16"), _matmul_row(8192, "bfloat16"),
    _matmul_row(4096, "float32"), _matmul_row(8192, "float32"),
    Row("softmax f32 4096x1024", "softmax", ((4096, 1024),), "float32", "GB/s", _io_bytes,
        (Config({}, P(num_warps=4)), Config({}, P(num_warps=8))),
        lambda x: jax.nn.softmax(x, axis=-1)),
    Row("layer norm f32 4096x1024", "layer_norm", ((4096, 1024), (1024,), (1024,)), "float32",
        "GB/s", _io_bytes, (Config({}, P(num_warps=4)), Config({}, P(num_warps=8))),
        _layer_norm_xla),
    Row("flash attn fwd bf16 4096x64", "flash_attention", ((4096, 64),) * 3, "bfloat16",
        "TFLOP/s", lambda shapes, _: 4.0 * shapes[0][0] ** 2 * shapes[0][1],
        (Config({"bq": 64, "bk": 64}, P(num_warps=4, num_stages=3)),
         Config({"bq": 128, "bk": 64}, P(num_warps=8, num_stages=2))),
        _attention_xla),
)


def pallas_triton_fn(row: Row):
    """The autotuned pallas_triton kernel of ``row`` (runs where ``config.call_options()`` says)."""
    @pt.autotune(row.configs)
    def tuned(config):
        return lambda *xs: getattr(K, row.kernel)(*xs, **config.blocks, **config.call_options())
    return tuned


def jax_pallas_fn(row: Row):
    """The same kernel source on JAX's deprecated Pallas Triton backend (first config)."""
    from jax.experimental import pallas as jax_pallas
    from jax.experimental.pallas import triton as jax_pallas_triton
    kernels = load_kernels(jax_pallas)
    config = row.configs[0]
    params = jax_pallas_triton.CompilerParams(num_warps=config.compiler_params.num_warps or 4,
                                              num_stages=config.compiler_params.num_stages or 3)
    return jax.jit(lambda *xs: getattr(kernels, row.kernel)(*xs, **config.blocks,
                                                             compiler_params=params))


def seconds_per_call(fn, args, repeat=20) -> float:
    jax.block_until_ready(fn(*args))
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def rate(row: Row, args, fn) -> float | str:
    """GB/s or TFLOP/s of ``fn`` on ``args``, or why it was not measured."""
    try:
        secs = seconds_per_call(fn, args)
    except Exception as e:  # noqa: BLE001  (one failing column must not hide the others)
        return f"error: {type(e).__name__}"
    itemsize = np.dtype(jnp.dtype(row.dtype)).itemsize
    scale = 1e-9 if row.metric == "GB/s" else 1e-12
    return row.work([a.shape for a in args], itemsize) / secs * scale


def _cell(v):
    return f"{v:>12.1f}" if isinstance(v, float) else f"{v:>12}"


def _ratio(a, b):
    return f"{a / b:>9.2f}" if isinstance(a, float) and isinstance(b, float) else f"{'n/a':>9}"


GPU_TESTS = os.path.join(os.path.dirname(KERNELS_PATH), "test_gpu_launch.py")


def run_conformance_suite() -> int:
    rc = 0
    for what, args in (
            ("conformance suite, --pallas-backend triton (launched through XLA's Triton call)",
             ["--pyargs", "pallas_frontend.testing", "--pallas-backend", "triton"]),
            ("GPU-only tests (launch, numerics vs interpreter and XLA)", [GPU_TESTS])):
        print(f"{what}:", flush=True)
        proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                               *args], capture_output=True, text=True)
        print("  " + (proc.stdout.strip().splitlines() or ["(no output)"])[-1])
        rc = rc or proc.returncode
    return rc


def time_rows() -> None:
    rng = np.random.default_rng(0)
    print(f"{'kernel':<30}{'metric':>8}{'pallas_triton':>14}{'XLA':>12}{'JAX Pallas':>12}"
          f"{'vs XLA':>9}{'vs JAX P':>9}")
    for row in ROWS:
        args = row.args(rng)
        ours = rate(row, args, pallas_triton_fn(row))
        xla = rate(row, args, jax.jit(row.xla))
        theirs = rate(row, args, jax_pallas_fn(row))
        print(f"{row.name:<30}{row.metric:>8}{_cell(ours):>14}{_cell(xla)}{_cell(theirs)}"
              f"{_ratio(ours, xla)}{_ratio(ours, theirs)}", flush=True)


def cpu_checks() -> None:
    print(f"{'row it would time':<30}{'metric':>8}  {'sm_90 cubin bytes':>18}{'codegen+ptxas s':>17}")
    for row in ROWS:
        structs = [jax.ShapeDtypeStruct(s, row.dtype) for s in row.shapes]
        config = row.configs[0]
        start = time.perf_counter()
        ir = pt.kernel_ir_of(lambda *xs: getattr(K, row.kernel)(*xs, **config.blocks,
                                                                **config.call_options()),
                             *structs)
        asm = pt.compile_for_target(ir, target=("cuda", 90), params=config.compiler_params)
        print(f"{row.name:<30}{row.metric:>8}  {len(asm['cubin']):>18}"
              f"{time.perf_counter() - start:>17.2f}", flush=True)
    # the autotuner on this machine: a small add under Triton's interpreter
    tuner = pallas_triton_fn(dataclasses.replace(
        ROWS[0], configs=(Config({"block": 64}), Config({"block": 1024}))))
    x, y = (jnp.asarray(np.random.default_rng(1).standard_normal(4096), jnp.float32)
            for _ in range(2))
    np.testing.assert_allclose(np.asarray(tuner(x, y)), np.asarray(x, np.float64) + np.asarray(y),
                               rtol=1e-6, atol=1e-6)
    for trial in next(iter(tuner.trials.values())):
        print(f"autotune (Triton interpreter, add 4096): {dict(trial.config.blocks)} "
              f"{trial.seconds * 1e3:.1f} ms")
    print(f"autotune picked {dict(tuner.best_config(x, y).blocks)}")


def main() -> int:
    has_gpu = jax.default_backend() == "gpu"
    if not has_gpu:
        cpu_checks()
        print(f"SKIP: no GPU (jax backend '{jax.default_backend()}'): the conformance suite on "
              f"GPU and the {len(ROWS)} timed rows above need a CUDA/ROCm device.")
        return 0
    print(f"device: {jax.devices()[0].device_kind}")
    suite_rc = run_conformance_suite()
    time_rows()
    return suite_rc


if __name__ == "__main__":
    sys.exit(main())
