"""Which PTX ISA version to write, from the ptxas versions this machine has.

Triton 3.9 picks the PTX version from the ptxas it bundles (CUDA 13.4 for
sm_90+, so ``.version 9.4``); a CUDA 13.0 toolkit's ptxas, and a driver of that
age, reject it ("Unsupported .version 9.4"). The PTX we hand out must be
accepted by every ptxas found here: the oldest one decides.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess


def _release(ptxas: str) -> tuple[int, int] | None:
    try:
        text = subprocess.run([ptxas, "--version"], capture_output=True, text=True,
                              timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"release (\d+)\.(\d+)", text)
    return (int(m.group(1)), int(m.group(2))) if m else None


def ptxas_candidates(arch: int) -> list[str]:
    """Triton's own ptxas for ``arch``, and the system's (CUDA_HOME/CUDA_PATH, PATH)."""
    found = []
    try:
        from triton.backends.nvidia.compiler import get_ptxas
        found.append(get_ptxas(arch).path)
    except Exception:  # noqa: BLE001  (no NVIDIA backend in this triton build)
        pass
    for root in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"),
                 os.environ.get("CUDA_ROOT"), "/usr/local/cuda"):
        if root and os.path.isfile(os.path.join(root, "bin", "ptxas")):
            found.append(os.path.join(root, "bin", "ptxas"))
    on_path = shutil.which("ptxas")
    if on_path:
        found.append(on_path)
    return list(dict.fromkeys(os.path.realpath(p) for p in found))


def isa_for_release(major: int, minor: int) -> int:
    """The newest PTX ISA (as 10*major+minor) that ptxas of CUDA ``major.minor`` accepts."""
    if major >= 13:
        return 90 + (major - 13) * 10 + minor
    if major == 12:
        return 80 + minor if minor < 6 else 80 + minor - 1
    if major == 11:
        return 70 + minor
    return 63 + minor


@functools.lru_cache(maxsize=16)
def ptx_version_for(arch: int) -> int | None:
    """The PTX version every local ptxas accepts, or None when none answers."""
    releases = [r for r in map(_release, ptxas_candidates(arch)) if r is not None]
    if not releases:
        return None
    return min(isa_for_release(*r) for r in releases)
