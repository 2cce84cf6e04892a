"""The effect an interpreted launch carries when its interpreter runs the
kernel through ordered host callbacks (JAX's TPU and Mosaic GPU interpreters).

To the user such a launch is pure: its callbacks only simulate the chip's
memory. Declared as JAX's own ``OrderedIOEffect``, JAX refuses it where it
must assume the callbacks are user side effects: ``jax.vmap`` of a
``while_loop`` or of a ``cond`` around the kernel, and ``jax.grad`` of a
``jax.checkpoint`` around it. The primitive declares this effect instead:
ordered (launches keep their order, so the interpreters' shared state is never
used by two launches at once), allowed in every transformation. Lowering maps
its token onto the ``OrderedIOEffect`` token the interpreter's callbacks use.
"""

from __future__ import annotations

import functools

from pallas_frontend import _jax_compat as jc


class InterpretedLaunch(jc.core.Effect):
    """An interpreted kernel launch: ordered host callbacks, no user-visible effect."""

    def __str__(self):
        return "InterpretedLaunch"

    __repr__ = __str__


interpreted_launch = InterpretedLaunch()
jc.register_pure_ordered_effect(InterpretedLaunch)


def launch_effects(backend_effects) -> set:
    """A backend's ``call_effects`` with its interpreter's host-callback IO
    effects folded into ``interpreted_launch``; other effects are kept."""
    effs = set(backend_effects)
    if effs & set(jc.io_callback_effects):
        effs -= set(jc.io_callback_effects)
        effs.add(interpreted_launch)
    return effs


def with_callback_tokens(rule):
    """Wraps a lowering rule ``rule(ctx, *args, **params)``: the token JAX
    threads for ``interpreted_launch`` is handed to the rule as the
    ``OrderedIOEffect`` token, and the rule's output token handed back."""
    @functools.wraps(rule)
    def lower(ctx, *args, **params):
        if interpreted_launch not in ctx.tokens_in.effects():
            return rule(ctx, *args, **params)
        token = ctx.tokens_in.get(interpreted_launch)
        others = {e: t for e, t in ctx.tokens_in.items() if e is not interpreted_launch}
        inner = ctx.replace(tokens_in=jc.TokenSet({**others, jc.ordered_io_effect: token}),
                            tokens_out=None)
        outs = rule(inner, *args, **params)
        if inner.tokens_out is not None:
            out = dict(inner.tokens_out.items())
            token = out.pop(jc.ordered_io_effect, token)
        else:
            out = others
        ctx.set_tokens_out(jc.TokenSet({**out, interpreted_launch: token}))
        return outs
    return lower


def refuse_export_of_callbacks(rule):
    """Wraps the per-platform lowering rule: under ``jax.export``, a kernel
    whose lowering left Python host callbacks in the module (an interpreter
    that runs it through callbacks, or the kernel's debug prints) is refused
    naming the kernel, the cause and what exports, where JAX says only
    'serialization of host_callbacks is not yet implemented'."""
    @functools.wraps(rule)
    def lower(ctx, *args, platform, kernel, interpret, backend, **params):
        mc = ctx.module_context
        before = jc.host_callback_count(mc) if jc.lowering_for_export(mc) else None
        outs = rule(ctx, *args, platform=platform, kernel=kernel, interpret=interpret,
                    backend=backend, **params)
        if before is not None and jc.host_callback_count(mc) > before:
            raise NotImplementedError(_export_refusal(platform, kernel, interpret, backend))
        return outs
    return lower


def _export_refusal(platform, kernel, interpret, backend) -> str:
    from pallas_frontend import registry
    b = registry.select_backend(platform=platform, interpret=interpret,
                                compiler_params=kernel.compiler_params, backend=backend)
    where = f"jax.export cannot serialize the pallas_call kernel '{kernel.name}' ({kernel.source})"
    if b.name == registry.INTERPRETER:
        return (f"{where}: its pl.debug_print / debug checks run as Python host callbacks, "
                "which an exported program cannot carry. Export the kernel without them "
                "(remove the prints; pl.enable_debug_checks(False)).")
    from pallas_frontend.backend_base import public_class_name
    hw = [p for p in b.platforms if p != platform] or list(b.platforms)
    params = (f"compiler_params={public_class_name(b.compiler_params_type)}(...)"
              if b.compiler_params_type is not None else "this backend's compiler_params")
    return (f"{where} for platform '{platform}': backend '{b.name}' runs it here in its "
            "interpreter, through Python host callbacks, which an exported program cannot "
            f"carry. Export what the hardware runs instead ({params} and "
            f"jax.export.export(..., platforms={hw!r})), or pass interpret=True: the built-in "
            "interpreter lowers the kernel to plain XLA, which exports and runs anywhere.")
