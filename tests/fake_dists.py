"""Lightweight fake plugin distributions: a module plus a ``*.dist-info`` with
``entry_points.txt`` in a directory put on ``sys.path`` (of a subprocess, or of
this process for ``discovering`` and ``probe``), so importlib.metadata discovers them like
installed wheels."""

import contextlib
import os
import subprocess
import sys
import textwrap
import warnings
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


@contextlib.contextmanager
def discovering(monkeypatch, path: Path, env=None):
    """Within: this process discovers backends as a fresh process would with the
    fake distributions under ``path`` on sys.path and only ``env`` of the
    frontend's variables (a jax import per subprocess would cost more than the
    test). Everything is restored afterwards."""
    from pallas_frontend import discovery, registry
    with monkeypatch.context() as m:
        for key in [k for k in os.environ if k.startswith("PALLAS_FRONTEND_")]:
            m.delenv(key)
        for key, value in (env or {}).items():
            m.setenv(key, value)
        m.syspath_prepend(str(path))          # also empties importlib's path caches
        m.setattr(discovery, "_warned", set())
        fakes = {p.stem for p in path.glob("*.py")}
        registry.reload()
        try:
            yield
        finally:
            registry.reload()
            for module in fakes & set(sys.modules):
                del sys.modules[module]


def probe(monkeypatch, path: Path, *use, env=None) -> dict:
    """What ``discovering`` finds: the backends, the load failures (or the
    error), what using each of ``use`` gives, the load warnings."""
    from pallas_frontend import registry
    with discovering(monkeypatch, path, env), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            names = sorted(registry.backends())
            failures = {k: [f.origin.distribution, f.origin.version, f.reason]
                        for k, f in registry.load_failures().items()}
            error = None
        except Exception as e:
            names, failures, error = None, None, f"{type(e).__name__}: {e}"
        uses = {}
        for name in use:
            try:
                registry.get_backend(name)
                uses[name] = "ok"
            except Exception as e:
                uses[name] = f"{type(e).__name__}: {e} | cause: {e.__cause__!r}"
    return {"names": names, "failures": failures, "error": error, "uses": uses,
            "warnings": [str(w.message) for w in caught
                         if type(w.message).__name__ == "BackendLoadWarning"]}
