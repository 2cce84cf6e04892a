"""The numbers and versions README.md and the hand-written docs state, each
held against the code or a generated page (``tools/test_doc_claims.py``).

``FACTS``: a pattern (its ``v`` group is the stated value) and where the true
value comes from; a stated value that differs is a failure naming both.

The sweep: every version-like token (``3.12``, ``0.1.0``, ``1.x``) of those
pages, in prose and in non-Python code blocks, must lie inside a fact's match
or an ``EXEMPT`` pattern (each says why it is not a claim about this code: a
dated measurement, another project's version, an example message). In the
entry pages (``COUNTED_PAGES``) every other number too. So a new number
cannot go unchecked: it fails the sweep until it is made a fact or exempted.
"""

from __future__ import annotations

import configparser
import dataclasses
import re
import tomllib
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# written by a generator (they state what the generator measured)
GENERATED = {"support-matrix.md", "jax-ops.md", "jax-suite.md", "ecosystem.md", "api-parity.md",
             "changelog.md", "differential.md"}
COUNTED_PAGES = {"README.md", "docs/install.md", "docs/index.md"}
VERSION = re.compile(r"(?<![\w.-])\d+(?:\.(?:\d+|x|\*))+(?![\w.])")
NUMBER = re.compile(r"(?<![\w.-])\d+(?:\.\d+)*(?![\w])")
WORDS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6}


def pages() -> list[Path]:
    return [REPO / "README.md"] + [p for p in sorted((REPO / "docs").glob("*.md"))
                                   if p.name not in GENERATED]


# --- where the true values come from ----------------------------------------------------------

def _pyproject(path: str = "pyproject.toml") -> dict:
    return tomllib.loads((REPO / path).read_text())["project"]


def _lower_bound(requirement: str) -> str:
    return re.search(r">=\s*([\d.]+)", requirement)[1]


def _dependency(project: dict, name: str, extra: str | None = None) -> str:
    reqs = project["dependencies"] if extra is None else project["optional-dependencies"][extra]
    return next(r for r in reqs if re.match(rf"{re.escape(name)}\b", r))


def api_version() -> tuple[int, int]:
    text = (REPO / "pallas_frontend" / "contract.py").read_text()
    found = re.search(r"^API_VERSION: tuple\[int, int\] = \((\d+), (\d+)\)", text, re.M)
    major, minor = found.groups()
    return int(major), int(minor)


def api_history() -> set[str]:
    """The minors the contract's comment says what they added ("1.1: ...")."""
    text = (REPO / "pallas_frontend" / "contract.py").read_text()
    return set(re.findall(r"# .*?\b(\d+\.\d+): ", text)) | set(re.findall(r"; (\d+\.\d+): ", text))


def python_min() -> str:
    return _lower_bound(_pyproject()["requires-python"])


def jax_series() -> str:
    return ".".join(_lower_bound(_dependency(_pyproject(), "jax")).split(".")[:2])


def libtpu_pin() -> str:
    pin = _dependency(_pyproject("plugins/pallas_tpu/pyproject.toml"), "libtpu", "libtpu")
    return re.search(r"==\s*([\d.]+?)(?:\.\*)?$", pin)[1]


def dist_version(dist: str) -> str:
    path = "pyproject.toml" if dist == "pallas-frontend" else \
        f"plugins/{dist.replace('-', '_')}/pyproject.toml"
    return _pyproject(path)["version"]


def frontend_bound() -> tuple[str, str]:
    """(lower, upper) of the plugins' pallas-frontend requirement."""
    req = _dependency(_pyproject("plugins/pallas_triton/pyproject.toml"), "pallas-frontend")
    return re.search(r">=([\d.]+),<([\d.]+)", req).groups()


def plugin_bound() -> tuple[str, str]:
    req = _dependency(_pyproject(), "pallas-triton", "triton")
    return re.search(r">=([\d.]+),<([\d.]+)", req).groups()


def tox_envs() -> list[str]:
    ini = configparser.ConfigParser(interpolation=None)
    ini.read(REPO / "tox.ini")
    return [e.strip() for e in ini["tox"]["envlist"].split(",")]


def frontend_envs() -> list[str]:
    """The envlist's envs that run the frontend's tests/ folder."""
    ini = configparser.ConfigParser(interpolation=None)
    ini.read(REPO / "tox.ini")
    return [e for e in tox_envs() if re.search(r"pytest .*--dist loadfile tests\b",
                                               ini[f"testenv:{e}"].get("commands", ""))]


def plugin_count() -> int:
    return len([p for p in (REPO / "plugins").glob("pallas_*") if (p / "pyproject.toml").is_file()])


def jax_ops_cpu_rows() -> str:
    return re.search(r"\*\*Rows where JAX works: (\d+)",
                     (REPO / "docs" / "jax-ops.md").read_text())[1]


def jax_ops_compiled_cells() -> str:
    line = re.search(r"\*\*TPU v5e: JAX compiles.*", (REPO / "docs" / "jax-ops.md").read_text())[0]
    return str(sum(int(n) for n in re.findall(r"JAX compiles (\d+)", line)))


def jax_suite_totals() -> tuple[str, str]:
    row = re.search(r"\| \*\*total\*\* \| \*\*(\d+)\*\* \| \*\*\d+\*\* \| \*\*\d+\*\* \| "
                    r"\*\*(\d+)\*\*", (REPO / "docs" / "jax-suite.md").read_text())
    return row[1], row[2]


def import_timeout_default() -> str:
    text = (REPO / "pallas_frontend" / "env_config.py").read_text()
    return f"{float(re.search(r'^DEFAULT_IMPORT_TIMEOUT = ([\d.]+)', text, re.M)[1]):g}"


def progress_every() -> str:
    text = (REPO / "tools" / "run_tests.py").read_text()
    return f"{float(re.search(r'--every.*?default=([\d.]+)', text)[1]):g}"


def slowest_default() -> str:
    text = (REPO / "tools" / "run_tests.py").read_text()
    return re.search(r'--slowest.*?default=(\d+)', text)[1]


# --- the facts ------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Fact:
    name: str
    pattern: str                       # group "v": the stated value
    truth: Callable[[], object]        # the value, or a predicate taking the stated one
    predicate: bool = False            # truth() returns a function: value -> problem or None

    def check(self, stated: str) -> str | None:
        if self.predicate:
            return self.truth()(stated)
        want = str(self.truth())
        return None if stated == want else f"says {stated}, the code says {want}"


def _api_minor_known(stated: str) -> str | None:
    major, minor = api_version()
    if stated not in api_history():
        return f"API {stated} is not in the contract's version history (contract.py)"
    s_major, s_minor = map(int, stated.split("."))
    if (s_major, s_minor) > (major, minor):
        return f"API {stated} is newer than the code's {major}.{minor}"
    return None


def _number_word(stated: str) -> int:
    return WORDS.get(stated.lower(), int(stated) if stated.isdigit() else -1)


FACTS = [
    Fact("Python floor", r"Python >= (?P<v>\d+\.\d+)", python_min),
    Fact("Python floor (pyproject)", r'requires-python = ">=(?P<v>[\d.]+)"', python_min),
    Fact("Python of .python-version", r"Python (?P<v>\d+\.\d+) (?:following|where pyenv)",
         python_min),
    Fact("JAX series", r"\bJAX (?P<v>\d+\.\d+)\b(?!\.\d| deprecated)", jax_series),
    Fact("libtpu pin", r"\blibtpu (?P<v>\d+\.\d+\.\d+)\b(?!\.\d)", libtpu_pin),
    Fact("backend API now", r"under development: (?P<v>\d+\.\d+)",
         lambda: "%d.%d" % api_version()),
    Fact("frontend version", r"the (?P<v>\d+\.\d+\.\d+) under development",
         lambda: dist_version("pallas-frontend")),
    Fact("frontend series", r"\| (?P<v>\d+\.\d+)\.x \| \d+\.x \(the",
         lambda: ".".join(dist_version("pallas-frontend").split(".")[:2])),
    Fact("API major of the series", r"\| \d+\.\d+\.x \| (?P<v>\d+)\.x \(the",
         lambda: str(api_version()[0])),
    Fact("API major", r"\bAPI (?P<v>\d+)\.x\b", lambda: str(api_version()[0])),
    Fact("API minors", r"\bAPI (?P<v>\d+\.\d+)\b(?! is refused| but this)",
         lambda: _api_minor_known, predicate=True),
    Fact("API minors (install.md's list)", r"\b(?P<v>1\.\d+)\s+(?:added\s+)?`",
         lambda: _api_minor_known, predicate=True),
    Fact("API minors (declaring)", r"declaring (?P<v>\d+\.\d+) or older",
         lambda: _api_minor_known, predicate=True),
    Fact("plugins' pallas-frontend floor", r"pallas-frontend>=(?P<v>[\d.]+),<",
         lambda: frontend_bound()[0]),
    Fact("plugins' pallas-frontend ceiling", r"pallas-frontend>=[\d.]+,<(?P<v>[\d.]+)",
         lambda: frontend_bound()[1]),
    Fact("extras' plugin floor", r"pallas-triton>=(?P<v>[\d.]+),<", lambda: plugin_bound()[0]),
    Fact("extras' plugin ceiling", r"pallas-triton>=[\d.]+,<(?P<v>[\d.]+)",
         lambda: plugin_bound()[1]),
    Fact("pallas-triton version", r"\(pallas-triton (?P<v>\d+\.\d+\.\d+)\)",
         lambda: dist_version("pallas-triton")),
    Fact("frontend envs", r"split over (?P<v>\w+) envs \(`frontend-a`",
         lambda: lambda v: None if _number_word(v) == len(frontend_envs())
         else f"says {v}, tox.ini runs tests/ in {len(frontend_envs())} envs "
              f"({', '.join(frontend_envs())})", predicate=True),
    Fact("frontend envs (start first)", r"The (?P<v>\w+) frontend envs start first",
         lambda: lambda v: None if _number_word(v) == len(frontend_envs())
         else f"says {v}, tox.ini has {len(frontend_envs())}", predicate=True),
    Fact("distributions", r"(?i)\b(?P<v>one|two|three|four|five|six|\d+) "
                          r"(?:distributions|wheels)\b(?! claim)",
         lambda: lambda v: None if _number_word(v) == plugin_count() + 1
         else f"says {v}, there are {plugin_count() + 1}", predicate=True),
    Fact("plugins", r"(?i)\b(?P<v>one|two|three|four|five|six|\d+) plugins\b",
         lambda: lambda v: None if _number_word(v) in (plugin_count(), -1)
         else f"says {v}, plugins/ holds {plugin_count()}", predicate=True),
    Fact("JAX kernels on CPU", r"all (?P<v>\d+) rows where JAX runs", jax_ops_cpu_rows),
    Fact("JAX kernels compiled", r"all (?P<v>\d+) cells JAX\s+compiles", jax_ops_compiled_cells),
    Fact("JAX suite, JAX", r"of (?P<v>\d+) tests JAX\s+passes", lambda: jax_suite_totals()[0]),
    Fact("JAX suite, ours", r"passes on CPU, ours\s+passes (?P<v>\d+)",
         lambda: jax_suite_totals()[1]),
    Fact("import timeout", r"(?:\(|within |IMPORT_TIMEOUT`\s+seconds \()default (?P<v>\d+)",
         import_timeout_default),
    Fact("progress interval", r"every (?P<v>\d+) s\b", progress_every),
    Fact("slowest tests named", r"the (?P<v>\w+) slowest\s+tests",
         lambda: lambda v: None if _number_word(v) == int(slowest_default()) or
         v == "ten" and slowest_default() == "10" else f"says {v}, run_tests.py names "
         f"{slowest_default()}", predicate=True),
]

# Numbers that are not claims about this code, and why.
EXEMPT = [
    (r"JAX 0\.11 deprecated", "history: the JAX release that deprecated Pallas Triton"),
    (r"jax-triton \d+\.\d+\.\d+", "another project's version"),
    (r"\d{4}-\d{2}-\d{2}(?: \(\w+\))?(?:,? \d{2}:\d{2}(?: UTC)?)?", "a date of a measurement"),
    (r"\d+m\d+s|\d+(?:\.\d+)?(?:-\d+(?:\.\d+)?)? ?(?:s|ms|min|minutes|x|MB|GB|%)\b"
     r"(?:\s*(?:during|while|with|loaded|quiet|of))?", "a measured time or size"),
    (r"\(`tox p` \d+ s\)", "a measured time"),
    (r"\b\d+-core\b|\b\d+ (?:shared )?cores\b", "the machine measured on"),
    (r"Python\s+3\.11, JAX 0\.10\.2(?:,\s+libtpu\s+0\.0\.42\.1)?|jax 0\.10\.2 \+ libtpu 0\.0\.42\.1"
     r"|all \d+ exports",
     "the versions of a remote TPU host, and a count of one dated run on it"),
    (r"pytest \d+\.\d+, pytest-xdist\s+\d+\.\d+", "the tool versions a measurement used"),
    (r"-?[0-9]\.0\b(?= |`|,|\)|$)|\b0\.0\b", "a float value in an example"),
    (r'(?:__version__|version) = "0\.1\.0"|pallas-looped\s+0\.1\.0\s+1\.3|api_version = \(1, 3\)',
     "the guide's own example backend"),
    (r":maxdepth: \d+|PEP \d+", "a Sphinx option; a PEP's number"),
    (r"API 2\.0 is refused|backend API 2\.0 but this pallas-frontend provides 1\.3|"
     r"pallas-good \d+\.\d+\.\d+ and pallas-good-fork \d+\.\d+", "an example message"),
    (r"while it is 0\.x \(its major from 1\.0 on\)|\| 0\.2\.x \(none yet\) \| 2\.x \|",
     "the version policy's rule, not a current version"),
]


@dataclasses.dataclass(frozen=True)
class Problem:
    where: str
    text: str

    def __str__(self):
        return f"{self.where}: {self.text}"


def _line(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def _swept_text(text: str) -> str:
    """``text`` with Python code blocks, HTML comments and link targets blanked
    (same length: positions keep their lines)."""
    def blank(m):
        return re.sub(r"[^\n]", " ", m[0])
    text = re.sub(r"```python\n.*?```", blank, text, flags=re.S)
    text = re.sub(r"<!--.*?-->", blank, text, flags=re.S)
    return re.sub(r"\]\([^)]*\)", blank, text)


def check_page(path: Path) -> tuple[list[Problem], int]:
    """(problems, how many facts were checked) of one page."""
    text = path.read_text()
    rel = str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)
    covered: list[tuple[int, int]] = []
    problems, checked = [], 0
    for fact in FACTS:
        for m in re.finditer(fact.pattern, text):
            covered.append(m.span())
            checked += 1
            problem = fact.check(m["v"])
            if problem:
                problems.append(Problem(f"{rel}:{_line(text, m.start())}",
                                        f"{fact.name}: {m[0]!r} {problem}"))
    for pattern, _why in EXEMPT:
        covered += [m.span() for m in re.finditer(pattern, text)]
    swept = _swept_text(text)
    token = NUMBER if rel in COUNTED_PAGES else VERSION
    for m in token.finditer(swept):
        if not any(a <= m.start() and m.end() <= b for a, b in covered):
            start = max(0, m.start() - 40)
            problems.append(Problem(
                f"{rel}:{_line(text, m.start())}",
                f"{m[0]!r} is checked by no fact and exempted by no rule "
                f"(…{text[start:m.end() + 20]!r}…): add a Fact or an EXEMPT entry to "
                "tools/doc_numbers.py"))
    return problems, checked
