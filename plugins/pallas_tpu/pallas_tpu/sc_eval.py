"""The SparseCore CPU model's evaluator: one program's kernel jaxpr, equation
by equation, on concrete NumPy values and ``sc_views.Buf`` memory.

Ref primitives (JAX's get / swap / addupdate, ours' SparseCore and DMA
primitives, scoped allocations) act on buffers; loops and conditionals run
their bodies here (their bodies hold Ref operations); every other primitive
is bound eagerly by JAX on the concrete operands.
"""

from __future__ import annotations

import jax
import numpy as np

from pallas_tpu import sc_host_ops
from pallas_tpu import sc_primitives as scp
from pallas_tpu import sc_vector_ops as scv
from pallas_tpu.sc_views import ATOMIC, Buf, poison, read, rows_moved, write
from pallas_tpu.view_parts import Selection

# a program that never reaches a barrier the others wait at fails them after this
BARRIER_TIMEOUT_S = 60.0
_CALLS = ("pjit", "jit", "closed_call", "core_call", "remat", "checkpoint", "custom_jvp_call",
          "custom_vjp_call", "custom_vjp_call_jaxpr")


def _parts(tree, vals):
    """Unflattens ``vals`` by ``tree``; a view part becomes (Buf, transforms)."""
    return jax.tree.unflatten(tree, list(vals))


def _ref(part):
    """A DMA part as (Buf, transforms); a selection (``pl.select_ref``) as the
    choice its index picks when the copy runs."""
    if isinstance(part, Selection):
        return _ref(part.chosen(int(np.asarray(part.select.idx))))
    if isinstance(part, tuple) and len(part) == 2 and isinstance(part[1], tuple):
        if isinstance(part[0], Selection):
            buf, first = _ref(part[0])
            return buf, (*first, *part[1])
        return part
    return part, ()


class Evaluator:
    """Evaluates jaxprs for one ``sc_interpret.Program``."""

    def __init__(self, prog):
        self.prog = prog

    def eval_jaxpr(self, jaxpr, args, consts=()):
        closed_consts = getattr(jaxpr, "consts", None)
        jaxpr = getattr(jaxpr, "jaxpr", jaxpr)
        env = {}
        if closed_consts is None and not consts and jaxpr.constvars and \
                len(args) == len(jaxpr.constvars) + len(jaxpr.invars):
            # a body traced with explicit consts: JAX 0.10 keeps them as constvars
            # (0.12 as leading invars); either way they come first in ``args``
            consts, args = args[:len(jaxpr.constvars)], args[len(jaxpr.constvars):]
        for v, x in zip(jaxpr.constvars, closed_consts if closed_consts is not None else consts):
            env[v] = x
        for v, x in zip(jaxpr.invars, args):
            env[v] = x

        def get(v):
            return v.val if type(v).__name__ == "Literal" else env[v]
        for eqn in jaxpr.eqns:
            invals = [get(v) for v in eqn.invars]
            outs = self.eqn(eqn, invals)
            if not eqn.primitive.multiple_results:
                outs = [outs]
            for v, x in zip(eqn.outvars, outs):
                env[v] = x
        return [get(v) for v in jaxpr.outvars]

    # --- dispatch -------------------------------------------------------------------

    def eqn(self, eqn, invals):
        prim, params = eqn.primitive, eqn.params
        rule = getattr(self, "_p_" + prim.name, None)
        if rule is not None:
            return rule(invals, **params)
        if prim.name in _CALLS:
            body = params.get("jaxpr", params.get("call_jaxpr", params.get("fun_jaxpr")))
            return self.eval_jaxpr(body, invals)
        fast = sc_host_ops.evaluate(eqn, invals)
        if fast is not None:
            return fast
        if any(isinstance(x, Buf) for x in invals):
            raise NotImplementedError(f"the primitive {prim.name} on a Ref is not modelled by the "
                                      "SparseCore CPU model.")
        if prim in (scv.sort_p, scv.cumop_p) and np.issubdtype(np.asarray(invals[0]).dtype,
                                                               np.floating):
            if np.any(np.isnan(np.asarray(invals[0]))):
                raise ValueError(f"{prim.name}: NaN keys; the SparseCore's NaN order is not "
                                 "documented, so the CPU model refuses them.")
        out = prim.bind(*invals, **params)
        if prim.multiple_results:
            return [np.asarray(o) for o in out]
        return np.asarray(out)

    # --- JAX's Ref primitives -----------------------------------------------------------

    def _transforms(self, tree, leaves):
        return tuple(jax.tree.unflatten(tree, list(leaves))) if tree is not None else ()

    def _p_get(self, invals, tree):
        ref, *leaves = invals
        return read(ref, self._transforms(tree, leaves), self.prog, "ref read")

    def _p_swap(self, invals, tree):
        ref, val, *leaves = invals
        t = self._transforms(tree, leaves)
        old = read(ref, t, self.prog, "ref write")
        write(ref, t, self.prog, val, "ref write")
        return old

    def _p_addupdate(self, invals, tree):
        ref, val, *leaves = invals
        write(ref, self._transforms(tree, leaves), self.prog, val, "ref add", add=True)
        return []

    def _p_empty_ref(self, invals, **params):
        ty = params.get("ty") or params.get("aval")
        inner = getattr(ty, "inner_aval", ty)
        return Buf(poison(inner.shape, inner.dtype), params.get("memory_space"))

    def _p_free_ref(self, invals, **params):
        return []

    def _p_run_scoped(self, invals, jaxpr, **params):
        refs = [Buf(poison(v.aval.inner_aval.shape, v.aval.inner_aval.dtype),
                    getattr(v.aval, "memory_space", None)) for v in jaxpr.invars]
        return self.eval_jaxpr(jaxpr, refs, invals)

    # --- control flow --------------------------------------------------------------------

    def _p_cond(self, invals, branches, **params):
        index, *ops = invals
        return self.eval_jaxpr(branches[int(np.clip(int(index), 0, len(branches) - 1))], ops)

    def _p_while(self, invals, cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts):
        cc, bc = invals[:cond_nconsts], invals[cond_nconsts:cond_nconsts + body_nconsts]
        carry = list(invals[cond_nconsts + body_nconsts:])
        while bool(self.eval_jaxpr(cond_jaxpr, [*cc, *carry])[0]):
            carry = self.eval_jaxpr(body_jaxpr, [*bc, *carry])
        return carry

    def _p_scan(self, invals, jaxpr, length, reverse, **params):
        if "ft_in" in params:    # jax >= 0.12 groups the operands in a flat tree
            consts, carry, xs = (list(g) for g in params["ft_in"].update(invals).unpack())
        else:
            n, c = params["num_consts"], params["num_carry"]
            consts, carry, xs = invals[:n], list(invals[n:n + c]), invals[n + c:]
        num_carry = len(carry)
        ys = []
        for i in (reversed(range(length)) if reverse else range(length)):
            out = self.eval_jaxpr(jaxpr, [*consts, *carry, *(np.asarray(x)[i] for x in xs)])
            carry, y = out[:num_carry], out[num_carry:]
            ys.append(y)
        if reverse:
            ys.reverse()
        outvars = jaxpr.jaxpr.outvars[num_carry:]
        stacked = [np.stack([y[k] for y in ys]) if ys else
                   np.zeros((0, *v.aval.shape), v.aval.dtype) for k, v in enumerate(outvars)]
        return [*carry, *stacked]

    def _p_sc_parallel_loop(self, invals, body, num_consts, unroll, effect_spec):
        lower, upper, step = (int(x) for x in invals[:3])
        consts = invals[3:3 + num_consts]
        carry = list(invals[3 + num_consts:])
        for i in range(lower, upper, step):
            carry = self.eval_jaxpr(body, [*consts, np.int32(i), *carry])
        return carry

    def _p_tpu_emit_pipeline(self, invals, schedule=None, num_schedule_consts=0, **params):
        # a SparseCore kernel's pipeline carries ours' traced schedule (pipeline.py);
        # its operands are the equation's last ones
        if schedule is None:
            raise NotImplementedError(
                "The SparseCore CPU model runs an emit_pipeline traced inside a kernel whose "
                "blocks divide its operands (no ragged edge) and whose BoundedSlice dims view "
                "operands already in the blocks' memory; this one was not.")
        return self.eval_jaxpr(schedule, list(invals[len(invals) - num_schedule_consts:]))

    # --- SparseCore memory ops -----------------------------------------------------------

    def _p_sc_load_expanded(self, invals, tree, effect_spec, shape, dtype):
        part, mask = _parts(tree, invals)
        buf, t = _ref(part)
        src, mask = read(buf, t, self.prog, "load_expanded"), np.asarray(mask)
        out = poison(shape, dtype)
        n = int(mask.sum())
        out[mask] = src.reshape(-1)[:n]
        return out

    def _p_sc_store(self, invals, tree, effect_spec, add, compress, has_mask):
        part, x, mask = _parts(tree, invals)
        buf, t = _ref(part)
        x = np.asarray(x)
        if not compress:
            write(buf, t, self.prog, x, "addupdate" if add else "store", add=add)
            return []
        mask = np.asarray(mask)
        sel = x[mask]
        with ATOMIC:   # an add is atomic with respect to the other programs
            cur = read(buf, t, self.prog, "store_compressed").reshape(-1)
            if add:
                cur[:sel.size] += sel
            else:
                cur[:sel.size] = sel
            write(buf, t, self.prog, cur.reshape(x.shape), "store_compressed")
        return []

    def _lanes(self, op, buf, t, indices, mask):
        view_shape = read(buf, t, self.prog, op).shape
        idx = [np.asarray(i) for i in indices]
        active = np.ones(idx[0].shape, bool) if mask is None else np.asarray(mask)
        for d, (a, n) in enumerate(zip(idx, view_shape)):
            bad = active & ((a < 0) | (a >= n))
            if bad.any():
                lane = int(np.argmax(bad))
                raise IndexError(f"plsc.{op}: lane {lane} has index {int(a[lane])} in dim {d}, "
                                 f"out of range for size {n} (the chip does not check; the "
                                 "model refuses).")
        return idx, active

    def _p_sc_gather(self, invals, tree, effect_spec, shape, dtype):
        part, indices, mask = _parts(tree, invals)
        buf, t = _ref(part)
        idx, active = self._lanes("load_gather", buf, t, indices, mask)
        src = read(buf, t, self.prog, "load_gather")
        out = poison(shape, dtype)
        out[active] = src[tuple(a[active] for a in idx)]
        return out

    def _p_sc_scatter(self, invals, tree, effect_spec, add):
        part, indices, x, mask = _parts(tree, invals)
        buf, t = _ref(part)
        op = "addupdate_scatter" if add else "store_scatter"
        idx, active = self._lanes(op, buf, t, indices, mask)
        x = np.asarray(x)
        targets = tuple(a[active] for a in idx)
        vals = x[active]
        if not add:
            flat = np.ravel_multi_index(targets, read(buf, t, self.prog, op).shape) \
                if vals.size else np.zeros((0,), int)
            for f in np.unique(flat):
                lanes = vals[flat == f]
                if lanes.size > 1 and not np.all(lanes.view(np.uint8).reshape(lanes.size, -1)
                                                 == lanes[:1].view(np.uint8)):
                    raise ValueError(f"plsc.store_scatter: two active lanes store different "
                                     f"values to one element ({lanes.tolist()}); which lands "
                                     "is not defined. Mask all but one, or use addupdate_scatter.")
        with ATOMIC:
            view = read(buf, t, self.prog, op)
            if add:
                np.add.at(view, targets, vals)
            else:
                view[targets] = vals
            write(buf, t, self.prog, view, op)
        return []

    def _p_sc_fetch_and_add(self, invals, tree, effect_spec):
        part, value, subcore = _parts(tree, invals)
        buf, t = _ref(part)
        machine = self.prog.machine
        s = int(subcore)
        if not 0 <= s < machine.num_subcores:
            raise IndexError(f"plsc.fetch_and_add: subcore_id={s} is out of range for "
                             f"{machine.num_subcores} subcores.")
        if buf.scratch_index is None:
            raise ValueError("plsc.fetch_and_add: x_ref must be an SMEM scratch Ref of the kernel.")
        target = machine.program(self.prog.core, s)
        tbuf = target.scratch[buf.scratch_index]
        with ATOMIC:
            old = read(tbuf, t, target, "fetch_and_add").reshape(())
            write(tbuf, t, target, old + np.int32(value), "fetch_and_add")
        return np.int32(old)

    def _p_sc_subcore_barrier(self, invals):
        self.prog.machine.barriers[self.prog.core].wait(timeout=BARRIER_TIMEOUT_S)
        return []

    # --- DMAs and frontend primitives -----------------------------------------------------

    def _p_tpu_dma_start(self, invals, tree, effect_spec, priority, add, device_id_type):
        src, dst, _, _, device_id = _parts(tree, invals)
        if device_id is not None:
            raise NotImplementedError("SparseCore CPU model: remote DMAs are not modelled.")
        sbuf, st = _ref(src)
        dbuf, dt = _ref(dst)
        value = read(sbuf, st, self.prog, "DMA source")
        # an indirect DMA through plsc.Indices skips the rows whose index is ignored
        rows = [r for r in (rows_moved(sbuf, st, self.prog, "DMA source"),
                            rows_moved(dbuf, dt, self.prog, "DMA destination")) if r is not None]
        write(dbuf, dt, self.prog, value, "DMA destination", add=add,
              rows=np.logical_and.reduce(rows) if rows else None)
        return []

    def _p_tpu_dma_wait(self, invals, **params):
        return []

    def _p_debug_print(self, invals, fmt):
        print(fmt.format(*[np.asarray(v) for v in invals]) if "{" in fmt else
              " ".join([fmt, *map(str, invals)]))
        return []

    def _p_multiple_of(self, invals, values):
        return invals[0]

    def _p_delay(self, invals):
        return []

