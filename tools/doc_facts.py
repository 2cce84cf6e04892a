"""The numbers the docs state, each with where its true value comes from
(``FACTS``), and the categories of numbers that are not claims about this code
(``EXEMPT``). ``tools/doc_numbers.py`` sweeps the pages with both.

A ``Fact``: a pattern whose ``v`` group is the stated value, and ``truth``, the
value read from the code (``tools/doc_truths.py``) or a predicate on what is
stated. An ``EXEMPT`` entry: a pattern, why its numbers are not a claim, and
optionally the pages it applies to. Keep each pattern to the category it names
(never a bare number): a new number of that kind is covered, any other fails.
"""

from __future__ import annotations

import ast
import dataclasses
import re
from collections.abc import Callable

from doc_truths import (REPO, api_history, api_version, conformance_test_count, constant,
                        dist_version, dot_tiles, frontend_bound, frontend_envs,
                        gpu_aot_conformance_cases, import_timeout_default,
                        interpreter_semaphore_start, jax_names_provided, jax_ops_compiled_cells,
                        jax_ops_cpu_rows, jax_ops_jax_version, jax_pallas_names,
                        jax_series_in_window, jax_series_span, jax_window, python_of_matrix,
                        jax_suite_totals, jax_triton_style_calls,
                        pallas_frontend_default, plugin_bound, plugin_count, progress_every,
                        python_min, slowest_default, source_default, sparse_core_info, tox_setenv,
                        tpu_sc_names)

WORDS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6}


@dataclasses.dataclass(frozen=True)
class Fact:
    name: str
    pattern: str                       # group "v": the stated value
    truth: Callable[[], object]        # the value, or a predicate taking the stated one
    predicate: bool = False            # truth() returns a function: value -> problem or None
    whole_match: bool = False          # the predicate takes the re.Match, not its "v" group
    pages: frozenset = frozenset()     # only these pages (relative paths); empty: every page

    def check(self, match: re.Match) -> str | None:
        if self.whole_match:
            return self.truth()(match)
        stated = match["v"]
        if self.predicate:
            return self.truth()(stated)
        want = str(self.truth())
        return None if stated == want else f"says {stated}, the code says {want}"


def _api_minor_known(stated: str) -> str | None:
    major, minor = api_version()
    if stated not in api_history():
        return f"API {stated} is not in the contract's version history (contract.py)"
    s_major, s_minor = map(int, stated.split("."))
    if (s_major, s_minor) > (major, minor):
        return f"API {stated} is newer than the code's {major}.{minor}"
    return None


def _number_word(stated: str) -> int:
    return WORDS.get(stated.lower(), int(stated) if stated.isdigit() else -1)


# sources several facts read
_MGPU_SCHEDULE = "plugins/pallas_mgpu/pallas_mgpu/schedule.py"
_TRITON_PARAMS = "plugins/pallas_triton/pallas_triton/params.py"
# pages some EXEMPT entries are limited to
_ERRORS = {"docs/errors.md"}
_AUTOTUNE = {"docs/autotune.md"}
_MGPU = {"plugins/pallas_mgpu/README.md"}
_TPU = {"plugins/pallas_tpu/README.md"}
_TRITON = {"plugins/pallas_triton/README.md"}


def _equals(value: Callable[[], object], source: str) -> Callable[[], Callable[[str], str | None]]:
    """A predicate fact: the stated number equals ``value()`` (named by ``source``)."""
    def check(stated: str) -> str | None:
        want = value()
        return None if _number_word(stated) == want or stated == str(want) else \
            f"says {stated}, {source} says {want}"
    return lambda: check


def _const(path: str, name: str, scale: Callable[[object], object] = lambda v: v):
    return _equals(lambda: scale(constant(path, name)), f"{name} in {path}")


def _signature_defaults(match: re.Match) -> str | None:
    """docs/api.md's signatures: each ``name=literal`` is the pallas_frontend default."""
    problems = []
    for name, literal in re.findall(r"(\w+)=([^,()]+|\([^()]*\))", match["v"]):
        if not re.fullmatch(r"-?\d+|\((?:-?\d+,\s*)*-?\d*\)", literal.strip()):
            continue                           # a name, None, True, ...: no number to check
        stated = ast.literal_eval(literal.strip())
        actual = pallas_frontend_default(match["fn"], name)
        if stated != actual:
            problems.append(f"{name}={literal.strip()} but pallas_frontend.{match['fn']} has "
                            f"{name}={actual!r}")
    return "; ".join(problems) or None


def _conformance_total(match: re.Match) -> str | None:
    stated = sum(int(match[g]) for g in ("v", "s", "x") if match.groupdict().get(g))
    total = conformance_test_count()
    return None if stated == total else (
        f"counts {stated} tests, the conformance suite (pallas_frontend/testing) has {total}: "
        "run it for this backend and restate the result")


def _flash_defaults(match: re.Match) -> str | None:
    from jax.experimental.pallas.ops.tpu import flash_attention
    sizes = dataclasses.asdict(flash_attention.BlockSizes.get_default(1, 1, 1, 1, 1))
    stated = {k: int(match["b"]) if k == "block_b" else int(match["v"]) for k in sizes}
    wrong = {k: v for k, v in sizes.items() if stated[k] != v}
    return None if not wrong else f"JAX's BlockSizes.get_default() differs: {wrong}"


def _tiles_match(match: re.Match) -> str | None:
    want = dot_tiles()
    wrong = [f"{k}={match[k]} (dot_paths.py: {want[k]})" for k in want
             if match.groupdict().get(k) and match[k] != want[k]]
    return "; ".join(wrong) or None


def _rank1_rule(match: re.Match) -> str | None:
    """pallas_tpu's rank-1 block rule (check.block_shape_problem): the chunk
    and the lane count of its minimum power of 2, as check.py has them."""
    path = "plugins/pallas_tpu/pallas_tpu/check.py"
    lanes, sublanes = constant(path, "LANES"), constant(path, "SUBLANES")
    if match["two"] != "2" or match["word"] != "32":
        return "the rule is a power of 2 of at least LANES * (32 // bits)"
    if int(match["chunk"]) != lanes * sublanes or int(match["lanes"]) != lanes:
        return (f"says {match['chunk']} and {match['lanes']}, check.py's rule uses "
                f"{lanes * sublanes} and {lanes}")
    return None


def _register_tiles(match: re.Match) -> str | None:
    """pallas_mgpu/layouts.py: row tiles below the WGMMA layout's rows, of warp sub-tiles."""
    path = "plugins/pallas_mgpu/pallas_mgpu/layouts.py"
    sub_rows, min_cols = constant(path, "SUB_ROWS"), constant(path, "MIN_COLS")
    wgmma_rows = int(re.search(r"if rows % (\d+) == 0:\s+return plgpu\.Layout\.WGMMA",
                               (REPO / path).read_text())[1])
    want = {"v": sub_rows, "w": wgmma_rows - sub_rows, "r": sub_rows, "c": min_cols}
    wrong = [f"{match[k]} where layouts.py gives {v}" for k, v in want.items()
             if int(match[k]) != v]
    return "; ".join(wrong) or None


def _triton_math_bounds(match: re.Match) -> str | None:
    """The triton README's ULP figures are pallas_triton.manifests.XLA_DIFFERENCES' bounds."""
    from pallas_triton import manifests
    ulps = {name: d["ulps"] for name, d in manifests.XLA_DIFFERENCES.items()
            if set(d.get("ulps") or ()) == {"float32", "bfloat16", "float16", "float64"}
            and d["ulps"]["float32"] > 0}
    special = ("exp2", "erf_inv", "sinh", "cosh", "pow")
    most = [u for name, u in ulps.items() if name not in special]
    want = {"lo": min(u["float32"] for u in most), "hi": max(u["float32"] for u in most),
            "exp2": ulps["exp2"]["float32"], "erfinv": ulps["erf_inv"]["float32"],
            "sinh": ulps["sinh"]["float32"],
            "h_lo": min(min(u["bfloat16"], u["float16"]) for u in most),
            "h_hi": max(max(u["bfloat16"], u["float16"]) for u in most),
            "bf": ulps["exp2"]["bfloat16"], "f16": ulps["exp2"]["float16"]}
    if ulps["cosh"] != ulps["sinh"]:
        return "sinh and cosh have different bounds in XLA_DIFFERENCES"
    wrong = [f"{k}: says {match[k]}, XLA_DIFFERENCES gives {v}" for k, v in want.items()
             if int(match[k]) != v]
    if match["x"] not in manifests.XLA_DIFFERENCES["erf_inv"]["why"]:
        wrong.append(f"erf_inv's bound is not stated for |x| <= {match['x']}")
    return "; ".join(wrong) or None


def _sparse_core_row(match: re.Match) -> str | None:
    info = sparse_core_info(match["chip"])
    stated = (int(match["v"]), int(match["s"]), int(match["l"]))
    want = (info.num_cores, info.num_subcores, info.num_lanes)
    return None if stated == want else f"{match['chip']}: says {stated}, JAX's tpu_info {want}"


FACTS = [
    Fact("SparseCores of a chip (docs/sparsecore.md's table)",
         r"\| `(?P<chip>v5p|v6e|tpu7x):[\dx]+` \| (?P<v>\d+) \| (?P<s>\d+) \| (?P<l>\d+) \|",
         lambda: _sparse_core_row, predicate=True, whole_match=True),
    # two floors: the project's (pyproject) and the test matrix's (JAX 0.12 needs 3.12)
    Fact("Python floor", r"Python >= (?P<v>\d+\.\d+)",
         lambda: lambda v: None if v in (python_min(), python_of_matrix()) else
         f"Python {v} is neither the project's floor {python_min()} nor the matrix's "
         f"{python_of_matrix()}", predicate=True),
    Fact("Python floor (pyproject)", r'requires-python = ">=(?P<v>[\d.]+)"', python_min),
    Fact("Python of .python-version", r"Python (?P<v>\d+\.\d+) (?:following|where pyenv)",
         python_of_matrix),
    Fact("JAX series", r"\bJAX\s+(?P<v>\d+\.\d+)\b(?!\.\d| deprecated)",
         lambda: jax_series_in_window, predicate=True),
    Fact("JAX window", r"\bJAX\s+(?P<lo>\d+\.\d+)\s+to\s+(?P<hi>\d+\.\d+)\b(?!\.\d)",
         lambda: lambda m: None if (m["lo"], m["hi"]) == jax_series_span() else
         f"says {m['lo']} to {m['hi']}, pyproject says {jax_window()}",
         predicate=True, whole_match=True),
    Fact("Python named", r"\bPython\s+(?P<v>3\.\d+)\b(?!\.\d)",
         lambda: lambda v: None if v in (python_min(), python_of_matrix()) else
         f"Python {v} is neither the project's floor nor the matrix's", predicate=True),
    Fact("Python the test command asks for", r"require_python\.py (?P<v>\d+\.\d+)",
         python_of_matrix),
    Fact("JAX release", r"\b(?:jax|JAX)(?:==|\s+)(?P<v>\d+\.\d+\.\d+(?:\.\d+)?)\b",
         lambda: lambda v: jax_series_in_window(".".join(v.split(".")[:2])), predicate=True),
    Fact("JAX requirement", r"jax>=(?P<lo>[\d.]+),<(?P<hi>[\d.]+)",
         lambda: lambda m: None if (m["lo"], m["hi"]) == jax_window() else
         f"says >={m['lo']},<{m['hi']}, pyproject says {jax_window()}",
         predicate=True, whole_match=True),
    Fact("backend API now", r"under development: (?P<v>\d+\.\d+)",
         lambda: "%d.%d" % api_version()),
    Fact("frontend version", r"the (?P<v>\d+\.\d+\.\d+) under development",
         lambda: dist_version("pallas-frontend")),
    Fact("frontend series", r"\| (?P<v>\d+\.\d+)\.x \| \d+\.x \(the",
         lambda: ".".join(dist_version("pallas-frontend").split(".")[:2])),
    Fact("API major of the series", r"\| \d+\.\d+\.x \| (?P<v>\d+)\.x \(the",
         lambda: str(api_version()[0])),
    Fact("API major", r"\bAPI (?P<v>\d+)\.x\b", lambda: str(api_version()[0])),
    Fact("API minors", r"\bAPI (?P<v>\d+\.\d+)\b(?! is refused| but this)",
         lambda: _api_minor_known, predicate=True),
    Fact("API minors (install.md's list)", r"\b(?P<v>1\.\d+)\s+(?:added\s+)?`",
         lambda: _api_minor_known, predicate=True),
    Fact("API minors (declaring)", r"declaring (?P<v>\d+\.\d+) or older",
         lambda: _api_minor_known, predicate=True),
    Fact("plugins' pallas-frontend floor", r"pallas-frontend>=(?P<v>[\d.]+),<",
         lambda: frontend_bound()[0]),
    Fact("plugins' pallas-frontend ceiling", r"pallas-frontend>=[\d.]+,<(?P<v>[\d.]+)",
         lambda: frontend_bound()[1]),
    Fact("extras' plugin floor", r"pallas-triton>=(?P<v>[\d.]+),<", lambda: plugin_bound()[0]),
    Fact("extras' plugin ceiling", r"pallas-triton>=[\d.]+,<(?P<v>[\d.]+)",
         lambda: plugin_bound()[1]),
    Fact("pallas-triton version", r"\(pallas-triton (?P<v>\d+\.\d+\.\d+)\)",
         lambda: dist_version("pallas-triton")),
    Fact("frontend envs", r"split over (?P<v>\w+) envs \(`frontend-a`",
         lambda: lambda v: None if _number_word(v) == len(frontend_envs())
         else f"says {v}, tox.ini runs tests/ in {len(frontend_envs())} envs "
              f"({', '.join(frontend_envs())})", predicate=True),
    Fact("distributions", r"(?i)\b(?P<v>one|two|three|four|five|six|\d+) "
                          r"(?:distributions|wheels)\b(?! claim)",
         lambda: lambda v: None if _number_word(v) == plugin_count() + 1
         else f"says {v}, there are {plugin_count() + 1}", predicate=True),
    Fact("plugins", r"(?i)\b(?P<v>one|two|three|four|five|six|\d+) plugins\b",
         lambda: lambda v: None if _number_word(v) in (plugin_count(), -1)
         else f"says {v}, plugins/ holds {plugin_count()}", predicate=True),
    Fact("JAX kernels on CPU", r"all (?P<v>\d+) rows where JAX runs", jax_ops_cpu_rows),
    Fact("JAX kernels compiled", r"all (?P<v>\d+) cells JAX\s+compiles", jax_ops_compiled_cells),
    Fact("JAX suite, JAX", r"of (?P<v>\d+) tests JAX\s+passes", lambda: jax_suite_totals()[0]),
    Fact("JAX suite, ours", r"passes on CPU, ours\s+passes (?P<v>\d+)",
         lambda: jax_suite_totals()[1]),
    Fact("import timeout", r"(?:\(|within |IMPORT_TIMEOUT`\s+seconds \()default (?P<v>\d+)",
         import_timeout_default),
    Fact("progress interval", r"every (?P<v>\d+) s\b", progress_every),
    Fact("slowest tests named", r"the (?P<v>\w+) slowest\s+tests",
         lambda: lambda v: None if _number_word(v) == int(slowest_default()) or
         v == "ten" and slowest_default() == "10" else f"says {v}, run_tests.py names "
         f"{slowest_default()}", predicate=True),
    Fact("api.md signature defaults", r"`(?P<fn>[A-Za-z_]\w*)\((?P<v>[^`]*=[^`]*)\)`",
         lambda: _signature_defaults, whole_match=True, pages=frozenset({"docs/api.md"})),
    Fact("JAX's public pallas names", r"public names are the (?P<v>\d+) non-underscore",
         lambda: jax_pallas_names()[0]),
    Fact("JAX's pallas names we provide", r"attributes of the module\.\s+(?P<v>\d+) are provided",
         lambda: jax_pallas_names()[1]),
    Fact("num_warps floor", r"power\s+of\s+two\s+from\s+(?P<v>\d+)\s+to",
         lambda: re.search(r'_check_count\("num_warps", self\.num_warps, (\d+)',
                           (REPO / _TRITON_PARAMS).read_text())[1]),
    Fact("num_warps ceiling", r"power\s+of\s+two\s+from\s+\d+\s+to\s+(?P<v>\d+)",
         _const(_TRITON_PARAMS, "MAX_NUM_WARPS"), predicate=True),
    Fact("num_stages floor", r"`num_stages` below (?P<v>\d+)",
         lambda: re.search(r'_check_count\("num_stages", self\.num_stages, (\d+)',
                           (REPO / _TRITON_PARAMS).read_text())[1]),
    Fact("TMA box minor dim", r"multiple\s+of\s+(?P<v>\d+)\s+bytes",
         _const(_MGPU_SCHEDULE, "TMA_MIN_BYTES"), predicate=True),
    Fact("aliasing grid limit", r"grids? of more than (?P<v>\d+)\s+points",
         _const(_MGPU_SCHEDULE, "MAX_MASK_POINTS"), predicate=True),
    Fact("TMA box", r"(?:the (?P<v>\d+)-element TMA box|TMA box limit \((?P<w>\d+) elements\))",
         lambda: lambda m: _equals(lambda: constant(_MGPU_SCHEDULE, "MAX_TMA_BOX"),
                                   "MAX_TMA_BOX")()(m["v"] or m["w"]), whole_match=True),
    Fact("CTA SMEM", r"(?P<v>\d+) KiB of SMEM",
         _const(_MGPU_SCHEDULE, "SMEM_BYTES", lambda b: b // 1024), predicate=True),
    Fact("CTA grid axes", r"CTA grid \(at most (?P<v>\d+) axes",
         _const(_MGPU_SCHEDULE, "MAX_CTA_AXES"), predicate=True),
    Fact("mgpu kernel threads", r"up to (?P<v>\d+) threads \(warpgroups\)",
         _const("plugins/pallas_mgpu/pallas_mgpu/mesh_kernel.py", "MAX_THREADS"), predicate=True),
    Fact("mma.sync k", r"and k of (?P<v>\d+)`|k of\s+(?P<w>\d+), operands",
         lambda: lambda m: _equals(lambda: constant("plugins/pallas_mgpu/pallas_mgpu/dot_paths.py",
                                                    "MMA_K"), "MMA_K")()(m["v"] or m["w"]),
         whole_match=True),
    Fact("register tiles' row step", r"multiple of (?P<v>\d+), a\s+block\s+past",
         _const("plugins/pallas_mgpu/pallas_mgpu/layouts.py", "SUB_ROWS"), predicate=True),
    Fact("interpreter index-map chunk", r"in chunks of (?P<v>2\^\d+) points",
         _const("pallas_frontend/block_indices.py", "_CHUNK_POINTS",
                lambda n: f"2^{n.bit_length() - 1}"),
         predicate=True),
    Fact("interpreter table limit",
         r"Above (?P<v>2\^\d+) points such a kernel runs as a plain loop",
         _const("pallas_frontend/interpreter/execute.py", "MAX_TABLE_POINTS",
                lambda n: f"2^{n.bit_length() - 1}"), predicate=True),
    Fact("unrolled loop steps", r"Loops of more than (?P<v>\d+) steps stay loops",
         _const("pallas_frontend/interpreter/vectorized.py", "_MAX_UNROLLED_STEPS"),
         predicate=True),
    Fact("grid sizes the scaling test measures", r"a (?P<v>10\^\d+)- or (?P<w>10\^\d+)-point grid",
         lambda: lambda m: None if all(f"_run_big({e.replace('^', '**')}," in
                                       (REPO / "tests/test_block_ranges_scaling.py").read_text()
                                       for e in (m["v"], m["w"]))
         else "tests/test_block_ranges_scaling.py runs no such grid", whole_match=True),
    Fact("module size limit", r"No frontend module is over\s+(?P<v>\d+) lines",
         _const("tests/test_import_graph.py", "MAX_MODULE_LINES"), predicate=True),
    Fact("CLI exit on a load failure", r"(?:which then exits|shows the whole error and\s+exits) "
                                       r"(?P<v>\d+)",
         lambda: re.search(r"failures\)\} backend plugin\(s\) failed to load \(exit status (\d+)",
                           (REPO / "pallas_frontend/cli.py").read_text())[1]),
    Fact("CLI exit with --allow-load-errors", r"or (?P<v>\d+)\s+with `--allow-load-errors`|"
                                              r"`--allow-load-errors` exits (?P<w>\d+)",
         lambda: lambda m: None if (m["v"] or m["w"]) == re.search(
             r'"exit (\d+) even when a plugin failed to load"',
             (REPO / "pallas_frontend/cli.py").read_text())[1]
         else "pallas_frontend/cli.py's --allow-load-errors says otherwise", whole_match=True),
    Fact("CLI exit on a bad setting", r"prints the first bad one and\s+exits (?P<v>\d+)",
         lambda: re.search(r"checked first \(a bad one: exit status (\d+)\)",
                           (REPO / "pallas_frontend/cli.py").read_text())[1]),
    Fact("a true PALLAS_FRONTEND_* flag", r"PALLAS_FRONTEND_(?:STRICT|DISABLE_PLUGIN_AUTOLOAD)"
                                          r"(?:=| = )(?P<v>\w+)",
         lambda: lambda v: None if v in constant("pallas_frontend/env_config.py", "_TRUE")
         else f"{v} is not one of the values env_config.py reads as true", predicate=True),
    Fact("import timeout off", r"default \d+; (?P<v>\d+): no limit",
         lambda: re.search(r"(\d+) means no limit",
                           (REPO / "pallas_frontend/env_config.py").read_text())[1]),
    Fact("differential examples", r"`PALLAS_DIFFERENTIAL_EXAMPLES`, (?P<v>\d+) by default",
         lambda: re.search(r'"PALLAS_DIFFERENTIAL_EXAMPLES", "(\d+)"',
                           (REPO / "tests/test_differential.py").read_text())[1]),
    Fact("parity examples", r"draws (?P<v>\d+) fresh random kernels",
         lambda: re.search(r'"PALLAS_PARITY_EXAMPLES", "(\d+)"',
                           (REPO / "tests/test_fast_interpreter_parity.py").read_text())[1]),
    Fact("gmm tiling default", r"default `(?P<v>\(\d+, \d+, \d+\))`",
         lambda: str(source_default("jax:experimental/pallas/ops/tpu/megablox/gmm.py", "gmm",
                                    "tiling"))),
    Fact("flash attention block defaults",
         r"The default is (?P<v>\d+) for every field but `block_b` \((?P<b>\d+)\)",
         lambda: _flash_defaults, whole_match=True),
    Fact("JAX's Triton-style kernel calls",
         r"all (?P<v>\d+) of JAX's Triton-style GPU kernel calls run",
         jax_triton_style_calls),
    Fact("triton priority", r"on `cuda` and `rocm` \(priority (?P<v>-?\d+)\)",
         lambda: re.search(r"priority = (\d+) if gpu_launch\.AVAILABLE",
                           (REPO / "plugins/pallas_triton/pallas_triton/backend.py")
                           .read_text())[1]),
    Fact("triton default compute capability", r"`CompilerParams\(compute_capability=\.\.\.\)`; "
                                              r"else (?P<v>\d+)\.",
         _const("plugins/pallas_triton/pallas_triton/gpu_launch.py", "DEFAULT_CUDA_CAPABILITY"),
         predicate=True),
    Fact("triton device kinds",
         r"H100/H200 -> (?P<h>\d+),\s+A100 -> (?P<a>\d+), B200 -> (?P<v>\d+)",
         lambda: lambda m: None if all(
             (kind, int(m[g])) in constant("plugins/pallas_triton/pallas_triton/gpu_launch.py",
                                          "_KIND_CAPABILITY")
             for kind, g in (("H100", "h"), ("H200", "h"), ("A100", "a"), ("B200", "v")))
         else "gpu_launch._KIND_CAPABILITY maps these kinds otherwise", whole_match=True),
    Fact("triton stages tried", r"the most stages\s+\((?P<v>\d+, \d+, \d+)\)",
         lambda: re.search(r"num_stages=n\) for n in \(([\d, ]+)\)",
                           (REPO / "plugins/pallas_triton/pallas_triton/gpu_launch.py")
                           .read_text())[1]),
    Fact("Triton's default stages", r"Triton's default (?P<v>\d+) stages",
         lambda: re.search(r'_check_count\("num_stages".*?example=(\d+)',
                           (REPO / _TRITON_PARAMS).read_text(), re.S)[1]),
    Fact("XLA's Triton custom call API", r"\(FFI API\s+version (?P<v>\d+)\)",
         lambda: re.search(r"custom_call_api_version=(\d+)", (REPO / "plugins/pallas_triton/"
                           "pallas_triton/gpu_launch.py").read_text())[1]),
    Fact("conformance run (passed/skipped/xfailed)",
         r"(?P<v>\d+) passed, (?P<s>\d+) skipped, (?P<x>\d+) xfailed",
         lambda: _conformance_total, whole_match=True),
    Fact("conformance run (pass/skipped)",
         r"--pallas-backend \w+`: (?P<v>\d+) pass, (?P<s>\d+) skipped",
         lambda: _conformance_total, whole_match=True),
    Fact("conformance run (n/n)", r"conformance suite (?P<v>\d+)/(?P<w>\d+)",
         lambda: lambda m: _conformance_total(m) or (None if m["v"] == m["w"]
                                                      else "not all passed"),
         whole_match=True),
    Fact("TPU test host devices", r"(?:runs on|uses) (?P<v>\d+) host devices",
         lambda: re.search(r"xla_force_host_platform_device_count=(\d+)",
                           (REPO / "plugins/pallas_tpu/tests/conftest.py").read_text())[1]),
    Fact("uniform's mantissa bits", r"uniform is a (?P<v>\d+)-bit mantissa",
         lambda: constant("plugins/pallas_tpu/pallas_tpu/random.py", "_MANTISSA_BITS")),
    Fact("prng key words", r"a `(?P<v>\(\d+, \d+\))` uint32 array",
         lambda: str(constant("plugins/pallas_tpu/pallas_tpu/keyed_random.py", "_KEY_SHAPE"))),
    Fact("Hopper matmul tiles (errors.md)",
         r"WGMMA tiles are (?P<wgmma_m>\d+) rows by a multiple of (?P<wgmma_n>\d+) columns, and\s+"
         r"the warp-level MMA fallback needs m a multiple of (?P<mma_m>\d+), n of (?P<mma_n>\d+)",
         lambda: _tiles_match, whole_match=True),
    Fact("Hopper matmul tiles (mgpu README)",
         r"WGMMA: m a multiple of (?P<wgmma_m>\d+), n of (?P<wgmma_n>\d+); `mma\.sync`: m of "
         r"(?P<mma_m>\d+), n of (?P<mma_n>\d+)", lambda: _tiles_match, whole_match=True),
    Fact("WGMMA rows (mgpu README)", r"What WGMMA's\s+(?P<wgmma_m>\d+)-row tiles",
         lambda: _tiles_match, whole_match=True),
    Fact("num_warps example", r"Pass e\.g\. num_warps=(?P<v>\d+)",
         lambda: re.search(r'_check_count\("num_warps".*?example=(\d+)',
                           (REPO / _TRITON_PARAMS).read_text(), re.S)[1]),
    Fact("TPU VMEM tiling", r"(?:do not tile|Mosaic's) \((?P<v>\d+, \d+)\)",
         lambda: "%d, %d" % (constant("plugins/pallas_tpu/pallas_tpu/check.py", "SUBLANES"),
                             constant("plugins/pallas_tpu/pallas_tpu/check.py", "LANES"))),
    Fact("tox's compile-cache threshold", r"JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS=(?P<v>\d+)",
         lambda: tox_setenv("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS")),
    Fact("the build backend's setuptools", r'requires = \["setuptools>=(?P<v>\d+)"\]',
         lambda: re.search(r'requires = \["setuptools>=(\d+)"\]',
                           (REPO / "pyproject.toml").read_text())[1]),
    Fact("replay_equations' start", r"replay_equations\(jaxpr, env, rule, \*, start=(?P<v>\d+)",
         lambda: source_default("pallas_frontend/kernel_arrays.py", "replay_equations", "start")),
    Fact("TPU rank-1 block rule", r"a rank-1 block\s+must\s+equal\s+the\s+array,\s+be\s+a\s+"
                                  r"multiple\s+of\s+(?P<chunk>\d+)\s+or\s+a\s+power\s+of\s+"
                                  r"(?P<two>\d+)\s+of\s+at\s+least\s+(?P<lanes>\d+)\s+\*\s+"
                                  r"\((?P<word>\d+) // bits\)",
         lambda: _rank1_rule, whole_match=True),
    Fact("TPU chip checks off", r"PALLAS_TPU_CHIP_CHECKS=(?P<v>\d+)",
         lambda: lambda stated: None if stated in constant(
             "plugins/pallas_tpu/pallas_tpu/check.py", "CHIP_CHECKS_OFF_VALUES")
         else f"{stated} does not turn the checks off (check.CHIP_CHECKS_OFF_VALUES)",
         predicate=True),
    Fact("TPU lane width", r"multiples of (?P<v>\d+) \(the lane width\)",
         lambda: constant("plugins/pallas_tpu/pallas_tpu/check.py", "LANES")),
    Fact("register tiles' rows", r"2-D tiles of (?P<v>\d+) to (?P<w>\d+) rows \((?P<r>\d+)x"
                                  r"(?P<c>\d+)\s+sub-tiles",
         lambda: _register_tiles, whole_match=True),
    Fact("the JAX release of the kernel table", r"TPU7x that JAX (?P<v>\d+\.\d+\.\d+\.\d+)",
         jax_ops_jax_version),
    Fact("tpu_sc names pallas_tpu provides", r"provides all (?P<v>\d+) of JAX's names",
         _equals(lambda: tpu_sc_names() if jax_names_provided(
             "jax.experimental.pallas.tpu_sc", "pallas_tpu.tpu_sc") == tpu_sc_names() else -1,
             "JAX's tpu_sc, all provided by pallas_tpu.tpu_sc (-1: some are not)"),
         predicate=True),
    Fact("JAX mosaic_gpu names pallas_mgpu provides",
         r"`mosaic_gpu` exports\s+Provided \((?P<v>\d+)\)",
         lambda: jax_names_provided("jax.experimental.pallas.mosaic_gpu", "pallas_mgpu")),
    Fact("interpreter semaphores' start", r"(?:int32 Refs in the interpreter, starting at|for one "
         r"`pallas_call`; semaphores start at) (?P<v>\d+)",
         interpreter_semaphore_start),
    Fact("triton math ULP bounds",
         r"float32: (?P<lo>\d+)-(?P<hi>\d+) for most; `exp2` (?P<exp2>\d+), "
         r"`erf_inv` (?P<erfinv>\d+) "
         r"up to \|x\| = (?P<x>[\d.]+), `sinh`/`cosh` (?P<sinh>\d+),.*?; 16-bit: (?P<h_lo>\d+)-"
         r"(?P<h_hi>\d+) \(`exp2`: bfloat16 (?P<bf>\d+), float16 (?P<f16>\d+)\)",
         lambda: _triton_math_bounds, whole_match=True),
    Fact("triton pow ULP bound", r"\| `pow` \| within (?P<v>\d+) ULP",
         lambda: __import__("pallas_triton.manifests", fromlist=["_"])
         .XLA_DIFFERENCES["pow"]["ulps"]["float32"]),
    Fact("float16 logistic flush threshold",
         r"float16 `logistic` keeps results below (?P<v>[\d.e-]+)",
         lambda: lambda v: None if f"below {v} to zero" in __import__(
             "pallas_triton.manifests", fromlist=["_"]).XLA_DIFFERENCES["logistic"][
             "flushed_results"]["float16"] else "XLA_DIFFERENCES['logistic'] says otherwise",
         predicate=True),
    Fact("a test's block shapes (triton)", r"a \((?P<v>\d+),\)-element `pl\.Element`\s+stencil and "
                                           r"\((?P<w>\d+, \d+)\) blocks",
         lambda: lambda m: None if f"pl.Element({m['v']}," in (
             text := (REPO / "plugins/pallas_triton/tests/test_any_block_shape.py").read_text())
         and f"BlockSpec(({m['w']})" in text else "test_any_block_shape.py uses other shapes",
         whole_match=True),
    Fact("GPU AOT conformance kernels",
         r"the (?P<v>\d+) conformance kernels|\((?P<w>\d+) conformance "
                                        r"kernels",
         lambda: lambda m: _equals(gpu_aot_conformance_cases, "gpu_aot_cases.cases()")()(
             m["v"] or m["w"]), whole_match=True),
]

# Numbers that are not claims about this code, and why (optionally: only on these pages).
EXEMPT = [
    (r"JAX 0\.11 deprecated", "history: the JAX release that deprecated Pallas Triton"),
    (r"jax-triton \d+\.\d+\.\d+", "another project's version"),
    (r"\d{4}-\d{2}-\d{2}(?: \(\w+\))?(?:,? \d{2}:\d{2}(?: UTC)?)?", "a date of a measurement"),
    (r"\d+m\d+s|\d+(?:\.\d+)?(?:-\d+(?:\.\d+)?)? ?(?:s|ms|min|minutes|x|MB|GB|%)\b"
     r"(?:\s*(?:during|while|with|loaded|quiet|of))?", "a measured time or size"),
    (r"\(`tox p` \d+ s\)", "a measured time"),
    (r"\b\d+-core\b|\b\d+ (?:shared )?cores\b", "the machine measured on"),
    (r"Python\s+3\.11, JAX 0\.10\.2(?:,\s+libtpu\s+0\.0\.42\.1)?|jax 0\.10\.2 \+ libtpu 0\.0\.42\.1"
     r"|all \d+ exports",
     "the versions of a remote TPU host, and a count of one dated run on it"),
    (r"pytest \d+\.\d+, pytest-xdist\s+\d+\.\d+", "the tool versions a measurement used"),
    (r"\blibtpu\s+0\.0\.\d+\.\d+", "the libtpu of a TPU host a dated run used"),
    (r"-?[0-9]\.0\b(?= |`|,|\)|$)|\b0\.0\b", "a float value in an example"),
    (r'(?:__version__|version) = "0\.1\.0"|pallas-looped\s+0\.1\.0\s+1\.3|api_version = \(1, 3\)',
     "the guide's own example backend"),
    (r":maxdepth: \d+|PEP \d+", "a Sphinx option; a PEP's number"),
    (r"API 2\.0 is refused|backend API 2\.0 but this pallas-frontend provides 1\.3|"
     r"pallas-good \d+\.\d+\.\d+ and pallas-good-fork \d+\.\d+", "an example message"),
    (r"while it is 0\.x \(its major from 1\.0 on\)|\| 0\.2\.x \(none yet\) \| 2\.x \|",
     "the version policy's rule, not a current version"),
    (r"(?m)^#{1,6} \d+\.(?= )|^ {0,3}\d+\.(?= )|\bsection \d+\b",
     "a section or list item's number"),
    (r"\b(?:args|outputs?|inputs?|Output|scratch_shapes|out_shape)\[\d+\](?:\['\w+'\])?",
     "an operand's index, as a message names it"),
    (r"`[^`\n]*(?:==|<<|>>|\*\*|\+=| @ |lambda|range\(|clip\(|program_id\(|pl\.ds\(|_ref\[|"
     r"expm1\(|pow\(|rem\(|sqrt\(|x / 0|\(1 - x\)|\{\d)[^`\n]*`",
     "a value inside an example expression (an index, an operand, a comparison)"),
    (r"`\(-?\d+(?:, ?-?\d+)*,?\)`|(?:shape|from|to|block|point|platforms) \(-?\d+(?:, ?-?\d+)*,?\)"
     r"|\b(?:f32|f16|float32|float16|int32|uint32)\[\d+(?:, ?\d+)*\]|\b\d+x\d+(?:x\d+)?\b",
     "an example shape"),
    (r"(?m)\| `[^|\n]*`[^|\n]*\|[ \t]*$", "a quoted example message (its values are the example's)",
     _ERRORS),
    (r"\b(?:file|FILE)\.py:\d+|/path/\w+\.py:\d+", "a line number in an example message"),
    (r"\b2(?:\*\*|\^)31(?: - 1)?(?= |\)|$)", "int32's range, not a choice of this code"),
    (r"`[\[(]-?\w+, -?\w+[\])]`", "an interval's bound in an example"),
    (r"\b2\*\*25 \+ 1 blocks of 128\s+rows|(?:wrap it to|read)\s+block 1\b|block index 33554433",
     "the example of an offset past int32 (2**25 + 1 blocks of 128 rows) and JAX's result on it"),
    (r"is -2048, as it runs, not 2048|on a 128-block|spans 8 bytes|at step 2 after"
     r"|whole \(8, 32\)\s+tiles|`CompilerParams\(num_warps=1024\)|\(`1`, `\"yes\"`\)",
     "a value of the example an error message is quoted for"),
    (r"`pl\.(?:Blocked|Element|BoundedSlice)\(-?\d+\)`", "an example argument"),
    (r"\b(?:8|16|32|64)-bit\b|\b\d-D\b", "a dtype's width; a rank"),
    (r"(?:width or more|NaN) gives? 0\b|puts 0 in|\(0 under Triton's",
     "XLA's result where C leaves it undefined (plugins/pallas_triton/tests/test_xla_numerics.py)"),
    (r"\b\d+ MiB of VMEM", "the chip's memory (hardware, not this code)"),
    (r"(?s)8192×8192×8192 in bfloat16 on one v5e, a run from outside this project\s+"
     r"\(reported in issue 31\) measured.*?gave 187", "a measurement reported in issue 31"),
    (r"\((?:\d+,\s*)+\d+\)|\"block_k\": \d+|block_b=1,", "a candidate configuration in an example",
     _AUTOTUNE),
    (r"with 16\s+or 32 tokens a page, 128 to 512 tokens a step", "tuning advice for a chip"),
    (r"\bdevices\(\)\[0\]", "the first device"),
    (r"`[\[(]-?\w+, [\w ]+[\])]`", "an interval's bound in an example"),
    (r"`\w+` > 0\b", "a presence test (more than none)"),
    (r"`start=k \+ 1`|`\w+ >= 1`|\(of size > 1\)|steps 1\.\.n-1|block index and 0\b"
     r"|X\(0, o_init\)|`\+0`|`0 \+ T`",
     "an index or bound in the description of a loop's steps"),
    (r"\d+ CPU-seconds|took \d+ minutes and ours \d+", "a measured time"),
    (r"--durations=0 -n 0|--jobs \d+\b", "a command's options in an example command"),
    (r"`PALLAS_\w+_EXAMPLES=\d+`", "an example setting"),
    (r"is block\s+0 everywhere|axis of size 0 runs nothing",
     "zero as an origin or an empty size (the definition, not a setting)"),
    (r"same Ref, a semaphore starts at 0\.", "Mosaic's zeroed semaphore scratch (TPU interpret "
     "mode cannot read a semaphore back to check it: semaphore_read has no rule there)",
     {"plugins/pallas_tpu/README.md"}),
    (r'`\(\("i", 4\), \("j", 2\)\)`', "an example grid"),
    (r"`range\(7, 1, -2\)` gives 4", "JAX's trip count in an example (tests/test_jax_compat.py)"),
    (r"\(16/32-row blocks|about 16 mantissa bits", "an example block size; a precision estimate",
     _MGPU),
    (r"multiple\s+of 128 \(lanes|swizzled tiles \(8 rows by 128 bytes for "
     r"128-byte-wide blocks", "a warpgroup's 128 lanes and Hopper's 128-byte swizzle (hardware)",
     _MGPU),
    (r"`arch_major = 9`", "a value of the decoded module the test reads (sm_90)"),
    (r"(?m)^\| device-less H100 compile \|.*$",
     "the kernels tests/test_cuda_aot.py compiles and the registers its ptxas report gave "
     "(a measurement)", _MGPU),
    (r"\(\(\d+,\)\)", "an example shape"),
    (r"CUDA 13\.0\s+at `/usr/local/cuda-13\.0` here", "this machine's CUDA toolkit"),
    (r"`SemaphoreType\.DMA\(\d+\)`|\.at\[\d+\]", "an example argument or index"),
    (r"(?s)JAX's own TPU tests \(`tests/pallas/tpu_pallas_"
     r".*?since the frontend's issue-23 batching\)",
     "results of JAX's TPU test files at dated snapshots (2026-08-08, 2026-12-03)", _TPU),
    (r"in \(-1, 1\)|\[0, n\)", "an interval's bound"),
    (r"\(16384\s+points: 62 s of the check alone, 65536 about 1000 s\)",
     "a measurement (grid sizes and the times they took)", _TPU),
    (r"the looped program ids at 0", "zero as an origin"),
    (r"(?s)\(f16 256x256 matmul, 128x128x64 blocks, 8 warps, 3 stages\).*?\(sm_80: 642 vs 575,"
     r"|\(256x512 @ 512x256 f32, 64-blocks, 2 cores\)",
     "a measurement: an example kernel's PTX instruction counts and times", _TRITON),
    (r"jax-triton \(\d+\.\d+\.\d+ is broken with jax \d+\.\d+;",
     "another project's version, and the JAX release it breaks with"),
    (r"the 16-byte divisibility", "a property Triton's hints describe (its 16-byte alignment)"),
    (r"(?s)Triton 3\.9 writes PTX ISA 9\.4 \(its bundled\s+CUDA 13\.4 ptxas for sm_90\+\), "
     r"which CUDA 13\.0's.*?8\.8 for sm_80\)",
     "other projects' versions: Triton's PTX ISA, CUDA's, on this machine"),
    (r"paged attention; 54 kernels\)", "the pallas_calls a run of `tox -e triton-amd` compiled "
     "(a count of that run's output)", _TRITON),
    (r"(?s)AMD registers \(`tox -e triton-amd`, Triton 3\.9.*?paged attention 89/106\.",
     "a measurement: the registers and spills the AMD compiler reported", _TRITON),
    (r">= the width give 0|±0\b|float16/32/64|`expm1\(88\.7\)` = 3\.3e38",
     "XLA's result; signed zeros; dtype widths"),
    (r"2050 x 2\*\*20 int8 array", "the size of a test's array (past 2**31 elements)"),
    (r"(?m)^\| (?:math functions|`pow`) [^\n]*ULP[^\n]*$",
     "ULP distances measured against float64 (tests/test_polynomial.py, test_float_edges.py)",
     _TRITON),
    (r"(?s)Measured 2026-12-01 on the shared 2-core CPU host.*?add 0\.95 \(A/A 1\.05\)",
     "a dated measurement (the benchmark table)", _TRITON),
    (r"(?s)Checked for false alarms over JAX's own `tests/pallas`.*?tests above pass\.",
     "a dated measurement: tools/jax_suite.py with the coverage warning made an error",
     {"docs/user-guide.md"}),
]
