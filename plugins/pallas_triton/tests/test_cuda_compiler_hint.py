"""Without the XLA:GPU compiler, a device-less compile says how to get it with a
command that works pasted (issue 34): the CUDA plugin pinned to the installed
jaxlib's version (it said "... at jaxlib's version", which pip cannot take)."""

import importlib.metadata
import shlex

import pytest

from pallas_frontend.backend_api import BackendUnavailableError
from pallas_triton import aot


def test_missing_cuda_compiler_names_a_pasteable_command(monkeypatch):
    monkeypatch.setattr(aot, "cuda_compiler_installed", lambda: False)
    with pytest.raises(BackendUnavailableError) as info:
        aot.compile_only_mesh("H100")
    version = importlib.metadata.version("jaxlib")
    command = f"pip install jax-cuda12-plugin=={version} jax-cuda12-pjrt=={version}"
    assert command in str(info.value), str(info.value)
    assert shlex.split(command)[2:] == [f"jax-cuda12-plugin=={version}",
                                        f"jax-cuda12-pjrt=={version}"]
