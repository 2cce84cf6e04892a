"""Arrays of 2**31 elements or more: block offsets computed in 64 bits (issue 24 #4).

Before: program id * block size in int32 wrapped, and block 2048 of 2**20 int8
elements was read from block 0. The run needs ~5 GB: it runs in a subprocess,
skipped where the machine has less memory available.
"""

import os
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import pytest

import pallas_frontend as pl
import pallas_triton as pt

BLOCK = 2 ** 20
N = 2050 * BLOCK            # > 2**31 elements


def _far_blocks(**call):
    def body(x_ref, o_ref):
        o_ref[...] = x_ref[...] + 1
    return pl.pallas_call(body, grid=(2,), in_specs=[pl.BlockSpec((BLOCK,), lambda i: (2048 + i,))],
                          out_specs=pl.BlockSpec((BLOCK,), lambda i: (i,)),
                          out_shape=jax.ShapeDtypeStruct((2 * BLOCK,), jnp.int8), **call)


@pytest.mark.parametrize("target", [("cuda", 90), ("hip", "gfx942")], ids=str)
def test_offsets_are_64_bit_in_the_compiled_kernel(target):
    # the same offsets past 2**31 with 1024-element blocks: a 2**20-element block
    # costs Triton's GPU compile about a minute and proves nothing more
    small, first = 2 ** 10, 2 ** 21

    def body(x_ref, o_ref):
        o_ref[...] = x_ref[...] + 1
    far = pl.pallas_call(body, grid=(2,),
                         in_specs=[pl.BlockSpec((small,), lambda i: (first + i,))],
                         out_specs=pl.BlockSpec((small,), lambda i: (i,)),
                         out_shape=jax.ShapeDtypeStruct((2 * small,), jnp.int8))
    n = (first + 2) * small
    assert n > 2 ** 31
    asm = pt.compile_for_target(lambda x: far(x), jax.ShapeDtypeStruct((n,), jnp.int8),
                                target=target)
    assert ".to(tl.int64)" in asm["source"]
    assert "i64" in asm["ttir"]


def _available_bytes():
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


@pytest.mark.skipif(_available_bytes() < 12 * 2 ** 30, reason="needs ~5 GB (12 GB available)")
def test_far_blocks_read_the_right_data_under_the_interpreter():
    script = textwrap.dedent(f"""
        import resource, numpy as np, jax, jax.numpy as jnp
        resource.setrlimit(resource.RLIMIT_AS, (12 * 2 ** 30, 12 * 2 ** 30))
        import pallas_triton as pt
        from test_large_offsets import _far_blocks, BLOCK, N
        x = np.zeros(N, np.int8)
        x[2048 * BLOCK:] = np.arange(2 * BLOCK) % 101      # blocks 0..2047 stay 0
        # jit: the eager call converts the 2 GB operand more than once
        out = np.asarray(jax.jit(_far_blocks(interpret=pt.InterpretParams()))(jax.device_put(x)))
        expect = (np.arange(2 * BLOCK) % 101 + 1).astype(np.int8)
        print("OK" if np.array_equal(out, expect) else "WRONG", int(out[:8].sum()))
    """)
    env = dict(os.environ, JAX_PLATFORMS="cpu",
               PYTHONPATH=os.pathsep.join(filter(None, [os.path.dirname(__file__),
                                                        os.environ.get("PYTHONPATH")])))
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=600, env=env)
    assert proc.stdout.strip().startswith("OK"), proc.stdout + proc.stderr[-3000:]
