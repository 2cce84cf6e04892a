"""tools/bytecode_store.py: bytecode moves between environments by distribution
name and version, is used where the sources are the same files, and is never
run in place of a source that changed."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import bytecode_store as bs


def _site(root: Path, value: int, mtime: int) -> Path:
    """A site-packages holding distribution demo-1.0 (module demo.mod)."""
    site = root / "site-packages"
    (site / "demo").mkdir(parents=True)
    for rel, text in (("demo/__init__.py", ""), ("demo/mod.py", f"VALUE = {value}\n")):
        (site / rel).write_text(text)
        os.utime(site / rel, (mtime, mtime))
    (site / "demo-1.0.dist-info").mkdir()
    (site / "demo-1.0.dist-info" / "RECORD").write_text(
        "demo/__init__.py,,\ndemo/mod.py,,\ndemo-1.0.dist-info/RECORD,,\n")
    return site


def _import_value(site: Path) -> str:
    out = subprocess.run([sys.executable, "-c", "import demo.mod; print(demo.mod.VALUE)"],
                         env={**{k: v for k, v in os.environ.items()
                                 if k != "PYTHONDONTWRITEBYTECODE"}, "PYTHONPATH": str(site)},
                         capture_output=True, text=True, check=True)
    return out.stdout.strip()


def _saved_store(root: Path) -> Path:
    """A store holding the bytecode of demo-1.0 (VALUE = 1, mtime 1_700_000_000)."""
    donor = _site(root / "a", 1, 1_700_000_000)
    _import_value(donor)
    bs.save(root / "store", donor)
    return root / "store"


def _pyc(site: Path) -> Path:
    return site / "demo" / "__pycache__" / f"mod.{sys.implementation.cache_tag}.pyc"


def test_bytecode_saved_from_one_site_serves_the_same_sources_elsewhere(tmp_path):
    donor = _site(tmp_path / "a", 1, 1_700_000_000)
    assert _import_value(donor) == "1" and _pyc(donor).is_file()
    store = tmp_path / "store"
    assert bs.save(store, donor) == 2
    assert bs.save(store, donor) == 0                       # nothing new the second time

    target = _site(tmp_path / "b", 1, 1_700_000_000)         # same files, same times
    assert bs.restore(store, target) == 2
    before = _pyc(target).read_bytes()
    assert _import_value(target) == "1"
    assert _pyc(target).read_bytes() == before               # used as it was, not rewritten


def test_changed_source_is_compiled_again_not_served_stale(tmp_path):
    store = _saved_store(tmp_path)
    # the same distribution and version, the same size, other contents and time
    target = _site(tmp_path / "b", 2, 1_700_000_999)
    assert bs.restore(store, target) == 2
    assert _import_value(target) == "2"


def test_other_versions_and_existing_bytecode_are_left_alone(tmp_path):
    store = _saved_store(tmp_path)
    other = _site(tmp_path / "b", 1, 1_700_000_000)
    shutil.move(other / "demo-1.0.dist-info", other / "demo-2.0.dist-info")
    assert bs.restore(store, other) == 0
    same = _site(tmp_path / "c", 1, 1_700_000_000)
    _import_value(same)
    assert bs.restore(store, same) == 0
