"""What the docs say is or is not supported, read so that a test can hold it
against the code (``tools/test_doc_claims.py``, in ``tox -e docs``).

Claim tags. A statement that a backend supports or refuses a feature carries
an HTML comment after it, in the same paragraph, list item or table row
(hidden on GitHub and on the site):

    Traced grid sizes run in the TPU plugin. <!-- claim: supported tpu traced_grid -->
    ... are refused. <!-- claim: unsupported interpret traced_grid_vmap; unsupported interpret traced_grid_jvp -->

``supported|unsupported BACKEND FEATURE``, several separated by ``;``. FEATURE
is a probe of ``tools/claim_probes.py`` (a tiny kernel run on BACKEND); a tag
never starts a line (CommonMark would end the paragraph there).

Untagged statements. A paragraph with a sentence (or clause, or table cell)
that mentions a feature of ``MENTIONS`` in words that say it is missing
("not", "refused", "yet", ...) must carry a tag for that feature: a new "not
supported yet" cannot go stale unnoticed.

Name lists. The API overview (docs/api.md) and the plugins' READMEs list
names as provided or not; ``api_overview_claims()`` and
``plugin_readme_claims()`` read those lists so that the test compares them
with the modules.
"""

from __future__ import annotations

import builtins
import dataclasses
import re
from pathlib import Path

import snippets

REPO = snippets.REPO
TAG = re.compile(r"<!--\s*claim:\s*(?P<body>.*?)\s*-->")
POLARITIES = ("supported", "unsupported")
# feature -> how prose names it (case-insensitive)
MENTIONS = {
    "traced_grid": r"traced grids?\b|traced grid sizes?|dynamic grids?\b|dynamic \(array-valued\) grid"
                   r"|grid sizes? known only at run time|sizes known only at run time",
    "none_operand": r"`?None`? operands?",
    "semaphore_view": r"\bsems?\.at\[",
    "semaphore_read": r"\bsemaphore_read\b",
    "bounded_slice": r"\bBoundedSlice\b",
    "indirect_block": r"\bIndirect\b",
    "collective_run_scoped": r"\bcollective_axes\b|\bcollective_run_scoped\b",
    "get_global_in_branch": r"get_global\b.{0,40}\b(loop|branch)",
}
NEGATION = re.compile(r"\b(not|no|never|yet|cannot|can't|refuses?|refused|fails?|unsupported)\b",
                      re.IGNORECASE)
SENTENCE = re.compile(r"(?<=[.;])\s+|\s+\|\s+")   # sentences, clauses, table cells
UNIT_START = re.compile(r"^\s*([-*+]\s|\d+[.)]\s|\||#)")


@dataclasses.dataclass(frozen=True)
class Claim:
    where: str            # file:line
    polarity: str         # "supported" or "unsupported"
    backend: str
    feature: str

    @property
    def id(self) -> str:
        return f"{self.polarity} {self.backend} {self.feature}"


@dataclasses.dataclass(frozen=True)
class Unit:
    """A paragraph, list item, table row or heading (outside code blocks)."""
    path: Path
    line: int             # 1-based first line
    text: str

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(REPO)}:{self.line}"


def units(path: Path) -> list[Unit]:
    lines = path.read_text().splitlines()
    found: list[Unit] = []
    current: list[str] = []
    start = 0
    fence = None

    def flush():
        if current:
            found.append(Unit(path, start + 1, "\n".join(current)))
            current.clear()
    for i, line in enumerate(lines):
        opening = snippets.FENCE.match(line)
        if fence is not None:            # inside a code block: not prose
            if opening and line.strip().strip(fence[0]) == "":
                fence = None
            continue
        if opening:
            flush()
            fence = opening["fence"]
            continue
        if not line.strip():
            flush()
            continue
        if UNIT_START.match(line) or (current and current[0].lstrip().startswith(("|", "#"))):
            flush()
        if not current:
            start = i
        current.append(line)
    flush()
    return found


def claims_in(unit: Unit) -> tuple[list[Claim], list[str]]:
    """The unit's claims, and what is malformed about its tags."""
    claims, problems = [], []
    for offset, line in enumerate(unit.text.splitlines()):
        where = f"{unit.path.relative_to(REPO)}:{unit.line + offset}"
        # a tag shown as code (`<!-- claim: ... -->`) is an example, not a claim
        line = re.sub(r"`[^`]*`", lambda m: " " * len(m.group()), line)
        for tag in TAG.finditer(line):
            if not line[:tag.start()].strip():
                problems.append(f"{where}: a claim tag starts the line; put it after the "
                                "sentence it checks (a comment at a line's start ends the paragraph)")
            for part in tag["body"].split(";"):
                words = part.split()
                if len(words) != 3 or words[0] not in POLARITIES:
                    problems.append(f"{where}: claim {part.strip()!r} is not "
                                    "'supported|unsupported BACKEND FEATURE'")
                    continue
                claims.append(Claim(where, *words))
    return claims, problems


def all_units() -> list[Unit]:
    return [u for f in snippets.markdown_files() for u in units(f)]


def untagged_statements(all_: list[Unit]) -> list[str]:
    """Paragraphs with a sentence (or clause) that mentions a MENTIONS feature
    in words of what is missing, and no tag for that feature."""
    problems = []
    for unit in all_:
        text = " ".join(TAG.sub("", unit.text).split())
        clauses = [c for c in SENTENCE.split(text) if NEGATION.search(c)]
        tagged = {c.feature for c in claims_in(unit)[0]}
        for feature, pattern in MENTIONS.items():
            if any(re.search(pattern, c, re.IGNORECASE) for c in clauses) and not any(
                    t == feature or t.startswith(feature + "_") for t in tagged):
                problems.append(f"{unit.where}: mentions {feature} in words of what is missing "
                                f"but has no '<!-- claim: ... {feature} -->' tag: "
                                f"{' '.join(text.split())[:200]!r}")
    return problems


# --- name lists -----------------------------------------------------------------------------

NAME = re.compile(r"^[A-Za-z_]\w*")
# `None`, `TypeError`: Python's, not a module's (lower-case ones like `sum` may be a module's)
BUILTINS = {n for n in dir(builtins) if not n.islower()}


def names_in(cell: str) -> list[str]:
    """The identifiers a table cell or a list names in backticks: ``f(a, b)`` is
    ``f``, ``atomic_add/and/or`` is three names, ``x.y``, ``a_*`` and ``None`` none."""
    out = []
    for code in re.findall(r"`([^`]+)`", cell):
        code = code.strip()
        first = NAME.match(code)
        if not first or code[first.end():first.end() + 1] in (".", "*") or first.group() in BUILTINS:
            continue
        out.append(first.group())
        head, _, tail = code[:len(code.split("(")[0])].partition("/")
        if tail and "_" in head:          # stem_a/b/c
            stem = head.rsplit("_", 1)[0]
            out += [f"{stem}_{t}" for t in tail.split("/") if re.fullmatch(r"\w+", t)]
    return out


def _rows(text: str):
    for line in text.splitlines():
        if line.startswith("|") and not re.fullmatch(r"\|[-|: ]+\|?", line.strip()):
            yield [c.strip() for c in line.strip().strip("|").split("|")]


@dataclasses.dataclass(frozen=True)
class NameClaim:
    where: str
    module: str           # "pallas_frontend", "pallas_tpu", ...
    name: str
    provided: bool
    section: str = ""     # docs/api.md: "overview" (its table) or "jax" (JAX's names)


def api_overview_claims() -> list[NameClaim]:
    """docs/api.md: the overview table and the JAX-name lists (provided / not
    provided) must agree with ``pallas_frontend``."""
    path = REPO / "docs" / "api.md"
    out: list[NameClaim] = []
    section = "overview"
    for unit in units(path):
        text = unit.text
        if text.startswith("## JAX"):
            section = "jax"
        elif section == "jax" and "are provided with JAX's signatures" in text:
            section = "jax list"
        elif section == "jax list":     # the paragraph after that sentence
            out += [NameClaim(unit.where, "pallas_frontend", n, True, "jax") for n in names_in(text)]
            section = "jax"
        elif section == "overview" and text.startswith("|"):
            for row in _rows(text):
                if row[0] != "name":
                    out += [NameClaim(unit.where, "pallas_frontend", n, True, "overview")
                            for n in names_in(row[0])]
        elif section == "jax" and text.startswith("|"):
            for row in _rows(text):
                if row[0] != "name":
                    out += [NameClaim(unit.where, "pallas_frontend", n, False, "jax")
                            for n in names_in(row[0])]
        # "Not provided, with the reason: `pl.x`, ..." / "Removed: `pl.dot` ...", up to the
        # sentence's end, wherever in a paragraph
        for sentence in re.findall(r"\b(?:Not provided|Removed)\b.*?(?:\.\s|\.$|$)",
                                   " ".join(text.split())):
            out += [NameClaim(unit.where, "pallas_frontend", n, False)
                    for n in re.findall(r"`pl\.(\w+)`", sentence)]
    return out


def jax_name_counts() -> tuple[int, int] | None:
    """The "N non-underscore attributes ... M are provided" figures of docs/api.md."""
    text = " ".join((REPO / "docs" / "api.md").read_text().split())
    m = re.search(r"its public names are the (\d+) non-underscore attributes of the module\. "
                  r"(\d+) are provided", text)
    return (int(m[1]), int(m[2])) if m else None


def plugin_readme_claims() -> list[NameClaim]:
    """The plugins' READMEs: tables whose first column names the plugin's (or
    JAX's) public names and whose second says provided or not."""
    out: list[NameClaim] = []
    for readme in sorted((REPO / "plugins").glob("pallas_*/README.md")):
        module = readme.parent.name
        for unit in units(readme):
            if unit.text.startswith("Provided ("):       # "Provided (45): `a`, `b`, ..."
                out += [NameClaim(unit.where, module, n, True) for n in names_in(unit.text)]
                continue
            if not unit.text.startswith("|"):
                continue
            rows = list(_rows(unit.text))
            if not rows:          # the |---| line
                continue
            # a table is one unit per row: the header is the table's first row
            header = _header_of(readme, unit)
            if header is None or header[0] not in ("JAX 0.12 name", "name", "not provided"):
                continue
            if rows[0] == header:
                continue
            verdict = rows[0][1].lower() if len(rows[0]) > 1 else ""
            if header[0] == "not provided" or verdict.startswith(("no", "not provided")):
                provided = False
            elif verdict.startswith(("yes", "provided")):
                provided = True
            else:
                continue
            out += [NameClaim(unit.where, module, n, provided) for n in names_in(rows[0][0])]
    return out


def _header_of(path: Path, unit: Unit) -> list[str] | None:
    lines = path.read_text().splitlines()
    i = unit.line - 1
    while i > 0 and lines[i - 1].startswith("|"):
        i -= 1
    return next(_rows(lines[i]), None)
