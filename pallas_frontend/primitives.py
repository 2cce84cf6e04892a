"""Primitives and functions used inside a kernel body.

``program_id`` and ``num_programs`` read the grid position from the kernel
being traced; the others are JAX primitives owned by the frontend, each with
the rules the reference interpreter needs (abstract eval, lowering, batching,
state discharge).
"""

from __future__ import annotations

import functools
import string
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from pallas_frontend import _jax_compat as jc
from pallas_frontend import pretty_equations, scopes
from pallas_frontend.backend_api import (
    FRONTEND_OWNER, def_pure_primitive, kernel_primitive, ref_effects)
from pallas_frontend.specs import MemoryRef, check_dims
# the grid state lives in a leaf module, so that the contract offers it to backends
from pallas_frontend.grid_context import (  # noqa: F401
    GridContext as _GridContext, _local, current_grid, grid_context)
# debug checks and kernel failures: their own module, re-exported here for the
# modules that import them from primitives
from pallas_frontend.kernel_checks import (  # noqa: F401
    FRONTEND_CHECK, KernelCheckError, SemaphoreDeadlockError, _fail, _raise_deadlock,
    debug_check, debug_check_p, enable_debug_checks, take_kernel_failure)


# --- the grid position of the kernel being traced ----------------------------

def _current_grid(fn_name: str) -> _GridContext:
    ctx = current_grid()
    if ctx is None:
        raise RuntimeError(f"pl.{fn_name} can only be called inside a kernel traced by "
                           "pallas_call or pl.kernel.")
    return ctx


def _axis_position(ctx: _GridContext, axis: int | str, fn_name: str) -> int:
    if isinstance(axis, str):
        if not ctx.names or axis not in ctx.names:
            raise ValueError(f"pl.{fn_name}({axis!r}): the grid has no axis named {axis!r}; "
                             f"its names are {ctx.names}. Name axes with grid=(('i', n), ...).")
        return ctx.names.index(axis)
    n = len(ctx.sizes)
    if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)) or not -n <= axis < n:
        raise ValueError(f"pl.{fn_name}({axis!r}): axis must be an int in [0, {n}) for a grid "
                         f"of rank {n} (grid={ctx.sizes}).")
    return int(axis) % n


def program_id(axis: int | str) -> jax.Array:
    """This program's coordinate along grid ``axis`` (an index or a grid-axis name)."""
    ctx = _current_grid("program_id")
    return ctx.indices[_axis_position(ctx, axis, "program_id")]


class GridSizeInIndexMap(NotImplementedError):
    """An index map asked for a traced grid size that its jaxpr was not given;
    ``pallas_call`` then traces the index maps again with the sizes passed in
    (a scalar-prefetch operand of its own), so this reaches users only from
    where no such operand can be added."""


def num_programs(axis: int | str) -> int:
    """The grid size along ``axis``: a static int, or a traced int32 for a dynamic grid dim."""
    ctx = _current_grid("num_programs")
    size = ctx.sizes[_axis_position(ctx, axis, "num_programs")]
    if size is None:   # only in an index map traced without the grid sizes
        raise GridSizeInIndexMap(
            f"pl.num_programs({axis!r}) in an index map of a grid whose size along that axis "
            "is traced: pass the size to the index map through scalar prefetch instead.")
    if callable(size):   # an index map's traced size, read only where it is asked for
        return size()
    return size


# --- multiple_of --------------------------------------------------------------

multiple_of_p = kernel_primitive("multiple_of", owner=FRONTEND_OWNER)
def_pure_primitive(
    multiple_of_p,
    impl=lambda x, *, values: x,
    abstract_eval=lambda aval, *, values: aval,
    batch_rule=lambda args, dims, *, values: (multiple_of_p.bind(args[0], values=values), dims[0]),
    jvp_rule=lambda primals, tangents, *, values: (multiple_of_p.bind(primals[0], values=values),
                                                    tangents[0]),
)


def multiple_of(x, values: int | tuple[int, ...]):
    """Tells the compiler that ``x`` is a multiple of ``values``; the identity at run time."""
    values = tuple(values) if isinstance(values, (list, tuple)) else (int(values),)
    jc.register_elementwise_with_jax_fuser(multiple_of_p)   # JAX's fuser sees the call
    return multiple_of_p.bind(x, values=values)


# --- delay ---------------------------------------------------------------------

delay_p = kernel_primitive("delay", owner=FRONTEND_OWNER, multiple_results=True)
# An effect keeps the wait in the kernel jaxpr (nothing depends on it); the
# interpreter runs grid points in order, so waiting changes nothing there.
delay_p.def_effectful_abstract_eval(lambda nanos: ([], {jc.debug_effect}))
delay_p.def_impl(lambda nanos: [])
jc.mlir.register_lowering(delay_p, lambda ctx, nanos: [])
jc.batching.primitive_batchers[delay_p] = lambda args, dims: (delay_p.bind(args[0]), [])


def delay(nanos) -> None:
    """Waits about ``nanos`` nanoseconds (a hint to hardware backends; the
    interpreter does not wait)."""
    delay_p.bind(jnp.asarray(nanos, jnp.int32))


# --- debug_print ---------------------------------------------------------------

debug_print_p = kernel_primitive("debug_print", owner=FRONTEND_OWNER, multiple_results=True)


def _debug_print_host(fmt, *args):
    jax.debug.print(fmt, *args)
    return []


debug_print_p.def_effectful_abstract_eval(lambda *avals, fmt: ([], {jc.debug_effect}))
debug_print_p.def_impl(lambda *args, fmt: _debug_print_host(fmt, *args))
jc.mlir.register_lowering(
    debug_print_p,
    lambda ctx, *args, fmt: jc.mlir.lower_fun(
        lambda *a: _debug_print_host(fmt, *a), multiple_results=True)(ctx, *args))
jc.batching.primitive_batchers[debug_print_p] = (
    lambda args, dims, *, fmt: (debug_print_p.bind(*args, fmt=fmt), []))


def debug_print(fmt: str, *args):
    """Prints from inside a kernel. ``fmt`` uses ``{}`` placeholders, one per
    arg; without placeholders the values are printed after ``fmt``, separated
    by spaces (as JAX's Triton and TPU backends print them)."""
    if not isinstance(fmt, str):
        raise TypeError(f"pl.debug_print: fmt must be a str, got {type(fmt).__name__}")
    plain, used = _automatic_fields(fmt)
    if not used and args:
        fmt = plain + " {}" * len(args)
    elif sorted(set(used)) != list(range(len(args))):
        raise ValueError(f"pl.debug_print: format {fmt!r} has {len(used)} placeholders but "
                         f"{len(args)} arguments were given (each argument must be used).")
    else:
        fmt, args = plain, [args[k] for k in used]
    debug_print_p.bind(*args, fmt=fmt)


def _automatic_fields(fmt: str):
    """``fmt`` with each field made an automatic ``{}`` (``{1:.2f}`` -> ``{:.2f}``),
    and the argument each field prints: backends only ever meet ``{}`` fields
    taken in order, while the kernel may number them as ``str.format`` allows."""
    out, used, auto, numbered = [], [], 0, False
    try:
        fields = list(string.Formatter().parse(fmt))
    except ValueError as e:
        raise ValueError(f"pl.debug_print: format {fmt!r}: {e}") from None
    for text, field, spec, conv in fields:
        out.append(text.replace("{", "{{").replace("}", "}}"))
        if field is None:
            continue
        if field and not field.isdigit() or "{" in (spec or ""):
            raise ValueError(f"pl.debug_print: format {fmt!r} has field {{{field}}}; use {{}} "
                             "or numbered fields {0}, {1}, ... with literal format specs.")
        if (field == "" and numbered) or (field and used and not numbered):
            raise ValueError(f"pl.debug_print: format {fmt!r} mixes {{}} and numbered fields.")
        numbered = field != ""
        k = int(field) if numbered else auto
        auto += not numbered
        used.append(k)
        out.append("{" + (f"!{conv}" if conv else "") + (f":{spec}" if spec else "") + "}")
    return "".join(out), used


# --- scoped allocation ------------------------------------------------------

def ref_aval_of(t: Any, what: str) -> jc.AbstractRef:
    """The Ref type for a scratch/scoped type: a ``MemoryRef``, a
    ``jax.ShapeDtypeStruct``, or a backend type with ``get_ref_aval()``."""
    if isinstance(t, MemoryRef):
        return jc.AbstractRef(jc.kernel_aval(t.shape, t.dtype), memory_space=t.memory_space)
    if hasattr(t, "get_ref_aval"):
        aval = t.get_ref_aval()
        if not isinstance(aval, jc.AbstractRef):
            raise TypeError(f"{what}: get_ref_aval() of {t!r} returned {aval!r}, not a Ref type.")
        return aval
    if hasattr(t, "shape") and hasattr(t, "dtype"):
        return jc.AbstractRef(jc.kernel_aval(check_dims(t.shape, what), np.dtype(t.dtype)))
    raise TypeError(f"{what}: {t!r} is not a scratch type. Use pl.MemorySpace.X(shape, dtype), "
                    "a backend memory space such as pallas_tpu.VMEM(shape, dtype), or "
                    "jax.ShapeDtypeStruct.")


def run_scoped(f, *types, collective_axes=(), **kw_types):
    """Allocates Refs of ``types`` for the duration of ``f(*refs, **kw_refs)``
    and returns ``f``'s result.

    Each of ``types`` and ``kw_types`` may be a pytree (dicts, lists, tuples,
    nested) of scratch types: ``f`` gets the Refs in the same structure, and
    ``None`` where the tree has ``None`` (as in JAX).

    ``collective_axes`` (a mesh axis name or a tuple of them) asks for one
    buffer shared by the programs along those axes (e.g. the warpgroups of a
    ``pallas_mgpu.kernel``); it is handed to the backend in the kernel jaxpr
    (``backend_api.ScopedAllocation``) and backends that cannot share
    buffers refuse it before lowering."""
    from pallas_frontend.backend_api import ScopedAllocation
    axes = (collective_axes,) if isinstance(collective_axes, str) else tuple(collective_axes)
    if not all(isinstance(a, str) for a in axes):
        raise TypeError(f"run_scoped: collective_axes must be axis names, got {collective_axes!r}.")

    def scoped_aval(t, what):
        aval = ref_aval_of(t, what)
        if axes:
            aval = jc.AbstractRef(aval.inner_aval,
                                  memory_space=ScopedAllocation(aval.memory_space, axes))
        return aval
    leaves, tree = jax.tree_util.tree_flatten_with_path((types, kw_types))
    avals = []
    for path, t in leaves:     # path: (which of types / kw_types, the position in it)
        where = ("types" if path[0].idx == 0 else "kw_types") + jax.tree_util.keystr(path[1:])
        avals.append(scoped_aval(t, f"run_scoped {where}"))
    out_tree = []

    @functools.wraps(f)     # errors of the trace name the kernel author's function
    def body(*flat_refs):
        refs, kw_refs = jax.tree.unflatten(tree, flat_refs)
        flat_out, treedef = jax.tree.flatten(f(*refs, **kw_refs))
        out_tree.append(treedef)
        return flat_out
    # one equation holding the body's jaxpr, as JAX's (scopes.py expands it
    # before a backend sees the kernel)
    out = scopes.bind_scoped(body, avals, axes, traced_for="pallas run_scoped")
    return jax.tree.unflatten(out_tree[0], out)


get_global_p = kernel_primitive("get_global", owner=FRONTEND_OWNER)
get_global_p.ref_allocating = True      # its Ref is made here, like jax.new_ref's
get_global_p.def_effectful_abstract_eval(lambda *, aval: (aval, {jc.internal_ref_effect}))


def get_global(what: Any):
    """A Ref that outlives one program: every grid point of the kernel sees the
    same Ref (in the interpreter, for the duration of one ``pallas_call``; a
    semaphore starts at 0). ``what`` is a scratch type, e.g.
    ``pl.ANY((), jnp.int32)`` for a semaphore."""
    _current_grid("get_global")
    return get_global_p.bind(aval=ref_aval_of(what, "pl.get_global"))


# --- semaphores ---------------------------------------------------------------
# A semaphore is an int32 Ref here; the interpreter is sequential, so a wait
# that is not yet satisfiable can never become so and is reported as an error.

semaphore_read_p = kernel_primitive("semaphore_read", owner=FRONTEND_OWNER)
semaphore_signal_p = kernel_primitive("semaphore_signal", owner=FRONTEND_OWNER, multiple_results=True)
semaphore_wait_p = kernel_primitive("semaphore_wait", owner=FRONTEND_OWNER, multiple_results=True)


class DeviceIdType:
    """How ``semaphore_signal``'s ``device_id`` names a device: ``MESH``, a
    coordinate per mesh axis (a tuple, or a dict by axis name); ``LOGICAL``,
    one flat device index. Plain strings, handed to the backend as they are."""
    MESH = "mesh"
    LOGICAL = "logical"


# Operands: the semaphore Ref, one int32 index per dim when the semaphore is an
# element of an array of semaphores (``sems.at[i]``), then the value.
semaphore_read_p.def_effectful_abstract_eval(
    lambda ref, *idx: (jc.ShapedArray((), jnp.int32), ref_effects(reads=[0])))
# semaphore_signal: ref, *idx, inc, then the leaves of device_id (int32, possibly
# traced) when ``device_id_tree`` is not None.
semaphore_signal_p.def_effectful_abstract_eval(
    lambda ref, *idx_inc_dev, device_id_tree, device_id_type, core_index: (
        [], ref_effects(reads=[0], writes=[0])))
semaphore_wait_p.def_effectful_abstract_eval(
    lambda ref, *idx_value, decrement: ([], ref_effects(reads=[0], writes=[0])))


def _split_ref(sem, fn_name: str):
    """(underlying Ref, int32 indices) of a semaphore or of one element of an
    array of semaphores."""
    if not isinstance(sem, jc.state_types.TransformedRef):
        if sem.shape != ():
            raise ValueError(f"pl.{fn_name}: got an array of {sem.shape} semaphores; pick one "
                             "with sems.at[i].")
        return sem, []
    transforms = tuple(sem.transforms)
    if len(transforms) != 1 or not isinstance(transforms[0], jc.NDIndexer):
        raise ValueError(f"pl.{fn_name}: a semaphore view must be one plain index, "
                         f"sems.at[i, ...]; got {transforms}.")
    idx = list(transforms[0].indices)
    if any(isinstance(i, jc.Slice) for i in idx) or len(idx) != len(sem.ref.shape):
        raise ValueError(f"pl.{fn_name}: index every dim of the semaphore array "
                         f"(shape {sem.ref.shape}) with a scalar, e.g. sems.at[i].")
    return sem.ref, [jnp.asarray(i, jnp.int32) for i in idx]


def semaphore_read(sem):
    """The current value (an int32 scalar) of ``sem``: a semaphore, or one of an
    array of them (``sems.at[i]``, ``i`` static or traced)."""
    ref, idx = _split_ref(sem, "semaphore_read")
    return semaphore_read_p.bind(ref, *idx)


def semaphore_signal(sem, inc=1, *, device_id=None, device_id_type=DeviceIdType.MESH,
                     core_index=None):
    """Adds ``inc`` to ``sem``; with ``device_id`` (an int, a traced int, or a
    tuple/dict of them, read as ``device_id_type``) to that device's ``sem``."""
    ref, idx = _split_ref(sem, "semaphore_signal")
    id_type = _device_id_type(device_id_type)
    if device_id is None:
        dev_leaves, dev_tree = [], None
    else:
        dev_leaves, dev_tree = jax.tree.flatten(device_id)
        dev_leaves = [jnp.asarray(d, jnp.int32) for d in dev_leaves]
    semaphore_signal_p.bind(ref, *idx, jnp.asarray(inc, jnp.int32), *dev_leaves,
                            device_id_tree=dev_tree, device_id_type=id_type,
                            core_index=core_index)


def _device_id_type(t) -> str:
    name = getattr(t, "name", t)      # also JAX's pltpu.DeviceIdType members
    name = name.lower() if isinstance(name, str) else name
    if name not in (DeviceIdType.MESH, DeviceIdType.LOGICAL):
        raise ValueError(f"pl.semaphore_signal: device_id_type must be pl.DeviceIdType.MESH or "
                         f"pl.DeviceIdType.LOGICAL, got {t!r}.")
    return name


def semaphore_wait(sem, value=1, *, decrement: bool = True):
    """Blocks until ``sem`` (a semaphore or ``sems.at[i]``) holds at least
    ``value``, then subtracts ``value`` from it (``decrement=False``: leaves it).
    In the built-in interpreter, which runs programs one after another, a wait
    that no earlier signal satisfies raises ``SemaphoreDeadlockError``."""
    ref, idx = _split_ref(sem, "semaphore_wait")
    semaphore_wait_p.bind(ref, *idx, jnp.asarray(value, jnp.int32), decrement=decrement)


def semaphore_ref_positions(jaxpr: jc.Jaxpr) -> set[int]:
    """Positions of ``jaxpr``'s invars that some semaphore operation uses,
    looking into loop and branch bodies."""
    found: set[int] = set()

    def visit(jx, outer: dict):
        for eqn in jx.eqns:
            if eqn.primitive.name.startswith("semaphore_") and eqn.invars[0] in outer:
                found.add(outer[eqn.invars[0]])
            for sub, operands in _sub_operands(eqn):
                visit(sub, {v: outer[o] for v, o in zip(sub.invars, operands)
                            if not isinstance(o, jc.Literal) and o in outer})

    visit(jaxpr, {v: i for i, v in enumerate(jaxpr.invars)})
    return found


def _sub_operands(eqn):
    """(nested jaxpr, the outer operands its invars receive) for each body."""
    subs = jc.sub_jaxprs(eqn)
    if eqn.primitive.name == "while":
        cn, bn = eqn.params["cond_nconsts"], eqn.params["body_nconsts"]
        carry = eqn.invars[cn + bn:]
        return [(eqn.params["cond_jaxpr"], eqn.invars[:cn] + carry),
                (eqn.params["body_jaxpr"], eqn.invars[cn:cn + bn] + carry)]
    # scan, jit, cond (after the predicate), run_state...: a suffix of the operands
    return [(sub, eqn.invars[len(eqn.invars) - len(sub.invars):]) for sub in subs
            if len(sub.invars) <= len(eqn.invars)]


def _sem_add(ref_val, idx, delta):
    ref_val = jnp.asarray(ref_val)
    return ref_val.at[tuple(idx)].add(delta) if idx else ref_val + delta


def _sem_read_discharge(ctx, ref_val, *idx):
    return (None,) * (1 + len(idx)), jnp.asarray(ref_val)[tuple(idx)]


def _sem_signal_discharge(ctx, ref_val, *idx_inc_dev, device_id_tree, device_id_type,
                          core_index):
    if device_id_tree is not None or core_index is not None:
        raise NotImplementedError("semaphore_signal to another device or core needs a "
                                  "multi-device backend (e.g. pallas_tpu interpret mode); the "
                                  "frontend interpreter runs one device's programs.")
    *idx, inc = idx_inc_dev
    new = _sem_add(ref_val, idx, inc)
    return (new,) + (None,) * len(idx_inc_dev), []


def _sem_wait_discharge(ctx, ref_val, *idx_value, decrement):
    *idx, value = idx_value
    cur = jnp.asarray(ref_val)[tuple(idx)]
    jax.debug.callback(_raise_deadlock, cur >= value,
                       message="semaphore_wait would block forever: the semaphore holds less "
                               "than the awaited value and no other program can signal it "
                               "in the sequential interpreter.")
    new = _sem_add(ref_val, idx, -value) if decrement else None
    return (new,) + (None,) * len(idx_value), []


jc.register_discharge_rule(semaphore_read_p)(_sem_read_discharge)
jc.register_discharge_rule(semaphore_signal_p)(_sem_signal_discharge)
jc.register_discharge_rule(semaphore_wait_p)(_sem_wait_discharge)
pretty_equations.register_frontend_printers(semaphore_signal_p, semaphore_wait_p)
