"""The docs' statements of what is and is not supported hold for the code
(``tox -e docs``; the conventions are in ``tools/doc_claims.py``):

- every ``<!-- claim: supported|unsupported BACKEND FEATURE -->`` tag of
  README.md, docs/ and the plugins' READMEs is run as a tiny kernel
  (``tools/claim_probes.py``) and must come out as the tag says;
- a paragraph that says a probed feature is missing carries such a tag;
- the names docs/api.md and the plugins' READMEs list as provided exist, and
  those listed as not provided do not; docs/api.md's JAX lists cover JAX's
  ``jax.experimental.pallas`` exactly, with the counts its text gives.
"""

import os

# before jax loads: libtpu on a host without a TPU (as tox -e docs sets them)
for _key, _value in {"JAX_PLATFORMS": "cpu", "TPU_ACCELERATOR_TYPE": "v5litepod-4",
                     "TPU_WORKER_HOSTNAMES": "localhost", "ALLOW_MULTIPLE_LIBTPU_LOAD": "1"}.items():
    os.environ.setdefault(_key, _value)

import importlib  # noqa: E402
import types  # noqa: E402
import warnings  # noqa: E402

import pytest  # noqa: E402

import claim_probes  # noqa: E402
import doc_claims  # noqa: E402

UNITS = doc_claims.all_units()
CLAIMS = [c for u in UNITS for c in doc_claims.claims_in(u)[0]]
PAIRS = sorted({(c.backend, c.feature) for c in CLAIMS if c.feature in claim_probes.PROBES})


def test_claim_tags_are_well_formed_and_name_a_probe():
    problems = [p for u in UNITS for p in doc_claims.claims_in(u)[1]]
    for c in CLAIMS:
        if c.feature not in claim_probes.PROBES:
            problems.append(f"{c.where}: no probe for feature {c.feature!r} in "
                            f"tools/claim_probes.py (known: {', '.join(sorted(claim_probes.PROBES))})")
        elif c.backend not in claim_probes.PROBES[c.feature][1]:
            problems.append(f"{c.where}: the {c.feature!r} probe does not run on {c.backend!r} "
                            f"(it runs on {', '.join(claim_probes.PROBES[c.feature][1])})")
    assert not problems, "\n".join(problems)


def test_every_statement_of_a_missing_feature_is_tagged():
    problems = doc_claims.untagged_statements(UNITS)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize(("backend", "feature"), PAIRS, ids=[f"{b}-{f}" for b, f in PAIRS])
def test_claim_holds(backend, feature):
    ok, why = claim_probes.supported(backend, feature)
    actual = "supported" if ok else "unsupported"
    wrong = [c for c in CLAIMS if (c.backend, c.feature) == (backend, feature)
             and c.polarity != actual]
    assert not wrong, (f"the code says {feature} is {actual} on {backend}"
                       f"{' (' + why + ')' if why else ''}, but the docs say otherwise at:\n"
                       + "\n".join(f"  {c.where}: {c.id}" for c in wrong))


def _has(module: str, name: str) -> bool:
    with warnings.catch_warnings():   # a deprecated name is still provided
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            getattr(importlib.import_module(module), name)
        except AttributeError:
            return False
    return True


def _mismatches(claims) -> list[str]:
    return [f"{c.where}: `{c.name}` is listed as {'provided' if c.provided else 'not provided'}, "
            f"but {c.module}.{c.name} {'does not exist' if c.provided else 'exists'}"
            for c in claims if _has(c.module, c.name) != c.provided]


def test_api_md_names_match_pallas_frontend():
    claims = doc_claims.api_overview_claims()
    assert len(claims) > 50, "docs/api.md's tables were not found (changed layout?)"
    problems = _mismatches(claims)
    assert not problems, "\n".join(problems)


def test_api_md_covers_jax_pallas_names_exactly():
    import jax.experimental.pallas as jax_pallas
    jax_names = {n for n in dir(jax_pallas) if not n.startswith("_")
                 and not isinstance(getattr(jax_pallas, n), types.ModuleType)}
    jax_section = [c for c in doc_claims.api_overview_claims() if c.section == "jax"]
    provided = {c.name for c in jax_section if c.provided}
    not_provided = {c.name for c in jax_section if not c.provided}
    assert provided | not_provided == jax_names, (
        f"JAX names docs/api.md does not list: {sorted(jax_names - provided - not_provided)}; "
        f"listed but not JAX's: {sorted((provided | not_provided) - jax_names)}")
    assert doc_claims.jax_name_counts() == (len(jax_names), len(provided)), (
        f"docs/api.md gives (public names, provided) = {doc_claims.jax_name_counts()}; "
        f"JAX has {len(jax_names)}, of which the page lists {len(provided)} as provided")


def test_plugin_readme_name_tables_match_the_plugins():
    claims = doc_claims.plugin_readme_claims()
    assert {c.module for c in claims} >= {"pallas_tpu", "pallas_triton", "pallas_mgpu"}, (
        "a plugin README's provided/not-provided table was not found (changed layout?)")
    problems = _mismatches(claims)
    assert not problems, "\n".join(problems)


# --- numbers and versions (tools/doc_numbers.py, doc_facts.py, doc_truths.py) -----------

import doc_facts  # noqa: E402
import doc_numbers  # noqa: E402


def test_every_number_and_version_in_the_docs_matches_the_code():
    """README.md, the hand-written docs and the plugins' READMEs: each stated version,
    default, limit or count equals what the code (pyproject files, constants, defaults,
    tox.ini, ...) or a generated page says, and no number is left unchecked (each is in
    a fact's match, an EXEMPT category, or a python block the snippet test runs)."""
    problems = [p for page in doc_numbers.pages() for p in doc_numbers.check_page(page)[0]]
    assert not problems, "\n".join(map(str, problems))


def test_every_fact_is_stated_somewhere():
    """A reworded page must not drop its check silently: each fact matches a page."""
    import re
    texts = [p.read_text() for p in doc_numbers.pages()]
    unused = [f.name for f in doc_numbers.FACTS if not any(re.search(f.pattern, t) for t in texts)]
    assert not unused, unused


def test_a_drifted_number_fails(tmp_path, monkeypatch):
    """The checker itself: the backend API version is read from the code (so a bump
    there fails a page that still states the old one), and a new unexplained version
    fails the sweep."""
    page = tmp_path / "page.md"
    major, minor = doc_facts.api_version()
    page.write_text(f"The backend API under development: {major}.{minor}.\n")
    assert doc_numbers.check_page(page) == ([], 1)
    monkeypatch.setattr(doc_facts, "api_version", lambda: (major, minor + 1))
    problems, _ = doc_numbers.check_page(page)
    assert any(f"says {major}.{minor}, the code says {major}.{minor + 1}" in str(p)
               for p in problems), problems
    page.write_text("Needs somelib 4.2 or newer.\n")
    problems, _ = doc_numbers.check_page(page)
    assert any("'4.2' is checked by no fact and exempted by no rule" in str(p)
               for p in problems), problems


def test_numbers_in_unrun_code_are_swept(tmp_path):
    """A python block the snippet test runs is checked by running it; a skipped one
    is not, so its numbers must be facts or exempted like prose."""
    page = tmp_path / "page.md"
    page.write_text("```python\nx = 12345\n```\n\n<!-- snippet: skip (needs a GPU) -->\n"
                    "```python\ny = 67890\n```\n")
    problems, _ = doc_numbers.check_page(page)
    assert [p.text.split(" is checked")[0] for p in problems] == ["'67890'"], problems
    assert doc_numbers.tally(page) == doc_numbers.Tally(run=1, unchecked=1)


@pytest.mark.parametrize("wrong", [
    "num_warps must be a power of two from 1 to 64",                # a constant (params.py)
    "blocks and scratch past a CTA's 228 KiB of SMEM",              # a scaled constant
    "over the grid, in chunks of 2^21 points,",                     # a power of two
    "which then exits 3, or 0\nwith `--allow-load-errors`",         # the CLI's exit status
    "`PALLAS_DIFFERENTIAL_EXAMPLES`, 7 by default",                 # a test's default
    "default `(128, 128, 256)`",                                    # JAX's source default
    "On CPU: 63 passed, 0 skipped, 0 xfailed.",                     # the suite's size
    "semaphores (int32 Refs in the interpreter, starting at 1)",    # a value read by running
])
def test_a_wrong_value_fails_its_fact(tmp_path, wrong):
    page = tmp_path / "page.md"
    page.write_text(wrong + "\n")
    problems, checked = doc_numbers.check_page(page)
    assert checked >= 1 and any("is checked by no fact" not in p.text for p in problems), problems
