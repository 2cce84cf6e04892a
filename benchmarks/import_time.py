"""Added import time of pallas_frontend over `import jax`, in fresh processes.

Run: python benchmarks/import_time.py [repeats]
Prints the median over repeats of (time to import jax + pallas_frontend) minus
(time to import jax), each measured inside its own new interpreter; and, for
information, the cost of then loading the whole API (the package loads its
modules on first attribute access).
"""

import statistics
import subprocess
import sys

PROBE = """
import time
t0 = time.perf_counter()
import jax
t1 = time.perf_counter()
{extra}
t2 = time.perf_counter()
print(t1 - t0, t2 - t1)
"""

TARGET_MS = 50.0


def measure(extra: str) -> float:
    out = subprocess.run([sys.executable, "-c", PROBE.format(extra=extra)], check=True,
                         capture_output=True, text=True).stdout.split()
    return float(out[1])


def main(repeats: int = 7) -> int:
    added, full = [], []
    for _ in range(repeats):
        base = measure("pass")
        added.append(measure("import pallas_frontend") - base)
        full.append(measure("import pallas_frontend as pl; [getattr(pl, n) for n in pl.__all__]")
                    - base)
    ms = statistics.median(added) * 1e3
    print(f"pallas_frontend import adds {ms:.1f} ms over `import jax` "
          f"(median of {repeats}; target < {TARGET_MS:.0f} ms): {'OK' if ms < TARGET_MS else 'OVER'}")
    print(f"loading every public name as well adds {statistics.median(full) * 1e3:.1f} ms "
          "(paid on first use)")
    return 0 if ms < TARGET_MS else 1


if __name__ == "__main__":
    raise SystemExit(main(int(sys.argv[1]) if len(sys.argv) > 1 else 7))
