"""A dot with a ``float8_e4m3fn`` operand, as this backend compiles it for a TPU.

Measured on a v5e (libtpu 0.0.42.1, 2026-12-06): Mosaic's dot of bfloat16 and
``float8_e4m3fn`` (either side) reads the float8 operand's NaN as a finite
number, so the result holds finite values where it must hold NaN. XLA's dot,
the interpreters and the same kernel's ``astype`` of that operand give NaN;
JAX's Pallas compiles the same wrong dot. Widening the operand to bfloat16 in
the kernel first is exact (every e4m3fn value, NaN included, is a bfloat16),
kept the NaN on the chip, and gave the native dot's bits everywhere else
(``float8_e5m2`` and ``float8_e4m3b11fnuz`` carry NaN natively: untouched).

Only chips whose MXU has no float8 mode get the widening: there Mosaic widens
in software anyway, so it costs nothing. A chip that multiplies float8 itself
would lose half its rate, and no wrong result has been measured on one.
"""

from __future__ import annotations

import jax.numpy as jnp
from jax import lax

from pallas_tpu import chip_info, interpret_mode

_DROPS_NAN = jnp.dtype(jnp.float8_e4m3fn)


def widens(eqn) -> bool:
    """Whether ``eqn`` is a dot this module rewrites (before knowing the chip)."""
    return eqn.primitive is lax.dot_general_p and any(
        getattr(v.aval, "dtype", None) == _DROPS_NAN for v in eqn.invars)


def _chip_multiplies_float8() -> bool:
    try:
        info = chip_info.get_tpu_info()
    except Exception:      # noqa: BLE001 - no chip known: the exact path is the safe one
        return False
    return getattr(info, "fp8_ops_per_second", 0) > 0


def dot_general(eqn, invals):
    """The replay rule: the dot of ``eqn`` with its e4m3fn operands in bfloat16."""
    if interpret_mode.active() is not None or _chip_multiplies_float8():
        return eqn.primitive.bind(*invals, **eqn.params)
    lhs, rhs = (lax.convert_element_type(x, jnp.bfloat16) if x.dtype == _DROPS_NAN else x
                for x in invals)
    # the result keeps the type the kernel's dot had
    params = dict(eqn.params, preferred_element_type=eqn.outvars[0].aval.dtype)
    return eqn.primitive.bind(lhs, rhs, **params)


def _register():
    from pallas_tpu import evaluate
    evaluate.register_rule(lax.dot_general_p, dot_general, applies=widens)


_register()
