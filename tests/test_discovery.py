"""Discovery and isolation: each fault of a plugin distribution is recorded,
warned about once, skipped, and raised with its cause when the backend is used."""

import subprocess
import sys

import pytest

from fake_dists import backend_source, make_dist, probe


@pytest.fixture
def site(tmp_path):
    make_dist(tmp_path, "pallas-good", "1.2.0", "pf_good", backend_source("good"), "good")
    return tmp_path


def test_good_plugin_is_discovered_next_to_the_interpreter(site):
    r = probe(site, "good")
    assert {"good", "interpret"} <= set(r["names"])      # other installed plugins may be listed too
    assert r["failures"] == {} and r["uses"]["good"] == "ok"


def test_bad_import_is_skipped_and_raised_on_use(site):
    make_dist(site, "pallas-broken", "0.3.1", "pf_broken", "import no_such_module_xyz\n", "broken")
    r = probe(site, "broken", "good")
    dist, version, reason = r["failures"]["broken"]
    assert (dist, version) == ("pallas-broken", "0.3.1")
    assert "import of its module failed" in reason and "no_such_module_xyz" in reason
    assert r["uses"]["good"] == "ok"
    assert r["uses"]["broken"].startswith("BackendUnavailableError")
    assert "pallas-broken 0.3.1" in r["uses"]["broken"]
    assert "ModuleNotFoundError" in r["uses"]["broken"]   # the stored cause
    assert len([w for w in r["warnings"] if "'broken'" in w]) == 1


def test_raising_hook_is_skipped(site):
    src = ("from pallas_frontend import backend_api\n"
           "@backend_api.hookimpl\n"
           "def pallas_frontend_backend():\n"
           "    raise ValueError('no device driver found')\n")
    make_dist(site, "pallas-raising", "2.0", "pf_raising", src, "raising")
    r = probe(site, "raising")
    assert "loading it raised: ValueError: no device driver found" in r["failures"]["raising"][2]
    assert "ValueError" in r["uses"]["raising"]
    assert "good" in r["names"]


def test_hook_returning_no_backend_is_skipped(site):
    src = ("from pallas_frontend import backend_api\n"
           "@backend_api.hookimpl\n"
           "def pallas_frontend_backend():\n"
           "    return 'not a backend'\n")
    make_dist(site, "pallas-malformed", "0.1", "pf_malformed", src, "malformed")
    r = probe(site, "malformed")
    assert "not a pallas_frontend.backend_api.Backend" in r["failures"]["malformed"][2]


def test_unequal_major_api_version_is_refused(site):
    make_dist(site, "pallas-future", "9.0", "pf_future", backend_source("future", api=(2, 0)),
              "future")
    r = probe(site, "future")
    dist, version, reason = r["failures"]["future"]
    assert (dist, version) == ("pallas-future", "9.0")
    assert "backend API 2.0" in reason and "major versions must be equal" in reason
    assert "BackendUnavailableError" in r["uses"]["future"]


def test_older_minor_api_version_is_accepted(tmp_path, monkeypatch):
    from pallas_frontend import backend_api
    monkeypatch.setattr(backend_api, "API_VERSION", (1, 3))
    from pallas_frontend import discovery
    from fake_dists import backend_source as src
    namespace = {}
    exec(compile(__import__("textwrap").dedent(src("older", api=(1, 1))), "<older>", "exec"),
         namespace)
    origin = discovery.Origin("older", "x", "pallas-older", "1.0")
    assert discovery._validate(namespace["B"](), origin) is None
    newer = src("newer", api=(1, 5))
    exec(compile(__import__("textwrap").dedent(newer), "<newer>", "exec"), namespace)
    assert "upgrade pallas-frontend" in discovery._validate(namespace["B"](), origin)


def test_duplicate_name_from_two_distributions(site):
    make_dist(site, "pallas-good-fork", "1.0", "pf_good_fork", backend_source("good"), "good2")
    r = probe(site, "good")
    assert r["uses"]["good"] == "ok"       # the first (by entry point name) wins
    dist, version, reason = r["failures"]["good"]
    assert (dist, version) == ("pallas-good-fork", "1.0")
    assert "already provided by pallas-good 1.2.0" in reason


def test_allow_list_loads_only_named_backends(site):
    make_dist(site, "pallas-broken", "0.3.1", "pf_broken", "import no_such_module_xyz\n", "broken")
    r = probe(site, "good", env={"PALLAS_FRONTEND_BACKENDS": "good"})
    assert r["names"] == ["good", "interpret"] and r["failures"] == {}
    r = probe(site, "good", env={"PALLAS_FRONTEND_BACKENDS": "interpret"})
    assert r["names"] == ["interpret"]
    assert "No pallas_frontend backend named 'good'" in r["uses"]["good"]


def test_disable_autoload_keeps_only_the_interpreter(site):
    r = probe(site, "good", env={"PALLAS_FRONTEND_DISABLE_PLUGIN_AUTOLOAD": "1"})
    assert r["names"] == ["interpret"]
    assert 'pip install "pallas-frontend[good]"' in r["uses"]["good"]


def test_strict_mode_turns_load_failures_into_errors(site):
    make_dist(site, "pallas-broken", "0.3.1", "pf_broken", "import no_such_module_xyz\n", "broken")
    r = probe(site, env={"PALLAS_FRONTEND_STRICT": "1"})
    assert r["error"].startswith("BackendLoadError")
    assert "pallas-broken 0.3.1" in r["error"] and "no_such_module_xyz" in r["error"]
    assert probe(site, env={"PALLAS_FRONTEND_STRICT": "1",
                            "PALLAS_FRONTEND_BACKENDS": "good"})["error"] is None


def test_import_pallas_frontend_imports_no_backend_module(site):
    code = ("import sys, pallas_frontend\n"
            "bad = [m for m in sys.modules if m.startswith(('pf_', 'pallas_frontend.interpreter',"
            " 'pallas_triton', 'pallas_tpu', 'pallas_mgpu', 'pallas_example_backend'))]\n"
            "assert not bad, bad\n"
            "import pallas_frontend.registry as r; r.backends()\n"
            "assert 'pf_good' in sys.modules and 'pallas_frontend.interpreter.backend' in sys.modules\n")
    env = {"PYTHONPATH": str(site)}
    import os
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, **env},
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
