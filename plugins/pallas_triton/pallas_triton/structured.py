"""Emitters that write statements: Ref reads/writes, loops, branches, inlined calls."""

from __future__ import annotations

from pallas_triton.refs import RegisterRef, resolve_indexer, unflatten_transforms
from pallas_triton.emitters import register, tl_dtype
from pallas_triton.errors import unsupported
from pallas_triton.schedule import whole_access


def _ref_and_indexer(w, eqn, ins, n_leading):
    ref = ins[0]
    transforms = unflatten_transforms(eqn, eqn.invars[n_leading:])
    return ref, resolve_indexer(w, transforms)


def _register_ref(eqn, ins):
    """The RegisterRef this access reads or writes whole, or None for a Ref in memory."""
    if not isinstance(ins[0], RegisterRef):
        return None
    if not whole_access(eqn):       # check() refuses these first; this guards codegen
        raise unsupported(f"sliced access to {ins[0].label}, which lives in registers")
    return ins[0]


def _as_block(reg: RegisterRef, value: str) -> str:
    """``value`` with the register's exact type, so loops and branches can carry it."""
    if value.isidentifier():
        return f"{value}.to({tl_dtype(reg.dtype)})"
    from pallas_triton.padding import shape
    return f"tl.full({shape(reg.shape)}, {value}, {tl_dtype(reg.dtype)})"


@register("get")
def _get(w, eqn, ins):
    reg = _register_ref(eqn, ins)
    if reg is not None:
        copy = w.fresh("r")          # a snapshot: later writes rebind the register's name
        w.line(f"{copy} = {reg.name}")
        return [copy]
    # integer-array (gather) indices are fine for reads, as in JAX's Triton lowering
    w.allow_gather, allowed = True, w.allow_gather
    try:
        ref, indexer = _ref_and_indexer(w, eqn, ins, 1)
    finally:
        w.allow_gather = allowed
    return [w.load(ref, indexer)]


def _is_used(w, var) -> bool:
    return var in w.used_vars


@register("swap")
def _swap(w, eqn, ins):
    reg = _register_ref(eqn, ins)
    if reg is not None:
        old = None
        if _is_used(w, eqn.outvars[0]):
            old = w.fresh("old")
            w.line(f"{old} = {reg.name}")
        w.line(f"{reg.name} = {_as_block(reg, ins[1])}")
        return [old or "None"]
    ref, indexer = _ref_and_indexer(w, eqn, ins, 2)
    old = None
    if _is_used(w, eqn.outvars[0]):
        old = w.bind(w.load(ref, indexer), "old")
    w.store(ref, indexer, ins[1], value_dtype=eqn.invars[1].aval.dtype)
    return [old or "None"]


@register("addupdate")
def _addupdate(w, eqn, ins):
    reg = _register_ref(eqn, ins)
    if reg is not None:
        total = w.bind(f"{reg.name} + {ins[1]}")
        w.line(f"{reg.name} = {_as_block(reg, total)}")
        return []
    ref, indexer = _ref_and_indexer(w, eqn, ins, 2)
    old = w.bind(w.load(ref, indexer), "old")
    total = f"{old} + {ins[1]}"
    if w.target == "interpret" and ref.dtype.name == "bfloat16":   # see widening.py
        from pallas_triton.widening import cast, to_float32
        f32 = f"{to_float32(w, old, ref.dtype)} + {to_float32(w, ins[1], ref.dtype)}"
        total = w.bind(cast(w, f32, "float32", ref.dtype))
    w.store(ref, indexer, total)
    return []


# --- control flow -----------------------------------------------------------------------

def _assign(w, names, values):
    if names:
        w.line(f"{', '.join(names)} = {', '.join(values)}")


def _scan_counts(p):
    """(num consts, num carry): named params before jax 0.12, flat trees (consts, carry, xs) after."""
    if "num_consts" in p:
        return p["num_consts"], p["num_carry"]
    ft = p["ft_in"]
    consts, carry, _ = ft.unpack() if hasattr(ft, "unpack") else ft
    return _count(consts), _count(carry)


def _count(tree) -> int:
    return len(tree) if isinstance(tree, (tuple, list)) else len(list(tree))


@register("scan")
def _scan(w, eqn, ins):
    p = eqn.params
    n_consts, n_carry = _scan_counts(p)
    consts, init, xs = ins[:n_consts], ins[n_consts:n_consts + n_carry], ins[n_consts + n_carry:]
    if xs or len(eqn.outvars) != n_carry:
        raise unsupported("scan over arrays or with stacked outputs (only fori_loop-style scans)")
    carry = [w.fresh("c") for _ in init]
    _assign(w, carry, init)
    it = w.fresh("it")
    w.line(f"for {it} in range({p['length']}):")
    w.depth += 1
    outs = w.emit_jaxpr(p["jaxpr"], consts + carry)
    _assign(w, carry, outs)
    w.depth -= 1
    return carry


@register("while")
def _while(w, eqn, ins):
    p = eqn.params
    nc, nb = p["cond_nconsts"], p["body_nconsts"]
    cond_consts, body_consts, init = ins[:nc], ins[nc:nc + nb], ins[nc + nb:]
    carry = [w.fresh("c") for _ in init]
    _assign(w, carry, init)
    pred = w.fresh("go")
    (first,) = w.emit_jaxpr(p["cond_jaxpr"], cond_consts + carry)
    w.line(f"{pred} = {first}")
    w.line(f"while {pred}:")
    w.depth += 1
    outs = w.emit_jaxpr(p["body_jaxpr"], body_consts + carry)
    _assign(w, carry, outs)
    (again,) = w.emit_jaxpr(p["cond_jaxpr"], cond_consts + carry)
    w.line(f"{pred} = {again}")
    w.depth -= 1
    return carry


@register("cond")
def _cond(w, eqn, ins):
    branches = eqn.params["branches"]
    index, ops = ins[0], ins[1:]
    results = [w.fresh("r") for _ in eqn.outvars]
    for k in range(len(branches) - 1, -1, -1):
        if k == len(branches) - 1 and len(branches) > 1:
            w.line(f"if {index} == {k}:" if len(branches) > 2 else f"if {index}:")
        elif k > 0:
            w.line(f"elif {index} == {k}:")
        else:
            w.line("else:" if len(branches) > 1 else "if True:")
        w.depth += 1
        outs = w.emit_jaxpr(branches[k], list(ops))
        _assign(w, results, outs)
        if not results:
            w.line("pass")
        w.depth -= 1
    return results


@register("pjit", "jit", "closed_call", "core_call", "remat", "remat2", "checkpoint",
          "eval_jaxpr")
def _inline(w, eqn, ins):
    sub = eqn.params.get("jaxpr") or eqn.params.get("call_jaxpr")
    return w.emit_jaxpr(sub, list(ins))


@register("custom_jvp_call", "custom_vjp_call", "custom_vjp_call_jaxpr")
def _inline_custom(w, eqn, ins):
    sub = eqn.params.get("call_jaxpr") or eqn.params.get("fun_jaxpr")
    return w.emit_jaxpr(sub, list(ins))


# --- run_scoped temporaries --------------------------------------------------------

@register("empty_ref")
def _empty_ref(w, eqn, ins):
    """A ``pl.run_scoped`` buffer: a tensor in registers, like scratch (whole reads and
    writes only; a sliced access is refused when the kernel is checked)."""
    from pallas_triton.codegen import padding_block
    from pallas_frontend.backend_api import source_line
    aval = eqn.outvars[0].aval
    inner = getattr(aval, "inner_aval", aval)
    where = source_line(eqn) or w.kernel.source
    reg = RegisterRef(w.fresh("scoped"), tuple(inner.shape), inner.dtype,
                      f"the run_scoped buffer made at {where}")
    w.line(f"{reg.name} = {padding_block(reg.shape, reg.dtype)}")
    return [reg]


@register("free_ref")
def _free_ref(w, eqn, ins):
    return []


# --- printing -------------------------------------------------------------------------

@register("debug_print")
def _debug_print(w, eqn, ins):
    """``tl.device_print``: Triton prints each value per program and element after the
    format's text (its ``{}`` fields removed), as JAX's Triton lowering does."""
    from pallas_triton.codegen import printable
    text = eqn.params["fmt"].replace("{}", "").replace("{{", "{").replace("}}", "}").strip()
    prefix = repr(printable(text or "debug_print"))   # user text enters only as a repr
    w.line(f"tl.device_print({', '.join([prefix, *ins])})")
    return []
