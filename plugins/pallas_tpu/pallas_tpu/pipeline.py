"""``emit_pipeline``: a software pipeline over HBM Refs, inside a kernel.

The user's body is traced *here*, at kernel-trace time, into a jaxpr over
VMEM block Refs; index maps become jaxprs over the pipeline's grid indices.
The kernel jaxpr then holds one ``tpu_emit_pipeline`` equation carrying them,
so the backend rebuilds the pipeline from the KernelIR alone (JAX's
``pltpu.emit_pipeline`` with a body that replays the traced one).
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

import pallas_frontend as pf
from pallas_frontend.backend_api import KernelIR, kernel_primitive

from pallas_frontend import backend_api
from pallas_tpu.memory import VMEM
from pallas_tpu.primitives import OWNER, _effects, _is_ref

emit_pipeline_p = kernel_primitive("tpu_emit_pipeline", owner=OWNER, multiple_results=True)
emit_pipeline_p.def_effectful_abstract_eval(
    lambda *avals, effect_spec, **params: ([], _effects(effect_spec)))


def uses_pipeline(kernel: KernelIR) -> bool:
    return any(e.primitive is emit_pipeline_p for e in kernel.iter_equations())


def _spec_list(specs) -> list:
    if isinstance(specs, pf.BlockSpec):
        return [specs]
    return list(specs)


def _trace_index_map(spec: pf.BlockSpec, n_grid: int):
    def flat(*idx):
        out = spec.index_map(*idx)
        out = out if isinstance(out, (tuple, list)) else (out,)
        return [jnp.asarray(v, jnp.int32) for v in out]
    jaxpr, consts = backend_api.trace_body(
        flat, [jax.core.ShapedArray((), jnp.int32)] * n_grid, traced_for="emit_pipeline index_map")
    if consts:
        raise ValueError("emit_pipeline index maps must be functions of the grid indices only "
                         "(they captured values from the enclosing kernel).")
    return jaxpr


def _block_shape(spec: pf.BlockSpec, ref) -> tuple[int, ...]:
    if spec.block_shape is None:
        return tuple(ref.shape)
    if any(not isinstance(d, (int, np.integer)) for d in spec.block_shape):
        raise NotImplementedError("emit_pipeline block shapes must be ints here "
                                  "(Squeezed/Element/BoundedSlice are not supported yet).")
    return tuple(int(d) for d in spec.block_shape)


def emit_pipeline(body, *, grid: Sequence[int], in_specs=(), out_specs=(),
                  dimension_semantics: Sequence[str] | None = None):
    """Returns ``pipeline(*in_refs, *out_refs)`` that runs ``body(*in_blocks,
    *out_blocks)`` over ``grid``, double-buffering the blocks the BlockSpecs
    select between the given (HBM/ANY) Refs and VMEM."""
    grid = tuple(int(g) for g in grid)
    if any(g <= 0 for g in grid):
        raise ValueError(f"emit_pipeline grid sizes must be positive, got {grid}")
    specs = _spec_list(in_specs) + _spec_list(out_specs)
    n_in = len(_spec_list(in_specs))

    def pipeline(*refs):
        if len(refs) != len(specs):
            raise TypeError(f"emit_pipeline: {len(specs)} BlockSpecs but {len(refs)} Refs given.")
        shapes = [_block_shape(s, r) for s, r in zip(specs, refs)]
        dtypes = [r.dtype for r in refs]
        block_avals = [VMEM(sh, dt) for sh, dt in zip(shapes, dtypes)]
        block_avals = [jax.ref.AbstractRef(jax.core.ShapedArray(b.shape, b.dtype),
                                           memory_space=b.memory_space) for b in block_avals]

        def flat_body(*blocks):
            body(*blocks)
            return []
        body_jaxpr, consts = backend_api.trace_body(flat_body, block_avals,
                                                       traced_for="emit_pipeline body")
        index_maps = tuple(_trace_index_map(s, len(grid)) for s in specs)
        operands = [*refs, *consts]
        effect_spec = tuple((i, "w") for i, x in enumerate(operands) if _is_ref(x))
        emit_pipeline_p.bind(
            *operands, effect_spec=effect_spec, body=body_jaxpr, index_maps=index_maps,
            block_shapes=tuple(shapes), grid=grid, num_inputs=n_in, num_refs=len(refs),
            dimension_semantics=None if dimension_semantics is None else tuple(dimension_semantics))
    return pipeline


def replay_emit_pipeline(eqn, invals):
    """Evaluator rule: the same pipeline through JAX's ``pltpu.emit_pipeline``."""
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    from pallas_tpu import evaluate
    p = eqn.params
    refs, consts = invals[:p["num_refs"]], invals[p["num_refs"]:]

    def index_fn(jaxpr):
        return lambda *idx: tuple(evaluate.eval_jaxpr(jaxpr, (), *idx))
    specs = [pl.BlockSpec(shape, index_fn(im))
             for shape, im in zip(p["block_shapes"], p["index_maps"])]

    def inner(*blocks):
        evaluate.eval_jaxpr(p["body"], (), *consts, *blocks)
    sem = p["dimension_semantics"]
    kwargs = {}
    if sem is not None:
        kwargs["dimension_semantics"] = tuple(
            getattr(pltpu, s.upper()) for s in sem)
    pltpu.emit_pipeline(inner, grid=p["grid"], in_specs=specs[:p["num_inputs"]],
                        out_specs=specs[p["num_inputs"]:], **kwargs)(*refs)
    return []


def _register():
    from pallas_tpu import evaluate
    evaluate.register_rule(emit_pipeline_p, replay_emit_pipeline)


_register()
