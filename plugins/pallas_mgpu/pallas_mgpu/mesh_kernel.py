"""``pallas_mgpu.kernel``: a Mosaic GPU kernel over a CTA grid, a cluster and
warpgroup threads, written like JAX's ``plgpu.kernel``.

The body sees every operand whole, in GMEM, and moves data itself (TMA
copies, barriers, WGMMA). It reads its coordinates with
``lax.axis_index(name)`` for the grid, cluster and thread axis names. The
frontend traces it as a single-program ``pallas_call`` whose compiler params
(``MeshKernelParams``) carry the mesh; the backend rebuilds the
``plgpu.kernel`` it describes (``build``).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax

import pallas_frontend as pf

from pallas_mgpu import _jax_private, evaluate, ref_operands, ref_union
from pallas_mgpu.memory import GMEM, scratch_to_jax
from pallas_mgpu.params import CompilerParams, LoweringSemantics, adopt_interpret


MAX_THREADS = 2048 // 128


def _own_fields():
    inherited = {f.name for f in dataclasses.fields(pf.CompilerParams)}
    return [f.name for f in dataclasses.fields(CompilerParams) if f.name not in inherited]


@dataclasses.dataclass(frozen=True)
class MeshKernelParams(CompilerParams):
    """``CompilerParams`` plus the mesh of a ``pallas_mgpu.kernel``."""
    grid: tuple[int, ...] = ()
    grid_names: tuple[str, ...] = ()
    cluster: tuple[int, ...] = ()
    cluster_names: tuple[str, ...] = ()
    num_threads: int | None = None
    thread_name: str | None = None

    def __post_init__(self):
        super().__post_init__()
        for sizes, names, what in ((self.grid, self.grid_names, "grid"),
                                   (self.cluster, self.cluster_names, "cluster")):
            if len(sizes) != len(names):
                raise ValueError(f"pallas_mgpu.kernel: {what} {sizes} and {what}_names {names} "
                                 "must have the same length.")
            if any(int(s) < 1 for s in sizes):
                raise ValueError(f"pallas_mgpu.kernel: {what} sizes must be >= 1, got {sizes}.")
        if (self.num_threads is None) != (self.thread_name is None):
            raise ValueError("pallas_mgpu.kernel: pass num_threads and thread_name together.")
        # Each thread is a warpgroup (128 CUDA threads); a CTA holds at most 2048.
        if self.num_threads is not None and not 1 <= self.num_threads <= MAX_THREADS:
            raise ValueError(f"pallas_mgpu.kernel: num_threads (warpgroups per CTA) must be in "
                             f"[1, {MAX_THREADS}], got {self.num_threads}.")
        names = [*self.grid_names, *self.cluster_names, *([self.thread_name] if self.thread_name else [])]
        if len(set(names)) != len(names):
            raise ValueError(f"pallas_mgpu.kernel: axis names {names} must be distinct.")

    @property
    def axis_sizes(self) -> dict[str, int]:
        sizes = dict(zip(self.grid_names, self.grid))
        sizes.update(zip(self.cluster_names, self.cluster))
        if self.thread_name is not None:
            sizes[self.thread_name] = self.num_threads
        return sizes

    def to_jax(self, dimension_semantics=None):
        base = {name: getattr(self, name) for name in _own_fields()}
        return CompilerParams(**base).to_jax(dimension_semantics)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Mesh:
    """JAX's ``plgpu.Mesh``: CTAs of ``grid`` times ``cluster``, each running
    ``num_threads`` warpgroups. ``pl.core_map(mesh)`` and ``pl.kernel(mesh=)``
    run a body on every point; ``lax.axis_index(name)`` reads its coordinate."""
    grid: tuple[int, ...] = ()
    grid_names: tuple[str, ...] = ()
    cluster: tuple[int, ...] = ()
    cluster_names: tuple[str, ...] = ()
    num_threads: int | None = None
    thread_name: str | None = None
    kernel_name: str | None = None

    def __post_init__(self):
        for f in ("grid", "grid_names", "cluster", "cluster_names"):
            object.__setattr__(self, f, tuple(getattr(self, f)))
        if len(self.cluster) > 3:
            raise ValueError(f"plgpu.Mesh: cluster must be at most 3-D, got {self.cluster}.")
        self.compiler_params    # validates the sizes and names now

    @property
    def shape(self) -> dict:
        """Axis name -> size: the grid's, the cluster's, then the thread axis."""
        return self.compiler_params.axis_sizes

    @property
    def default_memory_space(self):
        """``GMEM``: a kernel over this mesh sees its operands whole in global memory."""
        return GMEM

    def core_map(self, *, interpret=False, **options):
        """``pl.core_map(mesh, ...)``: the frontend's, with JAX's own
        ``InterpretGPUParams`` taken as this plugin's (code written for JAX
        passes those)."""
        import warnings
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)   # pl.core_map is deprecated
            frontend_core_map = pf.core_map
        return frontend_core_map(_LaunchedMesh(self), interpret=adopt_interpret(interpret),
                                 **options)

    def operand_memory_space(self, aval):
        """Where ``pl.kernel`` over this mesh puts an operand: a semaphore Ref
        (``alloc_semaphore``) in its semaphore space; None (GMEM) otherwise."""
        from pallas_mgpu.multi_gpu import SemaphoreArray
        space = getattr(aval, "memory_space", None)
        return space if isinstance(space, SemaphoreArray) else None

    @property
    def compiler_params(self) -> "MeshKernelParams":
        """What the frontend launches the mesh's grid with (selects this backend)."""
        return MeshKernelParams(grid=tuple(int(g) for g in self.grid), grid_names=self.grid_names,
                                cluster=tuple(int(c) for c in self.cluster),
                                cluster_names=self.cluster_names, num_threads=self.num_threads,
                                thread_name=self.thread_name)


@dataclasses.dataclass(frozen=True)
class _LaunchedMesh:
    """A ``Mesh`` as the frontend's ``core_map`` launches it (no ``core_map`` hook)."""
    mesh: Mesh

    shape = property(lambda self: self.mesh.shape)
    default_memory_space = property(lambda self: self.mesh.default_memory_space)
    compiler_params = property(lambda self: self.mesh.compiler_params)


def kernel(body=None, out_type: Any = (), *, scratch_types: Any = (), compiler_params=None,
           cost_estimate=None, grid=(), grid_names=(), cluster=(), cluster_names=(),
           num_threads: int | None = None, thread_name: str | None = None, interpret: Any = None,
           debug: bool = False, name: str | None = None, kernel_name: str | None = None):
    """Runs ``body(*in_refs, *out_refs, *scratch_refs)`` once per CTA of ``grid``
    (times ``cluster``) and per warpgroup thread; the same arguments as JAX
    0.12's ``plgpu.kernel``. Without ``body`` it is a decorator."""
    if body is None:
        return functools.partial(
            kernel, out_type=out_type, scratch_types=scratch_types, compiler_params=compiler_params,
            cost_estimate=cost_estimate, grid=grid, grid_names=grid_names, cluster=cluster,
            cluster_names=cluster_names, num_threads=num_threads, thread_name=thread_name,
            interpret=interpret, debug=debug, name=name, kernel_name=kernel_name)
    if compiler_params is not None and not isinstance(compiler_params, CompilerParams):
        raise TypeError(f"pallas_mgpu.kernel: compiler_params must be pallas_mgpu.CompilerParams, "
                        f"got {compiler_params!r}.")
    # no params: the body is JAX's Mosaic GPU code, lowered as this JAX lowers it by
    # default (warpgroup semantics from JAX 0.11; lane semantics under 0.10)
    base = compiler_params or CompilerParams(lowering_semantics=LoweringSemantics[
        _jax_private.jax_default_lowering_semantics()])
    params = MeshKernelParams(
        **{name: getattr(base, name) for name in _own_fields()},
        grid=tuple(int(g) for g in grid), grid_names=tuple(grid_names),
        cluster=tuple(int(c) for c in cluster), cluster_names=tuple(cluster_names),
        num_threads=num_threads, thread_name=thread_name)
    sizes = params.axis_sizes

    @functools.wraps(body)
    def traced(*refs, **scratch_refs):   # dict scratch_types: the body takes keywords
        body(*refs, **scratch_refs)

    def run(*args):
        # jax.Ref operands (alloc_semaphore's among them) go in as their values
        if any(ref_operands.is_ref(a) for a in jax.tree.leaves(args)):
            return ref_operands.call_with_refs(launch, out_type, args)
        return launch(out_type)(*args)

    def launch(out_type_, in_specs=None, out_specs=None, aliases=None, body_refs=None):
        def go(*args):
            # The names stay bound for the whole trace (with jax_enable_checks JAX
            # checks the kernel jaxpr, axis_index equations included, after the
            # body) but not while it is lowered: JAX's interpreter would then lower
            # axis_index as a device axis.
            call = functools.partial(_call, out_type_, in_specs, out_specs, aliases, body_refs)
            with _jax_private.bind_axis_names(sizes):
                closed, shapes = jax.make_jaxpr(call, return_shape=True)(*args)
            outs = jax.core.eval_jaxpr(closed.jaxpr, closed.consts, *jax.tree.leaves(args))
            return jax.tree.unflatten(jax.tree.structure(shapes), outs)
        return go

    def _call(out_type_, in_specs, out_specs, aliases, body_refs, *args):
        whole = pf.BlockSpec(memory_space=GMEM)
        kernel_body = traced
        if body_refs is not None:    # Ref operands (ref_operands.call_with_refs)
            kernel_body = functools.wraps(traced)(
                lambda *refs, **kw: traced(*body_refs(refs), **kw))
        return pf.pallas_call(
            kernel_body, out_type_,
            in_specs=in_specs or jax.tree.map(lambda _: whole, tuple(args)),
            out_specs=out_specs or jax.tree.map(lambda _: whole, out_type_),
            input_output_aliases=aliases or {},
            scratch_shapes=ref_union.expand(scratch_types),
            compiler_params=params,
            interpret=False if interpret is None else adopt_interpret(interpret),
            cost_estimate=cost_estimate, debug=debug,
            name=kernel_name or name or getattr(body, "__name__", "mgpu_kernel"))(*args)
    return run


def build(kernel_ir, out_types, jax_interpret):
    """The ``plgpu.kernel`` a ``pallas_mgpu.kernel`` describes, on the flat operands."""
    from jax.experimental.pallas import mosaic_gpu as plgpu
    from jax import lax
    p: MeshKernelParams = kernel_ir.compiler_params
    jaxpr = kernel_ir.jaxpr
    scratch = [scratch_to_jax(a.memory_space, a.inner_aval.shape, a.inner_aval.dtype)
               for a in kernel_ir.scratch_avals]
    # the members of each plgpu.RefUnion share memory again (one JAX RefUnion)
    scratch, split_unions = ref_union.regroup([a.memory_space for a in kernel_ir.scratch_avals],
                                              scratch)
    n_in = len(kernel_ir.in_mappings)
    # plgpu.kernel has no aliasing: an aliased input goes in as a Ref (updated
    # in place) that the body also sees as the output, and comes back as it.
    aliased = dict((o, i) for i, o in kernel_ir.input_output_aliases)
    fresh = [o for o in range(len(out_types)) if o not in aliased]

    def body(*refs):
        ins, outs, scr = refs[:n_in], refs[n_in:n_in + len(fresh)], refs[n_in + len(fresh):]
        scr = split_unions(scr)
        by_out = dict(zip(fresh, outs))
        all_outs = [by_out[o] if o in by_out else ins[aliased[o]] for o in range(len(out_types))]
        # a mesh launched by pl.core_map / pl.kernel(mesh=) has the mesh as its named grid
        ids = [lax.axis_index(name) for name in kernel_ir.grid_names or ()]
        evaluate.eval_closed(jaxpr, *ids, *ins, *all_outs, *scr)
    body.__name__ = kernel_ir.name
    call = plgpu.kernel(body, out_type=[out_types[o] for o in fresh], scratch_types=scratch,
                        compiler_params=p.to_jax(), grid=p.grid, grid_names=p.grid_names,
                        cluster=p.cluster, cluster_names=p.cluster_names,
                        num_threads=p.num_threads, thread_name=p.thread_name,
                        interpret=jax_interpret)

    def run(*args):
        args = list(args)
        # an input traced in a semaphore memory space goes in as JAX's semaphore Ref
        space = [m.memory_space for m in kernel_ir.in_mappings]
        refs = {i: ref_operands.jax_ref(space[i], args[i]) for i in set(aliased.values())}
        for i, r in refs.items():
            args[i] = r
        got = dict(zip(fresh, jax.tree.leaves(call(*args))))
        return [got[o] if o in got
                else ref_operands.jax_ref_value(space[aliased[o]], refs[aliased[o]])
                for o in range(len(out_types))]
    return run

