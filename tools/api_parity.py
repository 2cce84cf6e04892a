"""docs/api-parity.md: every public name of JAX's Pallas modules, and ours.

For each pair (JAX's module -> ours) every public name of JAX's module is
either *provided* (ours has it, of the same kind: module, class, function or
constant; where both are functions or classes with an inspectable signature,
the parameters are compared and a difference is listed) or *missing*. A
missing name carries an entry of ``tools/api_parity_reasons.json``:

- ``"kept_out"``: a reason a user accepts (the name needs hardware, a lowering
  or a JAX internal that no backend here has; or it is provided otherwise);
- ``"pending"``: not provided yet, with what it needs (counted as missing).

A missing name without an entry is *unlisted*: tests/test_api_parity.py fails
on it, on an entry for a name that is no longer missing, and on a stale page.

    python tools/api_parity.py            # rewrite docs/api-parity.md
    python tools/api_parity.py --check    # exit 1 if the page is stale or a name is unlisted
"""

from __future__ import annotations

import argparse
import enum
import importlib
import inspect
import json
import os
import sys
import types
import warnings
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "api-parity.md"
REASONS = Path(__file__).resolve().parent / "api_parity_reasons.json"

# (JAX's module, ours)
PAIRS = (
    ("jax.experimental.pallas", "pallas_frontend"),
    ("jax.experimental.pallas.tpu", "pallas_tpu"),
    ("jax.experimental.pallas.tpu_sc", "pallas_tpu.tpu_sc"),
    ("jax.experimental.pallas.mosaic_gpu", "pallas_mgpu"),
    ("jax.experimental.pallas.triton", "pallas_triton"),
)
# Imported first, so that the subpackage attributes of jax.experimental.pallas
# (set by Python on import) are the same set in every run.
JAX_SUBPACKAGES = ("tpu", "tpu_sc", "mosaic_gpu", "triton", "fuser")


def _quiet_libtpu() -> None:
    # importing JAX's TPU modules loads libtpu; on a host without a TPU it must
    # not look for chips (the same settings as tox.ini's envs with pallas-tpu)
    for k, v in (("TPU_ACCELERATOR_TYPE", "v5litepod-4"), ("TPU_WORKER_HOSTNAMES", "localhost"),
                 ("ALLOW_MULTIPLE_LIBTPU_LOAD", "1"), ("JAX_PLATFORMS", "cpu")):
        os.environ.setdefault(k, v)


def kind(obj) -> str:
    if isinstance(obj, types.ModuleType):
        return "module"
    if isinstance(obj, type):
        return "class"
    if isinstance(obj, enum.Enum):   # a member, even a callable one (pl.ANY(shape, dtype))
        return "constant"
    if callable(obj):
        return "function"
    return "constant"


def _signature(obj):
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return None
    return tuple((p.name, p.kind, p.default is inspect.Parameter.empty)
                 for p in sig.parameters.values())


def _render_signature(params) -> str:
    out, star = [], False
    for i, (name, pkind, required) in enumerate(params):
        if pkind != inspect.Parameter.POSITIONAL_ONLY and i and \
                params[i - 1][1] == inspect.Parameter.POSITIONAL_ONLY:
            out.append("/")
        if pkind == inspect.Parameter.VAR_POSITIONAL:
            out.append(f"*{name}")
            star = True
            continue
        if pkind == inspect.Parameter.VAR_KEYWORD:
            out.append(f"**{name}")
            continue
        if pkind == inspect.Parameter.KEYWORD_ONLY and not star:
            out.append("*")
            star = True
        out.append(name if required else f"{name}=")
    if params and params[-1][1] == inspect.Parameter.POSITIONAL_ONLY:
        out.append("/")
    return "(" + ", ".join(out) + ")"


def signature_difference(jax_obj, ours) -> str | None:
    """How the parameters differ (names, kinds, which are required), or None
    when they agree or either side cannot be inspected."""
    if kind(jax_obj) not in ("function", "class") or kind(ours) != kind(jax_obj):
        return None
    a, b = _signature(jax_obj), _signature(ours)
    if a is None or b is None or a == b:
        return None
    # a catch-all (*args, **kwargs) on either side says nothing about the call
    if any(k == inspect.Parameter.VAR_KEYWORD for _, k, _ in a + b) and \
            any(k == inspect.Parameter.VAR_POSITIONAL for _, k, _ in a + b) and \
            (len(a) == 2 or len(b) == 2):
        return None
    return f"JAX `{_render_signature(a)}`, ours `{_render_signature(b)}`"


@dataclass
class ModuleParity:
    jax_module: str
    ours: str
    provided: list = field(default_factory=list)       # (name, kind)
    kind_differs: list = field(default_factory=list)   # (name, jax kind, our kind)
    signatures: list = field(default_factory=list)     # (name, difference)
    kept_out: list = field(default_factory=list)       # (name, kind, reason)
    pending: list = field(default_factory=list)        # (name, kind, what it needs)
    unlisted: list = field(default_factory=list)       # (name, kind)
    stale_reasons: list = field(default_factory=list)  # names with an entry, now provided

    @property
    def missing_without_accepted_reason(self) -> int:
        return len(self.pending) + len(self.unlisted) + len(self.kind_differs)


def public_names(module) -> list[str]:
    """``dir(module)`` without private names, nor the subpackages Python sets
    as attributes when something imports them (``jax.experimental.pallas.ops``
    appears once a test imports one of JAX's kernels), other than JAX_SUBPACKAGES."""
    def incidental(name):
        value = getattr(module, name)
        return (isinstance(value, types.ModuleType) and name not in JAX_SUBPACKAGES
                and value.__name__ == f"{module.__name__}.{name}")
    return sorted(n for n in dir(module) if not n.startswith("_") and not incidental(n))


def load_reasons() -> dict:
    return json.loads(REASONS.read_text())


def compare(reasons: dict | None = None) -> list[ModuleParity]:
    _quiet_libtpu()
    reasons = load_reasons() if reasons is None else reasons
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for sub in JAX_SUBPACKAGES:
            importlib.import_module(f"jax.experimental.pallas.{sub}")
        results = []
        for jax_name, our_name in PAIRS:
            jax_mod = importlib.import_module(jax_name)
            ours = importlib.import_module(our_name)
            entries = reasons.get(jax_name, {})
            r = ModuleParity(jax_name, our_name)
            for name in public_names(jax_mod):
                jax_obj = getattr(jax_mod, name)
                k = kind(jax_obj)
                try:
                    our_obj = getattr(ours, name)
                except AttributeError:
                    entry = entries.get(name)
                    if entry is None:
                        r.unlisted.append((name, k))
                    elif entry["status"] == "kept_out":
                        r.kept_out.append((name, k, entry["reason"]))
                    else:
                        r.pending.append((name, k, entry["reason"]))
                    continue
                if name in entries:
                    r.stale_reasons.append(name)
                if kind(our_obj) != k:
                    r.kind_differs.append((name, k, kind(our_obj)))
                    continue
                r.provided.append((name, k))
                diff = signature_difference(jax_obj, our_obj)
                if diff is not None:
                    r.signatures.append((name, diff))
            results.append(r)
    return results


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render(results: list[ModuleParity]) -> str:
    import jax
    lines = [
        "# Every public name of JAX's Pallas, and ours",
        "",
        "Generated by `tools/api_parity.py` (do not edit by hand; "
        "`python tools/api_parity.py` rewrites it, tests/test_api_parity.py fails when it is "
        "stale). For each of JAX's Pallas modules, every public name (`dir()`, no leading "
        "underscore) is provided by ours, of the same kind (module, class, function, constant), "
        "or missing: *kept out* with a reason (`tools/api_parity_reasons.json`, reviewed), or "
        "*pending* (not provided yet; what it needs is said). Where both sides have an "
        "inspectable signature, the parameters are compared (names, kinds, which are "
        "required) and a difference is listed.",
        "",
        f"- JAX: jax {jax.__version__} (`jax.experimental.pallas` with its subpackages "
        f"{', '.join('`' + s + '`' for s in JAX_SUBPACKAGES)} imported)",
        "",
        "| JAX module | ours | public names | provided | kept out (reason) | pending | "
        "unlisted | signature differences |",
        "|---|---|---|---|---|---|---|---|",
    ]
    total = dict(names=0, provided=0, kept=0, pending=0, unlisted=0, sig=0)
    for r in results:
        n = len(r.provided) + len(r.kind_differs) + len(r.kept_out) + len(r.pending) + len(r.unlisted)
        lines.append(f"| `{r.jax_module}` | `{r.ours}` | {n} | {len(r.provided)} | "
                     f"{len(r.kept_out)} | {len(r.pending) + len(r.kind_differs)} | "
                     f"{len(r.unlisted)} | {len(r.signatures)} |")
        for key, value in (("names", n), ("provided", len(r.provided)), ("kept", len(r.kept_out)),
                           ("pending", len(r.pending) + len(r.kind_differs)),
                           ("unlisted", len(r.unlisted)), ("sig", len(r.signatures))):
            total[key] += value
    lines.append(f"| all | | {total['names']} | {total['provided']} | {total['kept']} | "
                 f"{total['pending']} | {total['unlisted']} | {total['sig']} |")
    lines += ["", f"Missing without an accepted reason (pending + unlisted): "
                  f"**{total['pending'] + total['unlisted']}**.", ""]
    for r in results:
        lines += [f"## `{r.jax_module}` -> `{r.ours}`", ""]
        if r.unlisted:
            lines += ["Missing, with no entry in the reasons file (the test fails on these):", ""]
            lines += [f"- `{name}` ({k})" for name, k in r.unlisted] + [""]
        if r.kind_differs:
            lines += ["Provided as another kind:", "", "| name | JAX | ours |", "|---|---|---|"]
            lines += [f"| `{name}` | {a} | {b} |" for name, a, b in r.kind_differs] + [""]
        if r.pending:
            lines += ["Pending (not provided yet):", "", "| name | kind | what it needs |",
                      "|---|---|---|"]
            lines += [f"| `{name}` | {k} | {_cell(why)} |" for name, k, why in r.pending] + [""]
        if r.kept_out:
            lines += ["Kept out:", "", "| name | kind | reason |", "|---|---|---|"]
            lines += [f"| `{name}` | {k} | {_cell(why)} |" for name, k, why in r.kept_out] + [""]
        if r.signatures:
            lines += ["Signatures that differ:", "", "| name | parameters |", "|---|---|"]
            lines += [f"| `{name}` | {_cell(d)} |" for name, d in r.signatures] + [""]
        provided = ", ".join(f"`{name}`" for name, _ in r.provided)
        lines += [f"Provided ({len(r.provided)}): {provided}.", ""]
    return "\n".join(lines).rstrip() + "\n"


def problems(results: list[ModuleParity]) -> list[str]:
    """What makes the check fail: unlisted missing names, entries for names
    that are no longer missing."""
    out = []
    for r in results:
        out += [f"{r.jax_module}.{name} ({k}) is missing from {r.ours} and has no entry in "
                f"{REASONS.name}: provide it, or add a reason" for name, k in r.unlisted]
        out += [f"{r.jax_module}.{name}: {r.ours} provides it now; remove its entry from "
                f"{REASONS.name}" for name in r.stale_reasons]
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true",
                    help="do not write; exit 1 if the page is stale or a name is unlisted")
    args = ap.parse_args(argv)
    results = compare()
    text = render(results)
    issues = problems(results)
    for line in issues:
        print(line, file=sys.stderr)
    if args.check:
        stale = not PAGE.exists() or PAGE.read_text() != text
        if stale:
            print(f"{PAGE.relative_to(ROOT)} is stale: run python tools/api_parity.py",
                  file=sys.stderr)
        return 1 if stale or issues else 0
    PAGE.write_text(text)
    print(f"wrote {PAGE.relative_to(ROOT)}")
    return 1 if issues else 0


if __name__ == "__main__":
    sys.exit(main())
