"""Pinned buffers (JAX's state primitive ``pin(x)``) as kernel operands.

A pinned buffer is updated in place: a kernel that takes one must alias it
to an output, and that output is the pinned buffer again (its type, not a
plain array), for ``unpin`` to take back, as in JAX's ``pallas_call``.
"""

from __future__ import annotations

import jax

from pallas_frontend import _jax_compat as jc
from pallas_frontend.backend_api import KernelIR


def any_pinned(args) -> bool:
    """Whether any leaf of ``args`` is a pinned buffer."""
    return any(isinstance(jax.typeof(a), jc.AbstractLinVal) for a in jax.tree.leaves(args))


def keep_pinned(kernel: KernelIR, in_avals, out_avals) -> list:
    """``out_avals`` with each output aliased to a pinned input typed as that
    input; raises if a pinned input is not aliased. ``in_avals`` are the call's
    (dynamic grid sizes first, then prefetched scalars and inputs)."""
    n_ops = kernel.num_scalar_prefetch + len(kernel.in_mappings)
    operands = list(in_avals)[len(in_avals) - n_ops:]
    pinned = [i for i, a in enumerate(operands) if isinstance(a, jc.AbstractLinVal)]
    if not pinned:
        return list(out_avals)
    aliases = dict(kernel.input_output_aliases)
    missing = [i for i in pinned if i not in aliases]
    if missing:
        n_pf = kernel.num_scalar_prefetch
        names = ", ".join(f"{i} ({kernel.in_mappings[i - n_pf].origin})" if i >= n_pf
                          else f"{i} (scalar prefetch)" for i in missing)
        raise ValueError(
            f"Kernel {kernel.name_and_src_info}: input pinned buffers without "
            f"input_output_aliases: operand {names}. A pinned buffer is updated in place: "
            f"alias it to an output (input_output_aliases={{{missing[0]}: j}}) and unpin "
            "that output.")
    outs = list(out_avals)
    for i in pinned:
        outs[aliases[i]] = operands[i]
    return outs
