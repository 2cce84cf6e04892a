"""Rows computed in a worker process that may die or hang on one of them (a
compiler crash, an import that never returns): the parent reads the worker's
``START key`` / ``ROW [key, cell]`` lines, records a failed cell for the row it
was in, and starts a fresh worker for the rows left. Shared by jax_ops_aot.py
and ecosystem.py."""

from __future__ import annotations

import json
import queue
import subprocess
import threading
from collections.abc import Callable

ROW_TIMEOUT_S = 900


def _fail(error: str) -> dict:
    return {"status": "fail", "error": error}


def run_rows(argv: Callable[[list[str]], list[str]], keys: list[str], *, env: dict, cwd: str,
             log: Callable[[str, dict], None], cannot_start: str,
             timeout_s: float = ROW_TIMEOUT_S) -> dict:
    """{key: cell} for ``keys``; ``argv(todo)`` is the worker's command line for
    the rows still to do, ``cannot_start`` what a worker that dies before its
    first row means (each row left records it, with the worker's last line)."""
    out: dict = {}
    todo = list(keys)
    while todo:
        proc = subprocess.Popen(argv(todo), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, env=env, cwd=cwd)
        lines: queue.Queue = queue.Queue()
        threading.Thread(target=lambda: [lines.put(ln) for ln in proc.stdout] + [lines.put(None)],
                         daemon=True).start()
        err: list[str] = []
        reader = threading.Thread(target=lambda: err.extend(proc.stderr), daemon=True)
        reader.start()
        current = None
        while True:
            try:
                line = lines.get(timeout=timeout_s)
            except queue.Empty:     # hung: in a row, that row fails; before any, all left do
                proc.kill()
                for key in [current] if current else todo:
                    out[key] = _fail(f"no result in {timeout_s} s")
                current = None
                break
            if line is None:
                break
            if line.startswith("START "):
                current = line[6:].strip()
            elif line.startswith("ROW "):
                key, cell = json.loads(line[4:])
                out[key] = cell
                current = None
                log(key, cell)
        proc.wait()
        reader.join(timeout=10)
        tail = ([ln.strip() for ln in err if ln.strip()][-1:] or [f"exit {proc.returncode}"])[0]
        if current is not None and current not in out:     # it died in this row
            out[current] = _fail(f"the worker died (exit {proc.returncode}): {tail[:200]}")
        elif current is None and proc.returncode:
            for key in todo:
                out.setdefault(key, _fail(f"{cannot_start}: {tail[:200]}"))
        todo = [k for k in keys if k not in out]
    return out
