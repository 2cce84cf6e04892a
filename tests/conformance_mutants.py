"""Deliberately broken backends, for the conformance suite's mutation test
(``tests/test_conformance_mutation.py``).

Each one wraps the built-in interpreter and plants one fault: it rewrites the
``KernelIR`` before the interpreter sees it (the grid walked column-major,
program ids reversed, ragged edge blocks shifted into the array, scratch
zeroed at every grid point, writes to input Refs undone after each grid point,
aliases dropped, ``pl.Element`` padding put after the array or its two ends
swapped, Element offsets rounded down to a multiple of 8, the last grid
point of the last axis dropped) or the arrays around the interpreter's computation (float64
rounded through float32, outputs handed back in reverse order). ``none``
plants nothing: the control, which must pass the suite.

They are found like installed plugins: entry points ``mutant_<fault> =
conformance_mutants:plugin_<fault>`` of a distribution that the test writes
(``entry_points_text``). Run as a script, this module runs the suite against
each backend named on the command line in one process (JAX starts once) and
writes what failed as JSON:

    python conformance_mutants.py OUT.json NAME [NAME...] [-- PYTEST ARGS]
"""

from __future__ import annotations

import dataclasses
import json
import sys

import jax.numpy as jnp
from jax import lax

import pallas_frontend as pl
from pallas_frontend import _jax_compat as jc       # retraces the kernel's jaxprs
from pallas_frontend import backend_api
from pallas_frontend.interpreter.backend import InterpreterBackend

MODULE = "conformance_mutants"


# --- rewriting a KernelIR --------------------------------------------------------

def _trace(fun, avals):
    with jc.mutable_array_checks(False):
        jaxpr, _ = jc.trace_kernel_jaxpr(fun, avals, traced_for="conformance mutant")
    return jaxpr


def _wrap_body(kernel, wrap):
    """The kernel whose body is ``wrap(run, ids, refs)``, where ``run(ids, refs)``
    runs the original body."""
    n = kernel.num_index_operands

    def fun(*args):
        wrap(lambda ids, refs: jc.eval_jaxpr(kernel.jaxpr, *ids, *refs),
             list(args[:n]), list(args[n:]))
        return []
    return kernel.replace(jaxpr=_trace(fun, [v.aval for v in kernel.jaxpr.invars]))


def _wrap_index_map(kernel, mapping, wrap):
    """``mapping`` with index map ``wrap(run, ids, rest)``, ``run`` the original."""
    n = kernel.num_grid_axes

    def fun(*args):
        return wrap(lambda ids, rest: list(jc.eval_jaxpr(mapping.index_map, *ids, *rest)),
                    list(args[:n]), list(args[n:]))
    avals = [v.aval for v in mapping.index_map.invars]
    return dataclasses.replace(mapping, index_map=_trace(fun, avals))


def _static(kernel) -> bool:
    return not kernel.dynamic_grid_axes


def column_major_grid(kernel):
    """The grid axes (batch axes aside) walked first-fastest: the same points,
    the sequential order transposed."""
    b = kernel.num_batch_axes
    if not _static(kernel) or kernel.num_grid_axes - b < 2:
        return kernel

    def flip(ids):
        return ids[:b] + ids[b:][::-1]
    names = kernel.grid_names
    return kernel.replace(
        grid=tuple(flip(list(kernel.grid))),
        grid_names=None if names is None else tuple(flip(list(names))),
        jaxpr=_wrap_body(kernel, lambda run, ids, refs: run(flip(ids), refs)).jaxpr,
        in_mappings=tuple(_wrap_index_map(kernel, m, lambda run, ids, rest: run(flip(ids), rest))
                          for m in kernel.in_mappings),
        out_mappings=tuple(_wrap_index_map(kernel, m, lambda run, ids, rest: run(flip(ids), rest))
                           for m in kernel.out_mappings))


def program_ids_reversed(kernel):
    """The body sees ``n - 1 - i`` for program id ``i``; the blocks stay where they were."""
    b = kernel.num_batch_axes
    if not _static(kernel):
        return kernel

    def wrap(run, ids, refs):
        flipped = [g - 1 - i for g, i in zip(kernel.grid[b:], ids[b:])]
        run(ids[:b] + flipped, refs)
    return _wrap_body(kernel, wrap)


def scratch_reset(kernel):
    """Every scratch buffer zeroed at the start of every grid point."""
    k = len(kernel.scratch_avals)
    if not k:
        return kernel

    def wrap(run, ids, refs):
        for ref in refs[len(refs) - k:]:
            ref[...] = jnp.zeros(ref.shape, ref.dtype)
        run(ids, refs)
    return _wrap_body(kernel, wrap)


def input_writes_dropped(kernel):
    """What the body writes to an input block is undone before the next grid point."""
    start, count = kernel.num_scalar_prefetch, len(kernel.in_mappings)
    if not count:
        return kernel

    def wrap(run, ids, refs):
        inputs = refs[start:start + count]
        saved = [ref[...] for ref in inputs]
        run(ids, refs)
        for ref, value in zip(inputs, saved):
            ref[...] = value
    return _wrap_body(kernel, wrap)


def clamped_edge_blocks(kernel):
    """A ragged edge block is moved back inside the array (its start clamped
    to ``n - block``) instead of running past the end into padding."""
    def clamp(mapping):
        dims = mapping.block_dims
        if any(isinstance(d, pl.BoundedSlice) for d in dims):
            return mapping
        ragged = [k for k, (d, n) in enumerate(zip(dims, mapping.array_shape))
                  if isinstance(d, pl.Blocked) and n % d.block_size and n > d.block_size]
        if not ragged:
            return mapping

        def wrap(run, ids, rest):
            out = run(ids, rest)
            for k in ragged:
                size, n = dims[k].block_size, mapping.array_shape[k]
                out[k] = jnp.minimum(out[k] * size, n - size).astype(jnp.int32)
            return out
        new_dims = tuple(pl.Element(d.block_size) if k in ragged else d for k, d in enumerate(dims))
        return dataclasses.replace(_wrap_index_map(kernel, mapping, wrap), block_dims=new_dims)
    if not _static(kernel):
        return kernel
    return kernel.replace(in_mappings=tuple(map(clamp, kernel.in_mappings)),
                          out_mappings=tuple(map(clamp, kernel.out_mappings)))


def _map_element_dims(kernel, change):
    """Every mapping with its Element dims replaced by ``change(dim)``."""
    def remap(m):
        dims = tuple(change(d) if isinstance(d, pl.Element) else d for d in m.block_dims)
        return m if dims == m.block_dims else dataclasses.replace(m, block_dims=dims)
    return kernel.replace(in_mappings=tuple(map(remap, kernel.in_mappings)),
                          out_mappings=tuple(map(remap, kernel.out_mappings)))


def element_padding_at_end(kernel):
    """``pl.Element`` padding applied after the array only: the same padded
    length, but offsets count from the array's start, not the padding's."""
    return _map_element_dims(kernel, lambda d: pl.Element(
        d.block_size, (0, d.padding[0] + d.padding[1])))


def element_padding_swapped(kernel):
    """``pl.Element`` padding ``(lo, hi)`` read as ``(hi, lo)``."""
    return _map_element_dims(kernel, lambda d: pl.Element(d.block_size, d.padding[::-1]))


def element_offsets_aligned(kernel):
    """``pl.Element`` offsets rounded down to a multiple of 8 (as a backend
    that only moves aligned tiles might)."""
    def align(mapping):
        element = [k for k, d in enumerate(mapping.block_dims) if isinstance(d, pl.Element)]
        if not element:
            return mapping

        def wrap(run, ids, rest):
            out = run(ids, rest)
            for k in element:
                out[k] = (out[k] // 8 * 8).astype(jnp.int32)
            return out
        return _wrap_index_map(kernel, mapping, wrap)
    return kernel.replace(in_mappings=tuple(map(align, kernel.in_mappings)),
                          out_mappings=tuple(map(align, kernel.out_mappings)))


def last_grid_step_dropped(kernel):
    """The last grid axis runs one point short (an off-by-one in a launch bound)."""
    if not _static(kernel) or kernel.num_grid_axes <= kernel.num_batch_axes \
            or kernel.grid[-1] < 2:
        return kernel
    return kernel.replace(grid=(*kernel.grid[:-1], kernel.grid[-1] - 1))


def aliases_ignored(kernel):
    """input_output_aliases dropped: aliased outputs start empty."""
    return kernel.replace(input_output_aliases=())


def _through_float32(x):
    return x.astype(jnp.float32).astype(x.dtype) if x.dtype == jnp.float64 else x


@dataclasses.dataclass(frozen=True)
class Fault:
    kernel: object = None          # KernelIR -> KernelIR
    inputs: object = None          # list of arrays -> list of arrays
    outputs: object = None         # (kernel, list of arrays) -> list of arrays


def _reverse_alike(kernel, outs):
    # Only where the types agree: the swap must be silent, not a type error.
    avals = {(tuple(m.array_shape), str(m.dtype)) for m in kernel.out_mappings}
    return outs[::-1] if len(outs) > 1 and len(avals) == 1 else outs


FAULTS = {
    "none": Fault(),
    "aliases_ignored": Fault(kernel=aliases_ignored),
    "float64_as_float32": Fault(inputs=lambda xs: [_through_float32(x) for x in xs],
                                outputs=lambda k, outs: [_through_float32(o) for o in outs]),
    "column_major_grid": Fault(kernel=column_major_grid),
    "reversed_outputs": Fault(outputs=_reverse_alike),
    "clamped_edge_blocks": Fault(kernel=clamped_edge_blocks),
    "scratch_reset": Fault(kernel=scratch_reset),
    "program_ids_reversed": Fault(kernel=program_ids_reversed),
    "input_writes_dropped": Fault(kernel=input_writes_dropped),
    "element_padding_at_end": Fault(kernel=element_padding_at_end),
    "element_padding_swapped": Fault(kernel=element_padding_swapped),
    "element_offsets_aligned": Fault(kernel=element_offsets_aligned),
    "last_grid_step_dropped": Fault(kernel=last_grid_step_dropped),
}


# --- the backends ----------------------------------------------------------------

class _Capture(backend_api.LoweringContext):
    """Hands back the function the interpreter would lower, instead of lowering it."""

    def lower_fun(self, fun, *args):
        return fun


def _params_type(name):
    cls = dataclasses.make_dataclass(f"{name}_params", [], bases=(pl.CompilerParams,),
                                     frozen=True, namespace={"BACKEND": name})
    cls.__module__ = MODULE
    return cls


PARAMS = {f: _params_type(f"mutant_{f}") for f in FAULTS}


class MutantBackend(backend_api.Backend):
    api_version = backend_api.API_VERSION
    version = "0.0.1"
    platforms = ("cpu",)
    capabilities = InterpreterBackend.capabilities

    def __init__(self, fault: str):
        self.name = f"mutant_{fault}"
        self.fault = FAULTS[fault]
        self.compiler_params_type = PARAMS[fault]

    def accepts_foreign_primitive(self, prim):
        return backend_api.interpretable(prim)

    def lower(self, kernel, ctx, *args):
        fault = self.fault
        kernel = kernel.replace(compiler_params=None)
        if fault.kernel is not None:
            kernel = fault.kernel(kernel)
        capture = _Capture(ctx.mlir_ctx, ctx.platform, ctx.interpret_params)
        run = pl.get_backend("interpret").lower(kernel, capture, *args)

        def faulty(*xs):
            xs = fault.inputs(list(xs)) if fault.inputs else list(xs)
            outs = list(run(*xs))
            return fault.outputs(kernel, outs) if fault.outputs else outs
        return ctx.lower_fun(faulty, *args)


class _Plugin:
    def __init__(self, fault):
        self.fault = fault

    @backend_api.hookimpl
    def pallas_frontend_backend(self):
        return MutantBackend(self.fault)


for _fault in FAULTS:
    globals()[f"plugin_{_fault}"] = _Plugin(_fault)


def entry_points_text() -> str:
    """entry_points.txt of a distribution that installs every mutant."""
    lines = ["[pallas_frontend.backends]"]
    lines += [f"mutant_{f} = {MODULE}:plugin_{f}" for f in FAULTS]
    lines.append("[pallas_frontend.backend_info]")
    for f in FAULTS:
        lines += [f"mutant_{f}.platforms.cpu = {MODULE}", f"mutant_{f}.priority.0 = {MODULE}"]
    return "\n".join(lines) + "\n"


# --- running the suite against them ---------------------------------------------

class _Outcomes:
    """A pytest plugin that records each test's outcome."""

    def __init__(self):
        self.failed, self.passed, self.skipped = [], 0, 0

    def pytest_runtest_logreport(self, report):
        if report.failed:
            self.failed.append(f"{report.nodeid.split('::')[-1]} ({report.when})")
        elif report.when == "call" and report.passed:
            self.passed += 1
        elif report.skipped:
            self.skipped += 1


def run_suite(names, pytest_args=()) -> dict:
    import pytest
    results = {}
    for name in names:
        outcomes = _Outcomes()
        code = pytest.main(["-q", "-p", "no:cacheprovider", "--pyargs", "pallas_frontend.testing",
                            f"--pallas-backend={name}", *pytest_args], plugins=[outcomes])
        results[name] = {"exit": int(code), "failed": outcomes.failed,
                         "passed": outcomes.passed, "skipped": outcomes.skipped}
    return results


if __name__ == "__main__":
    argv = sys.argv[1:]
    cut = argv.index("--") if "--" in argv else len(argv)
    out_path, names = argv[0], argv[1:cut]
    found = run_suite(names, argv[cut + 1:])
    with open(out_path, "w") as f:
        json.dump(found, f, indent=1)
