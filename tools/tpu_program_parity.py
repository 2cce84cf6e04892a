"""JAX's TPU tests compiled device-less for a chip, ours' XLA program against JAX's.

    python tools/tpu_program_parity.py --suite .tpu-native/suite --ids IDS.txt
                                       [--topology v5e:2x2] [--json OUT]

``IDS.txt`` lists ``file.py::Class::test`` lines of the JAX test files that
``tools/tpu_native.py pack`` copied (``suite/jax``: JAX's, ``suite/ours``:
imports swapped). Each side runs the listed tests in a process of its own;
the first jitted function of the test file, or of the shipped kernels it
tests (JAX's ``pallas/ops`` tree, or ours' copy of it, ``pf_jax_ops``), that
a test calls is lowered and compiled for one chip of ``--topology`` by
libtpu, without a device, and not run (the test stops there). Compared per
test: the compiled entry computation (each instruction's type, with its
memory placement, and opcode) and the Mosaic kernels' operand types; each
test's line also gives both sides' host seconds to trace and lower, and to
compile. A chip runs what XLA compiled, so a difference here is one the chip
would see: ours' core_map once let XLA move read-only operands into VMEM, and
the v5e gave wrong values and hangs that TPU interpret mode on CPU could not
show.

Tests that call no such function are listed as not compared. Nothing here
runs in CI (it needs the pack and libtpu);
plugins/pallas_tpu/tests/test_core_map_outputs.py checks one program so.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def entry_instructions(compiled_text: str) -> list[str]:
    """``type opcode`` of each instruction of the entry computation, sorted:
    placements (``S(1)``: VMEM) kept, names and metadata left out."""
    entry = compiled_text[compiled_text.index("\nENTRY"):]
    entry = entry[:entry.index("\n}")]
    found = re.findall(r"^\s*(?:ROOT )?%\S+ = (.+?) ([\w-]+)\(", entry, re.MULTILINE)
    return sorted(f"{shape} {op}" for shape, op in found)


def kernel_operands(lowered_text: str) -> list[list[str]]:
    """Per Mosaic kernel of the program, its operands' memref types."""
    import sc_mosaic_text
    out = []
    for module in sc_mosaic_text.mosaic_modules(lowered_text):
        block = next((line for line in module.splitlines() if "^bb0(" in line), "")
        out.append(re.findall(r"memref<[^>]*>", block))
    return out


# --- one side, in its own process -------------------------------------------------

def _capture(side: str, folder: Path, ids: list[str], topology: str) -> dict:
    import importlib

    import jax
    import numpy as np
    from jax.experimental import topologies

    sys.path[:0] = [str(folder), str(HERE)]
    import tpu_cpu_plugin
    chip = topology.split(":")[0]
    tpu_cpu_plugin.answer_as_chip(chip)       # the tests' chip queries answer for it
    tpu_cpu_plugin.answer_tpu_info(chip)
    topo = topologies.get_topology_desc(topology_name=topology, platform="tpu")
    mesh = jax.sharding.Mesh(np.array(topo.devices)[:1], ("x",))
    # jitted functions of the test files and of the kernels they test (JAX's ops
    # tree, or ours' copy of it), not Pallas's own
    import jax.experimental.pallas.ops as jax_ops
    sources = (str(folder), str(Path(jax_ops.__file__).parent))

    class Captured(BaseException):
        """Raised past the test's own handlers (hypothesis would shrink on an Exception)."""

    class NotCompiled(BaseException):
        """This tool could not compile the call: raised past the test's handlers too
        (hypothesis, shrinking on an error of the tool's, once drew examples until
        this host ran out of memory)."""

    chip_device = jax.sharding.SingleDeviceSharding(topo.devices[0])

    def spec(a, sharding=None):
        if isinstance(a, (jax.Array, np.ndarray, jax.core.Tracer)):
            return jax.ShapeDtypeStruct(np.shape(a), a.dtype, sharding=sharding)
        return a        # a static argument, or a Python scalar traced as JAX would

    records, now = {}, {"test": None}
    real_jit = jax.jit

    class Compiled:
        """A jitted function that, called during a test, is compiled for the chip
        and recorded instead of run."""
        def __init__(self, jitted):
            self._jitted = jitted

        def __getattr__(self, name):
            return getattr(self._jitted, name)

        def __call__(self, *args, **kwargs):
            if now["test"] is None:
                return self._jitted(*args, **kwargs)
            start = time.perf_counter()
            # called while an outer function is traced (a vjp, another jit), the
            # operands are tracers and set_mesh is refused: their specs then name
            # the chip's device instead
            traced = any(isinstance(x, jax.core.Tracer) for x in jax.tree.leaves((args, kwargs)))
            place = functools.partial(spec, sharding=chip_device if traced else None)
            try:
                with contextlib.nullcontext() if traced else jax.set_mesh(mesh):
                    lowered = self._jitted.trace(*jax.tree.map(place, args),
                                                 **jax.tree.map(place, kwargs)).lower()
                    lowered_at = time.perf_counter()
                    compiled = lowered.compile()
            except Exception as e:      # noqa: BLE001 - recorded as this test's error
                raise NotCompiled(f"{type(e).__name__}: {str(e)[:300]}") from e
            records[now["test"]] = {"entry": entry_instructions(compiled.as_text()),
                                    "kernels": kernel_operands(lowered.as_text()),
                                    "seconds": {"trace and lower": lowered_at - start,
                                                "compile": time.perf_counter() - lowered_at}}
            raise Captured

    def fake_jit(fn=None, **kw):
        if fn is None:
            return lambda f: fake_jit(f, **kw)
        jitted = real_jit(fn, **kw)
        code = getattr(fn, "__code__", None)
        where = (code.co_filename if code else "", sys._getframe(1).f_code.co_filename)
        return Compiled(jitted) if any(w.startswith(sources) for w in where) else jitted
    jax.jit = fake_jit       # before the test files and the kernels they import
    for test_id in ids:
        name, cls_name, test = test_id.split("::")
        module = importlib.import_module(name.removesuffix(".py"))
        case = getattr(module, cls_name)(test)
        now["test"] = test_id
        try:
            case.setUp()
            getattr(case, test)()
            records.setdefault(test_id, {"error": "called no jitted function of its file "
                                                  "or of the kernels it tests"})
        except Captured:
            pass
        except NotCompiled as e:
            records[test_id] = {"error": f"not compiled for the chip: {e}"}
        except Exception as e:          # noqa: BLE001 - recorded, compared below
            records.setdefault(test_id, {"error": f"{type(e).__name__}: {str(e)[:300]}"})
        finally:
            now["test"] = None
    return records


# --- both sides, compared ---------------------------------------------------------

def run_side(side: str, suite: Path, ids_file: Path, topology: str, timeout: float) -> dict:
    sys.path.insert(0, str(HERE))
    import jax_suite
    folder = suite / side
    name = Path(ids_file.read_text().split("::", 1)[0]).name
    env = jax_suite.file_env(name, side, folder)
    # file_env: the copy's folder first and the TPU host settings (jax_suite.TPU_ENV)
    env.update(PYTHONPATH=os.pathsep.join([str(HERE), env["PYTHONPATH"]]), JAX_PLATFORMS="cpu")
    out = subprocess.run([sys.executable, __file__, "--side", side, "--suite", str(suite),
                          "--ids", str(ids_file), "--topology", topology],
                         cwd=folder, env=env, capture_output=True, text=True, timeout=timeout)
    line = next((l for l in reversed(out.stdout.splitlines()) if l.startswith("{")), None)
    if line is None:
        raise RuntimeError(f"{side} side ended with no record (exit status {out.returncode}):"
                           f"\n{out.stderr[-3000:]}")
    return json.loads(line)


def compare(jax_records: dict, our_records: dict) -> dict:
    rows = {}
    for test_id, theirs in jax_records.items():
        ours = our_records.get(test_id, {"error": "not reached"})
        seconds = {"jax": theirs.pop("seconds", None), "ours": ours.pop("seconds", None)}
        if "error" in theirs or "error" in ours:
            rows[test_id] = {"verdict": "not compared", "jax": theirs.get("error"),
                             "ours": ours.get("error")}
        elif theirs == ours:
            rows[test_id] = {"verdict": "same", "seconds": seconds}
        else:
            rows[test_id] = {"verdict": "differs",
                             "only_jax": sorted(set(theirs["entry"]) - set(ours["entry"])),
                             "only_ours": sorted(set(ours["entry"]) - set(theirs["entry"])),
                             "kernels_same": theirs["kernels"] == ours["kernels"],
                             "seconds": seconds}
    return rows


def _timing(seconds) -> str:
    """Host seconds to trace and lower, and to compile, ours against JAX's."""
    if not seconds or None in seconds.values():
        return ""
    ours, theirs = seconds["ours"], seconds["jax"]
    return "  (" + ", ".join(f"{step} {ours[step]:.2f} s, JAX {theirs[step]:.2f} s"
                             for step in ours) + ")"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--suite", type=Path, default=Path(".tpu-native/suite"))
    ap.add_argument("--ids", type=Path, required=True)
    ap.add_argument("--topology", default="v5e:2x2")
    ap.add_argument("--timeout", type=float, default=3600)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--side", help=argparse.SUPPRESS)      # the per-side process
    args = ap.parse_args()
    ids = [l.strip() for l in args.ids.read_text().splitlines() if l.strip()]
    if args.side:
        print(json.dumps(_capture(args.side, args.suite.resolve() / args.side, ids,
                                  args.topology)))
        return
    suite, ids_file = args.suite.resolve(), args.ids.resolve()
    rows = compare(run_side("jax", suite, ids_file, args.topology, args.timeout),
                   run_side("ours", suite, ids_file, args.topology, args.timeout))
    for test_id, row in rows.items():
        print(f"{row['verdict']:13} {test_id}{_timing(row.get('seconds'))}")
        for key in ("only_jax", "only_ours"):
            for item in row.get(key, ())[:6]:
                print(f"{'':15}{key}: {item[:160]}")
        if row["verdict"] == "not compared":
            print(f"{'':15}jax: {row['jax']}; ours: {row['ours']}")
    counts = {v: sum(r["verdict"] == v for r in rows.values())
              for v in ("same", "differs", "not compared")}
    print(counts)
    if args.json:
        args.json.write_text(json.dumps({"counts": counts, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
