"""What XLA on this machine's CPU does with 16-bit floats where the processor decides.

XLA compiles for the host's instruction set, and three of its 16-bit float results
depend on it (measured on jaxlib 0.12; ``docs/contributing.md`` says how to force
each path on one machine):

- float16 ``max``/``min`` (and so ``clamp``) with a NaN operand. With AVX512-FP16
  (Intel Sapphire Rapids and later) XLA computes float16 natively and a NaN operand
  comes out as it went in (the first NaN; a second operand's NaN with its sign ORed,
  for min, or ANDed, for max, with the first's). Without it (AMD EPYC, AVX2
  processors) float16 is computed in float32 and any NaN result is the quiet NaN
  0x7E00.
- float16 ``x * y + z``: fused into one float16 multiply-add with AVX512-FP16,
  rounded after the multiply and after the add without it.
- bfloat16 ``max``/``min``: with AVX512-BF16 (Cooper Lake, Sapphire Rapids, AMD
  Zen 4) a NaN operand gives the quiet NaN 0x7FC0 and a denormal operand is kept;
  without it they are computed as float32 max/min are (the NaN operand kept as for
  float16 above, denormals read as zero) and narrowed (0x7FC0 / 0xFFC0, ±0); JAX
  0.12.1's XLA computes them as with AVX512-BF16 there too (measured with
  ``--xla_cpu_max_isa=AVX2``), and its float16 ``polynomial`` is fused on every host.

These are XLA's results for arrays of two or more elements; a one-element array is
computed by other code (its NaN keeps its sign on every processor).

Rather than read processor flags (and repeat how ``XLA_FLAGS=--xla_cpu_max_isa``
filters them), :func:`xla_cpu_floats` asks XLA: one small jitted function on the
CPU device, once per process. Triton's interpreter then computes what XLA computes
here (``float_edges.extremum``, the float16 ``polynomial``); code for a GPU never
depends on the host.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class XlaCpuFloats:
    """How XLA on this host computes what the processor decides (see the module)."""
    float16_nan_kept: bool = True        # float16 max/min return the NaN operand (else 0x7E00)
    float16_fused: bool = True           # float16 x * y + z rounded once
    bfloat16_nan_kept: bool = False      # bfloat16 max/min keep the NaN's sign (else 0x7FC0)
    bfloat16_denormals_read_as_zero: bool = False   # in bfloat16 max/min


# The results of the processor that had all three until this module existed (Intel
# Sapphire Rapids); used where there is no CPU device to ask.
AVX512_FP16_HOST = XlaCpuFloats(True, True, False, False)
AVX2_HOST = XlaCpuFloats(False, False, True, True)

# Probe operands (16 lanes: XLA's vector code, not its one-element code).
# Lane 0: max(-NaN, 1). Lane 1: (1 + 2**-10) * 256.75 - 257 is 3 * 2**-12 exactly
# when fused; the product rounds to 257 in float16, so 0.0 when not. Lane 2: bfloat16
# max(2**-133, 1) with the second operand -1: the denormal, or 0 where read as zero.
_N = 16


def _operands():
    a = np.full(_N, 1.0, np.float32)
    b = np.full(_N, 1.0, np.float32)
    c = np.zeros(_N, np.float32)
    a[0] = -np.nan
    a[1], b[1], c[1] = 1 + 2.0 ** -10, 256.75, -257.0
    a[2], b[2] = 2.0 ** -133, -1.0
    return a, b, c


@functools.cache
def xla_cpu_floats() -> XlaCpuFloats:
    """XLA's answers on this process's CPU device (``AVX512_FP16_HOST`` without one)."""
    import jax
    import jax.numpy as jnp
    try:
        cpu = jax.devices("cpu")[0]
    except RuntimeError:
        return AVX512_FP16_HOST

    def probe(a16, b16, c16, a_bf, b_bf):
        return jnp.maximum(a16, b16), a16 * b16 + c16, jnp.maximum(a_bf, b_bf)

    a, b, c = _operands()
    # evaluated now even when asked while a kernel is traced or lowered
    with jax.ensure_compile_time_eval():
        args = [jax.device_put(v.astype(np.float16), cpu) for v in (a, b, c)]
        args += [jax.device_put(jnp.asarray(v, jnp.float32).astype(jnp.bfloat16), cpu)
                 for v in (a, b)]
        m16, fma16, mbf = (np.asarray(r) for r in jax.jit(probe)(*args))
    return XlaCpuFloats(
        float16_nan_kept=bool(m16.view(np.uint16)[0] == 0xFE00),
        float16_fused=bool(fma16[1] != 0),
        bfloat16_nan_kept=bool(mbf.view(np.uint16)[0] == 0xFFC0),
        bfloat16_denormals_read_as_zero=bool(mbf.view(np.uint16)[2] == 0))


def for_target(target: str) -> XlaCpuFloats:
    """The rules generated code follows: this host's XLA under Triton's interpreter
    (``target == "interpret"``), else the defaults (code for a GPU is host-free)."""
    return xla_cpu_floats() if target == "interpret" else XlaCpuFloats()
