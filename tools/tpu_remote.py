"""Run ``benchmarks/tpu_check.py``'s kernels on a TPU host whose JAX is older
than this project's (the lent TPU machine: Python 3.11, JAX 0.10.2, libtpu
0.0.42.1, no network), by exporting here and running the exports there.

    python tools/tpu_remote.py pack --out .tpu-pack          # here (JAX 0.12, no TPU needed)
    python3 tools/tpu_remote.py run --pack .tpu-pack --out results.json   # on the TPU host
    python benchmarks/tpu_check.py --results results.json --write        # here: the table

``pack`` exports, for platform ``tpu``, each case's input maker, each side
(ours, JAX's Pallas, XLA) and each autotune candidate, and makes the exports
readable by the older JAX:
- the StableHLO portable artifact is written at version ``STABLEHLO_TARGET``
  (JAX 0.12 writes 1.18, which 0.10.2 cannot read);
- each Mosaic kernel payload becomes generic-form MLIR text without debug
  information (libtpu 0.0.42.1 cannot read JAX 0.12's Mosaic bytecode).
``check`` deserializes every export with the older JAX and compiles it for a
v5e topology without a device (run it with that JAX, e.g. a Python 3.11 venv
of jax 0.10.2 + libtpu 0.0.42.1) — a free check before device time is spent.

``run`` needs only ``jax``, ``numpy`` and ``flatbuffers`` (JAX's export
serialization): it imports nothing of this project, and loads the pure files
it needs (``pallas_frontend/device_timing.py``, ``benchmarks/tpu_check_refs.py``,
the pack's conformance kernels) by path. It makes the inputs on the device,
computes the NumPy float64 references, runs every side, compares, and times
each with ``device_timing.time_per_call``. Python 3.11 syntax throughout.
"""

import argparse
import datetime
import functools
import importlib.util
import json
import os
import subprocess
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STABLEHLO_TARGET = "1.16.3"
CONFORMANCE_COPY = "conformance_kernels_jax.py"
TOPOLOGY = "v5e:2x2"
DEVICE_KIND = "TPU v5 lite"          # what a v5e chip calls itself (jax.devices()[0].device_kind)


@functools.cache
def _load_file(name, path):
    """The module at ``path`` (loaded once per process: every case reads the refs)."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# --- pack (this project's JAX) ------------------------------------------------------

def _portable_export(fn, avals):
    """``fn`` exported for TPU, serialized so that JAX 0.10.2 / libtpu 0.0.42.1 read it."""
    import dataclasses

    import jax
    from jax._src import xla_bridge
    from jax._src.interpreters import mlir
    from jax._src.lib import _jax, tpu
    from jax._src.lib.mlir import ir

    # JAX's TPU lowering reads the chip (tiling of 1-D blocks, VMEM size) from the
    # context mesh; on a host without a TPU an abstract v5e mesh names it.
    chip = jax.sharding.AbstractDevice(device_kind=DEVICE_KIND, num_cores=1, platform="tpu")
    mesh = jax.sharding.AbstractMesh((1,), ("x",), (jax.sharding.AxisType.Auto,),
                                     abstract_device=chip)
    with jax.sharding.use_abstract_mesh(mesh):
        exported = jax.export.export(jax.jit(fn), platforms=["tpu"])(*avals)
    context = mlir.make_ir_context()
    tpu.register_dialect(context)
    context.allow_unregistered_dialects = True
    with context:
        module = ir.Module.parse(exported.mlir_module())
        kernels = _rewrite_mosaic_payloads(module.operation, ir)
        text = module.operation.get_asm(enable_debug_info=False)
    artifact = _jax.mlir.serialize_portable_artifact(
        text, STABLEHLO_TARGET, xla_bridge.get_backend().serialize_with_sdy)
    return dataclasses.replace(exported, mlir_module_serialized=artifact).serialize(), kernels


def _rewrite_mosaic_payloads(operation, ir):
    """Every ``tpu_custom_call``'s kernel body, re-encoded as generic MLIR text
    without locations; returns how many kernels the program holds."""
    import base64

    count = 0
    for region in operation.regions:
        for block in region.blocks:
            for op in block.operations:
                count += _rewrite_mosaic_payloads(op.operation, ir)
                if (op.operation.name != "stablehlo.custom_call" or
                        ir.StringAttr(op.attributes["call_target_name"]).value != "tpu_custom_call"):
                    continue
                config = json.loads(ir.StringAttr(op.attributes["backend_config"]).value_bytes)
                body = base64.b64decode(config["custom_call_config"]["body"])
                kernel = ir.Module.parse(body)
                text = kernel.operation.get_asm(print_generic_op_form=True,
                                                enable_debug_info=False)
                config["custom_call_config"]["body"] = base64.b64encode(text.encode()).decode()
                op.attributes["backend_config"] = ir.StringAttr.get(json.dumps(config).encode())
                count += 1
    return count


# The dry run's "exports": on the CPU, JAX's TPU kernels need JAX's TPU interpret
# mode, whose host callbacks cannot be serialized, so the functions stay in this
# process and the manifest names them.
_LOCAL = {}


def _interpreted(fn, side):
    """``fn`` under the TPU interpret mode of its side (JAX's, or pallas_tpu's)."""
    if side == "jax":
        from jax.experimental.pallas import tpu as mode_owner
    else:
        import pallas_tpu as mode_owner

    def run(*args):
        with mode_owner.force_tpu_interpret_mode():
            return fn(*args)
    return run


def _export_to(pack, stem, fn, avals, platform="tpu", side="ours"):
    """Writes ``stem.bin``; returns its manifest entry (or the error)."""
    if platform == "cpu":
        _LOCAL[stem] = fn if side in ("xla", "inputs") else _interpreted(fn, side)
        return {"local": stem}
    try:
        data, kernels = _portable_export(fn, avals)
    except Exception as error:   # a side that cannot export is a row, not a crash
        return {"error": f"export: {type(error).__name__}: {str(error)[:400]}"}
    (pack / f"{stem}.bin").write_bytes(data)
    return {"file": f"{stem}.bin", "kernels": kernels}


def _load_export(pack, export):
    """The callable behind a manifest entry."""
    import jax
    if "local" in export:
        return _LOCAL[export["local"]]
    return jax.export.deserialize((pack / export["file"]).read_bytes()).call


def pack_cases(out, size="full", only=None, platform="tpu"):
    """Exports every case of ``benchmarks/tpu_check_cases.py`` into ``out``, for
    ``platform`` ("tpu"; "cpu" for the dry run)."""
    import jax

    sys.path.insert(0, str(ROOT / "benchmarks"))
    import tpu_check_cases

    out = Path(out)
    if platform == "tpu":
        _require_flatbuffers("here, to write the exports")
    out.mkdir(parents=True, exist_ok=True)
    for stale in out.glob("*.bin"):
        stale.unlink()
    if platform == "tpu":    # for a TPU host without a package index: read from the pack
        _download_flatbuffers(out / "wheels")
    (out / CONFORMANCE_COPY).write_text(tpu_check_cases.swapped_conformance_source())
    entries = []
    for index, case in enumerate(tpu_check_cases.cases(size, on_cpu=platform == "cpu")):
        if only and not any(word in case.name for word in only):
            continue
        began = time.perf_counter()
        stem = f"case{index:02d}"
        entry = {"name": case.name, "group": case.group, "ref": case.ref,
                 "ref_kwargs": case.ref_kwargs, "flops": case.flops,
                 "bytes": tpu_check_cases.traffic_bytes(case),
                 "rtol": case.rtol, "default": case.default}
        entry["inputs"] = _export_to(out, f"{stem}.inputs", case.inputs, (), platform,
                                     "inputs")
        avals = jax.eval_shape(case.inputs)
        entry["sides"] = {side: _export_to(out, f"{stem}.{side}", fn, avals, platform, side)
                          for side, fn in case.sides.items()}
        entry["tune"] = {label: _export_to(out, f"{stem}.tune{i}", fn, avals, platform)
                         for i, (label, fn) in enumerate(case.tune.items())}
        entries.append(entry)
        failed = [k for k, v in {**entry["sides"], **entry["tune"]}.items() if "error" in v]
        print(f"packed {case.name} in {time.perf_counter() - began:.1f} s"
              + (f"; export failed: {failed}" if failed else ""), flush=True)
    manifest = {"size": size, "platform": platform, "jax": jax.__version__, "stablehlo": STABLEHLO_TARGET,
                "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                "cases": entries}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1))
    return manifest


def failed_exports(manifest) -> list[str]:
    """``case: side`` of every export the pack could not write."""
    return [f"{entry['name']}: {label}" for entry in manifest["cases"]
            for label, export in _exports(entry) if "error" in export]


def _require_flatbuffers(where: str) -> None:
    """JAX (de)serializes exports with flatbuffers, which JAX does not depend on."""
    if importlib.util.find_spec("flatbuffers") is None:
        sys.exit(f"tools/tpu_remote.py needs the flatbuffers package {where}: "
                 "pip install flatbuffers")


def _download_flatbuffers(folder: Path) -> None:
    """flatbuffers' pure-Python wheel, which ``run`` imports from the pack where the
    host has no flatbuffers (a wheel of pure Python is importable as it is)."""
    folder.mkdir(exist_ok=True)
    if not list(folder.glob("flatbuffers-*.whl")):
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps",
                        "--only-binary=:all:", "-d", str(folder), "flatbuffers"], check=True)


def _flatbuffers_from_pack(pack: Path) -> None:
    if importlib.util.find_spec("flatbuffers") is None:
        sys.path.extend(str(w) for w in sorted((pack / "wheels").glob("flatbuffers-*.whl")))
    _require_flatbuffers("on this host (or its wheel in the pack's wheels/ folder)")


# --- check and run (the TPU host's JAX) -----------------------------------------------

def _exports(entry):
    """(label, file) of every export of a case: its sides, then its candidates."""
    yield from ((side, e) for side, e in entry["sides"].items())
    yield from ((f"tune:{label}", e) for label, e in entry["tune"].items())


def check_pack(pack):
    """Deserializes and compiles every export for one chip of a v5e topology,
    without a device; returns the failures."""
    import jax
    from jax.experimental import topologies
    from jax.sharding import NamedSharding, PartitionSpec

    for name, value in (("TPU_ACCELERATOR_TYPE", "v5litepod-4"),
                        ("TPU_WORKER_HOSTNAMES", "localhost"), ("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")):
        os.environ.setdefault(name, value)
    pack = Path(pack)
    manifest = json.loads((pack / "manifest.json").read_text())
    _flatbuffers_from_pack(pack)
    devices = topologies.get_topology_desc(topology_name=TOPOLOGY, platform="tpu").devices
    mesh = jax.sharding.Mesh(devices[:1], ("x",))
    failures = []
    for entry in manifest["cases"]:
        for label, export in [("inputs", entry["inputs"]), *_exports(entry)]:
            if "error" in export:
                continue
            try:
                exported = jax.export.deserialize((pack / export["file"]).read_bytes())
                avals = [jax.ShapeDtypeStruct(a.shape, a.dtype,
                                              sharding=NamedSharding(mesh, PartitionSpec()))
                         for a in exported.in_avals]
                # an input maker has no operands to place it: its results name the chip
                outs = None if avals else NamedSharding(mesh, PartitionSpec())
                jax.jit(exported.call, out_shardings=outs).trace(*avals).lower().compile()
            except Exception as error:
                failures.append((entry["name"], label, f"{type(error).__name__}: {error}"[:300]))
                print(f"FAIL {entry['name']} [{label}]: {failures[-1][2]}", flush=True)
    print(f"checked {sum(1 for e in manifest['cases'] for _ in _exports(e))} exports "
          f"against {TOPOLOGY} with JAX {jax.__version__}: {len(failures)} failed")
    return failures


def _bits_equal(a, b):
    import numpy as np
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


def compare(outputs, references):
    """Max abs error over all outputs and that error relative to the largest
    |reference| value (a scale-free figure for bf16/f32 results)."""
    import numpy as np
    if len(outputs) != len(references):
        raise ValueError(f"{len(outputs)} outputs against {len(references)} references")
    worst, scale = 0.0, 0.0
    for got, want in zip(outputs, references):
        got = np.asarray(got, np.float64)
        want = np.asarray(want, np.float64)
        if got.shape != want.shape:
            raise ValueError(f"output shape {got.shape} against reference {want.shape}")
        diff = np.abs(got - want)
        worst = max(worst, float(np.max(diff)) if np.all(np.isfinite(diff)) else float("inf"))
        scale = max(scale, float(np.max(np.abs(want))))
    return worst, worst / scale if scale else worst


def _flat(outputs):
    import jax
    return jax.tree_util.tree_leaves(outputs)


def _reference(pack, entry, args):
    kind, _, name = entry["ref"].rpartition(":")
    if kind == "conformance":
        module = _load_file("tpu_check_conformance", pack / CONFORMANCE_COPY)
    else:
        module = _load_file("tpu_check_refs", ROOT / "benchmarks" / "tpu_check_refs.py")
    result = getattr(module, name)(*args, **entry["ref_kwargs"])
    return list(result) if isinstance(result, (tuple, list)) else [result]


def run_pack(pack, out, timing=None, time_limit=None):
    """Runs every case of the pack on this host's default device; writes and
    returns the results. ``timing``: keyword arguments of
    ``device_timing.time_per_call`` (``False``: no timing)."""
    import jax
    import numpy as np

    pack = Path(pack)
    manifest = json.loads((pack / "manifest.json").read_text())
    if manifest["platform"] == "tpu":
        _flatbuffers_from_pack(pack)
    timer = _load_file("device_timing", ROOT / "pallas_frontend" / "device_timing.py")
    device = jax.devices()[0]
    try:
        from importlib.metadata import version
        libtpu = version("libtpu")
    except Exception:
        libtpu = "unknown"
    results = {"device_kind": device.device_kind, "platform": device.platform,
               "jax": jax.__version__, "libtpu": libtpu, "pack_jax": manifest["jax"],
               "size": manifest["size"],
               "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
               "timed": timing is not False, "cases": []}
    began = time.perf_counter()
    for entry in manifest["cases"]:
        row = {k: entry[k] for k in ("name", "group", "flops", "bytes", "rtol", "default")}
        row["sides"], row["tune"] = {}, {}
        results["cases"].append(row)
        if "error" in entry["inputs"]:
            row["error"] = entry["inputs"]["error"]
            continue
        try:
            args = jax.block_until_ready(jax.jit(_load_export(pack, entry["inputs"]))())
            references = _reference(pack, entry, [np.asarray(a) for a in args])
        except Exception as error:
            row["error"] = f"inputs/reference: {type(error).__name__}: {error}"[:400]
            continue
        outputs = {}
        for label, export in _exports(entry):
            side, target = label, row["sides"]
            if label.startswith("tune:"):
                side, target = label[5:], row["tune"]
            if "error" in export:
                target[side] = {"error": export["error"]}
                continue
            cell = target[side] = {}
            try:
                function = _load_export(pack, export)
                got = _flat(jax.block_until_ready(jax.jit(function)(*args)))
                outputs[label] = got
                cell["max_abs"], cell["rel"] = compare(got, references)
                cell["ok"] = bool(cell["rel"] <= entry["rtol"])
                if timing is not False and not (
                        time_limit and time.perf_counter() - began > time_limit):
                    measured = timer.time_per_call(function, *args, **(timing or {}))
                    cell["seconds"] = measured.seconds
                    cell["timing"] = measured.as_dict()
            except Exception as error:
                cell["error"] = f"{type(error).__name__}: {error}"[:400]
                traceback.print_exc(limit=3)
        if "ours" in outputs and "jax" in outputs:
            row["ours_equals_jax"] = all(_bits_equal(a, b)
                                         for a, b in zip(outputs["ours"], outputs["jax"]))
        print(_progress_line(row), flush=True)
        del args, outputs
    Path(out).write_text(json.dumps(results, indent=1))
    return results


def _progress_line(row):
    parts = []
    for side, cell in row["sides"].items():
        if "error" in cell:
            parts.append(f"{side} ERROR")
        else:
            ms = f" {cell['seconds'] * 1e3:.3f} ms" if "seconds" in cell else ""
            parts.append(f"{side} rel {cell['rel']:.1e}{ms}")
    bits = {True: "ours==jax", False: "ours!=jax"}.get(row.get("ours_equals_jax"), "")
    tuned = f"; {len(row['tune'])} candidates" if row["tune"] else ""
    return f"{row['name']}: " + ", ".join(parts) + f" {bits}{tuned}"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("pack", help="export the cases for TPU (this project's JAX)")
    p.add_argument("--out", required=True)
    p.add_argument("--size", choices=("full", "small"), default="full")
    p.add_argument("--only", nargs="*", help="cases whose name contains one of these words")
    c = sub.add_parser("check", help="compile every export for v5e without a device")
    c.add_argument("--pack", required=True)
    r = sub.add_parser("run", help="run the pack on this host's TPU (any JAX >= 0.10)")
    r.add_argument("--pack", required=True)
    r.add_argument("--out", required=True)
    r.add_argument("--no-timing", action="store_true")
    r.add_argument("--time-limit", type=float, default=None,
                   help="stop timing (still checking results) after this many seconds")
    args = parser.parse_args(argv)
    if args.command == "pack":
        failed = failed_exports(pack_cases(args.out, args.size, args.only))
        if failed:
            print(f"{len(failed)} exports failed: " + "; ".join(failed), file=sys.stderr)
            return 1
    elif args.command == "check":
        return 1 if check_pack(args.pack) else 0
    else:
        run_pack(args.pack, args.out, timing=False if args.no_timing else None,
                 time_limit=args.time_limit)
    return 0


if __name__ == "__main__":
    sys.exit(main())
