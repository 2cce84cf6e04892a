"""One-line jaxpr text for kernel primitives whose generic form (every param,
pytree defs included) hides what they do, in JAX's own notation: e.g.
``semaphore_signal a[...] 1:i32[] {x: (b, c)}`` (the semaphore, the increment,
the target device). Code written for JAX reads these lines (JAX's Pallas tests
match them)."""

from __future__ import annotations

from collections.abc import Callable

import jax

from pallas_frontend import _jax_compat as jc


def register_pretty_printer(prim, pieces: Callable) -> None:
    """Prints ``prim``'s equations as ``pieces(eqn, show)`` joined: strs as they
    are, and ``show(x)`` of an operand, or of a Ref view ``(Ref, transforms)``
    (``ref[...]`` where there are none), as JAX prints them. ``pieces`` returning
    None keeps JAX's generic form."""
    def rule(eqn, context, settings):
        def show(x):
            if isinstance(x, tuple):
                return jc.state_primitives.pp_ref_transforms(context, *x)
            return jc.core.pp_var(x, context)
        parts = pieces(eqn, show)
        if parts is None:
            return jc.core._pp_eqn(eqn, context, settings)
        return jc.pp.concat([jc.pp.text(p) if isinstance(p, str) else p for p in parts])
    jc.core.pp_eqn_rules[prim] = rule


def show_tree(tree, show) -> list:
    """A pytree of operands (a device id: a dict, tuple, list or one value) as JAX
    writes one: ``{x: (b, c)}``."""
    if isinstance(tree, dict):
        items = [[f"{k}: ", *show_tree(v, show)] for k, v in tree.items()]
        return ["{", *_joined(items), "}"]
    if isinstance(tree, (tuple, list)):
        items = [show_tree(v, show) for v in tree]
        return ["(" if isinstance(tree, tuple) else "[", *_joined(items),
                ")" if isinstance(tree, tuple) else "]"]
    return [show(tree)]


def _joined(items: list) -> list:
    out = []
    for k, item in enumerate(items):
        out += ([", "] if k else []) + item
    return out


def _semaphore(ref, idx, show) -> list:
    """``sem[...]`` or, for one semaphore of an array, ``sems[i,j]``."""
    if not idx:
        return [show((ref, ()))]
    return [show(ref), "[", *_joined([[show(i)] for i in idx]), "]"]


def _signal_pieces(eqn, show):
    tree = eqn.params["device_id_tree"]
    n_dev = tree.num_leaves if tree is not None else 0
    ref, *rest = eqn.invars
    idx, inc, dev = rest[:len(rest) - n_dev - 1], rest[len(rest) - n_dev - 1], rest[len(rest) - n_dev:]
    parts = ["semaphore_signal ", *_semaphore(ref, idx, show), " ", show(inc)]
    if n_dev:
        parts += [" ", *show_tree(jax.tree.unflatten(tree, dev), show)]
    return parts


def _wait_pieces(eqn, show):
    ref, *idx, value = eqn.invars
    return ["semaphore_wait[dec] " if eqn.params["decrement"] else "semaphore_wait ",
            *_semaphore(ref, idx, show), " ", show(value)]


def register_frontend_printers(signal_p, wait_p) -> None:
    register_pretty_printer(signal_p, _signal_pieces)
    register_pretty_printer(wait_p, _wait_pieces)
