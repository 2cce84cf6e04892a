"""The numbers and versions README.md, the hand-written docs and the plugins'
READMEs state, each held against the code or a generated page
(``tools/test_doc_claims.py``).

Every number of those pages, in prose and in code blocks that
``tools/test_snippets.py`` does not run, must lie inside a fact's match (checked
against the code: ``tools/doc_facts.py``, values from ``tools/doc_truths.py``) or
an ``EXEMPT`` pattern (each says why it is not a claim about this code: a dated
measurement, another project's version, a value inside an example or a quoted
example message). Python blocks that the snippet test runs are checked by
running them. So a new number cannot go unchecked: it fails the sweep until it
is made a fact or exempted.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from doc_facts import EXEMPT, FACTS
from doc_truths import REPO

# written by a generator (they state what the generator measured)
GENERATED = {"support-matrix.md", "jax-ops.md", "jax-suite.md", "ecosystem.md", "api-parity.md",
             "changelog.md", "differential.md"}
NUMBER = re.compile(r"(?<![\w.-])\d+(?:\.\d+)*(?![\w])")


def pages() -> list[Path]:
    """Every hand-written page: README.md, docs/ less the generated pages, the
    plugins' READMEs (the pages the snippet and claim tests read too)."""
    return [REPO / "README.md"] + [p for p in sorted((REPO / "docs").glob("*.md"))
                                   if p.name not in GENERATED] + \
        sorted((REPO / "plugins").glob("pallas_*/README.md"))


@dataclasses.dataclass(frozen=True)
class Problem:
    where: str
    text: str

    def __str__(self):
        return f"{self.where}: {self.text}"


def _line(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


_BLOCK = re.compile(r"^[ \t]*(?P<fence>```+)(?P<lang>[^\n`]*)\n.*?^[ \t]*(?P=fence)[ \t]*$",
                    re.S | re.M)
_MARKER = re.compile(r"<!--\s*snippet:\s*(?P<kind>\w+)")


def _runs_under_test_snippets(text: str, block: re.Match) -> bool:
    """A python block that tools/test_snippets.py executes: no ``skip`` marker,
    and not a ``gpu`` one (which only compiles and runs its imports)."""
    if block["lang"].strip().split(" ")[0].lower() not in ("python", "py"):
        return False
    before = text[:block.start()].rstrip().rsplit("\n", 1)[-1]
    marker = _MARKER.search(before)
    return not (marker and marker["kind"] in ("skip", "gpu"))


def _swept_text(text: str, run_blocks: bool = True) -> str:
    """``text`` with HTML comments, link targets and (``run_blocks``) the python
    blocks the snippet test runs blanked (same length: positions keep their lines)."""
    def blank(m):
        return re.sub(r"[^\n]", " ", m[0])
    if run_blocks:
        text = _BLOCK.sub(lambda m: blank(m) if _runs_under_test_snippets(text, m) else m[0], text)
    text = re.sub(r"<!--.*?-->", blank, text, flags=re.S)
    return re.sub(r"\]\([^)]*\)", blank, text)


def _exempt_applies(entry: tuple, rel: str) -> bool:
    return len(entry) < 3 or rel in entry[2]


@dataclasses.dataclass
class Tally:
    """How the numbers of one page are accounted for."""
    by_fact: int = 0         # inside a fact's match (checked against the code)
    exempted: int = 0        # inside an EXEMPT pattern only
    run: int = 0             # inside a python block the snippet test runs
    unchecked: int = 0       # neither: each one is a problem


def _rel(path: Path) -> str:
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


def _scan(path: Path) -> tuple[list[Problem], int, Tally]:
    text = path.read_text()
    rel = _rel(path)
    facts: list[tuple[int, int]] = []
    problems, checked = [], 0
    for fact in FACTS:
        if fact.pages and rel not in fact.pages:
            continue
        for m in re.finditer(fact.pattern, text):
            # only the stated values the fact checks (its named groups), not its context
            facts += [m.span(g) for g, v in m.groupdict().items() if v is not None]
            checked += 1
            problem = fact.check(m)
            if problem:
                problems.append(Problem(f"{rel}:{_line(text, m.start())}",
                                        f"{fact.name}: {m[0]!r} {problem}"))
    exempt = [m.span() for entry in EXEMPT if _exempt_applies(entry, rel)
              for m in re.finditer(entry[0], text)]
    tally = Tally()
    swept = _swept_text(text)
    tally.run = (len(NUMBER.findall(_swept_text(text, run_blocks=False)))
                 - len(NUMBER.findall(swept)))
    for m in NUMBER.finditer(swept):
        def inside(spans):
            return any(a <= m.start() and m.end() <= b for a, b in spans)
        if inside(facts):
            tally.by_fact += 1
        elif inside(exempt):
            tally.exempted += 1
        else:
            tally.unchecked += 1
            start = max(0, m.start() - 40)
            problems.append(Problem(
                f"{rel}:{_line(text, m.start())}",
                f"{m[0]!r} is checked by no fact and exempted by no rule "
                f"(…{text[start:m.end() + 20]!r}…). If it states what this project does "
                "(a default, a limit, a count, a version), add a Fact to tools/doc_facts.py "
                "whose truth reads the value from the code (tools/doc_truths.py); if it is not "
                "such a claim (a value inside an example, a dated measurement), add a narrow "
                "EXEMPT entry there saying why"))
    return problems, checked, tally


def check_page(path: Path) -> tuple[list[Problem], int]:
    """(problems, how many facts were checked) of one page."""
    problems, checked, _ = _scan(path)
    return problems, checked


def tally(path: Path) -> Tally:
    """How the numbers of one page are accounted for."""
    return _scan(path)[2]
