"""A plugin whose import raises KeyboardInterrupt or an exception whose
``__str__`` raises is reported and skipped like any broken plugin: ``pallas
backends`` lists it and goes on (issue 39: it died with a traceback). A real
Ctrl-C (SIGINT) while a plugin loads still interrupts.

The decision on KeyboardInterrupt: a signal goes to the main thread, so a
KeyboardInterrupt is a Ctrl-C only when a SIGINT arrived while the plugin
loaded; one that the plugin's own code raises (``raise KeyboardInterrupt`` at
import) is that plugin's failure, recorded with its message."""

import json
import signal
import subprocess
import sys
import time

import pytest

from fake_dists import backend_source, make_dist, run_code, site_env

BAD_STR = """
class Odd(Exception):
    def __str__(self):
        raise ValueError("no words for it")
raise Odd()
"""
BAD_STR_BASE = """
class Odder(RuntimeError):
    def __str__(self):
        raise KeyboardInterrupt
raise Odder()
"""
CTRL_C = "raise KeyboardInterrupt('pressed by the plugin')\n"


def _cli(site, *args, env=None):
    return subprocess.run([sys.executable, "-m", "pallas_frontend.cli", *args],
                          env=site_env(site, env), capture_output=True, text=True, timeout=300)


@pytest.fixture
def broken(tmp_path):
    make_dist(tmp_path, "pallas-good", "1.0", "pf_good", backend_source("good"), "good")
    make_dist(tmp_path, "pallas-ctrlc", "0.1", "pf_ctrlc", CTRL_C, "ctrlc")
    make_dist(tmp_path, "pallas-badstr", "0.1", "pf_badstr", BAD_STR, "badstr")
    make_dist(tmp_path, "pallas-badstr2", "0.1", "pf_badstr2", BAD_STR_BASE, "badstr2")
    return tmp_path


# "0": no time limit, so the plugin is imported in the calling (main) thread
@pytest.mark.parametrize("timeout", ["20", "0"])
def test_pallas_backends_reports_each_broken_plugin_and_goes_on(broken, timeout):
    out = _cli(broken, "backends", "--json", env={"PALLAS_FRONTEND_IMPORT_TIMEOUT": timeout})
    assert "Traceback" not in out.stderr, out.stderr[-3000:]
    assert out.returncode == 1, out.stderr[-3000:]            # load errors: exit status 1
    rows = {r["name"]: r for r in json.loads(out.stdout)}
    assert rows["ctrlc"]["load error"] == (
        "loading it raised: KeyboardInterrupt: pressed by the plugin (raised by the plugin's "
        "own code, not a Ctrl-C)")
    assert rows["badstr"]["load error"] == (
        "loading it raised: Odd (its message cannot be shown: str() of it raised ValueError)")
    assert rows["badstr2"]["load error"] == (
        "loading it raised: Odder (its message cannot be shown: str() of it raised "
        "KeyboardInterrupt)")
    assert rows["good"]["available"].startswith("yes")
    assert rows["interpret"]["available"].startswith("yes")


def test_pallas_backends_table_and_verbose_show_them(broken):
    out = _cli(broken, "backends", "--verbose", "--allow-load-errors")
    assert out.returncode == 0, out.stderr[-3000:]
    assert "Traceback (most recent call last)" in out.stdout       # --verbose: their causes
    text = " ".join(out.stdout.split())
    for words in ["KeyboardInterrupt: pressed by the plugin", "Odd (its message cannot be shown",
                  "Odder (its message cannot be shown"]:
        assert words in text


def test_using_the_broken_plugin_raises_with_the_stored_cause(broken):
    out = run_code(broken, """
        import warnings
        warnings.simplefilter("ignore")
        from pallas_frontend import registry
        names = registry.backends()
        print([n for n in ["good", "interpret", "ctrlc", "badstr", "badstr2"] if n in names])
        for name in ["ctrlc", "badstr"]:
            try:
                registry.get_backend(name)
            except Exception as e:
                print(type(e).__name__, "|", str(e).split(". Fix")[0])
    """)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.splitlines()
    assert lines[0] == "['good', 'interpret']"
    assert "BackendUnavailableError | pallas_frontend backend 'ctrlc'" in lines[1]
    assert "KeyboardInterrupt: pressed by the plugin" in lines[1]
    assert "Odd (its message cannot be shown" in lines[2]


SLOW = "import time\nprint('importing', flush=True)\ntime.sleep(60)\n"


@pytest.mark.skipif(sys.platform == "win32", reason="SIGINT to a child process")
@pytest.mark.parametrize("timeout", ["20", "0"])
def test_a_real_ctrl_c_while_a_plugin_loads_still_interrupts(tmp_path, timeout):
    make_dist(tmp_path, "pallas-slow", "0.1", "pf_slow", SLOW, "slow")
    code = ("from pallas_frontend import registry\n"
            "try:\n    registry.backends()\nexcept KeyboardInterrupt:\n"
            "    print('interrupted', flush=True)\n")
    # a run started in the background inherits SIGINT ignored, which Python then keeps:
    # the child gets the default back, so Ctrl-C means KeyboardInterrupt there
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            env=site_env(tmp_path, {"PALLAS_FRONTEND_IMPORT_TIMEOUT": timeout}),
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        assert proc.stdout.readline().strip() == "importing"
        time.sleep(0.3)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert out.strip() == "interrupted", err[-3000:]
