"""pallas_frontend demo: three kernels on the default backend, checked against NumPy.

Run: python examples/demo.py
"""

import sys

if sys.version_info < (3, 11):   # before importing jax: one line, not an ImportError
    sys.exit("pallas-frontend needs Python >= 3.11 (JAX 0.10); this is Python %s. "
             "Install Python 3.11+ and rerun." % sys.version.split()[0])

import functools  # noqa: E402
import time  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import pallas_frontend as pl  # noqa: E402


# --- vector add: the seed's example, with block *indices* in the index_map ----

def add_kernel(x_ref, y_ref, o_ref):
    o_ref[...] = x_ref[...] + y_ref[...]


def add(x, y, block_size=128):
    spec = pl.BlockSpec((block_size,), lambda i: (i,))      # block index i, not i * block_size
    return pl.pallas_call(add_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                          grid=(pl.cdiv(x.shape[0], block_size),),
                          in_specs=[spec, spec], out_specs=spec)(x, y)


# --- blocked matmul accumulating over the k grid axis -------------------------

def matmul_kernel(x_ref, y_ref, o_ref, acc_ref, *, num_k):
    @pl.when(pl.program_id(2) == 0)
    def _():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    acc_ref[...] += jnp.dot(x_ref[...], y_ref[...], preferred_element_type=jnp.float32)

    @pl.when(pl.program_id(2) == num_k - 1)
    def _():
        o_ref[...] = acc_ref[...]


def matmul(x, y, bm=64, bn=64, bk=64):
    (m, k), (_, n) = x.shape, y.shape
    return pl.pallas_call(
        functools.partial(matmul_kernel, num_k=k // bk),
        out_shape=jax.ShapeDtypeStruct((m, n), jnp.float32),
        grid=(m // bm, n // bn, k // bk),
        in_specs=[pl.BlockSpec((bm, bk), lambda i, j, kk: (i, kk)),
                  pl.BlockSpec((bk, bn), lambda i, j, kk: (kk, j))],
        out_specs=pl.BlockSpec((bm, bn), lambda i, j, kk: (i, j)),
        scratch_shapes=[pl.MemorySpace.DEFAULT((bm, bn), jnp.float32)])(x, y)


# --- row softmax ---------------------------------------------------------------

def softmax_kernel(x_ref, o_ref):
    x = x_ref[...]
    e = jnp.exp(x - x.max(axis=-1, keepdims=True))
    o_ref[...] = e / e.sum(axis=-1, keepdims=True)


def softmax(x, rows=16):
    spec = pl.BlockSpec((rows, x.shape[1]), lambda i: (i, 0))
    return pl.pallas_call(softmax_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                          grid=(pl.cdiv(x.shape[0], rows),), in_specs=[spec], out_specs=spec)(x)


def np_softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def main() -> int:
    rng = np.random.default_rng()
    backend = pl.which_backend()
    print(f"pallas_frontend {pl.__version__} on JAX {jax.__version__}, platform "
          f"'{jax.default_backend()}': default backend '{backend.name}' ({backend.version})")
    x, y = (rng.standard_normal(100_000).astype(np.float32) for _ in range(2))
    a, b = rng.standard_normal((256, 512)).astype(np.float32), rng.standard_normal((512, 192)).astype(np.float32)
    s = (3 * rng.standard_normal((1000, 256))).astype(np.float32)
    cases = [
        ("vector add (100000, blocks of 128)", lambda: add(x, y), x.astype(np.float64) + y, 1e-6),
        ("matmul 256x512 @ 512x192 (k on the grid)", lambda: matmul(a, b),
         a.astype(np.float64) @ b, 1e-4),
        ("row softmax 1000x256 (16-row blocks)", lambda: softmax(s), np_softmax(s.astype(np.float64)), 1e-5),
    ]
    failures = 0
    for name, run, expect, tol in cases:
        t0 = time.perf_counter()
        out = np.asarray(jax.block_until_ready(run()))
        dt = time.perf_counter() - t0
        err = float(np.max(np.abs(out - expect) / (np.abs(expect) + 1)))
        ok = err <= tol
        failures += not ok
        print(f"  {'PASS' if ok else 'FAIL'}  {name:44s} max rel err {err:.2e} (tol {tol:.0e})  "
              f"{dt * 1e3:7.1f} ms incl. compile")
    print("all kernels match NumPy" if not failures else f"{failures} kernel(s) differ from NumPy")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
