"""Every code block of README.md, docs/ and the plugin READMEs runs (tox -e docs).

The marker convention is in tools/snippets.py and docs/contributing.md. One
test per chain of python blocks (a block and the ``continue`` blocks after
it), one per bash or toml block; ids are ``file:line`` of the first block.
"""

from __future__ import annotations

import ast
import configparser
import os
import subprocess
import sys
import tomllib
import types

import pytest

import snippets


def _chains() -> list[list[snippets.Snippet]]:
    chains: list[list[snippets.Snippet]] = []
    last_python: dict[object, list[snippets.Snippet]] = {}
    for snippet in snippets.all_snippets():
        if snippet.language == "text":
            continue
        if snippet.marker == "continue":
            chain = last_python.get(snippet.path)
            if chain is None:
                raise snippets.SnippetSyntaxError(
                    f"{snippet.id}: 'snippet: continue' with no python block before it in the file")
            chain.append(snippet)
            continue
        chains.append([snippet])
        if snippet.language == "python":
            last_python[snippet.path] = chains[-1]
    return chains


def _params():
    try:
        chains = _chains()
    except snippets.SnippetSyntaxError as err:   # reported by the convention test below
        return [pytest.param(None, id="convention-error", marks=pytest.mark.skip(str(err)))]
    return [pytest.param(chain, id=chain[0].id,
                         marks=[pytest.mark.skip(chain[0].argument)] if chain[0].marker == "skip"
                         else []) for chain in chains]


def test_every_block_follows_the_convention():
    _chains()   # raises SnippetSyntaxError naming the file, line and rule


def _run_python(snippet: snippets.Snippet, namespace: dict) -> None:
    code = compile(snippet.code, snippet.id, "exec")
    if snippet.marker == "gpu":
        # No GPU here: the block must compile, and its imports must resolve.
        tree = ast.parse(snippet.code, snippet.id)
        imports = ast.Module([n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))],
                             type_ignores=[])
        exec(compile(imports, snippet.id, "exec"), namespace)
        return
    if snippet.marker == "raises":
        with pytest.raises(Exception) as caught:
            exec(code, namespace)
        names = {cls.__name__ for cls in type(caught.value).__mro__}
        assert snippet.argument in names, (
            f"{snippet.id} raised {type(caught.value).__name__}, not {snippet.argument}: "
            f"{caught.value}")
        return
    exec(code, namespace)


@pytest.mark.parametrize("chain", _params())
def test_snippet_runs(chain, monkeypatch):
    first = chain[0]
    monkeypatch.chdir(snippets.REPO)
    if first.language == "toml":
        tomllib.loads(first.code)
    elif first.language == "ini":
        configparser.ConfigParser(interpolation=None).read_string(first.code, first.id)
    elif first.language == "bash":
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        out = subprocess.run(["bash", "-euo", "pipefail", "-c", first.code], cwd=snippets.REPO,
                             capture_output=True, text=True, timeout=600, env=env)
        assert out.returncode == 0, f"{first.id}\n{first.code}\n{out.stdout[-3000:]}{out.stderr[-3000:]}"
    else:
        # a real module, so that dataclasses and pickling find the snippet's globals
        module = types.ModuleType("snippet_" + "".join(c if c.isalnum() else "_" for c in first.id))
        monkeypatch.setitem(sys.modules, module.__name__, module)
        for snippet in chain:
            _run_python(snippet, module.__dict__)
