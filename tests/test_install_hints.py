"""Every install hint the project prints is a command that works pasted where
the user stands (issue 34): the distributions are on no index yet, so
`pip install pallas-triton` would fail; a clone installs the plugin's folder,
a wheelhouse install names its folder with --find-links."""

import re
import shlex
import tomllib
from pathlib import Path

import pytest

from pallas_frontend import install_hints, registry

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("name, dist", sorted(install_hints.SHIPPED.items()))
def test_from_a_clone_the_hint_installs_the_plugins_folder(name, dist, monkeypatch, tmp_path):
    for cwd, shown in ((ROOT, f"plugins/{dist.replace('-', '_')}"),
                       (tmp_path, str(ROOT / "plugins" / dist.replace("-", "_")))):
        monkeypatch.chdir(cwd)
        command = registry.install_hint(name)
        assert command == f"{install_hints.pip_install()} -e {shlex.quote(shown)}", command
        folder = Path(cwd, shlex.split(command)[-1])
        project = tomllib.loads((folder / "pyproject.toml").read_text())["project"]
        assert project["name"] == dist


def test_a_clones_extra_is_installed_from_the_folder(monkeypatch):
    monkeypatch.chdir(ROOT)
    assert install_hints.install_command("pallas-tpu", "libtpu").endswith(
        " install -e 'plugins/pallas_tpu[libtpu]'")


def test_from_a_recorded_wheelhouse_the_hint_names_it(monkeypatch, tmp_path):
    wheel = tmp_path / "house" / "pallas_frontend-0.1.0-py3-none-any.whl"
    monkeypatch.setattr(install_hints, "clone_root", lambda: None)
    monkeypatch.setattr(install_hints, "_direct_url",
                        lambda: {"url": wheel.as_uri(), "archive_info": {}})
    assert install_hints.install_command("pallas-triton") == \
        f"{install_hints.pip_install()} --find-links {tmp_path / 'house'} pallas-triton"


def test_an_unrecorded_wheelhouse_is_named_in_words(monkeypatch, tmp_path):
    monkeypatch.setattr(install_hints, "clone_root", lambda: None)
    monkeypatch.setattr(install_hints, "_direct_url", lambda: {})
    monkeypatch.delenv("PIP_FIND_LINKS", raising=False)
    monkeypatch.chdir(tmp_path)
    command = install_hints.install_command("pallas-mgpu")
    assert command.startswith(f"{install_hints.pip_install()} --find-links WHEELHOUSE pallas-mgpu "
                              "(WHEELHOUSE: the folder of wheels pallas-frontend was installed "
                              "from, the DIR you gave --find-links: replace WHEELHOUSE by it; "
                              "set PIP_FIND_LINKS=DIR")


def _house(folder):
    from importlib import metadata
    folder.mkdir(parents=True)
    version = metadata.version("pallas-frontend")
    (folder / f"pallas_frontend-{version}-py3-none-any.whl").write_bytes(b"")
    return folder


@pytest.mark.parametrize("how", ["PIP_FIND_LINKS", "PIP_FIND_LINKS url", "./wheelhouse"])
def test_a_find_links_wheelhouse_is_found_and_named(monkeypatch, tmp_path, how):
    # issue 39: after pip install --find-links DIR (pip records no folder), hints
    # printed WHEELHOUSE even where the folder could be found
    monkeypatch.setattr(install_hints, "clone_root", lambda: None)
    monkeypatch.setattr(install_hints, "_direct_url", lambda: {})
    monkeypatch.delenv("PIP_FIND_LINKS", raising=False)
    monkeypatch.chdir(tmp_path)
    if how == "./wheelhouse":
        house = _house(tmp_path / "wheelhouse")
    else:
        house = _house(tmp_path / ("my wheels" if how.endswith("url") else "wheels"))
        other = tmp_path / "elsewhere"     # a folder without the frontend's wheel is passed over
        other.mkdir()
        link = house.as_uri() if how.endswith("url") else str(house)
        monkeypatch.setenv("PIP_FIND_LINKS", f"{other} {link}")
    command = install_hints.install_command("pallas-triton")
    assert command == (f"{install_hints.pip_install()} --find-links "
                       f"{shlex.quote(str(house))} pallas-triton")
    assert "WHEELHOUSE" not in command


def test_once_published_the_hint_names_the_distribution(monkeypatch):
    monkeypatch.setattr(install_hints, "clone_root", lambda: None)
    monkeypatch.setattr(install_hints, "PUBLISHED", True)
    assert install_hints.install_command("pallas-tpu", "libtpu") == \
        f"{install_hints.pip_install()} 'pallas-tpu[libtpu]'"


def test_the_installer_is_this_interpreters(monkeypatch):
    import sys
    assert install_hints.pip_install() in (
        "pip install", f"{shlex.quote(sys.executable)} -m pip install",
        f"uv pip install --python {shlex.quote(sys.executable)}")
    monkeypatch.setattr(install_hints.shutil, "which", lambda name: None)   # no pip on PATH
    assert install_hints.pip_install() == f"{shlex.quote(sys.executable)} -m pip install"


def test_every_hint_comes_from_install_hints():
    """No module writes its own `pip install ...` (the old ones named no-index packages)."""
    offenders = []
    for path in ROOT.glob("pallas_frontend/**/*.py"):
        if path.name == "install_hints.py" or "testing" in path.parts:   # the suite's asserts
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if re.search(r"pip install|pallas-frontend\[", line):
                offenders.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert not offenders, "\n".join(offenders)


def test_backends_lists_first_party_backends_that_are_not_installed(monkeypatch, capsys):
    """`pallas backends` names each shipped backend this environment lacks, with the
    command that installs it (a plugin env of tox lacks the other two)."""
    import json

    from pallas_frontend import cli
    monkeypatch.setitem(install_hints.SHIPPED, "ghost", "pallas-ghost")
    assert cli.main(["backends", "--json"]) in (0, 1)
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["ghost"]["distribution"] == "pallas-ghost"
    assert rows["ghost"]["available"] == \
        f"not installed: {install_hints.install_command('pallas-ghost')}"
    for name, dist in install_hints.SHIPPED.items():      # each shipped one: a row either way
        assert rows[name]["distribution"] == dist
