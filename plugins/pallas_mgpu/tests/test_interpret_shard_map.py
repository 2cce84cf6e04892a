"""GPU interpret mode under ``shard_map`` on 2 CPU devices (a subprocess: the
device count is fixed when JAX starts): ``pallas_mgpu.kernel`` and
``pl.pallas_call`` with a cost estimate, against NumPy and JAX's own
``plgpu.kernel``.

JAX 0.12's GPU interpreter checks, on each device as it finishes, that no
barrier of *any* device is still allocated, so a kernel with a scratch
``Barrier`` under ``shard_map`` on several devices fails at random with
"Barrier remains allocated" (JAX's own ``plgpu.kernel`` too), and the next
kernels as well. Ours make that check once every device has finished
(``_jax_private.gpu_interpreter_fixes``): barrier kernels run, and a kernel
that fails leaves the process usable."""

import os
import subprocess
import sys

from jax_window import JAX_PUBLIC_GPU_INTERPRET

SCRIPT = r'''
import functools
import jax, jax.numpy as jnp, numpy as np
from jax import lax
from jax.experimental import pallas as jax_pl
from jax.experimental.pallas import mosaic_gpu as jax_plgpu
import pallas_frontend as pl
import pallas_mgpu as plgpu
P = jax.sharding.PartitionSpec
mesh = jax.sharding.Mesh(jax.devices()[:2], ["x"])
rng = np.random.default_rng(int(np.random.SeedSequence().entropy % 2**32))
x = rng.standard_normal(16).astype(np.float32)

def body(x_ref, o_ref):
    t = lax.axis_index("t")
    o_ref[pl.ds(t * 4, 4)] = x_ref[pl.ds(t * 4, 4)] * 2 + lax.axis_index("x").astype(jnp.float32)

def sharded(per_device):
    return np.asarray(jax.jit(jax.shard_map(per_device, mesh=mesh, in_specs=P("x"),
                                             out_specs=P("x"), check_vma=False))(x))

want = x.astype(np.float64) * 2 + np.repeat([0.0, 1.0], 8)
for gpu, cost_type in ((plgpu, pl.CostEstimate), (jax_plgpu, jax_pl.CostEstimate)):
    cost = cost_type(flops=16, transcendentals=0, bytes_accessed=128)
    got = sharded(lambda xs: gpu.kernel(
        body, out_type=jax.ShapeDtypeStruct((8,), jnp.float32), num_threads=2, thread_name="t",
        cost_estimate=cost, interpret=gpu.InterpretGPUParams(detect_races=True))(xs))
    np.testing.assert_allclose(got, want, rtol=1e-6, err_msg=gpu.__name__)

def call_body(x_ref, o_ref):
    o_ref[...] = x_ref[...] * 2 + lax.axis_index("x").astype(jnp.float32)
got = sharded(lambda xs: pl.pallas_call(
    call_body, jax.ShapeDtypeStruct((8,), jnp.float32),
    in_specs=[pl.BlockSpec(memory_space=plgpu.GMEM)], out_specs=pl.BlockSpec(memory_space=plgpu.GMEM),
    cost_estimate=pl.CostEstimate(flops=16, transcendentals=0, bytes_accessed=128),
    interpret=plgpu.InterpretParams(detect_races=True))(xs))
np.testing.assert_allclose(got, want, rtol=1e-6)
print("OK")
'''


@JAX_PUBLIC_GPU_INTERPRET
def test_kernels_with_a_cost_estimate_under_shard_map():
    env = dict(os.environ, JAX_PLATFORMS="cpu", PALLAS_FRONTEND_BACKENDS="mgpu",
               XLA_FLAGS="--xla_force_host_platform_device_count=2")
    out = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0 and "OK" in out.stdout, out.stdout[-2000:] + out.stderr[-4000:]


RECOVERY = r'''
import traceback
import jax, jax.numpy as jnp, numpy as np
from jax import lax
import pallas_frontend as pl
import pallas_mgpu as plgpu
P = jax.sharding.PartitionSpec
mesh = jax.sharding.Mesh(jax.devices()[:2], ["x"])
rng = np.random.default_rng(int(np.random.SeedSequence().entropy % 2**32))

def sharded(per_device, x):
    return np.asarray(jax.jit(jax.shard_map(per_device, mesh=mesh, in_specs=P("x"),
                                             out_specs=P("x"), check_vma=False))(x))

def good(x_ref, o_ref, bar):   # both threads meet at a barrier before finishing
    t = lax.axis_index("t")
    o_ref[pl.ds(t * 4, 4)] = x_ref[pl.ds(t * 4, 4)] * 2 + lax.axis_index("x").astype(jnp.float32)
    plgpu.barrier_arrive(bar)
    plgpu.barrier_wait(bar)

def bad(x_ref, o_ref, bar):    # device 1 reads past its block, a barrier allocated
    o_ref[...] = x_ref[pl.ds(lax.axis_index("x") * 4, 8)]

def run(body, x):
    return sharded(lambda xs: plgpu.kernel(
        body, out_type=jax.ShapeDtypeStruct((8,), jnp.float32), num_threads=2, thread_name="t",
        scratch_types=[plgpu.Barrier(num_arrivals=2)], interpret=plgpu.InterpretParams())(xs), x)

def check_good():
    x = rng.standard_normal(16).astype(np.float32)
    want = x.astype(np.float64) * 2 + np.repeat([0.0, 1.0], 8)
    np.testing.assert_allclose(run(good, x), want, rtol=1e-6)

def failed_with_oob(e):   # the failing device's error, not the other device's broken wait
    text = "".join(traceback.format_exception(e))
    return "Out-of-bounds read" in text and "BrokenBarrierError" not in text

for _ in range(4):
    check_good()
try:
    run(bad, rng.standard_normal(16).astype(np.float32))
    raise SystemExit("the bad kernel ran")
except jax.errors.JaxRuntimeError as e:
    assert failed_with_oob(e), e
try:   # JAX reports a failed effectful computation once more (its ordered-effect token)
    jax.effects_barrier()
except Exception as e:
    assert failed_with_oob(e), e
for _ in range(6):
    check_good()
print("OK")
'''


def test_barrier_kernels_and_a_failed_kernel_under_shard_map():
    """Kernels with a scratch barrier, then one that fails on one device (an
    out-of-bounds read), then more: every good one matches NumPy."""
    env = dict(os.environ, JAX_PLATFORMS="cpu", PALLAS_FRONTEND_BACKENDS="mgpu",
               XLA_FLAGS="--xla_force_host_platform_device_count=2")
    out = subprocess.run([sys.executable, "-c", RECOVERY], env=env, capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0 and "OK" in out.stdout, out.stdout[-2000:] + out.stderr[-4000:]
