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


# Every setting is checked up front (issue 34): before, `pallas backends` and `pallas doctor`
# exited 0 for these, since nothing read the variable on that path.
@pytest.mark.parametrize("var, value, says", [
    ("PALLAS_FRONTEND_DEFAULT_BACKEND", "gpu=triton",
     "'gpu' is not a platform (name the GPU platform: cuda or rocm)"),
    ("PALLAS_FRONTEND_STRICT", "maybe", "is neither on nor off"),
    ("PALLAS_FRONTEND_DISABLE_PLUGIN_AUTOLOAD", "sometimes", "is neither on nor off"),
    ("PALLAS_FRONTEND_BACKENDS", "triton tpu", "entry 'triton tpu' is not a backend name"),
    ("PALLAS_FRONTEND_TEST_BACKEND", "tri-ton", "is not a backend name"),
])
@pytest.mark.parametrize("command", ["backends", "doctor"])
def test_cli_exits_2_for_any_bad_setting(monkeypatch, capsys, var, value, says, command):
    from pallas_frontend import cli
    monkeypatch.setenv(var, value)
    assert cli.main([command]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.startswith(f"pallas: {var}={value!r}"), captured
    assert says in captured.err, captured.err


def test_import_warns_about_bad_and_unknown_settings(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("PALLAS_FRONTEND_")}
    env.update(PALLAS_FRONTEND_DEFAULT_BACKEND="gpu=triton", PALLAS_FRONTEND_STIRCT="1")
    out = subprocess.run([sys.executable, "-c", "import pallas_frontend"], env=env, cwd=tmp_path,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "ConfigWarning: PALLAS_FRONTEND_DEFAULT_BACKEND='gpu=triton': 'gpu' is not a " \
           "platform" in out.stderr, out.stderr
    assert "ConfigWarning: PALLAS_FRONTEND_STIRCT is set but pallas_frontend reads no such " \
           "variable (a typo?)" in out.stderr, out.stderr


def test_every_variable_the_code_reads_is_checked():
    import re
    from pathlib import Path

    from pallas_frontend import env_config
    root = Path(__file__).resolve().parents[1]
    read = set()
    for path in [*root.glob("pallas_frontend/**/*.py"), *root.glob("plugins/*/pallas_*/**/*.py")]:
        read |= set(re.findall(r"PALLAS_FRONTEND_[A-Z][A-Z_]*[A-Z]", path.read_text()))
    assert read <= set(env_config.SETTINGS), read - set(env_config.SETTINGS)
