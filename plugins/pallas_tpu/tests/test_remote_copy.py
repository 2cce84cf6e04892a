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


def _permute_with_id_type(Pl, T, id_type, interpret):
    """Right permute naming the neighbour as JAX's tests do: a 1-tuple of mesh
    coordinates with DeviceIdType.MESH, or the logical device id."""
    def kernel(x_ref, o_ref, sems):
        right = jax.lax.rem(jax.lax.axis_index("x") + 1, N)
        dev = (right,) if id_type is Pl.DeviceIdType.MESH else right
        T.async_remote_copy(x_ref, o_ref, sems.at[0], sems.at[1], device_id=dev,
                            device_id_type=id_type).wait()
    return Pl.pallas_call(
        kernel, out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
        in_specs=[Pl.BlockSpec(memory_space=Pl.ANY)], out_specs=Pl.BlockSpec(memory_space=Pl.ANY),
        scratch_shapes=[T.SemaphoreType.DMA(2)],     # an int shape, as JAX accepts
        interpret=interpret)


@pytest.mark.parametrize("id_type", ["MESH", "LOGICAL"])
@pytest.mark.filterwarnings("ignore:device_id_type is deprecated")
def test_remote_copy_device_id_type_matches_jax(id_type):
    if len(jax.devices()) < N:
        pytest.skip(f"needs {N} host devices")
    from jax.experimental import pallas as jpl
    from jax.experimental.pallas import tpu as jpltpu
    mesh = Mesh(np.array(jax.devices()[:N]), ("x",))
    x = np.random.default_rng().standard_normal((N * 8, 128)).astype(np.float32)
    xs = jax.device_put(x, NamedSharding(mesh, P("x", None)))
    outs = []
    for Pl, T in ((pl, pltpu), (jpl, jpltpu)):
        call = _permute_with_id_type(Pl, T, getattr(Pl.DeviceIdType, id_type), T.InterpretParams())
        f = jax.jit(jax.shard_map(call, mesh=mesh, in_specs=P("x", None), out_specs=P("x", None),
                                  check_vma=False))
        outs.append(np.asarray(f(xs)))
    want = np.roll(x.reshape(N, 8, 128), 1, axis=0).reshape(N * 8, 128)
    np.testing.assert_array_equal(outs[0], want)
    np.testing.assert_array_equal(outs[0], outs[1])


def test_logical_device_id_must_be_one_int():
    with pytest.raises(ValueError, match="LOGICAL device_id is one int"):
        pltpu.make_async_remote_copy(None, None, None, None, device_id=(1,),
                                     device_id_type=pl.DeviceIdType.LOGICAL)
