"""Scalar prefetch (``pallas_triton.PrefetchScalarGridSpec``): data-dependent index maps
evaluated inside the generated kernel.

Each kernel runs under Triton's interpreter on fresh random data and is compared with
NumPy in float64 and with the frontend's interpreter; the same kernels lower to XLA's
Triton custom call for cuda and compile for sm_90 and gfx942 with Triton alone. (The
XLA:GPU device-less compile of both is in tests/gpu_aot_cases.py, tox -e triton-cuda-aot.)
"""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import pallas_frontend as pl
import pallas_triton as pt
from pallas_frontend.backend_api import BackendCapabilityError
from pallas_triton import schedule

import prefetch_kernels as P  # noqa: E402  (this directory)

TRITON = dict(interpret=pt.InterpretParams())
FRONTEND = dict(interpret=True)
# f32 dots at HIGHEST and an f32 online softmax against float64
ATTENTION_TOL = dict(rtol=1e-5, atol=1e-5)


def _kernel(fn, *args):
    return pt.kernel_ir_of(fn, *args)


def test_gather_blocks(rng):
    idx, x = P.gather_inputs(rng)
    fn = jax.jit(lambda i, x: P.gather_blocks(i, x, block_rows=8, **TRITON))
    got = np.asarray(fn(idx, x))
    np.testing.assert_allclose(got, P.gather_blocks_ref(idx, x, 8), rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(got, P.gather_blocks(idx, x, block_rows=8, **FRONTEND))
    plan = schedule.plan(_kernel(lambda i, x: P.gather_blocks(i, x, block_rows=8, **TRITON),
                                 idx, x))
    assert plan.parallel_axes == (0,) and plan.sequential_axes == ()


def test_gather_blocks_under_vmap_of_the_data(rng):
    # vmap adds a batch grid axis; the prefetched indices stay shared
    idx, _ = P.gather_inputs(rng)
    xs = rng.standard_normal((3, 48, 32)).astype(np.float32)
    got = jax.vmap(lambda x: P.gather_blocks(idx, x, block_rows=8, **TRITON))(xs)
    want = np.stack([P.gather_blocks_ref(idx, x, 8) for x in xs])
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-6, atol=1e-6)


def test_gather_blocks_under_vmap_of_the_indices(rng):
    # a batched prefetch operand: the frontend launches the kernel once per batch element
    _, x = P.gather_inputs(rng)
    idxs = rng.integers(0, 6, (3, 8)).astype(np.int32)
    got = jax.vmap(lambda i: P.gather_blocks(i, x, block_rows=8, **TRITON))(idxs)
    want = np.stack([P.gather_blocks_ref(i, x, 8) for i in idxs])
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-6, atol=1e-6)


def test_block_sparse_attention(rng):
    args = P.attention_inputs(rng)
    got = np.asarray(jax.jit(lambda *a: P.attention(*a, **TRITON))(*args))
    want = P.block_sparse_attention_ref(*args, bq=16, bk=16)
    np.testing.assert_allclose(got, want, **ATTENTION_TOL)
    np.testing.assert_allclose(got, P.attention(*args, **FRONTEND), rtol=1e-5, atol=1e-6)
    # heads and query blocks launch; the kv list is walked by a loop in each program
    plan = schedule.plan(_kernel(lambda *a: P.attention(*a, **TRITON), *args))
    assert plan.parallel_axes == (0, 1) and plan.sequential_axes == (2,)


def test_block_sparse_attention_uneven_lists(rng):
    # longer sequences, sparser lists: many (head, q block) lists end early
    args = P.attention_inputs(rng, heads=1, lq=128, lkv=128, d=32, bq=32, bk=16, keep=0.3)
    got = P.block_sparse_attention(*args, bq=32, bk=16, **TRITON)
    want = P.block_sparse_attention_ref(*args, bq=32, bk=16)
    np.testing.assert_allclose(np.asarray(got), want, **ATTENTION_TOL)


def test_output_index_map_from_data_loops(rng):
    # out block perm[i]: no axis is provably independent, so the one program loops
    x = rng.standard_normal((40, 16)).astype(np.float32)
    perm = rng.permutation(5).astype(np.int32)
    got = P.scatter_blocks(perm, x, block_rows=8, **TRITON)
    np.testing.assert_array_equal(np.asarray(got), P.scatter_blocks_ref(perm, x, 8))
    plan = schedule.plan(_kernel(lambda p, x: P.scatter_blocks(p, x, block_rows=8, **TRITON),
                                 perm, x))
    assert plan.parallel_axes == () and plan.sequential_axes == (0,)
    assert not plan.register_outputs      # its block moves with the data: stays in memory


@pytest.mark.parametrize("kernel", ["gather", "scatter"])
def test_prefetched_block_index_out_of_range_is_an_error(rng, kernel):
    # checked as the interpreted kernel runs (it read or wrote stray host memory before)
    idx, x = P.gather_inputs(rng, n_blocks=5, n_out=5)
    bad = int(rng.integers(5, 1000))
    idx[3] = bad
    fn = {"gather": P.gather_blocks, "scatter": P.scatter_blocks}[kernel]
    origin = "args\\[0\\]" if kernel == "gather" else "outputs"
    with pytest.raises(Exception, match=rf"Kernel 'body': the index_map of {origin}.*"
                                        rf"selected block {bad} at grid point \(3,\); its valid "
                                        r"block indices are 0..4"):
        jax.block_until_ready(fn(idx, x, block_rows=8, **TRITON))
    # the GPU code carries no such check
    src = pt.generate_source(_kernel(lambda i, x: fn(i, x, block_rows=8, **TRITON), idx, x),
                             target="cuda").source
    assert "_pallas_check_block" not in src


def test_writing_a_prefetched_operand_is_refused():
    def body(idx_ref, x_ref, o_ref):
        idx_ref[0] = 1
        o_ref[...] = x_ref[...]
    f = pl.pallas_call(
        body, jax.ShapeDtypeStruct((8, 16), jnp.float32),
        grid_spec=pt.PrefetchScalarGridSpec(
            num_scalar_prefetch=1, grid=(1,),
            in_specs=[pl.BlockSpec((8, 16), lambda i, idx: (idx[0], 0))],
            out_specs=pl.BlockSpec((8, 16), lambda i, idx: (i, 0))), **TRITON)
    with pytest.raises(BackendCapabilityError,
                       match=r"Kernel 'body' writes scalar-prefetch operand 0 at "
                             r".*test_scalar_prefetch.py.*read-only"):
        f(jnp.zeros(2, jnp.int32), jnp.ones((16, 16), jnp.float32))


def test_num_scalar_prefetch_is_validated():
    with pytest.raises(ValueError, match="num_scalar_prefetch must be a non-negative int"):
        pt.PrefetchScalarGridSpec(num_scalar_prefetch=-1, grid=(1,))


@pytest.mark.parametrize("case", ["prefetch_gather_blocks", "prefetch_block_sparse_attention"])
def test_lowers_to_one_triton_custom_call_for_cuda(case):
    fn, structs, warps, programs = P.aot_cases()[case]
    text = jax.jit(fn).trace(*structs).lower(lowering_platforms=("cuda",)).as_text()
    calls = [line for line in text.splitlines() if "stablehlo.custom_call" in line]
    assert len(calls) == 1 and "@__gpu$xla.gpu.triton" in calls[0], calls
    assert re.search(rf"\bgrid_x = {programs} : i32", calls[0])
    assert re.search(rf"\bnum_warps = {warps} : i32", calls[0])
    # the prefetched operands are the custom call's first operands, as in the pallas_call
    header = calls[0][calls[0].index("tt.func public"):].split("attributes")[0]
    args = re.findall(r"%(\w+): !tt\.ptr<(\w+)>", header)
    n_pf = {"prefetch_gather_blocks": 1, "prefetch_block_sparse_attention": 2}[case]
    assert [name for name, _ in args[:n_pf]] == [f"pf{k}_ptr" for k in range(n_pf)]
    assert [t for _, t in args[:n_pf]] == ["i32"] * n_pf
    assert len(args) == len(structs) + 1         # operands, then the one output


@pytest.mark.parametrize("target", [("cuda", 90), ("hip", "gfx942")], ids=["sm_90", "gfx942"])
def test_attention_compiles_for_gpus_with_triton_alone(target):
    fn, structs, warps, _ = P.aot_cases()["prefetch_block_sparse_attention"]
    asm = pt.compile_for_target(fn, *structs, target=target,
                                warp_size=32 if target[0] == "cuda" else 64)
    assert asm["metadata"].num_warps == warps
    if target[0] == "cuda":
        assert ".target sm_90" in asm["ptx"] and asm["cubin"]
    else:
        assert "gfx942" in asm["amdgcn"] and asm["hsaco"]
    # the kv block index is loaded from the prefetched list inside the kernel
    assert re.search(r"def pallas_body\(pf0_ptr, pf1_ptr, in0_ptr", asm["source"])
