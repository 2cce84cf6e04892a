"""Matmuls in portable kernels: ``jnp.dot`` of two blocks read whole from
SMEM becomes a WGMMA (``plgpu.wgmma`` into a scoped register accumulator)
where its 64-row tiles fit (``dot_paths.py``); when compiling, the rest that
``mma.sync`` tiles goes to ``mma_dot.py``. Other matmuls are left to JAX
(fine in interpret mode; ``check.py`` refuses them before compiling)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from pallas_mgpu import dot_paths, evaluate, mma_dot

WGMMA_DTYPES = (np.dtype(jnp.float16), np.dtype(jnp.bfloat16))
_state = {"interpreting": False}


def set_interpreting(flag: bool) -> None:
    _state["interpreting"] = flag


def _wgmma_operands(eqn, invals):
    """(a_ref, b_ref) as WGMMA takes them (b as (k, n)), or None."""
    (lc, rc), (lb, rb) = eqn.params["dimension_numbers"]
    a, b = (evaluate.ref_read_whole(v) for v in invals)
    if a is None or b is None or lb or rb or a.ndim != 2 or b.ndim != 2:
        return None
    if tuple(lc) == (0,):
        a = a.T
    if tuple(rc) == (1,):
        b = b.T
    m, n = a.shape[0], b.shape[1]
    if m % 64 or n % 8:
        return None
    return a, b


def _dot_general(eqn, invals):
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import mosaic_gpu as plgpu
    out = eqn.outvars[0].aval
    plan = dot_paths.plan_eqn(eqn)
    # In interpret mode float32 stays an exact float32 dot (WGMMA would be tf32),
    # and JAX's GPU interpreter has no mma.sync.
    use_wgmma = plan.path == "wgmma" and (plan.dtype != "float32" or not _state["interpreting"])
    operands = _wgmma_operands(eqn, invals) if use_wgmma else None
    if operands is None:
        (lc, rc), (lb, rb) = eqn.params["dimension_numbers"]
        if (not _state["interpreting"] and plan.path is not None and tuple(lc) == (1,)
                and dot_paths.mma_fits(plan.m, plan.n, plan.k)):
            return mma_dot.dot(invals, plan, out.dtype, rhs_transposed=tuple(rc) == (1,))
        invals = [v.force() if isinstance(v, evaluate.Deferred) else v for v in invals]
        return eqn.primitive.bind(*invals, **eqn.params)
    a_ref, b_ref = operands
    acc_dtype = jnp.int32 if jnp.issubdtype(out.dtype, jnp.integer) else jnp.float32

    def scope(acc):
        plgpu.wgmma(acc, a_ref, b_ref)
        return acc[...]
    result = pl.run_scoped(scope, plgpu.ACC((a_ref.shape[0], b_ref.shape[1]), acc_dtype))
    return result.astype(out.dtype) if result.dtype != out.dtype else result


evaluate.register_rule(lax.dot_general_p, _dot_general)
del jax
