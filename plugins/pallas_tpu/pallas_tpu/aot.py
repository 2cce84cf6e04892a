"""Compile-only for a TPU on a host without one: libtpu compiles for a named
topology (``jax.experimental.topologies``), running the real Mosaic compiler.

On a TPU host the local devices are used instead.
"""

from __future__ import annotations

import functools
import importlib.util
import os

from pallas_frontend.backend_api import BackendUnavailableError

TOPOLOGY = "v5e:2x2"


def _prepare_libtpu() -> None:
    """Set before libtpu loads, on the compile-only path of a host whose JAX
    runs without a TPU (on a TPU host they would misdescribe it): the first
    two silence libtpu's start-up warnings; the third lets several processes
    (parallel test runs) load libtpu, whose lock guards TPU chips there are none of."""
    os.environ.setdefault("TPU_ACCELERATOR_TYPE", "v5litepod-4")
    os.environ.setdefault("TPU_WORKER_HOSTNAMES", "localhost")
    os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")


def _libtpu_requirement() -> str:
    """The libtpu built for the installed JAX, through JAX's own ``tpu`` extra at
    that exact version (what this distribution's [libtpu] extra resolves to): a
    plain ``libtpu`` would be the newest, which an older jaxlib cannot load."""
    import jax
    return f"jax[tpu]=={jax.__version__}"


@functools.cache
def topology_mesh(topology: str = TOPOLOGY):
    """A one-device mesh of ``topology``: a single-chip program for it."""
    import jax
    from jax.experimental import topologies
    if importlib.util.find_spec("libtpu") is None:
        raise BackendUnavailableError(
            f"compiling for TPU topology {topology!r} without a TPU needs libtpu: "
            f"pip install '{_libtpu_requirement()}'")
    _prepare_libtpu()
    try:
        topo = topologies.get_topology_desc(topology_name=topology, platform="tpu")
    except Exception as e:
        if "chips_per_host_bounds" not in str(e):
            raise
        # an older libtpu (JAX 0.10's 0.0.42) takes a topology smaller than its
        # default host (2x2x1 chips) only when told the host is that small
        dims = tuple(int(d) for d in topology.split(":")[-1].split("x"))
        topo = topologies.get_topology_desc(topology_name=topology, platform="tpu",
                                            chips_per_host_bounds=(*dims, 1, 1)[:3])
    return jax.sharding.Mesh(topo.devices[:1], ("x",))


def lower_for_tpu(fn, *args, topology: str = TOPOLOGY):
    """``jax.jit(fn)`` lowered for one TPU chip: the local one on a TPU host,
    else one chip of ``topology``. ``args``: arrays or ShapeDtypeStructs."""
    import jax
    if jax.default_backend() == "tpu":
        return jax.jit(fn).lower(*args)
    from jax.sharding import NamedSharding, PartitionSpec
    mesh = topology_mesh(topology)
    specs = [jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=NamedSharding(mesh, PartitionSpec()))
             for a in args]
    # JAX's TPU lowering reads chip details (emit_pipeline tiling) from the context mesh.
    with jax.set_mesh(mesh):
        return jax.jit(fn).trace(*specs).lower()


def compile_for_tpu(fn, *args, topology: str = TOPOLOGY):
    """Lowers and compiles (never runs) ``fn`` for one TPU chip; see ``lower_for_tpu``."""
    import jax
    lowered = lower_for_tpu(fn, *args, topology=topology)
    if jax.default_backend() == "tpu":
        return lowered.compile()
    with jax.set_mesh(topology_mesh(topology)):
        return lowered.compile()
