"""Installs the XLA:GPU compiler (jax-cuda12-plugin, jax-cuda12-pjrt) at exactly
the installed jaxlib's version, into the running interpreter's environment.
Used by the tox envs triton-cuda-aot and mgpu-cuda-aot (device-less compiles);
a mismatched plugin would pull another jaxlib. With ``--target DIR`` the two
packages alone go into DIR (for PYTHONPATH: tools/jax_ops.py's GPU columns
leave the shared environment as it is)."""

import os
import shutil
import subprocess
import sys

import jaxlib

version = jaxlib.__version__
# uv (a dependency of those envs) links from its shared cache; pip unpacks anew
uv = shutil.which("uv") or shutil.which("uv", path=os.path.dirname(sys.executable))
installer = [uv, "pip", "install", "--python", sys.executable] if uv else \
    [sys.executable, "-m", "pip", "install"]
target = sys.argv[sys.argv.index("--target") + 1] if "--target" in sys.argv else None
if target:
    installer += ["--target", target, "--no-deps"]
subprocess.run(installer + ["-q", f"jax-cuda12-plugin=={version}", f"jax-cuda12-pjrt=={version}"],
               check=True)
