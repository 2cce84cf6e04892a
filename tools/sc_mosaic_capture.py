"""pytest plugin (``-p sc_mosaic_capture``): every SparseCore kernel a test
launches is lowered and compiled for a TPU topology with SparseCores, without
a device, and its Mosaic modules are recorded; the test then goes on with
zeros for the kernel's outputs (its value checks fail: nothing ran).

Settings (environment): ``SC_MOSAIC_SIDE`` ``jax`` (JAX's ``mpmd_map_p`` and
``pallas_call_p`` are captured) or ``ours`` (``pallas_frontend``'s
``pallas_call_p``); ``SC_MOSAIC_OUT``, the JSON-lines file the records are
appended to; ``SC_MOSAIC_TOPOLOGY`` (default ``v6e:2x2``).

For the test file to take this host for that chip: the context's abstract mesh
names the topology's device (``get_sparse_core_info`` and the kernels' tiling
read it), and ``jtu.is_device_tpu*`` answer for it. A kernel that JAX refuses
to lower raises as it would on the chip (tests expecting the error pass).
"""

from __future__ import annotations

import json
import os
import re
import traceback

for _k, _v in (("TPU_ACCELERATOR_TYPE", "v5litepod-4"), ("TPU_WORKER_HOSTNAMES", "localhost"),
               ("ALLOW_MULTIPLE_LIBTPU_LOAD", "1"), ("JAX_PLATFORMS", "cpu")):
    os.environ.setdefault(_k, _v)

SIDE = os.environ.get("SC_MOSAIC_SIDE", "jax")
OUT = os.environ.get("SC_MOSAIC_OUT", "sc_mosaic.jsonl")
TOPOLOGY = os.environ.get("SC_MOSAIC_TOPOLOGY", "v6e:2x2")

_state = {"test": "<collection>", "index": 0}


def _record(rec: dict) -> None:
    with open(OUT, "a") as f:
        f.write(json.dumps(rec) + "\n")


def _first_line(e: BaseException) -> str:
    text = f"{type(e).__name__}: {e}".strip()
    return text.splitlines()[0][:400] if text else type(e).__name__


def _chip_version(device_kind: str) -> tuple[int, str]:
    """('TPU v6 lite' -> (6, 'e'), 'TPU v5' -> (5, 'p'), 'TPU7x' -> (7, 'x'))."""
    m = re.match(r"TPU\s*v?(\d+)\s*(\w*)", device_kind)
    version, rest = int(m.group(1)), m.group(2)
    variant = {"lite": "e", "": "p" if version == 5 else ""}.get(rest, rest)
    return version, variant


def _patch_test_util(device_kind: str) -> None:
    from jax._src import test_util as jtu
    version, variant = _chip_version(device_kind)
    jtu.get_tpu_version = lambda: version
    jtu.is_device_tpu_at_least = lambda v: version >= v
    jtu.is_device_tpu = lambda v=None, var="": v is None or (v == version and var == variant)


def _capturing(prim, mesh):
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding, PartitionSpec

    import sc_mosaic_text
    original = prim.bind

    def bind(*args, **params):
        _state["index"] += 1
        rec = {"test": _state["test"], "index": _state["index"], "side": SIDE}
        avals = [jax.typeof(a) for a in args]
        rec["operands"] = [_typename(a) for a in avals]    # pairs hypothesis launches
        if not all(hasattr(a, "shape") and not hasattr(a, "inner_aval") for a in avals):
            rec["status"] = "not captured: a Ref operand"
            _record(rec)
            raise NotImplementedError("sc_mosaic_capture: a kernel with Ref operands")
        specs = [jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=NamedSharding(mesh, PartitionSpec()))
                 for a in avals]
        # ours' pl.kernel binds inside its own jit trace, where set_mesh is refused
        with (jax.set_mesh(mesh) if _trace_state_clean() else
              jax.sharding.use_abstract_mesh(mesh.abstract_mesh)):
            try:
                # out_shardings: a kernel without operands is placed on the topology too;
                # one with neither operands nor results through a placed scalar beside it
                # (JAX's pl.kernel(out_type=()) launches such)
                placed = len(avals) == 0

                def launch(*xs):
                    outs = original(*xs, **params)
                    return (outs, jnp.zeros((), jnp.int32)) if placed else outs
                lowered = jax.jit(launch, out_shardings=NamedSharding(mesh, PartitionSpec())
                                  ).trace(*specs).lower()
            except Exception as e:
                rec.update(status="lower error", error=_first_line(e),
                           where=traceback.format_exc(limit=-3)[-1500:])
                _record(rec)
                raise
            rec["modules"] = sc_mosaic_text.mosaic_modules(lowered.as_text())
            try:
                lowered.compile()
                rec["status"] = "compiled"
            except Exception as e:
                rec.update(status="compile error", error=_first_line(e))
        out_info = lowered.out_info[0] if placed else lowered.out_info
        outs = [jnp.zeros(o.shape, o.dtype) for o in jax.tree.leaves(out_info)]
        rec["results"] = [_typename(o) for o in outs]
        _record(rec)
        return outs if prim.multiple_results else outs[0]

    prim.bind = bind


def _typename(x) -> str:
    return f"{getattr(x, 'dtype', '?')}{list(getattr(x, 'shape', ()))}"


def _trace_state_clean() -> bool:
    from jax._src import core
    return core.trace_state_clean()


def _primitives():
    if SIDE == "ours":
        from pallas_frontend.call_primitive import pallas_call_p
        return [pallas_call_p]
    from jax._src.pallas import pallas_call
    prims = [pallas_call.pallas_call_p]
    try:
        from jax._src.pallas import mpmd
        prims.append(mpmd.mpmd_map_p)
    except ImportError:   # a JAX without mpmd_map launches every kernel as a pallas_call
        pass
    return prims


def pytest_configure(config):
    import jax
    from pallas_tpu import aot
    mesh = aot.topology_mesh(TOPOLOGY)
    device = mesh.devices.flat[0]
    chip = jax.sharding.AbstractDevice(device.device_kind, getattr(device, "num_cores", 1), "tpu")
    # for the whole run, collection included (test parameters read the chip)
    jax.sharding.use_abstract_mesh(
        jax.sharding.AbstractMesh((), (), abstract_device=chip)).__enter__()
    _patch_test_util(device.device_kind)
    for prim in _primitives():
        _capturing(prim, mesh)


def pytest_runtest_setup(item):
    _state.update(test=item.nodeid, index=0)


def pytest_runtest_logreport(report):
    if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
        _record({"test": report.nodeid, "side": SIDE, "outcome": report.outcome,
                 "when": report.when,
                 "message": "" if report.outcome == "passed" else
                 str(getattr(report, "longrepr", ""))[-600:].strip().splitlines()[-1:]})
