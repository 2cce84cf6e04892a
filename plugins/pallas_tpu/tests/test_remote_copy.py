"""A ring right-permute with async_remote_copy over 4 host devices, in TPU
interpret mode (one simulated TPU per device), and AOT-compiled for v5e:2x2."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

import pallas_frontend as pl
import pallas_tpu as pltpu

N = 4


def right_permute_kernel(x_ref, o_ref, send_sem, recv_sem):
    me = jax.lax.axis_index("x")
    right = jax.lax.rem(me + 1, N)
    copy = pltpu.make_async_remote_copy(x_ref, o_ref, send_sem, recv_sem, device_id={"x": right})
    copy.start()
    copy.wait_send()
    copy.wait_recv()


def right_permute(x, interpret=False):
    return pl.pallas_call(
        right_permute_kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        in_specs=[pl.BlockSpec(memory_space=pltpu.ANY)],
        out_specs=pl.BlockSpec(memory_space=pltpu.ANY),
        scratch_shapes=[pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.DMA],
        compiler_params=pltpu.CompilerParams(),
        interpret=interpret)(x)


def test_ring_right_permute_interpret_4_devices():
    if len(jax.devices()) < N:
        pytest.skip(f"needs {N} host devices (XLA_FLAGS=--xla_force_host_platform_device_count)")
    mesh = Mesh(np.array(jax.devices()[:N]), ("x",))
    rng = np.random.default_rng()
    x = rng.standard_normal((N * 8, 128)).astype(np.float32)
    f = jax.jit(jax.shard_map(
        functools.partial(right_permute, interpret=pltpu.InterpretParams()), mesh=mesh,
        in_specs=P("x", None), out_specs=P("x", None),
        check_vma=False))  # JAX's TPU interpreter re-evaluates axis_index without vma
    out = np.asarray(f(jax.device_put(x, NamedSharding(mesh, P("x", None)))))
    want = np.roll(x.astype(np.float64).reshape(N, 8, 128), 1, axis=0).reshape(N * 8, 128)
    np.testing.assert_array_equal(out, want)


def test_ring_right_permute_aot_v5e_2x2():
    from jax.experimental import topologies
    topo = topologies.get_topology_desc(topology_name="v5e:2x2", platform="tpu")
    mesh = Mesh(np.array(topo.devices), ("x",))
    spec = jax.ShapeDtypeStruct((N * 8, 128), jnp.float32,
                                sharding=NamedSharding(mesh, P("x", None)))
    f = jax.jit(jax.shard_map(right_permute, mesh=mesh, in_specs=P("x", None),
                              out_specs=P("x", None)))
    lowered = f.trace(spec).lower()
    assert "tpu_custom_call" in lowered.as_text()
    lowered.compile()
