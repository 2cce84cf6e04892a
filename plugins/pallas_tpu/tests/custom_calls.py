"""The Mosaic custom calls of a lowered program, comparable between ours and
JAX's (shared by the tests that compare them)."""

from __future__ import annotations

import re


def custom_calls(hlo: str, bodies: bool = True) -> list[str]:
    """The tpu_custom_call lines of a StableHLO text, without source
    locations; the Mosaic body is kept only where JAX puts the debug
    locations beside it (then the body holds none and can be compared) and
    ``bodies``."""
    lines = []
    for line in hlo.splitlines():
        if "tpu_custom_call" not in line:
            continue
        line = re.sub(r"loc\(#loc\d*\)", "", line)
        line = re.sub(r'\\22debug_locations\\22: \\22[^\\]*\\22', "", line)
        if "debug_locations" not in hlo or not bodies:
            line = re.sub(r'\\22body\\22: \\22[^\\]*\\22', "", line)
        lines.append(line.strip())
    return lines
