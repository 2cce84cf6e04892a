"""A hijax type for tests: ``Pair`` of two same-shaped arrays, whose Refs read
and write both arrays at once (JAX's ``HiType`` protocol, as JAX 0.10.2's
``PipelineHijaxTest`` defines its ``ArrayTuple``). ``PairType`` is None where
the installed JAX has no hijax. A DMA between two Pair Refs is one copy per
array through ``PairType.async_copy`` (a backend's ``make_async_copy``, set
by the test that needs it)."""

from __future__ import annotations

import dataclasses

import jax

try:
    from jax._src import hijax
    from jax._src.state import primitives as state_primitives
    from jax._src.state import indexing
    from jax._src.state.types import TransformedRef
except ImportError:     # a JAX without hijax
    hijax = None

HAVE_HIJAX = hijax is not None and hasattr(hijax, "HiType") and hasattr(hijax, "register_hitype")


@dataclasses.dataclass(frozen=True)
class Pair:
    a: jax.Array
    b: jax.Array

    @property
    def shape(self):
        return self.a.shape

    @property
    def dtype(self):
        return self.a.dtype


PairType = None

if HAVE_HIJAX:
    @dataclasses.dataclass(frozen=True)
    class PairType(hijax.HiType):
        shape: tuple
        dtype: object

        def update(self, *, shape=None, dtype=None, **_):
            return PairType(self.shape if shape is None else tuple(shape),
                            self.dtype if dtype is None else dtype)

        def lo_ty(self):
            return [hijax.ShapedArray(self.shape, self.dtype)] * 2

        def lower_val(self, v):
            return [v.a, v.b]

        def raise_val(self, a, b):
            return Pair(a, b)

        def lower_block_spec(self, spec):
            return [spec, spec]

        def transform_ndindexer(self, idx):     # the type of a view ref.at[idx]
            return self.update(shape=idx.get_indexer_shape())

        def _plain(self):
            return hijax.ShapedArray(self.shape, self.dtype)

        def ref_get_abstract_eval(self, ref_aval, *args, tree):
            out, effects = state_primitives.get_p.abstract_eval(
                ref_aval.update(inner_aval=self._plain()), *args, tree=tree)
            return PairType(out.shape, out.dtype), effects

        def ref_get_to_lojax(self, ref, idx):
            pair, transforms = ref._refs, tuple(ref.transforms) + (idx,)
            flat, tree = jax.tree.flatten(transforms)
            return Pair(*(state_primitives.get_p.bind(r, *flat, tree=tree)
                          for r in (pair.a, pair.b)))

        def ref_swap_abstract_eval(self, ref_aval, val_aval, *args, tree):
            out, effects = state_primitives.swap_p.abstract_eval(
                ref_aval.update(inner_aval=self._plain()),
                hijax.ShapedArray(val_aval.shape, val_aval.dtype), *args, tree=tree)
            return PairType(out.shape, out.dtype), effects

        def ref_swap_to_lojax(self, ref, val, idx):
            pair, transforms = ref._refs, tuple(ref.transforms) + (idx,)
            flat, tree = jax.tree.flatten(transforms)
            return Pair(*(state_primitives.swap_p.bind(r, v, *flat, tree=tree)
                          for r, v in ((pair.a, val.a), (pair.b, val.b))))

        async_copy = None       # not a field: a backend's make_async_copy(src, dst, sem)

        def _copies(self, src, dst, dst_sem):
            s, d = src.ref._refs, dst.ref._refs
            return [self.async_copy(TransformedRef(x, src.transforms),
                                    TransformedRef(y, dst.transforms), dst_sem)
                    for x, y in ((s.a, d.a), (s.b, d.b))]

        def dma_start(self, src, dst, src_sem, dst_sem, device_id, device_id_type, priority,
                      add):
            assert src_sem is None and device_id is None and not add, "local copies only"
            for c in self._copies(src, dst, dst_sem):
                c.start(priority=priority)

        def dma_wait(self, src, dst, src_sem, dst_sem, device_id, device_id_type):
            for c in self._copies(src, dst, dst_sem):
                c.wait()

    hijax.register_hitype(Pair, lambda p: PairType(tuple(p.shape), p.dtype))
    indexing.indexer_transform_type_registry.add(PairType)
