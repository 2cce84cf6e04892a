"""Probe, round 4 (issue 39 item 6): the frontend's surfaces outside a kernel,
each in a fresh process: the ``pallas`` command with odd arguments, a closed
pipe and an ASCII-only terminal; ``PALLAS_FRONTEND_*`` variables holding odd
values (empty, commas only, upper case, 100,000 characters, NaN, infinity,
duplicate entries, trailing newlines); plugins that misbehave in ways rounds
1-3 did not try (a hook returning None, a string or a class; an empty, numeric
or built-in name; two plugins of one name; string, future or negative API
versions; a string for platforms or priority; ``SystemExit`` or a non-ASCII
error at import; an entry point naming a missing module; ``check`` raising
``KeyError``; ``lower`` returning None).

Expected: the command exits 0, 1 (a plugin failed to load) or 2 (a bad
setting or argument) with no traceback and JSON that parses; a kernel on the
CPU default path still gives NumPy's result beside a broken plugin; a bad
setting or a broken backend that is asked for is an error naming it. A
command that does not finish in time is a hang. All cases are ``slow``."""

# Counts (issue 39 round 4, 2026-12-06), 104 cases: before fixes 2 crashes (`pallas
# backends | head -c 10`: a BrokenPipeError traceback; `pallas backends` on an ASCII-only
# stdout beside a plugin with a non-ASCII load error: UnicodeEncodeError); after fixes
# (53e9aa5, 1468792): 73 correct, 31 clear errors, 0 unhelpful, 0 crash, 0 hang,
# 0 silent-wrong. (plugin_check_keyerror-use counts clear because stderr names the
# plugin elsewhere; its KeyError itself names the kernel, not the backend 'fakeb'.)


import functools
import json
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

from probes.common import Case, Crashed, Hang

P = functools.partial
_TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TIMEOUT = 120

KERNEL = """
import numpy as np, jax, jax.numpy as jnp, pallas_frontend as pl
x = np.random.default_rng(SEED).standard_normal(1024).astype(np.float32)
def k_surface(x_ref, o_ref):
    o_ref[...] = x_ref[...] * 2 + 1
spec = pl.BlockSpec((256,), lambda i: (i,))
y = pl.pallas_call(k_surface, out_shape=jax.ShapeDtypeStruct((1024,), jnp.float32), grid=(4,),
                   in_specs=[spec], out_specs=spec, BACKEND)(x)
ok = np.allclose(np.asarray(y, np.float64), x.astype(np.float64) * 2 + 1, rtol=1e-6)
print("RESULT-OK" if ok else "RESULT-WRONG", flush=True)
"""
_INTERNAL_NAMES = ("AttributeError", "IndexError", "AssertionError", "UnboundLocalError",
                   "RecursionError", "SystemError", "ZeroDivisionError", "UnicodeEncodeError",
                   "UnicodeDecodeError", "JSONDecodeError", "BrokenPipeError")


def _env(extra=None, path=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith("PALLAS_FRONTEND_")}
    env.update({"JAX_PLATFORMS": "cpu", "TPU_ACCELERATOR_TYPE": "v5litepod-4",
                "TPU_WORKER_HOSTNAMES": "localhost", "ALLOW_MULTIPLE_LIBTPU_LOAD": "1"})
    if path is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(path), env.get("PYTHONPATH", "")])
    env.update(extra or {})
    return env


def _run(cmd, env, stdin_text=None):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT, env=env,
                              input=stdin_text, errors="replace")
    except subprocess.TimeoutExpired:
        raise Hang(f"{' '.join(cmd[-3:])}: no result after {TIMEOUT} s") from None


def _last_error(stderr: str) -> str:
    lines = [ln for ln in stderr.strip().splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def _raise_for(out, allow_traceback=False):
    """A refusal: internal exception types or a traceback where none belongs are
    crashes; anything else is an error classified by the words it names."""
    last = _last_error(out.stderr)
    if any(last.startswith(n) for n in _INTERNAL_NAMES) or out.returncode < 0:
        raise Crashed(f"exit {out.returncode}: {out.stderr[-800:]}")
    if "Traceback (most recent call last)" in out.stderr and not allow_traceback:
        raise Crashed(f"exit {out.returncode}, traceback: {out.stderr[-800:]}")
    raise RuntimeError(f"exit {out.returncode}: {out.stderr[-1200:]}{out.stdout[-400:]}")


def kernel_case(rng, env=None, plugin=None, backend=None):
    """The blocked kernel in a fresh process (on the CPU default path, or
    ``backend=``) beside the given settings and fake plugins."""
    seed = int(rng.integers(0, 2 ** 31))
    code = KERNEL.replace("SEED", str(seed)).replace(
        "BACKEND", f"backend={backend!r}" if backend else "")

    def run():
        with tempfile.TemporaryDirectory() as tmp:
            if plugin:
                plugin(Path(tmp))
            out = _run([sys.executable, "-c", code], _env(env, tmp if plugin else None))
        if "RESULT-OK" in out.stdout:
            return "ok"
        if "RESULT-WRONG" in out.stdout:
            return "wrong"
        _raise_for(out, allow_traceback=True)     # a user script's error prints one
    return run, (lambda got: got == "ok" or "the kernel's result differs from NumPy's")


def cli_case(rng, args, env=None, plugin=None, want_json=False, exits=(0, 1), must=(),
             head=None):
    """``pallas ARGS``: exit status in ``exits`` (else it is a refusal), no
    traceback, JSON that parses with --json, the words in ``must`` printed."""
    def run():
        with tempfile.TemporaryDirectory() as tmp:
            if plugin:
                plugin(Path(tmp))
            env_ = _env(env, tmp if plugin else None)
            cmd = [sys.executable, "-m", "pallas_frontend.cli", *args]
            if head is not None:        # the reader goes away after a few bytes
                return _closed_pipe(cmd, env_, head)
            out = _run(cmd, env_)
        if out.returncode not in exits or "Traceback (most recent call last)" in out.stderr \
                and "--verbose" not in args:
            _raise_for(out, allow_traceback="--verbose" in args)
        if want_json:
            try:
                json.loads(out.stdout)
            except ValueError as e:
                raise Crashed(f"--json printed what does not parse ({e}): {out.stdout[:300]}")
        text = out.stdout + out.stderr
        missing = [w for w in must if w.lower() not in text.lower()]
        return f"missing {missing}: {text[-600:]}" if missing else "ok"
    return run, (lambda got: got == "ok" or got)


def _closed_pipe(cmd, env, nbytes):
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    try:
        proc.stdout.read(nbytes)
        proc.stdout.close()
        _, err = proc.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise Hang(f"no exit {TIMEOUT} s after its reader closed the pipe") from None
    err = err.decode(errors="replace")
    if "Traceback (most recent call last)" in err:
        raise Crashed(f"exit {proc.returncode} after the reader left: {err[-600:]}")
    return "ok"


# --- fake plugins --------------------------------------------------------------------------

def _dist(root: Path, name: str, source: str, module: str | None = None, entry: str | None = None,
          version: str = "1.0"):
    module = module or f"fake_{name}"
    (root / f"{module}.py").write_text(textwrap.dedent(source))
    info = root / f"{module}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {module}\nVersion: {version}\n")
    (info / "entry_points.txt").write_text(
        f"[pallas_frontend.backends]\n{name} = {entry or module}\n")


def _backend_src(name="'fakeb'", api="(1, 0)", platforms="('cpu',)", priority="0", body="",
                 hook="return B()", prelude=""):
    return f"""
        {prelude}
        import pallas_frontend as pl
        from pallas_frontend import backend_api

        class B(backend_api.Backend):
            name = {name}
            api_version = {api}
            platforms = {platforms}
            priority = {priority}
            {body}
            def lower(self, kernel, ctx, *args):
                return pl.get_backend("interpret").lower(kernel, ctx, *args)

        @backend_api.hookimpl
        def pallas_frontend_backend():
            {hook}
        """


PLUGINS = {   # kind: (writer, the name a listing must show)
    "hook_none": (lambda r: _dist(r, "fakeb", _backend_src(hook="return None")), "fake_fakeb"),
    "hook_str": (lambda r: _dist(r, "fakeb", _backend_src(hook="return 'tpu'")), "fake_fakeb"),
    "hook_class": (lambda r: _dist(r, "fakeb", _backend_src(hook="return B")), "fake_fakeb"),
    "name_empty": (lambda r: _dist(r, "fakeb", _backend_src(name="''")), "fake_fakeb"),
    "name_int": (lambda r: _dist(r, "fakeb", _backend_src(name="123")), "fake_fakeb"),
    "name_interpret": (lambda r: _dist(r, "fakeb", _backend_src(name="'interpret'",
                                                                 priority="100")), "fake_fakeb"),
    "two_same_name": (lambda r: (_dist(r, "fakeb", _backend_src(), module="fake_one"),
                                 _dist(r, "fakec", _backend_src(), module="fake_two")), "fakeb"),
    "api_strings": (lambda r: _dist(r, "fakeb", _backend_src(api="('1', '0')")), "fake_fakeb"),
    "api_future": (lambda r: _dist(r, "fakeb", _backend_src(api="(2, 0)")), "fake_fakeb"),
    "api_negative": (lambda r: _dist(r, "fakeb", _backend_src(api="(1, -3)")), "fake_fakeb"),
    "platforms_str": (lambda r: _dist(r, "fakeb", _backend_src(platforms="'cpu'")), "fakeb"),
    "priority_str": (lambda r: _dist(r, "fakeb", _backend_src(priority="'high'")), "fakeb"),
    "capabilities_none": (lambda r: _dist(r, "fakeb", _backend_src(body="capabilities = None")),
                          "fakeb"),
    "import_systemexit": (lambda r: _dist(r, "fakeb", "raise SystemExit(3)\n"), "fake_fakeb"),
    "import_unicode": (lambda r: _dist(r, "fakeb", "raise ImportError('mödülé fehlt: ü∑')\n"),
                       "fake_fakeb"),
    "entry_missing_module": (lambda r: _dist(r, "fakeb", "x = 1\n", entry="no_such_module_xyz"),
                             "fakeb"),
    "check_keyerror": (lambda r: _dist(r, "fakeb", _backend_src(
        body="def check(self, kernel):\n                raise KeyError('oops')")), "fakeb"),
    "lower_none": (lambda r: _dist(r, "fakeb", _backend_src().replace(
        'return pl.get_backend("interpret").lower(kernel, ctx, *args)', "return None")),
        "fakeb"),
}
# plugins a kernel may name with backend="fakeb": an error naming it, or the result
USED = ("check_keyerror", "lower_none", "platforms_str", "priority_str", "capabilities_none",
        "api_strings", "name_interpret")

ENVS = {   # tag: (variable suffix, value, must the kernel still run?)
    "backends_empty": ("BACKENDS", "", True),
    "backends_commas": ("BACKENDS", ",,,", None),
    "backends_upper": ("BACKENDS", "TPU,TRITON", None),
    "backends_unknown": ("BACKENDS", "nonexistent", None),
    "backends_spaces": ("BACKENDS", "  tpu ,  triton  ", None),
    "backends_huge": ("BACKENDS", "x" * 100000, None),
    "backends_newline": ("BACKENDS", "tpu\n", None),
    "strict_2": ("STRICT", "2", None),     # read by discovery; import warns about it
    "strict_spaced_yes": ("STRICT", " YES ", None),
    "timeout_neg": ("IMPORT_TIMEOUT", "-1", None),
    "timeout_word": ("IMPORT_TIMEOUT", "abc", False),
    "timeout_nan": ("IMPORT_TIMEOUT", "nan", None),
    "timeout_inf": ("IMPORT_TIMEOUT", "inf", None),
    "timeout_1e309": ("IMPORT_TIMEOUT", "1e309", None),
    "timeout_zero": ("IMPORT_TIMEOUT", "0", None),
    "default_cpu_empty": ("DEFAULT_BACKEND", "cpu=", None),
    "default_eq_first": ("DEFAULT_BACKEND", "=triton", None),
    "default_twice": ("DEFAULT_BACKEND", "cpu=interpret,cpu=interpret", None),
    "default_gpu": ("DEFAULT_BACKEND", "gpu=triton", None),
    "default_cpu_unknown": ("DEFAULT_BACKEND", "cpu=nonexistent", None),
    "autoload_off": ("DISABLE_PLUGIN_AUTOLOAD", "1", True),
    "autoload_maybe": ("DISABLE_PLUGIN_AUTOLOAD", "maybe", None),
    "unknown_variable": ("TYPO_BACKENDZ", "1", True),
    "test_backend_bogus": ("TEST_BACKEND", "bogus", None),
}


# the words of an error for a case that must run: none contains them, so any error
# there counts as unhelpful, never as a clear refusal
MUST_RUN = ("<this case must run: an error here is a defect>",)


def _cases():
    out = []

    def add(cid, build, names=(), expect_error=False, either=False):
        out.append(Case(cid, build, names, expect_error=expect_error, either=either, slow=True,
                        timeout=TIMEOUT + 30))
    for tag, (var, value, runs) in ENVS.items():
        full = f"PALLAS_FRONTEND_{var}"
        add(f"env_{tag}-kernel", P(kernel_case, env={full: value}),
            MUST_RUN if runs is True else (full,),
            expect_error=runs is not True, either=runs is None)
        add(f"env_{tag}-cli", P(cli_case, args=["backends", "--json"], env={full: value},
                                want_json=True), MUST_RUN if runs is True else (full,),
            expect_error=runs is not True, either=runs is None)
    for kind, (writer, shown) in PLUGINS.items():
        add(f"plugin_{kind}-kernel", P(kernel_case, plugin=writer), MUST_RUN)
        add(f"plugin_{kind}-cli", P(cli_case, args=["backends", "--json"], plugin=writer,
                                    want_json=True, must=(shown,)), MUST_RUN)
        if kind in USED:
            add(f"plugin_{kind}-use", P(kernel_case, plugin=writer, backend="fakeb"),
                ("fakeb",), expect_error=True, either=True)
    add("cli-no_args", P(cli_case, args=[], exits=(0,)), ("usage",), expect_error=True)
    add("cli-bogus_command", P(cli_case, args=["bogus"], exits=(0,)), ("invalid choice",),
        expect_error=True)
    add("cli-extra_arg", P(cli_case, args=["backends", "extra"], exits=(0,)), ("unrecognized",),
        expect_error=True)
    add("cli-json_verbose", P(cli_case, args=["backends", "--json", "--verbose"],
                              want_json=True), MUST_RUN)
    add("cli-abbrev_json", P(cli_case, args=["backends", "--js"], want_json=True), MUST_RUN)
    add("cli-version", P(cli_case, args=["--version"], exits=(0,), must=("pallas",)), MUST_RUN)
    add("cli-closed_pipe", P(cli_case, args=["backends"], head=10), MUST_RUN)
    add("cli-closed_pipe_json", P(cli_case, args=["backends", "--json"], head=5), MUST_RUN)
    add("cli-ascii_terminal", P(cli_case, args=["backends"], plugin=PLUGINS["import_unicode"][0],
                                env={"PYTHONIOENCODING": "ascii", "LC_ALL": "C"},
                                must=("fake_fakeb",)), MUST_RUN)
    add("cli-ascii_json", P(cli_case, args=["backends", "--json"],
                            plugin=PLUGINS["import_unicode"][0],
                            env={"PYTHONIOENCODING": "ascii"}, want_json=True), MUST_RUN)
    add("cli-doctor", P(cli_case, args=["doctor"], env={"PALLAS_FRONTEND_BACKENDS": "interpret"},
                        exits=(0,), must=("PASS",)), MUST_RUN)
    add("cli-doctor_broken_plugin", P(cli_case, args=["doctor"],
                                      plugin=PLUGINS["check_keyerror"][0], must=("fakeb",)),
        MUST_RUN)
    add("cli-help_backends", P(cli_case, args=["backends", "--help"], exits=(0,),
                               must=("--json",)), MUST_RUN)
    return out


CASES = _cases()
