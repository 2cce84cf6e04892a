"""docs/api-parity.md is current, and every public name of JAX's Pallas modules
is provided by ours or has an entry in tools/api_parity_reasons.json
(tools/api_parity.py). Needs all three plugins: runs in tox's all-plugins env."""

import enum
import functools
import sys
from pathlib import Path

import pytest

TOOLS = Path(__file__).resolve().parent.parent / "tools"
sys.path.insert(0, str(TOOLS))
import api_parity  # noqa: E402

for _plugin in ("pallas_tpu", "pallas_mgpu", "pallas_triton"):
    pytest.importorskip(_plugin)


@pytest.fixture(scope="module")
def results():
    return api_parity.compare()


def test_every_missing_name_has_an_entry_and_no_entry_is_stale(results):
    assert api_parity.problems(results) == []


def test_page_is_current(results):
    assert api_parity.PAGE.read_text() == api_parity.render(results), (
        "docs/api-parity.md is stale: run python tools/api_parity.py")


def test_reasons_are_well_formed():
    reasons = api_parity.load_reasons()
    assert set(reasons) <= {jax_name for jax_name, _ in api_parity.PAIRS}
    for module, entries in reasons.items():
        for name, entry in entries.items():
            assert set(entry) == {"status", "reason"}, (module, name)
            assert entry["status"] in ("kept_out", "pending"), (module, name)
            assert len(entry["reason"]) > 40, f"{module}.{name}: say why, in a sentence"
            if entry["status"] == "kept_out":
                lowered = entry["reason"].lower()
                assert "not done" not in lowered and "todo" not in lowered, (module, name)


def test_an_unlisted_missing_name_fails_the_check():
    reasons = api_parity.load_reasons()
    trimmed = {m: {n: e for n, e in entries.items() if n != "tpu"}
               for m, entries in reasons.items()}
    found = api_parity.problems(api_parity.compare(trimmed))
    assert any("jax.experimental.pallas.tpu (module)" in p for p in found)


def test_subpackages_imported_elsewhere_do_not_count():
    import jax.experimental.pallas as jax_pl
    import jax.experimental.pallas.ops.tpu.matmul  # noqa: F401  (sets jax_pl.ops)
    assert "ops" not in api_parity.public_names(jax_pl)
    assert "tpu" in api_parity.public_names(jax_pl)


def test_kinds():
    class Color(enum.Enum):
        RED = 1

        def __call__(self):
            return self

    assert api_parity.kind(enum) == "module"
    assert api_parity.kind(Color) == "class"
    assert api_parity.kind(Color.RED) == "constant"     # a callable member is still a constant
    assert api_parity.kind(functools.partial(max, 1)) == "function"
    assert api_parity.kind(3) == "constant"


def test_signature_differences_are_reported():
    def jax_fn(x, *, approx=False): ...
    def ours_same(x, *, approx=False): ...
    def ours_other(y, approx=False): ...
    assert api_parity.signature_difference(jax_fn, ours_same) is None
    diff = api_parity.signature_difference(jax_fn, ours_other)
    assert diff == "JAX `(x, *, approx=)`, ours `(y, approx=)`"
