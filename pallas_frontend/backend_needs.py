"""What the backends this project ships need from the machine, beyond their
own distribution, to compile for their hardware without it; whether it is
here; and what installs it. The "available" column of ``pallas backends``
names a missing piece with its install command, instead of promising a
compile that then fails.

Only the shipped backends are described here (``registry.SHIPPED``); a
third-party backend speaks through ``is_available()`` and ``compile_only``.
Nothing here imports a plugin or the pieces themselves: presence is looked
up (``importlib.util.find_spec``, ``PATH``).
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import importlib.util
import os
import shutil
from collections.abc import Callable

from pallas_frontend import install_hints, load_timeout


@dataclasses.dataclass(frozen=True)
class Need:
    piece: str                   # what is needed, in words
    target: str                  # the platform it compiles for
    install: Callable[[], str]   # the command that provides it
    present: Callable[[], bool]


def _module(*names: str) -> Callable[[], bool]:
    def present() -> bool:
        if load_timeout.import_lock_holder() is not None:
            return True    # find_spec would wait for an abandoned import: claim nothing missing
        for name in names:
            try:
                if importlib.util.find_spec(name) is not None:
                    return True
            except (ImportError, ValueError):    # a parent package is absent
                continue
        return False
    return present


def _ptxas() -> bool:
    """Where XLA looks for CUDA's ptxas: PATH, the toolkit dirs, the pip wheel."""
    if shutil.which("ptxas"):
        return True
    roots = [os.environ.get(v) for v in ("CUDA_HOME", "CUDA_PATH", "CUDA_ROOT")]
    if any(r and os.path.isfile(os.path.join(r, "bin", "ptxas"))
           for r in [*roots, "/usr/local/cuda"]):
        return True
    return _module("nvidia.cuda_nvcc")()


def _cuda_plugin_at_jaxlib() -> str:
    pip = install_hints.pip_install()
    try:
        version = importlib.metadata.version("jaxlib")
    except importlib.metadata.PackageNotFoundError:
        return f"{pip} jax-cuda12-plugin jax-cuda12-pjrt (at jaxlib's version)"
    return f"{pip} jax-cuda12-plugin=={version} jax-cuda12-pjrt=={version}"


_CUDA_PLUGIN = _module("jax_cuda12_plugin", "jax_cuda13_plugin", "jax_plugins.xla_cuda12")

NEEDS: dict[str, tuple[Need, ...]] = {
    "tpu": (Need("libtpu", "tpu", lambda: install_hints.extra_command("pallas-tpu", "libtpu"),
                 _module("libtpu")),),
    "mgpu": (Need("the CUDA PJRT plugin jax-cuda12-plugin", "cuda",
                  lambda: install_hints.extra_command("pallas-mgpu", "cuda"), _CUDA_PLUGIN),
             Need("CUDA's ptxas", "cuda",
                  lambda: "install the CUDA toolkit, or "
                          f"{install_hints.pip_install()} nvidia-cuda-nvcc-cu12",
                  _ptxas)),
    "triton": (Need("the XLA:GPU compiler jax-cuda12-plugin", "cuda", _cuda_plugin_at_jaxlib,
                    _CUDA_PLUGIN),),
}


def missing(backend) -> list[Need]:
    """The pieces a shipped backend lacks here to compile for its hardware."""
    from pallas_frontend import registry
    if registry.SHIPPED.get(backend.name) != backend.distribution:
        return []
    return [n for n in NEEDS.get(backend.name, ()) if not n.present()]


def describe(needs: list[Need]) -> str:
    """``missing <piece> (<install>), ...``"""
    return "missing " + ", ".join(f"{n.piece} ({n.install()})" for n in needs)
