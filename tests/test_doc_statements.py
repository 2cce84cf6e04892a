"""Issue 39 #5: two doc statements the code contradicted. docs/contributing.md
said the docs have JAX's look (docs/conf.py sets Sphinx's default theme);
docs/migration.md says a TPU DMA sent to Triton names the kernel line (it named
pallas_tpu/primitives.py; tests/test_errors_actionable.py holds the code to it)."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_contributing_names_the_theme_conf_py_sets():
    theme = re.search(r'^html_theme\s*=\s*"([^"]+)"', (ROOT / "docs/conf.py").read_text(),
                      re.M).group(1)
    text = " ".join((ROOT / "docs/contributing.md").read_text().split())
    assert "the same look" not in text
    assert f"theme, {theme}," in text


def test_migration_says_what_the_foreign_primitive_error_names():
    text = " ".join((ROOT / "docs/migration.md").read_text().split())
    assert ("naming the primitive, its owner, the kernel line that calls it and the backend "
            "running the kernel") in text
