"""The docs site (tox -e docs): docs/support-matrix.md is what the installed
backends declare, and Sphinx builds the site with no warning. In one pytest
session with the snippet tests, so that the build (one busy core for a while)
runs beside them. The site is kept where tools/build_docs.py puts it
(docs/_build/html, or $PALLAS_DOCS_HTML) and its path printed."""

import dataclasses
import enum
import importlib
import inspect
import re
import sys
from pathlib import Path

import build_docs
import support_matrix

REPO = build_docs.REPO


def test_support_matrix_is_current(capsys):
    # stale: the diff is printed, with how to regenerate the page
    assert support_matrix.main(["--check"]) == 0, capsys.readouterr()


def test_site_builds_with_no_warnings(capsys):
    html = build_docs.out_dir()
    out = build_docs.build(html)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-4000:]
    assert (html / "index.html").is_file()
    with capsys.disabled():   # seen in a -n 0 run; tox -e docs prints it after the session
        sys.stdout.write(f"\ndocs site: {html / 'index.html'}\n")


# --- the API reference (docs/reference/*.md: autodoc) -----------------------------------------

OURS = ("pallas_frontend", "pallas_tpu", "pallas_triton", "pallas_mgpu")
AUTOMODULE = re.compile(r"^\.\. automodule:: (?P<module>\S+)\n(?P<options>(?:[ \t]+:.*\n)*)", re.M)


def _reference_modules():
    """(page, module, excluded names) for every automodule of docs/reference."""
    for page in sorted((REPO / "docs" / "reference").glob("*.md")):
        for m in AUTOMODULE.finditer(page.read_text()):
            excluded = re.search(r":exclude-members:(.*)", m["options"])
            yield page, m["module"], {n.strip() for n in excluded[1].split(",")} if excluded else set()


def _shown_names(module):
    """What autodoc documents with :members: — __all__, else what the module defines."""
    names = getattr(module, "__all__", None)
    if names is None:
        names = [n for n, v in vars(module).items()
                 if not n.startswith("_") and getattr(v, "__module__", None) == module.__name__]
    return names


def _own(obj) -> bool:
    return (getattr(obj, "__module__", None) or "").split(".")[0] in OURS


def _class_doc(cls) -> str | None:
    doc = cls.__dict__.get("__doc__")
    # a dataclass without a docstring gets its signature as __doc__
    if doc and dataclasses.is_dataclass(cls) and doc.startswith(cls.__name__ + "("):
        return None
    return doc


def _member_problems(cls, where: str) -> list[str]:
    problems = []
    for name, value in vars(cls).items():
        if name.startswith("_"):
            continue
        fn = value.__func__ if isinstance(value, (classmethod, staticmethod)) else value
        # autodoc shows a property's own doc (``property(f, doc=...)``), else its getter's
        own_doc = fn.__doc__ if isinstance(fn, property) else None
        fn = fn.fget if isinstance(fn, property) else fn
        if not inspect.isroutine(fn) or (isinstance(cls, enum.EnumType) and isinstance(value, cls)):
            continue                     # fields, enum members, constants
        if (own_doc or fn.__doc__) and _own(fn):
            continue
        # autodoc shows the docstring of the method it overrides: fine when that one is ours
        base = next((b.__dict__[name] for b in cls.__mro__[1:] if name in b.__dict__), None)
        base = base.fget if isinstance(base, property) else base
        if base is not None and getattr(base, "__doc__", None) and _own(base) and _own(fn):
            continue
        problems.append(f"{where}.{name}: " + (
            f"shows {fn.__module__}'s docstring as ours" if fn.__doc__ else "has no docstring"))
    return problems


def test_every_name_in_the_api_reference_has_its_own_docstring():
    """Each class, function and method the reference shows has a docstring of
    this project (not a missing one, not dataclasses.replace's or JAX's shown as
    ours). Objects re-exported from JAX as they are are left out of autodoc
    (``:exclude-members:``) and named in the page's text instead."""
    problems = []
    for page, module_name, excluded in _reference_modules():
        module = importlib.import_module(module_name)
        text = page.read_text()
        for name in excluded:
            if f"`{name}`" not in AUTOMODULE.sub("", text):
                problems.append(f"{page.name}: {module_name}.{name} is excluded from autodoc "
                                "but the page does not name it")
        for name in _shown_names(module):
            if name in excluded:
                continue
            obj = getattr(module, name)
            where = f"{module_name}.{name}"
            if inspect.isclass(obj):
                if not _own(obj):
                    problems.append(f"{where}: {obj.__module__}'s class shown as ours (exclude "
                                    "it and name it as a re-export in the page)")
                    continue
                if not _class_doc(obj):
                    problems.append(f"{where}: class has no docstring")
                problems += _member_problems(obj, where)
            elif inspect.isroutine(obj):
                if not _own(obj):
                    problems.append(f"{where}: {obj.__module__}'s function shown as ours (exclude "
                                    "it and name it as a re-export in the page)")
                elif not obj.__doc__:
                    problems.append(f"{where}: no docstring")
            elif callable(obj) and not _own(type(obj)) and not _own(obj):
                problems.append(f"{where}: {type(obj).__module__}'s {type(obj).__name__} shown as "
                                "ours (exclude it and name it as a re-export in the page)")
    assert not problems, f"{len(problems)} problems:\n" + "\n".join(problems)


# --- what autodoc imports is what docs/requirements.txt and the packages install ---------------

def _requirement_name(line: str) -> str | None:
    """The normalized distribution name of a requirement line, or None (no extras' lines)."""
    line = line.split("#")[0].strip()
    if not line or line.startswith("-"):
        return None
    requirement, _, marker = line.partition(";")
    if "extra" in marker:
        return None
    return _normalized(re.split(r"[\s\[<>=!~(]", requirement.strip(), maxsplit=1)[0])


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _installed_closure(roots: set[str]) -> set[str]:
    """``roots`` and what they require, transitively (extras left out)."""
    from importlib import metadata
    seen, todo = set(), list(roots)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue
        todo.extend(n for n in map(_requirement_name, requires) if n)
    return seen


def _module_level_imports(path) -> set[str]:
    """Top-level names imported when the module runs (not inside functions or classes)."""
    import ast
    tree = ast.parse(path.read_text())
    names, todo = set(), list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
        elif isinstance(node, (ast.If, ast.Try, ast.With)):
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                continue
            for field in ("body", "orelse", "finalbody", "handlers"):
                for child in getattr(node, field, []):
                    todo.extend(child.body if isinstance(child, ast.ExceptHandler) else [child])
    return names


def test_docs_requirements_cover_what_autodoc_imports():
    """The site builds from docs/index.md's command: the packages plus
    docs/requirements.txt. tox -e docs installs pytest for itself, so a module
    autodoc imports that needs pytest (pallas_frontend.testing) built there and
    failed from the documented command; this test reads the imports instead."""
    import tomllib
    from importlib import metadata
    roots = {_normalized(n) for n in ("pallas-frontend", "pallas-triton", "pallas-tpu",
                                      "pallas-mgpu")}
    for project in (REPO, *sorted((REPO / "plugins").glob("pallas_*"))):
        meta = tomllib.loads((project / "pyproject.toml").read_text())["project"]
        roots |= {n for n in map(_requirement_name, meta.get("dependencies", [])) if n}
    docs_requirements = {n for n in map(_requirement_name,
                                        (REPO / "docs" / "requirements.txt").read_text()
                                        .splitlines()) if n}
    allowed = _installed_closure(roots | docs_requirements)
    providers = metadata.packages_distributions()
    packages = {m.split(".")[0] for _, m, _ in _reference_modules()}
    missing = {}
    for package in packages:
        top = importlib.import_module(package)
        for path in sorted(Path(top.__path__[0]).rglob("*.py")):
            if "tests" in path.parts:
                continue
            for name in _module_level_imports(path):
                if name in sys.stdlib_module_names or name in OURS or name.startswith("_"):
                    continue
                dists = {_normalized(d) for d in providers.get(name, [name])}
                if not dists & allowed:
                    missing.setdefault(name, []).append(str(path.relative_to(REPO)))
    assert not missing, (
        "autodoc imports modules that neither the packages nor docs/requirements.txt install: "
        + "; ".join(f"{n} (module-level import in {', '.join(w[:3])})"
                    for n, w in sorted(missing.items())))
