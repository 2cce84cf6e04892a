"""`import pallas_frontend` stays light: no backend plugin, no triton, no pluggy work."""

import subprocess
import sys


def test_import_loads_no_plugin_and_no_triton():
    probe = ("import sys, pallas_frontend as pl; "
             "bad = [m for m in sys.modules if m.split('.')[0] in "
             "('pallas_triton', 'pallas_tpu', 'pallas_mgpu', 'triton', 'jax_triton', 'libtpu')"
             " or m.startswith('jax.experimental.pallas') or m.startswith('jax._src.pallas')]; "
             "print(bad)")
    out = subprocess.run([sys.executable, "-c", probe], check=True, capture_output=True,
                         text=True).stdout.strip()
    assert out == "[]", out
