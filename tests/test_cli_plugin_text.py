"""`pallas backends` against plugins that hand over odd things (issue 32, CLI
and plugins): a non-string platform or mixed-type capabilities give a clean
row, never a traceback; a plugin's text with terminal escapes is printed
escaped; `--json` stays JSON when a plugin prints on import; the import
timeout holds while an abandoned import keeps Python's import lock."""

import json
import subprocess
import sys
import textwrap
import time

from fake_dists import backend_source, discovering, make_dist, site_env

from pallas_frontend import plain_text

ESCAPES = "\x1b[2J\x1b]0;pwned\x07\u202e"     # clear screen, set window title, bidi override


def _cli_here(monkeypatch, capsys, site, *args, env=None):
    from pallas_frontend import cli
    capsys.readouterr()
    with discovering(monkeypatch, site, env):
        code = cli.main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _dist(root, name, source):
    make_dist(root, f"pallas-{name}", "0.1", f"pf_{name}", source, name)


def test_non_string_platform_and_mixed_capabilities_are_clean_rows(tmp_path, monkeypatch,
                                                                    capsys):
    _dist(tmp_path, "odd", backend_source("odd", platforms=(3,)))
    _dist(tmp_path, "mixed", backend_source("mixed", body="capabilities = frozenset({'grid', 3})"))
    _dist(tmp_path, "good", backend_source("good"))
    code, out, err = _cli_here(monkeypatch, capsys, tmp_path, "backends")
    assert code == 1 and "Traceback" not in out + err, out + err
    table = " ".join(out.split())
    assert "its Backend's platforms (3,) hold 3, not a platform name" in table, out
    assert "its Backend's capabilities hold 3 (int), not a tag name" in table, out
    code, out, _ = _cli_here(monkeypatch, capsys, tmp_path, "backends", "--json")
    rows = {r["name"]: r for r in json.loads(out)}
    assert rows["odd"]["available"] == rows["mixed"]["available"] == "no: failed to load"
    assert rows["good"]["available"] == "yes, natively (cpu)"


def test_an_in_process_backend_with_odd_attributes_is_a_row_too(monkeypatch, capsys):
    from pallas_frontend import cli, registry
    base = type(registry.get_backend("interpret"))

    class Odd(base):
        name = "oddreg"
        capabilities = frozenset({"grid", 3})

    registry.register_backend(Odd())
    try:
        assert cli.main(["backends", "--json"]) == 0
        rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    finally:
        registry.unregister_backend("oddreg")
    assert rows["oddreg"]["load error"].startswith(
        "its Backend's attributes cannot be read: TypeError"), rows["oddreg"]


def test_escape_sequences_in_plugin_text_are_printed_escaped(tmp_path, monkeypatch, capsys):
    _dist(tmp_path, "loud", f"raise RuntimeError({'boom ' + ESCAPES!r})\n")
    probe = f"def is_available(self): raise RuntimeError({'probe ' + ESCAPES!r})"
    _dist(tmp_path, "probe", backend_source("probe", body=probe))
    shown = plain_text.printable(ESCAPES)
    assert shown == "\\x1b[2J\\x1b]0;pwned\\x07\\u202e"
    for args in (["backends", "--verbose"], ["doctor"]):
        code, out, err = _cli_here(monkeypatch, capsys, tmp_path, *args)
        assert "\x1b" not in out + err and "\u202e" not in out + err, args
        assert "probe " + shown in " ".join(out.split()), (args, out)
        if args[0] == "backends":
            assert "boom " + shown in " ".join(out.split()), out
            assert out.count("boom " + shown) >= 2      # the row and the --verbose traceback
    code, out, _ = _cli_here(monkeypatch, capsys, tmp_path, "backends", "--json")
    rows = {r["name"]: r for r in json.loads(out)}
    assert rows["loud"]["load error"] == "loading it raised: RuntimeError: boom " + shown


NOISY = textwrap.dedent("""\
    import os, sys
    print("hello from the plugin")
    sys.stdout.flush()
    os.write(1, b"and from C\\n")
""")


def test_json_stays_json_when_a_plugin_prints_on_import(tmp_path):
    _dist(tmp_path, "noisy", NOISY + textwrap.dedent(backend_source("noisy")))
    out = subprocess.run([sys.executable, "-m", "pallas_frontend.cli", "backends", "--json"],
                         env=site_env(tmp_path, {"PALLAS_FRONTEND_BACKENDS": "noisy"}),
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    rows = {r["name"]: r for r in json.loads(out.stdout)}      # stdout: the JSON alone
    assert rows["noisy"]["available"] == "yes, natively (cpu)"
    assert "printed this on stdout while loading" in out.stderr, out.stderr
    assert "hello from the plugin" in out.stderr and "and from C" in out.stderr, out.stderr


HOLDS_IMPORT_LOCK = "import _imp, time\n_imp.acquire_lock()\ntime.sleep(120)\n_imp.release_lock()\n"

# A shipped-like backend whose "available" cell looks for a module (importlib's
# find_spec takes the import lock), listed after the plugin whose abandoned import
# holds that lock.
LISTS_AFTER_THE_HOLDER = """
    import sys
    from pallas_frontend import backend_needs, cli, registry
    registry.SHIPPED["cudaish"] = "pallas-cudaish"
    backend_needs.NEEDS["cudaish"] = (backend_needs.Need(
        "a compiler", "cuda", lambda: "pip install compiler",
        backend_needs._module("pf_no_such_compiler")),)
    sys.exit(cli.main(["backends", "--json"]))
"""


def test_import_timeout_holds_while_an_abandoned_import_keeps_the_import_lock(tmp_path):
    _dist(tmp_path, "cudaish", backend_source("cudaish", platforms=("cuda",)))
    _dist(tmp_path, "zlock", HOLDS_IMPORT_LOCK)
    _dist(tmp_path, "zzlater", backend_source("zzlater"))
    start = time.monotonic()
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(LISTS_AFTER_THE_HOLDER)],
        env=site_env(tmp_path, {"PALLAS_FRONTEND_IMPORT_TIMEOUT": "3",
                                "PALLAS_FRONTEND_BACKENDS": "cudaish,zlock,zzlater"}),
        capture_output=True, text=True, timeout=300)
    elapsed = time.monotonic() - start
    assert out.returncode == 1, out.stderr[-3000:]
    # the lock is held 120 s: waiting for it would take that long
    assert elapsed < 60, elapsed
    rows = {r["name"]: r for r in json.loads(out.stdout)}
    assert "its import did not return within 3 s" in rows["zlock"]["load error"]
    assert rows["zzlater"]["load error"].startswith(
        "its import was not started: Python's import lock is held by an abandoned call "
        "(loading zlock (pallas-zlock))"), rows["zzlater"]
    assert rows["cudaish"]["available"].startswith("no: it serves cuda") or \
        rows["cudaish"]["available"].startswith("compile-only"), rows["cudaish"]
