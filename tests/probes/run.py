"""Runs every probe category and prints one row per case and the counts:
``python tests/probes/run.py [category ...]`` (categories: errors, wrong_results,
hangs, crashes). The exit status is 1 if any case ended outside correct/clear_error."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from probes import common  # noqa: E402

CATEGORIES = ("errors", "wrong_results", "hangs", "crashes")


def main(argv):
    total, bad = [], 0
    for cat in argv or CATEGORIES:
        module = f"probe_{cat}"
        for case in common.cases_of(module):
            outcome, detail = common.run(module, case)
            total.append((outcome, detail))
            bad += outcome not in common.GOOD + ("skipped",)
            print(f"{cat:14s} {case.id:28s} {outcome:13s} {detail[:160]}", flush=True)
    print("counts:", common.counts(total))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
