"""Discovery and isolation: each fault of a plugin distribution is recorded,
warned about once, skipped, and raised with its cause when the backend is used."""

import subprocess
import sys

import pytest

from fake_dists import backend_source, make_dist, probe, run_code


@pytest.fixture
def site(tmp_path):
    make_dist(tmp_path, "pallas-good", "1.2.0", "pf_good", backend_source("good"), "good")
    return tmp_path


def test_good_plugin_is_discovered_next_to_the_interpreter(site, monkeypatch):
    r = probe(monkeypatch, site, "good")
    assert {"good", "interpret"} <= set(r["names"])      # other installed plugins may be listed too
    assert r["failures"] == {} and r["uses"]["good"] == "ok"


def test_bad_import_is_skipped_and_raised_on_use(site, monkeypatch):
    make_dist(site, "pallas-broken", "0.3.1", "pf_broken", "import no_such_module_xyz\n", "broken")
    r = probe(monkeypatch, site, "broken", "good")
    dist, version, reason = r["failures"]["broken"]
    assert (dist, version) == ("pallas-broken", "0.3.1")
    assert "import of its module failed" in reason and "no_such_module_xyz" in reason
    assert r["uses"]["good"] == "ok"
    assert r["uses"]["broken"].startswith("BackendUnavailableError")
    assert "pallas-broken 0.3.1" in r["uses"]["broken"]
    assert "ModuleNotFoundError" in r["uses"]["broken"]   # the stored cause
    assert len([w for w in r["warnings"] if "'broken'" in w]) == 1


def test_raising_hook_is_skipped(site, monkeypatch):
    src = ("from pallas_frontend import backend_api\n"
           "@backend_api.hookimpl\n"
           "def pallas_frontend_backend():\n"
           "    raise ValueError('no device driver found')\n")
    make_dist(site, "pallas-raising", "2.0", "pf_raising", src, "raising")
    r = probe(monkeypatch, site, "raising")
    assert "loading it raised: ValueError: no device driver found" in r["failures"]["raising"][2]
    assert "ValueError" in r["uses"]["raising"]
    assert "good" in r["names"]


def test_hook_returning_no_backend_is_skipped(site, monkeypatch):
    src = ("from pallas_frontend import backend_api\n"
           "@backend_api.hookimpl\n"
           "def pallas_frontend_backend():\n"
           "    return 'not a backend'\n")
    make_dist(site, "pallas-malformed", "0.1", "pf_malformed", src, "malformed")
    r = probe(monkeypatch, site, "malformed")
    assert "not a pallas_frontend.backend_api.Backend" in r["failures"]["malformed"][2]


def test_unequal_major_api_version_is_refused(site, monkeypatch):
    make_dist(site, "pallas-future", "9.0", "pf_future", backend_source("future", api=(2, 0)),
              "future")
    r = probe(monkeypatch, site, "future")
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


def test_duplicate_name_is_refused_naming_both_distributions(site, monkeypatch):
    make_dist(site, "pallas-good-fork", "1.0", "pf_good_fork", backend_source("good"), "good")
    r = probe(monkeypatch, site, "good")
    assert "good" not in r["names"]
    reasons = [f[2] for f in r["failures"].values()]
    assert len(reasons) == 2 and all("claimed by both pallas-good 1.2.0 and pallas-good-fork 1.0"
                                     in why for why in reasons)
    assert "BackendUnavailableError" in r["uses"]["good"] and "pallas-good-fork" in r["uses"]["good"]


def test_allow_list_picks_one_of_two_distributions(site, monkeypatch):
    make_dist(site, "pallas-good-fork", "1.0", "pf_good_fork", backend_source("good"), "good")
    r = probe(monkeypatch, site, "good", env={"PALLAS_FRONTEND_BACKENDS": "good@pallas-good-fork"})
    assert r["names"] == ["good", "interpret"] and r["failures"] == {}
    out = run_code(site, """
        import sys
        from pallas_frontend import registry
        b = registry.get_backend("good")
        print(type(b).__module__, "pf_good" in sys.modules)
    """, env={"PALLAS_FRONTEND_BACKENDS": "good@pallas-good-fork"})
    assert out.stdout.split() == ["pf_good_fork", "False"], out.stderr


def test_backend_name_must_equal_its_entry_point_name(site, monkeypatch):
    make_dist(site, "pallas-renamed", "1.0", "pf_renamed", backend_source("good"), "renamed")
    r = probe(monkeypatch, site, "renamed", "good")
    assert "named 'good' but its entry point is 'renamed'" in r["failures"]["renamed"][2]
    assert r["uses"]["good"] == "ok"


def test_allow_list_loads_only_named_backends(site, monkeypatch):
    make_dist(site, "pallas-broken", "0.3.1", "pf_broken", "import no_such_module_xyz\n", "broken")
    r = probe(monkeypatch, site, "good", env={"PALLAS_FRONTEND_BACKENDS": "good"})
    assert r["names"] == ["good", "interpret"] and r["failures"] == {}
    r = probe(monkeypatch, site, "good", env={"PALLAS_FRONTEND_BACKENDS": "interpret"})
    assert r["names"] == ["interpret"]
    # filtered, not "not installed", and no install hint
    msg = r["uses"]["good"]
    assert "is installed but it is not in PALLAS_FRONTEND_BACKENDS=interpret" in msg
    assert "not installed" not in msg.replace("is installed", "") and "pip install" not in msg


def test_allow_list_skips_plugins_without_importing_them(site):
    make_dist(site, "pallas-exits", "0.1", "pf_exits", "import sys; sys.exit(3)\n", "exits")
    out = run_code(site, """
        import sys
        from pallas_frontend import diagnostics, registry
        rows = {r["name"]: r for r in diagnostics.backend_rows("cpu")}
        print(",".join(sorted(registry.backends())), "pf_exits" in sys.modules,
              rows["exits"]["available"])
    """, env={"PALLAS_FRONTEND_BACKENDS": "good"})
    assert out.returncode == 0, out.stderr
    names, imported, available = out.stdout.strip().split(" ", 2)
    assert names == "good,interpret" and imported == "False"
    assert available.startswith("filtered out: it is not in PALLAS_FRONTEND_BACKENDS=good")


def test_unknown_allow_list_name_warns(site):
    out = run_code(site, """
        import warnings
        warnings.simplefilter("always")
        from pallas_frontend import registry
        with warnings.catch_warnings(record=True) as caught:
            registry.backends()
        print([str(w.message) for w in caught if type(w.message).__name__ == "BackendConfigWarning"])
    """, env={"PALLAS_FRONTEND_BACKENDS": "good,goood"})
    assert out.returncode == 0, out.stderr
    assert "'goood', which no installed distribution provides" in out.stdout
    assert "'good'," not in out.stdout.split("provides")[0]


def test_disable_autoload_keeps_only_the_interpreter(site, monkeypatch):
    r = probe(monkeypatch, site, "good", env={"PALLAS_FRONTEND_DISABLE_PLUGIN_AUTOLOAD": "1"})
    assert r["names"] == ["interpret"]
    assert "PALLAS_FRONTEND_DISABLE_PLUGIN_AUTOLOAD=1 is set" in r["uses"]["good"]
    assert "pallas-frontend[" not in r["uses"]["good"]


def test_omitted_api_version_is_refused(site, monkeypatch):
    make_dist(site, "pallas-unversioned", "0.1", "pf_unversioned",
              backend_source("unversioned", api=None), "unversioned")
    r = probe(monkeypatch, site, "unversioned")
    assert "declares no api_version; set api_version = (1, " in r["failures"]["unversioned"][2]


def test_register_backend_requires_api_version():
    from pallas_frontend import backend_api, registry

    class Unversioned(backend_api.Backend):
        name, platforms = "unversioned", ("cpu",)
    with pytest.raises(ValueError, match="declares no api_version"):
        registry.register_backend(Unversioned())


def test_strict_mode_turns_load_failures_into_errors(site, monkeypatch):
    make_dist(site, "pallas-broken", "0.3.1", "pf_broken", "import no_such_module_xyz\n", "broken")
    r = probe(monkeypatch, site, env={"PALLAS_FRONTEND_STRICT": "1"})
    assert r["error"].startswith("BackendLoadError")
    assert "pallas-broken 0.3.1" in r["error"] and "no_such_module_xyz" in r["error"]
    assert probe(monkeypatch, site, env={"PALLAS_FRONTEND_STRICT": "1",
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
