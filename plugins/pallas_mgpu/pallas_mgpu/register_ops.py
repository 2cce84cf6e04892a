"""Register-level matrix operations of JAX 0.12's ``plgpu`` beyond WGMMA on
SMEM: ``mma`` (Ampere-style synchronous MMA on arrays),
``wgmma_accumulator_load`` (read an ``ACC`` after waiting for WGMMAs), and
the (deprecated in JAX) ``transpose_ref``. Each records itself as an
``mgpu_op`` equation and is replayed with JAX's function of the same name.
"""

from __future__ import annotations

import jax

from pallas_mgpu import ops


def mma(acc, a, b, /):
    """``acc + a @ b`` on arrays in registers (synchronous MMA instructions)."""
    shapes = [tuple(jax.typeof(x).shape) for x in (acc, a, b)]
    if any(len(s) != 2 for s in shapes):
        raise ValueError(f"plgpu.mma: acc, a and b must be 2-D, got shapes {shapes}.")
    (m, n), (m2, k), (k2, n2) = shapes
    if (m, n, k) != (m2, n2, k2):
        raise ValueError(f"plgpu.mma: shapes acc {shapes[0]}, a {shapes[1]}, b {shapes[2]} do "
                         "not form acc (M, N) + a (M, K) @ b (K, N).")
    return ops.bind("mma", acc, a, b, out_avals=(ops.aval_of(jax.typeof(acc)),))[0]


def wgmma_accumulator_load(acc, *, wait_n: int | None = 0):
    """The value of the accumulator Ref ``acc`` (an ``ACC``), after waiting
    until at most ``wait_n`` WGMMAs are in flight (no wait if None)."""
    from pallas_mgpu.memory import WGMMAAccumulatorRef
    if wait_n is not None and wait_n < 0:
        raise ValueError(
            f"plgpu.wgmma_accumulator_load: wait_n must be >= 0 or None, got {wait_n}.")
    space = getattr(jax.typeof(acc), "memory_space", None) if ops._is_ref(acc) else None
    if not isinstance(space, WGMMAAccumulatorRef):
        raise TypeError("plgpu.wgmma_accumulator_load: acc must be a WGMMA accumulator Ref "
                        f"(a plgpu.ACC scratch buffer), got {acc!r}.")
    return ops.bind("wgmma_accumulator_load", acc, wait_n=None if wait_n is None else int(wait_n),
                    out_avals=(ops.aval_of(jax.typeof(acc)),))[0]


def transpose_ref(ref, permutation: tuple[int, ...]):
    """``ref`` seen with its dims permuted (same as ``ref.transpose(permutation)``)."""
    from pallas_mgpu.memory import TMEM
    space = getattr(jax.typeof(ref), "memory_space", None) if ops._is_ref(ref) else \
        getattr(ref, "memory_space", None)
    if space is TMEM or getattr(space, "memory_space", None) is TMEM:
        raise ValueError("plgpu.transpose_ref: a TMEM Ref cannot be transposed.")
    return ref.transpose(tuple(int(p) for p in permutation))


