"""Exit with one line from us when this Python is too old for pallas-frontend.

Run before `python -m venv` in the README's commands and in .ci/run, so that a
user of an old Python reads what to do instead of pip's jax resolution error.
`python tools/require_python.py` checks for what installing the project needs
(Python 3.11, JAX 0.10); `python tools/require_python.py 3.12` for what the
test matrix needs (it runs on JAX 0.12, which needs Python 3.12). Kept
parseable by old Pythons (no f-strings, no annotations).
"""
import sys

WHY = {(3, 11): "JAX 0.10, the oldest JAX it supports",
       (3, 12): "the test matrix runs on JAX 0.12, which needs it"}


def main(argv):
    needed = tuple(int(p) for p in argv[0].split(".")) if argv else (3, 11)
    if sys.version_info[:2] < needed:
        sys.stderr.write(
            "pallas-frontend needs Python >= %d.%d here (%s); this is Python %s (%s). "
            "Install Python %d.%d+ (e.g. `pyenv install %d.%d`) and rerun the same command.\n"
            % (needed[0], needed[1], WHY.get(needed, "JAX"), sys.version.split()[0],
               sys.executable, needed[0], needed[1], needed[0], needed[1]))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
