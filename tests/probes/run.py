"""Runs every probe category and prints one row per case and the counts:
``python tests/probes/run.py [category ...]`` (categories: errors, wrong_results,
hangs, crashes, issue 32's round3_numerics, round3_structure, round3_control, and
issue 39's round4_numerics, round4_structure, round4_control, round4_surface).
The exit status is 1 if any case ended outside correct/clear_error."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from probes import common  # noqa: E402

CATEGORIES = ("errors", "wrong_results", "hangs", "crashes", "round3_numerics",
              "round3_structure", "round3_control", "round4_numerics", "round4_structure",
              "round4_control", "round4_surface")


INTERPRETERS = ("builtin", "triton", "tpu", "mgpu")


def main(argv):
    total, bad, per = [], 0, {}
    for cat in argv or CATEGORIES:
        module = f"probe_{cat}"
        for case in common.cases_of(module):
            outcome, detail = common.run(module, case)
            if case.xfail and outcome not in common.GOOD + ("skipped",):
                detail = f"[xfail: {case.xfail}] {detail}"
            total.append((outcome, detail))
            bad += outcome not in common.GOOD + ("skipped",) and not case.xfail
            interp = case.id.split("-")[0]     # round 3 ids start with the interpreter
            per.setdefault(interp if interp in INTERPRETERS else "other", []).append(
                (outcome, detail))
            print(f"{cat:16s} {case.id:32s} {outcome:13s} {detail[:160]}", flush=True)
    for interp, results in per.items():
        print(f"counts {interp}:", {k: v for k, v in common.counts(results).items() if v})
    print("counts:", common.counts(total))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
