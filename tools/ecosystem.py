"""The port check for kernel libraries built on Pallas: run a library's Pallas
kernels from its own source under JAX's Pallas and, from a copy whose Pallas
imports name ours (nothing else changed), under ours; tabulate.

    python tools/ecosystem.py [--src tokamax=PATH ...] [--only NAME ...] [--out docs/ecosystem.md]

Each library's source is found at ``--src NAME=PATH`` or in its environment
variable (``PALLAS_TOKAMAX_SRC``, ``PALLAS_TPU_INFERENCE_SRC``); a library
whose source is absent, or whose own dependencies do not import, is listed as
skipped with the reason. Nothing of a library is kept in this repository.

- Static part (every Pallas file): the names a file uses from JAX's Pallas
  modules that ours lack (``tools/ecosystem_scan.py``).
- Runs (``tools/ecosystem_cases.py``): per kernel, on fresh random inputs made
  from one seed for both sides: ``interpret`` (on CPU, JAX's TPU / Mosaic GPU
  interpret modes; ours compared with JAX's output), ``v5e`` (AOT compile for
  one v5e chip with libtpu), ``cuda`` (lowered for cuda, no GPU and no plugin),
  with ``--h100`` also ``H100`` (compiled device-less by XLA:GPU, as
  ``tools/jax_ops_aot.py`` does; installs that compiler into a cache folder).
  One worker process per library and side (the copy and the original share
  the package name); a row that kills its worker costs that row only.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib
import importlib.util
import json
import os
import re
import sys
import tempfile
import threading
import time
import types
from pathlib import Path

import worker_rows

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
CATALOG = HERE / "ecosystem_cases.py"
_NO_ATTR = re.compile(r"module '([\w.]+)' has no attribute '(\w+)'")
_NO_NAME = re.compile(r"cannot import name '(\w+)' from '([\w.]+)'")
# a plugin's refusal: "pallas_tpu: Ref view transform ReshapeTransform(...) is not supported"
_REFUSED = re.compile(r"(pallas_\w+): ([^:]{3,120}?) (?:is|are) not supported")


def load_catalog(path: Path):
    spec = importlib.util.spec_from_file_location(f"_eco_catalog_{abs(hash(str(path)))}", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod      # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def find_source(lib, given: dict[str, str]) -> tuple[Path | None, str]:
    """(the library's source root, '') or (None, why it is skipped)."""
    where = given.get(lib.name) or os.environ.get(lib.env)
    if not where:
        return None, f"source not given (--src {lib.name}=PATH or {lib.env})"
    root = Path(where).expanduser()
    if not (root / lib.package / "__init__.py").is_file():
        return None, f"no package `{lib.package}` under the given source"
    return root, ""


def missing_from_error(error: str) -> list[str]:
    """The name an AttributeError / ImportError of our module says is missing."""
    names = [f"{m}.{n}" for m, n in _NO_ATTR.findall(error)]
    names += [f"{m}.{n}" for n, m in _NO_NAME.findall(error)]
    names += [f"{p}: {re.sub(r'[(].*', '', what)}" for p, what in _REFUSED.findall(error)]
    return [n for n in names if n.split(".")[0].startswith("pallas_")]


# --- in the worker ---------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Run:
    """What a case's ``call`` is told about the run."""
    mode: str                 # "interpret", "v5e", "cuda"
    ours: bool
    interpret: bool           # run on CPU (pass interpret=True where a kernel takes it)
    target: object = None     # jax_ops_aot.Target for "v5e"
    mesh: object = None       # sharded cases: four devices on axis "x" (CPU, or the target's)


def _bare_package(root: Path, name: str) -> None:
    """The package without its ``__init__`` (which imports a whole serving stack)."""
    mod = types.ModuleType(name)
    mod.__path__ = [str(root / name.replace(".", "/"))]
    sys.modules[name] = mod


def _chip_context(case):
    """TPU kernels that ask the mesh for the chip kind: an abstract v5e mesh
    (what JAX's message for a CPU host says to do; the run stays on CPU)."""
    if case.kind != "tpu" or case.sharded:
        return contextlib.nullcontext()
    import jax

    import jax_ops_aot
    return jax.sharding.use_abstract_mesh(jax_ops_aot.make_target("v5e").mesh.abstract_mesh)


def _structs(args, sharding=None):
    import jax
    return [jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=sharding) for a in args]


def run_one(case, mode: str, ours: bool, seed: int, out: Path):
    """Runs one (case, mode); returns a cell (status ok plus details)."""
    from unittest import mock
    try:
        mod = importlib.import_module(case.module)
    except Exception as e:
        raise ImportFailed(e) from e
    with contextlib.ExitStack() as stack:
        for name, value in case.returns.items():
            path, _, attr = name.rpartition(".")     # "f" or "backend.f" (seen from mod)
            owner = _getattr_path(mod, path) if path else mod
            stack.enter_context(mock.patch.object(owner, attr, lambda *a, _v=value, **k: _v))
        return _run_one(case, mod, mode, ours, seed, out)


class ImportFailed(Exception):
    """The case's module did not import: the worker starts afresh for the next
    row (a package left half-imported would change what the next row sees)."""


def _getattr_path(obj, path: str):
    for part in path.split("."):
        obj = getattr(obj, part)
    return obj


def _run_one(case, mod, mode: str, ours: bool, seed: int, out: Path):
    import jax
    import numpy as np

    import jax_ops
    args = case.inputs(np.random.default_rng(seed))
    if mode == "interpret":
        mesh = jax.make_mesh((4,), ("x",), axis_types=(jax.sharding.AxisType.Auto,)) \
            if case.sharded else None
        run = Run(mode, ours, True, mesh=mesh)
        with jax_ops._interpret_mode(case, ours), _chip_context(case):
            res = jax.block_until_ready(jax.jit(lambda *xs: case.call(mod, xs, run))(*args))
        outs = [np.asarray(o, np.float64) for o in jax.tree.leaves(res)]
        np.savez(out, *outs)
        return {"status": "ok", "outputs": len(outs)}
    import jax_ops_aot
    if mode in ("v5e", "H100", "B200"):   # compiled for a device this machine does not have
        target = jax_ops_aot.make_target(mode)
        mesh = target.all_devices if case.sharded else target.mesh
        run = Run(mode, ours, False, target, target.all_devices)
        sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
        with jax.set_mesh(mesh):
            lowered = jax.jit(lambda *xs: case.call(mod, xs, run)).trace(
                *_structs(args, sharding)).lower()
            kernels = len(jax_ops_aot._KERNEL_CALL.findall(lowered.as_text()))
            if not kernels:
                raise AssertionError("the lowered program holds no Pallas kernel call")
            lowered.compile()
        return {"status": "ok", "kernels": kernels}
    if mode == "cuda":
        run = Run(mode, ours, False)
        # the GPU the lowering asks for (JAX's Triton lowering: "specify an abstract GPU")
        gpu = jax.sharding.AbstractDevice(device_kind="NVIDIA H100", num_cores=132,
                                          platform="gpu")
        h100 = jax.sharding.AbstractMesh((1,), ("x",), abstract_device=gpu,
                                         axis_types=(jax.sharding.AxisType.Auto,))
        with jax.sharding.use_abstract_mesh(h100):
            lowered = jax.jit(lambda *xs: case.call(mod, xs, run)).trace(
                *_structs(args)).lower(lowering_platforms=("cuda",))
        kernels = len(jax_ops_aot._KERNEL_CALL.findall(lowered.as_text()))
        if not kernels:
            raise AssertionError("the lowered program holds no Pallas kernel call")
        return {"status": "ok", "kernels": kernels}
    raise ValueError(f"unknown mode {mode!r}")


class _StandIn:
    """A name ours lacks, for the probe run only: calling it, or any attribute
    of it, gives another stand-in; a kernel that really uses it fails later
    (or differs from JAX, which the comparison reports)."""

    def __init__(self, name: str):
        self._name = name

    def __call__(self, *args, **kwargs):
        return _StandIn(self._name + "()")

    def __getattr__(self, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _StandIn(f"{self._name}.{attr}")

    def __repr__(self):
        return f"<stand-in for {self._name}>"


def install_stand_ins(names) -> list[str]:
    """Puts a stand-in for each ``module.NAME`` that our module lacks (a class
    for a capitalised name, so that isinstance checks are False); returns the
    names it put."""
    put = []
    for full in names:
        modname, _, attr = full.rpartition(".")
        mod = importlib.import_module(modname)
        if not hasattr(mod, attr):
            setattr(mod, attr, type(attr, (), {}) if attr[:1].isupper() else _StandIn(full))
            put.append(full)
    return put


def _worker_main(catalog: str, lib_name: str, side: str, root: str, out: str, seed: str,
                 keys: list[str]) -> int:
    # (ours' chip checks off: JAX's TPU interpret mode, the other side, has none)
    for k, v in (("TPU_ACCELERATOR_TYPE", "v5litepod-4"), ("TPU_WORKER_HOSTNAMES", "localhost"),
                 ("ALLOW_MULTIPLE_LIBTPU_LOAD", "1"), ("JAX_PLATFORMS", "cpu"),
                 ("PALLAS_TPU_CHIP_CHECKS", "0")):
        os.environ.setdefault(k, v)
    import warnings
    warnings.simplefilter("ignore", DeprecationWarning)
    from jax_ops import _error_line
    lib = {lb.name: lb for lb in load_catalog(Path(catalog)).LIBRARIES}[lib_name]
    sys.path.insert(0, root)
    ours = side in ("ours", "probe")
    if ours:      # the copy's imports of JAX's own kernels name the swapped copy of those
        import jax_ops_copy
        jax_ops_copy.ours_ops()
    if side == "probe":
        install_stand_ins(lib.stand_ins)
    for name in lib.bare_packages:
        _bare_package(Path(root), name)
    cases = {c.name: c for c in lib.cases}
    for key in keys:
        name, mode = key.split("|")
        print("START " + key, flush=True)
        t0 = time.perf_counter()
        try:
            cell = run_one(cases[name], mode, ours, int(seed),
                           Path(out) / f"{side}-{name}-{mode}.npz")
        except ImportFailed as e:
            cell = {"status": "fail", "error": "import: " + _error_line(e.__cause__)}
        except Exception as e:     # the row records it; the next row goes on
            cell = {"status": "fail", "error": _error_line(e)}
        cell["seconds"] = round(time.perf_counter() - t0, 1)
        print("ROW " + json.dumps([key, cell]), flush=True)
        if cell.get("error", "").startswith("import: "):
            # the same module fails the same way in its other rows; the parent
            # starts a fresh worker for the rest
            for other in keys[keys.index(key) + 1:]:
                if cases[other.split("|")[0]].module == cases[name].module:
                    print("ROW " + json.dumps([other, dict(cell, seconds=0.0)]), flush=True)
            return 0
    return 0


# --- in the parent ---------------------------------------------------------------

def run_side(catalog: Path, lib, side: str, root: Path, out: Path, seed: int, keys, log) -> dict:
    """{key: cell}; a worker that dies is restarted past the row it died in."""
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    env.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=4")
    if any(k.endswith(("|H100", "|B200")) for k in keys):   # XLA:GPU, as jax_ops uses it
        import jax_ops_aot
        env["PYTHONPATH"] = jax_ops_aot._worker_env("cuda").get("PYTHONPATH",
                                                               env.get("PYTHONPATH", ""))
    argv = lambda todo: [sys.executable, str(Path(__file__).resolve()), "--worker",  # noqa: E731
                         str(catalog), lib.name, side, str(root), str(out), str(seed), *todo]
    cells = {}
    for group in _worker_groups(keys):
        cells.update(worker_rows.run_rows(argv, group, env=env, cwd=str(out),
                                          log=lambda k, c: log(lib.name, side, k, c),
                                          cannot_start="worker failed"))
    return cells


def _worker_groups(keys) -> list[list[str]]:
    """The keys split so that the B200 compiles get a worker of their own:
    Mosaic GPU keeps the GPU of a process's first compile, so a Blackwell
    kernel compiled after an H100 one fails in ptxas (under JAX as under ours)."""
    keys = list(keys)
    b200 = [k for k in keys if k.endswith("|B200")]
    return [g for g in ([k for k in keys if k not in b200], b200) if g]


def _compare(case, mode: str, out: Path, row: dict, side: str = "ours") -> None:
    """Holds ``side``'s interpret outputs against JAX's: its cell becomes
    "wrong" past the case's tolerance; ``rel`` is recorded for "ours"."""
    import numpy as np

    from jax_ops import max_rel_diff
    if mode != "interpret" or row["jax"]["status"] != "ok" or row[side]["status"] != "ok":
        return
    load = lambda s: list(np.load(out / f"{s}-{case.name}-{mode}.npz").values())  # noqa
    theirs, ours = load("jax"), load(side)
    if len(theirs) != len(ours) or any(a.shape != b.shape for a, b in zip(theirs, ours)):
        row[side] = {"status": "wrong", "error": "outputs of other shapes than JAX's"}
        return
    if all(not np.any(a) for a in theirs):
        row[side] = {"status": "wrong", "error": "JAX's output is all zeros: no comparison"}
        return
    rel = max_rel_diff(ours, theirs)
    if side == "ours":
        row["rel"] = rel
    if not rel <= case.rtol:
        row[side] = {"status": "wrong", "error": f"max rel diff from JAX {rel:.2e} > {case.rtol}"}


def _check_reference(case, mode: str, out: Path, row: dict, seed: int) -> None:
    """Where the case has a NumPy float64 reference: JAX's and our interpret
    outputs (the first ones, as many as it returns) against it."""
    import numpy as np

    from jax_ops import max_rel_diff
    if mode != "interpret" or case.reference is None:
        return
    ref = [np.asarray(r, np.float64) for r in
           case.reference(case.inputs(np.random.default_rng(seed)))]
    for side in ("jax", "ours"):
        if row[side]["status"] == "ok":
            got = list(np.load(out / f"{side}-{case.name}-{mode}.npz").values())[:len(ref)]
            rel = max_rel_diff(got, ref)
            row[f"ref_{side}"] = rel
            if not rel <= case.ref_rtol:
                row[side] = {"status": "wrong", "error": f"max rel diff from the NumPy "
                             f"reference {rel:.2e} > {case.ref_rtol}"}


def _modes(case, h100: bool) -> tuple[str, ...]:
    """The case's modes; with ``h100`` a device-less compile after each cuda
    lowering: for an H100, or a B200 for a Blackwell kernel (tcgen05, TMEM)."""
    gpu = "B200" if case.kind == "blackwell" else "H100"
    return tuple(m for mode in case.modes for m in
                 ((mode, gpu) if h100 and mode == "cuda" else (mode,)))


def check_library(catalog: Path, lib, root: Path, work: Path, seed: int, only=None, log=None,
                  jobs: int = 1, h100: bool = False) -> dict:
    """Scan and run one library; the page's data for it."""
    import ecosystem_scan
    log = log or (lambda *a: None)
    copy = work / "ours"
    files = ecosystem_scan.swapped_copy(root, lib.package, copy)
    scan = {}
    for rel in files:
        source = (root / rel).read_text(errors="replace")
        missing, jax_lacks = ecosystem_scan.missing_names(source)
        scan[rel] = {"missing": missing, "jax_lacks": jax_lacks,
                     "unswapped": ecosystem_scan.unswapped_imports(source)}
    cases = [c for c in lib.cases if not only or any(c.name.startswith(o) for o in only)]
    keys = [f"{c.name}|{m}" for c in cases for m in _modes(c, h100)]
    out = work / "outputs"
    out.mkdir(parents=True, exist_ok=True)
    sides = {"jax": root, "ours": copy}
    cells: dict = {}
    if jobs > 1:
        threads = {s: threading.Thread(target=lambda s=s: cells.__setitem__(
            s, run_side(catalog, lib, s, sides[s], out, seed, keys, log))) for s in sides}
        [t.start() for t in threads.values()]
        [t.join() for t in threads.values()]
    else:
        for s in sides:
            cells[s] = run_side(catalog, lib, s, sides[s], out, seed, keys, log)
    # a second run of ours with stand-ins for the names it lacks that a library
    # needs at import: what else its kernels miss (the page shows it apart)
    probe = [n for n in lib.stand_ins if _lacks(n)]
    failed = [k for k in keys if cells["ours"][k]["status"] != "ok"]
    if probe and failed:
        cells["probe"] = run_side(catalog, lib, "probe", copy, out, seed, failed, log)
    rows = []
    for c in cases:
        module_file = c.module.replace(".", "/") + ".py"
        for m in _modes(c, h100):
            key = f"{c.name}|{m}"
            row = {"case": c.name, "mode": m, "module": module_file, "rel": None,
                   "jax": _scrub(cells["jax"][key], root, copy),
                   "ours": _scrub(cells["ours"][key], root, copy)}
            _check_reference(c, m, out, row, seed)
            _compare(c, m, out, row)
            if key in cells.get("probe", {}):
                row["probe"] = _scrub(cells["probe"][key], root, copy)
                _compare(c, m, out, row, "probe")
            row["missing"] = sorted(set(missing_from_error(row["ours"].get("error", "")))
                                    | set(scan.get(module_file, {}).get("missing", [])))
            rows.append(row)
    return {"files": scan, "rows": rows, "seed": seed, "stand_ins": probe}


def _scrub(cell: dict, root: Path, copy: Path) -> dict:
    """No path of this machine in a cell: the library's files by their path in it."""
    if "error" in cell:
        err = cell["error"].replace(str(copy) + "/", "").replace(str(root) + "/", "")
        cell = dict(cell, error=err)
    return cell


def _lacks(full: str) -> bool:
    modname, _, attr = full.rpartition(".")
    try:
        return not hasattr(importlib.import_module(modname), attr)
    except ImportError:
        return True


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--worker"]:
        return _worker_main(argv[1], argv[2], argv[3], argv[4], argv[5], argv[6], argv[7:])
    import ecosystem_page
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--src", action="append", default=[], metavar="NAME=PATH",
                   help="a library's source root (else its PALLAS_*_SRC variable)")
    p.add_argument("--catalog", type=Path, default=CATALOG)
    p.add_argument("--only", nargs="*", help="case names (prefixes) to run")
    p.add_argument("--libraries", nargs="*", help="library names to check (default: all)")
    p.add_argument("--seed", type=int, default=None, help="default: a fresh one")
    p.add_argument("--h100", action="store_true",
                   help="also compile the cuda rows device-less for an H100 (XLA:GPU "
                        "compiler; a B200 for the Blackwell kernels)")
    p.add_argument("--jobs", type=int, default=1, help="run JAX's and our side at once (2)")
    p.add_argument("--work", type=Path, default=None)
    p.add_argument("--out", type=Path, default=None, help="the markdown page")
    p.add_argument("--json", type=Path, default=None, help="the results, for --from-json")
    p.add_argument("--from-json", type=Path, nargs="*", help="write the page from saved results")
    a = p.parse_args(argv)
    catalog = load_catalog(a.catalog)
    if a.from_json:
        results = {}
        for path in a.from_json:
            results.update(json.loads(path.read_text()))
    else:
        given = {name: str(Path(path).resolve())
                 for name, path in (s.split("=", 1) for s in a.src)}
        seed = a.seed if a.seed is not None else int(time.time()) % 2**31
        # absolute: the workers run with cwd in the outputs folder, where a relative
        # path would name another place (every row then failed with bogus errors)
        work = (a.work or Path(tempfile.mkdtemp(prefix="pf_ecosystem_"))).resolve()
        results = {}
        for lib in catalog.LIBRARIES:
            if a.libraries and lib.name not in a.libraries:
                continue
            t0 = time.perf_counter()
            root, why = find_source(lib, given)
            if root is None:
                results[lib.name] = {"skipped": why}
                print(f"{lib.name}: skipped: {why}", flush=True)
                continue
            res = check_library(a.catalog, lib, root, work / lib.name, seed, a.only,
                                log=lambda *r: print(*r, flush=True), jobs=a.jobs,
                                h100=a.h100)
            res["revision"] = ecosystem_page.revision(root)
            res["seconds"] = round(time.perf_counter() - t0)
            results[lib.name] = res
        if a.json:
            a.json.write_text(json.dumps(results, indent=1))
    if a.out:
        ecosystem_page.write(a.out, catalog, results)
    bad = [r for res in results.values() for r in res.get("rows", [])
           if r["jax"]["status"] == "ok" and r["ours"]["status"] != "ok"]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
