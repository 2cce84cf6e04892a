"""The code blocks of the repository's Markdown, and how each one is checked.

The convention (docs/contributing.md): every fenced block in README.md, docs/
and the plugins' and examples' READMEs is checked by ``tools/test_snippets.py``
according to its language and an optional marker, an HTML comment on the line
just before the opening fence:

    <!-- snippet: skip (why it cannot run here) -->   not run; the reason is required
    <!-- snippet: gpu -->                             needs a GPU: compiled and its imports run
    <!-- snippet: continue -->                        runs in the namespace of the previous
                                                      python block of the same file
    <!-- snippet: raises NAME -->                     must raise the exception class NAME

Languages: ``python`` runs (a fresh namespace per block unless ``continue``);
``bash``/``sh``/``shell`` runs under ``bash -euo pipefail`` from the repository
root; ``toml`` and ``ini`` must parse; ``text``/``console`` and blocks without a language
are output or diagrams, and MyST directives (```{toctree}, ...) are site
markup; neither is run. Any other language, an unknown marker
or a ``skip`` without a reason fails the check.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MARKER = re.compile(r"^\s*<!--\s*snippet:\s*(?P<body>.*?)\s*-->\s*$")
FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,})(?P<info>.*)$")
RUN_LANGUAGES = {"python": "python", "py": "python", "bash": "bash", "sh": "bash",
                 "shell": "bash", "toml": "toml", "ini": "ini"}
TEXT_LANGUAGES = {"", "text", "console", "output", "none"}
MARKER_KINDS = ("skip", "gpu", "continue", "raises")


@dataclasses.dataclass(frozen=True)
class Snippet:
    path: Path
    line: int              # 1-based line of the opening fence
    language: str          # "python", "bash", "toml" or "text"
    code: str
    marker: str | None     # "skip", "gpu", "continue", "raises" or None
    argument: str          # the skip reason, the exception name; else ""

    @property
    def id(self) -> str:
        return f"{self.path.relative_to(REPO)}:{self.line}"


class SnippetSyntaxError(ValueError):
    """A block or marker that breaks the convention (named by file and line)."""


def markdown_files() -> list[Path]:
    files = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md")),
             *sorted((REPO / "plugins").glob("*/README.md")),
             *sorted((REPO / "examples").glob("**/README.md"))]
    return [f for f in files if f.is_file() and "_build" not in f.parts]


def _parse_marker(text: str, where: str) -> tuple[str, str]:
    kind, _, argument = text.partition(" ")
    argument = argument.strip()
    if kind not in MARKER_KINDS:
        raise SnippetSyntaxError(f"{where}: unknown snippet marker {kind!r}; "
                                 f"use one of {', '.join(MARKER_KINDS)}")
    if kind == "skip":
        if not (argument.startswith("(") and argument.endswith(")") and len(argument) > 2):
            raise SnippetSyntaxError(f"{where}: 'snippet: skip' needs a reason in parentheses, "
                                     "e.g. <!-- snippet: skip (installs packages) -->")
        argument = argument[1:-1].strip()
    elif kind == "raises":
        if not argument.isidentifier():
            raise SnippetSyntaxError(f"{where}: 'snippet: raises' needs an exception class "
                                     "name, e.g. <!-- snippet: raises BlockIndexError -->")
    elif argument:
        raise SnippetSyntaxError(f"{where}: 'snippet: {kind}' takes no argument")
    return kind, argument


def parse(path: Path) -> list[Snippet]:
    """The fenced blocks of one Markdown file, in order."""
    lines = path.read_text().splitlines()
    rel = path.relative_to(REPO)
    found, i = [], 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        fence, indent = opening["fence"], len(opening["indent"])
        info = opening["info"].strip()
        # MyST directives ({toctree}, {include}, {eval-rst}) are site markup, not code
        language = "text" if info.startswith("{") else info.split(" ")[0].lower()
        where = f"{rel}:{i + 1}"
        body, j = [], i + 1
        while j < len(lines) and not (lines[j].strip().startswith(fence)
                                      and lines[j].strip().strip(fence[0]) == ""):
            line = lines[j]
            body.append(line[indent:] if line[:indent].strip() == "" else line.lstrip())
            j += 1
        if j == len(lines):
            raise SnippetSyntaxError(f"{where}: code block is never closed")
        k = i - 1
        while k >= 0 and not lines[k].strip():
            k -= 1
        marker = MARKER.match(lines[k]) if k >= 0 else None
        kind, argument = _parse_marker(marker["body"], where) if marker else (None, "")
        if language in RUN_LANGUAGES:
            language = RUN_LANGUAGES[language]
        elif language in TEXT_LANGUAGES:
            language = "text"
        else:
            raise SnippetSyntaxError(f"{where}: code block language {language!r} is not one the "
                                     f"snippet runner knows ({', '.join(sorted(RUN_LANGUAGES))}, "
                                     "or text for output and diagrams)")
        if kind in ("gpu", "continue", "raises") and language != "python":
            raise SnippetSyntaxError(f"{where}: 'snippet: {kind}' applies to python blocks only")
        found.append(Snippet(path, i + 1, language, "\n".join(body) + "\n", kind, argument))
        i = j + 1
    return found


def all_snippets() -> list[Snippet]:
    return [s for f in markdown_files() for s in parse(f)]
