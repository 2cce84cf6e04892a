"""Semaphores that one kernel returns and a later kernel takes: a DMA started
in one ``pallas_call`` and awaited in another (the pattern of JAX's
``tpu_pallas_async_test.py``, issue 41).

Each program is compiled for a v5e without a TPU, under ours and under JAX's
Pallas, and the two lowerings must agree: the same custom calls with the same
aliases, operand and result layouts and semaphore memory space, and (where
JAX keeps debug locations apart from the Mosaic body) the same Mosaic module.
The ``stateful`` programs close over ``run_state``'s Refs instead of being
passed them (the frontend makes them aliased operands, ``closed_refs.py``).
JAX's TPU interpret mode cannot run a semaphore across calls (it has no rule
for the semaphore dtype there), so nothing here runs; the chip run is
``tools/tpu_native.py``.
"""

import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import pallas_frontend as pf
from jax._src.state import discharge as state_discharge   # run_state, as JAX's test uses
import pallas_tpu
from pallas_tpu import semaphore_operands
from pallas_tpu.memory import SemaphoreKind
from custom_calls import custom_calls


def _apis():
    from jax.experimental import pallas as jpl
    from jax.experimental.pallas import tpu as jpltpu
    return {"ours": types.SimpleNamespace(pl=pf, tpu=pallas_tpu),
            "jax": types.SimpleNamespace(pl=jpl, tpu=jpltpu)}


# --- the kernels: a DMA started by one call, finished by the next ---------------------

def _start_dma(api, *, into=None, row=None, by_prefetch=False):
    """``x -> (x, (dst, sem))``: starts copying ``x`` (or its ``row``) into a
    new output ``dst`` of memory space ``into`` (ANY by default); ``sem`` is
    the DMA semaphore the copy signals. ``by_prefetch``: ``row`` is a traced
    index handed to the kernel as a scalar-prefetch operand."""
    pl, tpu = api.pl, api.tpu
    space = into or pl.ANY

    def kernel(*refs):
        if by_prefetch:
            idx_ref, refs = refs[0], refs[1:]
        src, _src_again, dst, sem = refs
        if by_prefetch:
            src = src.at[idx_ref[0]]
        elif row is not None:
            src = src.at[row]
        tpu.make_async_copy(src, dst, sem).start()

    def start(x):
        shape = x.shape if row is None else x.shape[1:]
        out_shape = (jax.ShapeDtypeStruct(x.shape, x.dtype), space(shape, x.dtype),
                     tpu.SemaphoreType.DMA(()))
        in_specs = [pl.BlockSpec(memory_space=pl.ANY)]
        out_specs = (pl.BlockSpec(memory_space=pl.ANY), pl.BlockSpec(memory_space=space),
                     pl.BlockSpec(memory_space=tpu.SEMAPHORE))
        if by_prefetch:
            spec = tpu.PrefetchScalarGridSpec(num_scalar_prefetch=1, in_specs=in_specs,
                                              out_specs=out_specs)
            x, dst, sem = pl.pallas_call(kernel, out_shape=out_shape, grid_spec=spec,
                                         input_output_aliases={1: 0})(
                jnp.reshape(row, (1,)).astype(jnp.int32), x)
        else:
            x, dst, sem = pl.pallas_call(kernel, out_shape=out_shape, in_specs=in_specs,
                                         out_specs=out_specs, input_output_aliases={0: 0})(x)
        return x, (dst, sem)
    return start


def _finish_dma(api, *, into=None, sliced=False):
    """``(x, (dst, sem)) -> dst`` once the copy ``_start_dma`` started has
    landed; ``sliced``: the copy was of one row of ``x``."""
    pl, tpu = api.pl, api.tpu
    space = into or pl.ANY

    def kernel(src, dst, sem, _dst_again):
        # a wait needs only the sizes of the copy: any row stands for the one copied
        tpu.make_async_copy(src.at[0] if sliced else src, dst, sem).wait()

    def finish(x, future):
        dst, sem = future
        return pl.pallas_call(
            kernel, out_shape=space(dst.shape, dst.dtype),
            in_specs=[pl.BlockSpec(memory_space=pl.ANY), pl.BlockSpec(memory_space=space),
                      pl.BlockSpec(memory_space=tpu.SEMAPHORE)],
            out_specs=pl.BlockSpec(memory_space=space), input_output_aliases={1: 0},
        )(x, dst, sem)
    return finish


def _signal_then_wait(api):
    """A regular semaphore: one call signals it and returns it, the next waits
    on it; ``x`` passes through both, aliased, untouched."""
    pl, tpu = api.pl, api.tpu

    def signal(_x_ref, _x_again, sem):
        pl.semaphore_signal(sem, 1)

    def wait(_x_ref, sem, _x_again):
        pl.semaphore_wait(sem, 1)

    def f(x):
        x, sem = pl.pallas_call(
            signal, out_shape=(jax.ShapeDtypeStruct(x.shape, x.dtype),
                               tpu.SemaphoreType.REGULAR(())),
            in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
            out_specs=(pl.BlockSpec(memory_space=pl.ANY),
                       pl.BlockSpec(memory_space=tpu.SEMAPHORE)),
            input_output_aliases={0: 0})(x)
        return pl.pallas_call(
            wait, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
            in_specs=[pl.BlockSpec(memory_space=pl.ANY),
                      pl.BlockSpec(memory_space=tpu.SEMAPHORE)],
            out_specs=pl.BlockSpec(memory_space=pl.ANY), input_output_aliases={0: 0})(x, sem)
    return f


# --- the programs, each ``api -> (function, argument types)`` ---------------------------

def _one_copy(into_vmem=False):
    def program(api):
        into = api.tpu.VMEM if into_vmem else None
        start, finish = _start_dma(api, into=into), _finish_dma(api, into=into)
        return (lambda x: finish(*start(x))), [jax.ShapeDtypeStruct((8, 128), jnp.float32)]
    return program


def _two_copies(into_vmem=False):
    def program(api):
        into = api.tpu.VMEM if into_vmem else None
        start, finish = _start_dma(api, into=into), _finish_dma(api, into=into)

        def f(x):
            x1, first = start(x)
            x2, second = start(x1)
            return finish(x1, first), finish(x2, second)
        return f, [jax.ShapeDtypeStruct((8, 128), jnp.float32)]
    return program


def _row_copy(api):
    start, finish = _start_dma(api, row=1), _finish_dma(api, sliced=True)
    return (lambda x: finish(*start(x))), [jax.ShapeDtypeStruct((4, 8, 128), jnp.float32)]


def _traced_rows(api):
    def f(x, i, j):
        x1, first = _start_dma(api, row=i, by_prefetch=True)(x)
        x2, second = _start_dma(api, row=j, by_prefetch=True)(x1)
        finish = _finish_dma(api, sliced=True)
        return finish(x1, first), finish(x2, second)
    scalar = jax.ShapeDtypeStruct((), jnp.int32)
    return f, [jax.ShapeDtypeStruct((4, 8, 128), jnp.float32), scalar, scalar]


def _copies_in_a_loop(api):
    start, finish = _start_dma(api), _finish_dma(api)
    f = lambda x: jax.lax.fori_loop(0, 3, lambda _, x: finish(*start(x)), x)   # noqa: E731
    return f, [jax.ShapeDtypeStruct((8, 128), jnp.float32)]


def _overlapped_loop(api):
    """Each step waits for the previous step's copy and starts the next one."""
    start, finish = _start_dma(api), _finish_dma(api)

    def f(x):
        def step(_, carry):
            return start(finish(*carry))
        return finish(*jax.lax.fori_loop(0, 4, step, start(x), unroll=2))
    return f, [jax.ShapeDtypeStruct((8, 128), jnp.float32)]


def _rows_gathered_in_a_loop(api):
    finish = _finish_dma(api, sliced=True)

    def f(x):
        def step(i, ys):
            x_again, future = _start_dma(api, row=i, by_prefetch=True)(x)
            return ys.at[i].set(finish(x_again, future))
        return jax.lax.fori_loop(0, x.shape[0], step, jnp.zeros_like(x))
    return f, [jax.ShapeDtypeStruct((4, 8, 128), jnp.float32)]


def _regular_semaphore(api):
    return _signal_then_wait(api), [jax.ShapeDtypeStruct((8, 128), jnp.float32)]


# --- kernels that close over the program's Refs (run_state), no Ref passed ---------------

def _closed_over_copy(api, row=None):
    """Inside ``run_state``: one call starts a DMA between two Refs it closes
    over and returns the semaphore, the next waits on it."""
    pl, tpu = api.pl, api.tpu

    def copy(src, dst, sem, wait):
        desc = tpu.make_async_copy(src if row is None else src.at[row], dst, sem)
        desc.wait() if wait else desc.start()

    def begin(src, dst):
        return pl.pallas_call(lambda sem: copy(src, dst, sem, False),
                              out_shape=tpu.SemaphoreType.DMA(()),
                              out_specs=pl.BlockSpec(memory_space=tpu.SEMAPHORE))()

    def end(src, dst, sem):
        pl.pallas_call(lambda sem: copy(src, dst, sem, True), out_shape=(),
                       in_specs=[pl.BlockSpec(memory_space=tpu.SEMAPHORE)])(sem)
    return begin, end


def _stateful(row=None, copies=1):
    def program(api):
        begin, end = _closed_over_copy(api, row)

        def f(x):
            dst = jnp.zeros(x.shape if row is None else x.shape[1:], x.dtype)

            def body(refs):
                src, *dsts = refs
                sems = [begin(src, d) for d in dsts]
                for d, sem in zip(dsts, sems):
                    end(src, d, sem)
            return state_discharge.run_state(body)((x, *[dst] * copies))[1:]
        shape = (8, 128) if row is None else (4, 8, 128)
        return f, [jax.ShapeDtypeStruct(shape, jnp.float32)]
    return program


PROGRAMS = {
    "stateful_copy": _stateful(), "stateful_row_copy": _stateful(row=2),
    "stateful_two_copies": _stateful(copies=2),
    "one_copy": _one_copy(), "one_copy_into_vmem": _one_copy(True),
    "two_copies": _two_copies(), "two_copies_into_vmem": _two_copies(True),
    "row_copy": _row_copy, "traced_rows": _traced_rows,
    "copies_in_a_loop": _copies_in_a_loop, "overlapped_loop": _overlapped_loop,
    "rows_gathered_in_a_loop": _rows_gathered_in_a_loop,
    "regular_semaphore": _regular_semaphore,
}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_compiles_for_v5e_as_jax_does(name, aot_compile):
    apis = _apis()
    hlo = {}
    for which, api in apis.items():
        fn, args = PROGRAMS[name](api)
        compiled, hlo[which] = aot_compile(fn, *args)
        assert compiled is not None
    # A closed-over Ref is an aliased input and output pair under both; JAX's
    # body uses the input Ref, ours the output Ref (one buffer on the chip).
    bodies = not name.startswith("stateful")
    ours, theirs = custom_calls(hlo["ours"], bodies), custom_calls(hlo["jax"], bodies)
    assert len(theirs) >= 2
    assert ours == theirs


def _kernel_irs(fn, *args):
    jaxpr = jax.make_jaxpr(fn)(*args)

    def walk(j):
        for eqn in j.eqns:
            if "kernel" in eqn.params and hasattr(eqn.params["kernel"], "out_mappings"):
                yield eqn.params["kernel"]
            for sub in jax.extend.core.jaxprs_in_params(eqn.params):
                yield from walk(sub)
    return list(walk(jaxpr.jaxpr))


def test_the_kind_is_read_off_the_kernel():
    ours = _apis()["ours"]
    x = jax.ShapeDtypeStruct((8, 128), jnp.float32)
    start_ir, finish_ir = _kernel_irs(_one_copy()(ours)[0], x)
    assert semaphore_operands.kinds(start_ir) == ({}, {2: SemaphoreKind.DMA})
    assert semaphore_operands.kinds(finish_ir) == ({2: SemaphoreKind.DMA}, {})
    signal_ir, wait_ir = _kernel_irs(_signal_then_wait(ours), x)
    assert semaphore_operands.kinds(signal_ir) == ({}, {1: SemaphoreKind.REGULAR})
    assert semaphore_operands.kinds(wait_ir) == ({1: SemaphoreKind.REGULAR}, {})


def test_a_semaphore_of_two_kinds_is_refused():
    pl, tpu = pf, pallas_tpu

    def both(x_ref, o_ref, sem):
        tpu.make_async_copy(x_ref, o_ref, sem).start()
        pl.semaphore_signal(sem, 1)

    def f(x):
        return pl.pallas_call(
            both, out_shape=(jax.ShapeDtypeStruct(x.shape, x.dtype), tpu.SemaphoreType.DMA(())),
            in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
            out_specs=(pl.BlockSpec(memory_space=pl.ANY),
                       pl.BlockSpec(memory_space=tpu.SEMAPHORE)))(x)
    (ir,) = _kernel_irs(f, jax.ShapeDtypeStruct((8, 128), jnp.float32))
    with pytest.raises(ValueError, match="used both by a DMA and by pl.semaphore_signal"):
        semaphore_operands.kinds(ir)


def test_no_semaphore_operands_leave_the_context_as_it_is():
    def copy(x_ref, o_ref):
        o_ref[...] = x_ref[...]
    x = np.ones((8, 128), np.float32)
    (ir,) = _kernel_irs(pf.pallas_call(copy, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype)),
                        x)
    assert semaphore_operands.kinds(ir) == ({}, {})
    sentinel = object()
    assert semaphore_operands.typed_lowering_context(ir, sentinel) is sentinel
