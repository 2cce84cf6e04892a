"""docs/jax-suite.md's sections that other tools keep (the chip run, the
SparseCore counts) survive tools/jax_suite.py writing the CPU tables anew."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
import jax_suite  # noqa: E402


def test_sections_after_the_tables_are_kept_in_order(tmp_path):
    page = tmp_path / "jax-suite.md"
    tail = ("\n## TPU v5e, natively\n\nthe chip's table\n"
            "\n## SparseCore (`tpu_sparsecore_pallas_test.py`)\n\nthe counts\n")
    page.write_text("# JAX's suite\n\nold CPU tables\n" + tail)
    assert jax_suite._kept_native_section(page) == tail


def test_a_sparsecore_section_alone_is_kept(tmp_path):
    page = tmp_path / "jax-suite.md"
    page.write_text("# JAX's suite\n\nold CPU tables\n\n## SparseCore\n\nthe counts\n")
    assert jax_suite._kept_native_section(page) == "\n## SparseCore\n\nthe counts\n"
    page.write_text("# JAX's suite\n\nonly tables\n")
    assert jax_suite._kept_native_section(page) == ""
