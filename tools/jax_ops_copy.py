"""A copy of the installed jax's ``jax/experimental/pallas/ops/`` tree whose
Pallas imports name ours (the rewriting of ``tools/jax_suite.py``, nothing
else changed), importable as package ``pf_jax_ops``.

    ops = ours_ops()                         # the copy (made once per process)
    ops.load("gpu.layer_norm")               # our run of JAX's file
    jax_ops("gpu.layer_norm")                # JAX's file, unmodified

Used by ``tools/jax_ops.py`` and by the parity tests (tests/test_jax_*).
"""

from __future__ import annotations

import atexit
import importlib
import re
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import jax_suite  # noqa: E402  (the shared import rewriting)

PACKAGE = "pf_jax_ops"
JAX_OPS = "jax.experimental.pallas.ops"


def jax_ops_dir() -> Path:
    import jax.experimental.pallas.ops as ops
    return Path(ops.__file__).resolve().parent


def rewrite(source: str) -> str:
    """JAX's Pallas imports -> ours; the tree's imports of itself -> the copy."""
    source = re.sub(rf"^(\s*from\s+){re.escape(JAX_OPS)}(?=[.\s])", rf"\g<1>{PACKAGE}",
                    source, flags=re.M)
    return jax_suite.make_copy(source, ours=True, skewed=[])


class OursOps:
    def __init__(self, root: Path):
        self.root = root

    def load(self, name: str):
        """Our copy of module ``name`` (e.g. ``"tpu.megablox.gmm"``)."""
        return importlib.import_module(f"{PACKAGE}.{name}")


_made: OursOps | None = None


def write_copy(root: Path) -> Path:
    """Writes the rewritten tree as ``root/pf_jax_ops``; returns that folder."""
    src = jax_ops_dir()
    for path in sorted(src.rglob("*.py")):
        dest = root / PACKAGE / path.relative_to(src)
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text(rewrite(path.read_text()))
    return root / PACKAGE


def use_copy(test_source: str) -> str:
    """A test file's imports of JAX's ops (``from jax.experimental.pallas.ops...``,
    ``import jax.experimental.pallas.ops.tpu.megablox as mblx``) -> the copy's,
    so a test of a shipped kernel runs it through ours."""
    return re.sub(rf"^(\s*(?:from|import)\s+){re.escape(JAX_OPS)}(?=[.\s])", rf"\g<1>{PACKAGE}",
                  test_source, flags=re.M)


def ours_ops() -> OursOps:
    global _made
    if _made is None:
        root = Path(tempfile.mkdtemp(prefix="pf_jax_ops_"))
        atexit.register(shutil.rmtree, root, ignore_errors=True)
        write_copy(root)
        sys.path.insert(0, str(root))
        _made = OursOps(root)
    return _made


def shipped(name: str) -> bool:
    """Whether the installed JAX ships ops module ``name`` (JAX 0.12.1 no longer ships
    its Triton-style GPU ops: gpu.attention, gpu.softmax, gpu.layer_norm, ...)."""
    import importlib.util
    try:
        return importlib.util.find_spec(f"{JAX_OPS}.{name}") is not None
    except ModuleNotFoundError:       # a package on the way is missing
        return False


def jax_ops(name: str):
    """JAX's own module ``name``, as installed."""
    return importlib.import_module(f"{JAX_OPS}.{name}")
