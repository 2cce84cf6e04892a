"""``emit_pipeline_with_async_prefetch``: JAX's pair of a pipeline and a
function that starts the pipeline's first input copies ahead of its kernel.

JAX allocates the input windows and their DMA semaphores outside any kernel
(Refs in the VMEM and semaphore memory of a core mesh) and starts the first
copies in a kernel of its own, left in flight for the pipeline's kernel.
A pallas_frontend kernel takes no Ref that outlives it in VMEM or semaphore
memory (``pl.kernel`` passes a Ref argument through HBM), and JAX's TPU
interpret mode runs none either. So here the prefetch is deferred:
``async_prefetch`` checks its inputs against the specs and returns one
``DeferredPrefetch`` per input; a pipeline given them fetches those first
blocks itself when it starts. The values are JAX's on every path; the
overlap of the first copies with work between the two kernels is lost.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping

import jax

import pallas_frontend as pf
from pallas_tpu import pipeline_schedule
from pallas_tpu.pipeline import emit_pipeline


@jax.tree_util.register_static
@dataclasses.dataclass(frozen=True, eq=False)
class DeferredPrefetch:
    """What ``async_prefetch`` returns for one input: a promise that the
    pipeline of ``owner`` fetches its first ``prefetched_count`` blocks
    itself. It holds no array, so a kernel body may close over it."""
    owner: object
    spec: pf.BlockSpec
    prefetched_count: int


def _is_spec(x) -> bool:
    return isinstance(x, pf.BlockSpec) or x is pf.no_block_spec


def _as_tuple(specs):
    """JAX's normalisation: a list becomes a tuple, one spec a 1-tuple."""
    if isinstance(specs, list):
        return tuple(specs)
    return specs if isinstance(specs, tuple) else (specs,)


def _without_prefetch(spec):
    """``spec`` whose pipeline fetches every block itself (prefetched_count 0)."""
    mode = getattr(spec, "pipeline_mode", None)
    if mode is None or not getattr(mode, "prefetched_count", 0):
        return spec
    return dataclasses.replace(spec, pipeline_mode=dataclasses.replace(mode, prefetched_count=0))


def _check_mesh(mesh) -> None:
    if not isinstance(getattr(mesh, "shape", None), Mapping):
        raise TypeError(
            f"emit_pipeline_with_async_prefetch: mesh must be a core mesh (e.g. "
            f"pltpu.TensorCoreMesh('core')) with a `shape` of axis sizes, got {mesh!r}.")


def emit_pipeline_with_async_prefetch(
        body, *, grid, in_specs=(), out_specs=(), mesh, tiling=None, core_axis=None,
        core_axis_name=None, dimension_semantics=None, trace_scopes: bool = True,
        no_pipelining: bool = False, _explicit_indices: bool = False
) -> tuple[Callable, Callable]:
    """``(pipeline, async_prefetch)``: ``pipeline`` is ``emit_pipeline``'s;
    ``async_prefetch(*inputs)``, called outside the kernel, returns the input
    allocations to pass as ``pipeline(..., allocations=...)``. Inputs whose
    spec has ``pipeline_mode=pl.Buffered(n, prefetched_count=k)`` get their
    first ``k`` blocks fetched when the pipeline starts (see the module doc)."""
    _check_mesh(mesh)
    options = dict(grid=grid, out_specs=out_specs, tiling=tiling, core_axis=core_axis,
                   core_axis_name=core_axis_name, dimension_semantics=dimension_semantics,
                   trace_scopes=trace_scopes, no_pipelining=no_pipelining,
                   _explicit_indices=_explicit_indices)
    # as given: a pipeline run without the prefetch's allocations refuses
    # prefetched specs, as JAX's does
    given = emit_pipeline(body, in_specs=in_specs, **options)
    fetch_all = emit_pipeline(
        body, in_specs=jax.tree.map(_without_prefetch, in_specs, is_leaf=_is_spec), **options)
    owner = object()

    def deferred(allocations) -> bool:
        leaves = [a for a in jax.tree.leaves(
            allocations, is_leaf=lambda a: a is None or isinstance(a, DeferredPrefetch))
            if a is not None]
        ours = [isinstance(a, DeferredPrefetch) for a in leaves]
        if not any(ours):
            return False
        if not all(ours) or any(a.owner is not owner for a in leaves):
            raise ValueError(
                "emit_pipeline_with_async_prefetch: allocations= must be exactly what this "
                "pipeline's async_prefetch returned (output buffers are allocated by the "
                "pipeline); got allocations from another pipeline or mixed with BufferedRefs.")
        return True

    def pipeline(*refs, allocations=None, scratches=None):
        if allocations is not None and deferred(allocations):
            return fetch_all(*refs, scratches=scratches)
        return given(*refs, allocations=allocations, scratches=scratches)

    def async_prefetch(*inputs):
        specs = _as_tuple(in_specs)
        spec_leaves, spec_tree = jax.tree.flatten(specs, is_leaf=_is_spec)
        try:
            input_leaves = spec_tree.flatten_up_to(tuple(inputs))
        except (ValueError, TypeError) as e:
            raise ValueError(
                f"async_prefetch: the inputs must match in_specs ({len(spec_leaves)} "
                f"BlockSpec(s) in {spec_tree}); got {len(inputs)} input(s): {e}") from None
        kept = [(s, x) for s, x in zip(spec_leaves, input_leaves) if s is not pf.no_block_spec]
        for s, x in kept:
            if not hasattr(x, "shape") or not hasattr(x, "dtype"):
                raise TypeError(f"async_prefetch: an input must be an array or a Ref, got {x!r}.")
        # the same checks as the pipeline's own allocations (e.g. prefetched_count
        # within the buffer count), before anything is traced; as in JAX, a block
        # that is the whole operand at every step (trivial windowing) may prefetch
        # more than its buffer count
        pipeline_schedule.make_allocations(
            *[x for _, x in kept], grid=tuple(grid), tiling=tiling,
            in_specs=[s for s, _ in kept])
        out = [None if s is pf.no_block_spec else
               DeferredPrefetch(owner, s, getattr(s.pipeline_mode, "prefetched_count", 0))
               for s in spec_leaves]
        return jax.tree.unflatten(spec_tree, out)

    return pipeline, async_prefetch
