"""Exit with one line from us when this Python is too old for pallas-frontend.

Run before `python -m venv` in the README's commands and in .ci/run, so that a
Python 3.10 user reads what to do instead of pip's jax resolution error. Kept
parseable by old Pythons (no f-strings, no annotations).
"""
import sys

NEEDED = (3, 11)

if sys.version_info[:2] < NEEDED:
    sys.stderr.write(
        "pallas-frontend needs Python >= %d.%d (JAX 0.10); this is Python %s (%s). "
        "Install Python 3.11+ (e.g. `pyenv install 3.12`) and rerun the same command.\n"
        % (NEEDED[0], NEEDED[1], sys.version.split()[0], sys.executable))
    sys.exit(1)
