"""Every PALLAS_FRONTEND_* variable with a bad value fails with an error that
names the variable, its value, the values it takes and the fix (issue 24
#13): a typo must not silently change which backend runs."""

import os
import subprocess
import sys

import pytest

import pallas_frontend as pl
from pallas_frontend import discovery, registry
from pallas_frontend.backend_api import BackendUnavailableError

VAR = "PALLAS_FRONTEND_DEFAULT_BACKEND"


def select(platform="cpu"):
    return registry.select_backend(platform=platform, interpret=False, compiler_params=None,
                                   backend=None)


def _names_the_fix(msg, value):
    assert f"{VAR}={value!r}" in msg, msg
    assert "platforms cpu, cuda, rocm, tpu" in msg and "installed backends: " in msg, msg
    assert "interpret" in msg.split("installed backends: ")[1], msg
    assert f"unset {VAR}" in msg, msg


@pytest.mark.parametrize("value, problem", [
    ("gpu=interpret", "'gpu' is not a platform (name the GPU platform: cuda or rocm)"),
    ("cpu=", "entry 'cpu=' names no backend"),
    ("cpu=interpret=x", "entry 'cpu=interpret=x' has more than one '='"),
    ("cpu=interpret,cpu=interpret", "it names platform 'cpu' twice"),
    ("interpret,interpret", "it names a default for every platform twice"),
])
def test_malformed_default_backend(monkeypatch, value, problem):
    monkeypatch.setenv(VAR, value)
    with pytest.raises(ValueError) as info:
        select()
    assert problem in str(info.value)
    _names_the_fix(str(info.value), value)


def test_default_backend_that_is_not_installed(monkeypatch):
    monkeypatch.setenv(VAR, "cuda=interpret,cpu=nosuch")
    with pytest.raises(BackendUnavailableError) as info:
        select("cpu")
    msg = str(info.value)
    assert "backend 'nosuch' cannot be the default for platform 'cpu'" in msg
    _names_the_fix(msg, "cuda=interpret,cpu=nosuch")
    assert select("cuda").name == "interpret"       # the other entry still works


def test_default_backend_for_a_platform_it_does_not_serve(monkeypatch):
    class CudaOnly(pl.backend_api.Backend):
        name = "cudaonly"
        api_version = pl.backend_api.API_VERSION
        platforms = ("cuda",)
    registry.register_backend(CudaOnly())
    try:
        monkeypatch.setenv(VAR, "cudaonly")
        with pytest.raises(BackendUnavailableError) as info:
            select("cpu")
        msg = str(info.value)
        assert "does not serve platform 'cpu' (it serves cuda)" in msg and ".." not in msg
        _names_the_fix(msg, "cudaonly")
        assert select("cuda").name == "cudaonly"
    finally:
        registry.unregister_backend("cudaonly")


def test_platform_entry_beats_the_bare_name(monkeypatch):
    monkeypatch.setenv(VAR, "nosuch,cpu=interpret")
    assert select("cpu").name == "interpret"


def test_set_default_backend_error_names_the_call():
    pl.set_default_backend("cpu", "nosuch")
    try:
        with pytest.raises(BackendUnavailableError) as info:
            select("cpu")
    finally:
        pl.set_default_backend("cpu", None)
    msg = str(info.value)
    assert "set_default_backend('cpu', 'nosuch') chose it" in msg
    assert "set_default_backend('cpu', None)" in msg


@pytest.mark.parametrize("var", ["PALLAS_FRONTEND_STRICT",
                                 "PALLAS_FRONTEND_DISABLE_PLUGIN_AUTOLOAD"])
def test_on_off_variables_refuse_other_values(monkeypatch, var):
    monkeypatch.setenv(var, "enabled")
    with pytest.raises(ValueError) as info:
        discovery.env_flag(var)
    msg = str(info.value)
    assert f"{var}='enabled'" in msg and "1 (or true, yes, on)" in msg and "0 (or false" in msg
    for value, want in [("1", True), ("Yes", True), ("0", False), ("off", False), ("", False)]:
        monkeypatch.setenv(var, value)
        assert discovery.env_flag(var) is want


def test_suite_backend_from_the_environment_names_the_variable(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("PALLAS_FRONTEND_")}
    env["PALLAS_FRONTEND_TEST_BACKEND"] = "nosuch"
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--pyargs",
         "pallas_frontend.testing.test_contract"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode != 0
    assert "PALLAS_FRONTEND_TEST_BACKEND=nosuch: No pallas_frontend backend named 'nosuch'" \
        in out.stderr + out.stdout, out.stderr[-2000:]


def test_cli_reports_a_bad_setting_without_a_traceback(monkeypatch, capsys):
    from pallas_frontend import cli
    monkeypatch.setenv("PALLAS_FRONTEND_IMPORT_TIMEOUT", "soon")
    monkeypatch.setattr(registry, "_found", None)      # discover again, under the bad setting
    try:
        assert cli.main(["backends"]) == 2
    finally:
        monkeypatch.delenv("PALLAS_FRONTEND_IMPORT_TIMEOUT")
        registry.reload()
    err = capsys.readouterr().err
    assert err.startswith("pallas: PALLAS_FRONTEND_IMPORT_TIMEOUT='soon' is not a number"), err
