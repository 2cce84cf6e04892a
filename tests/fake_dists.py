"""Lightweight fake plugin distributions: a module plus a ``*.dist-info`` with
``entry_points.txt`` in a directory that is put on ``sys.path`` of a
subprocess, so importlib.metadata discovers them like installed wheels."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path


def make_dist(root: Path, dist: str, version: str, module: str, source: str,
              entry_name: str, declares: tuple[str, ...] = ()) -> None:
    """``declares``: entry point names of group pallas_frontend.backend_info
    (e.g. "vx.platforms.cuda", "vx.priority.5"), read without importing."""
    (root / f"{module}.py").write_text(textwrap.dedent(source))
    info = root / f"{dist.replace('-', '_')}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
    text = f"[pallas_frontend.backends]\n{entry_name} = {module}\n"
    if declares:
        text += "[pallas_frontend.backend_info]\n" + "".join(f"{d} = {module}\n" for d in declares)
    (info / "entry_points.txt").write_text(text)


def backend_source(name: str, api=(1, 0), extra: str = "", platforms=("cpu",),
                   priority: int = 0, body: str = "") -> str:
    return f"""
        import dataclasses
        import pallas_frontend as pl
        from pallas_frontend import backend_api

        @dataclasses.dataclass(frozen=True)
        class Params(pl.CompilerParams):
            BACKEND = {name!r}

        class B(backend_api.Backend):
            name = {name!r}
            api_version = {api!r}
            platforms = {tuple(platforms)!r}
            priority = {priority!r}
            compiler_params_type = Params
            {body}
            def lower(self, kernel, ctx, *args):
                return pl.get_backend("interpret").lower(kernel, ctx, *args)
        {extra}
        @backend_api.hookimpl
        def pallas_frontend_backend():
            return B()
    """


PROBE = """
import json, sys, warnings
warnings.simplefilter("always")
with warnings.catch_warnings(record=True) as caught:
    from pallas_frontend import registry
    try:
        names = sorted(registry.backends())
        failures = {k: [f.origin.distribution, f.origin.version, f.reason]
                    for k, f in registry.load_failures().items()}
        error = None
    except Exception as e:
        names, failures, error = None, None, f"{type(e).__name__}: {e}"
uses = {}
for name in sys.argv[1:]:
    try:
        registry.get_backend(name)
        uses[name] = "ok"
    except Exception as e:
        uses[name] = f"{type(e).__name__}: {e} | cause: {e.__cause__!r}"
print(json.dumps({"names": names, "failures": failures, "error": error, "uses": uses,
                  "warnings": [str(w.message) for w in caught
                               if "BackendLoadWarning" in type(w.message).__name__]}))
"""


def site_env(path: Path, env=None) -> dict:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("PALLAS_FRONTEND_")}
    full_env["PYTHONPATH"] = os.pathsep.join([str(path), full_env.get("PYTHONPATH", "")])
    full_env.update(env or {})
    return full_env


def run_code(path: Path, code: str, *args, env=None, timeout=120):
    """Runs ``code`` in a fresh interpreter that sees the fake distributions."""
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args],
                          env=site_env(path, env), capture_output=True, text=True,
                          timeout=timeout)


def probe(path: Path, *use, env=None) -> dict:
    out = run_code(path, PROBE, *use, env=env)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])
