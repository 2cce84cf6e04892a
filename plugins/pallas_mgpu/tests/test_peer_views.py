"""``multicast_ref``, ``cluster_ref`` and ``PeerMemRef``: the views are JAX's
own, so a TMA copy into a multicast view lowers for an H100 to the same Mosaic
GPU operations as JAX's kernel (and to more than a plain copy: the broadcast
reaches the lowering), as does a load from a peer CTA's SMEM through a cluster
view; ``remote_ref``'s views carry JAX's ``PeerMemRef``. JAX's
refusals hold for ours alike."""

from collections import Counter

import jax
import jax.numpy as jnp
import pytest
from jax.experimental.pallas import mosaic_gpu as jax_plgpu

import pallas_mgpu
from test_plain_ops import LIBS, _lowered_ops


def _scratch(lib):
    return [lib.SMEM((128,), jnp.float32)]


def _copy_out(multicast: bool):
    def make(lib):
        def body(x_ref, o_ref, smem):
            smem[...] = x_ref[...]
            lib.commit_smem()
            lib.copy_smem_to_gmem(smem, lib.multicast_ref(o_ref, "x") if multicast else o_ref)
            lib.wait_smem_to_gmem(0)
        return body
    return make


def test_multicast_copy_lowers_for_h100_as_jaxs():
    ours, jaxs = (_lowered_ops(LIBS[n], _copy_out(True), (128,), jnp.float32, _scratch)
                  for n in ("ours", "jax"))
    assert ours == jaxs, (ours - jaxs, jaxs - ours)
    plain = _lowered_ops(pallas_mgpu, _copy_out(False), (128,), jnp.float32, _scratch)
    assert ours - plain and not plain - ours        # the multicast adds to the plain copy


def test_multicast_store_is_refused_as_under_jax():
    def make(lib):
        def body(x_ref, o_ref):
            lib.multicast_ref(o_ref, "x")[...] = x_ref[...]
        return body
    for lib in LIBS.values():
        with pytest.raises(NotImplementedError, match="Multicast references are not allowed"):
            _lowered_ops(lib, make, (128,), jnp.float32)


def test_remote_views_carry_jaxs_peer_transform():
    assert pallas_mgpu.PeerMemRef is jax_plgpu.PeerMemRef
    seen = []

    def body(x_ref, o_ref):
        seen.append(pallas_mgpu.remote_ref(o_ref, 0).transforms)
        o_ref[...] = x_ref[...]
    out = jax.ShapeDtypeStruct((128,), jnp.float32)
    jax.jit(pallas_mgpu.kernel(body, out_type=out)).trace(out)
    assert [type(t) for t in seen[0]] == [pallas_mgpu.PeerMemRef]


def _peer_load(lib):
    def body(x_ref, o_ref, smem):
        c = jax.lax.axis_index("c")
        smem[...] = x_ref[...]
        o_ref[...] = lib.cluster_ref(smem, {"c": 1 - c})[...]
    return body


def _peer_store(lib):
    def body(x_ref, o_ref, smem):
        c = jax.lax.axis_index("c")
        lib.cluster_ref(smem, {"c": 1 - c})[...] = x_ref[...]
        o_ref[...] = smem[...]
    return body


@pytest.mark.parametrize("semantics", ["Lane", "Warpgroup"])
def test_cluster_ref_load_lowers_for_h100_as_jaxs(semantics):
    """A load from the peer CTA's SMEM lowers to JAX's operations; a store
    through the view is refused by JAX's lowering, for ours alike."""
    got = {}
    for name, lib in LIBS.items():
        params = lib.CompilerParams(lowering_semantics=getattr(lib.LoweringSemantics, semantics))
        got[name] = _lowered_ops(lib, _peer_load, (128,), jnp.float32, _scratch,
                                 cluster=(2,), cluster_names=("c",), compiler_params=params)
    # in Lane semantics the rebuilt kernel takes 4 more memref.subview of the SMEM
    # buffer on the way to the peer's view (views, no data moved); nothing else differs
    extra = Counter({"memref.subview": 4}) if semantics == "Lane" else Counter()
    assert got["ours"] - got["jax"] == extra and not got["jax"] - got["ours"], (
        got["ours"] - got["jax"], got["jax"] - got["ours"])
    for lib in LIBS.values():
        with pytest.raises(ValueError, match="smem_cluster"):
            _lowered_ops(lib, _peer_store, (128,), jnp.float32, _scratch, cluster=(2,),
                         cluster_names=("c",))
