"""Arrays with a dim too long for int32 block offsets, run exactly.

The interpreter moves blocks with ``lax.dynamic_slice`` at int32 starts (JAX
keeps x64 off by default), so a block that starts at element 2**31 or later
would be read at a wrapped offset. Such a ``Blocked(b)`` dim of ``n`` elements
is split before planning into ``(ceil(n / b), b)``: the first part is indexed
by the block index (a ``Squeezed`` dim), the second holds one block (index 0).
The kernel sees the same blocks; every offset fits int32. The array is padded
to whole blocks with the interpreter's padding value, which is what an edge
block reads anyway, and outputs are cut back. Other dim kinds of that length
are refused.
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
from jax import lax

from pallas_frontend import _jax_compat as jc
from pallas_frontend.backend_api import BlockMapping, KernelIR
from pallas_frontend.interpreter.execute import padding_value
from pallas_frontend.specs import Blocked, BoundedSlice, Squeezed

INT32_MAX = (1 << 31) - 1


@dataclasses.dataclass(frozen=True)
class SplitKernel:
    """The rewritten kernel, and per operand the dims split (dim -> block size)."""
    kernel: KernelIR
    splits: tuple[dict[int, int], ...]          # inputs then outputs

    def prepare_operands(self, operands):
        """The operands (dynamic grid sizes, scalar prefetch, then inputs), inputs split."""
        n_lead = len(self.kernel.dynamic_grid_axes) + self.kernel.num_scalar_prefetch
        n_in = len(self.kernel.in_mappings)
        inputs = [_split_array(x, s) for x, s in zip(operands[n_lead:], self.splits[:n_in])]
        return [*operands[:n_lead], *inputs]

    def finish_outputs(self, outs, original: KernelIR):
        n_in = len(self.kernel.in_mappings)
        return [_join_array(o, s, m.array_shape)
                for o, s, m in zip(outs, self.splits[n_in:], original.out_mappings)]


def _wide_dims(m: BlockMapping, kernel: KernelIR) -> dict[int, int]:
    """dim -> block size of the dims whose block starts may pass int32."""
    wide = {}
    for d, (n, dim) in enumerate(zip(m.array_shape, m.block_dims)):
        if not isinstance(n, int) or n - 1 <= INT32_MAX:
            continue                      # a jax.export symbolic dim: int32 offsets assumed
        if isinstance(dim, Blocked) and dim.block_size >= n:
            continue                      # one block: its start is 0
        if not isinstance(dim, Blocked) or -(-n // dim.block_size) > INT32_MAX:
            raise NotImplementedError(
                f"The reference interpreter cannot run kernel '{kernel.name}' ({kernel.source})"
                f": {m.origin} has {n} elements in dim {d}, past int32 offsets, and that dim "
                f"is {dim!r}, whose offsets would wrap. Block such a dim with pl.Blocked(b) "
                f"so that it has fewer than 2**31 blocks.")
        wide[d] = dim.block_size
    return wide


def split_wide_dims(kernel: KernelIR) -> SplitKernel | None:
    """The kernel with every too-long Blocked dim split (see the module doc), or
    None when every block offset fits int32."""
    splits = tuple(_wide_dims(m, kernel) for m in kernel.mappings)
    if not any(splits):
        return None
    n_in = len(kernel.in_mappings)
    for i, o in kernel.input_output_aliases:
        i -= kernel.num_scalar_prefetch       # aliases count the prefetch operands
        if splits[i] != splits[n_in + o]:
            raise NotImplementedError(
                f"Kernel '{kernel.name}' ({kernel.source}): aliased {kernel.in_mappings[i].origin}"
                f" and {kernel.out_mappings[o].origin} have dims beyond int32 offsets blocked "
                "differently; block them alike.")
    maps = tuple(_split_mapping(m, s) if s else m for m, s in zip(kernel.mappings, splits))
    return SplitKernel(kernel.replace(in_mappings=maps[:n_in], out_mappings=maps[n_in:]), splits)


def _split_mapping(m: BlockMapping, split: dict[int, int]) -> BlockMapping:
    shape, dims, zero_after = [], [], []
    out_pos = 0
    for d, (n, dim) in enumerate(zip(m.array_shape, m.block_dims)):
        if d in split:
            b = split[d]
            shape += [-(-n // b), b]
            dims += [Squeezed(), Blocked(b)]
            zero_after.append(out_pos)
        else:
            shape.append(n)
            dims.append(dim)
        out_pos += 2 if isinstance(dim, BoundedSlice) else 1
    old = m.index_map

    def index_map(*args):
        outs = list(jc.eval_jaxpr(old, *args))
        for p in reversed(zero_after):      # block index, then block 0 within it
            outs.insert(p + 1, jnp.int32(0))
        return outs

    new, _ = jc.trace_kernel_jaxpr(index_map, [v.aval for v in old.jaxpr.invars],
                                   traced_for="pallas index_map")
    return dataclasses.replace(m, array_shape=tuple(shape), block_dims=tuple(dims),
                               index_map=new)


def _split_array(x, split: dict[int, int]):
    if not split:
        return x
    pads = [(0, -x.shape[d] % split[d], 0) if d in split else (0, 0, 0) for d in range(x.ndim)]
    if any(hi for _, hi, _ in pads):
        x = lax.pad(x, padding_value(x.dtype), pads)
    shape = []
    for d, n in enumerate(x.shape):
        shape += [n // split[d], split[d]] if d in split else [n]
    return x.reshape(shape)


def _join_array(x, split: dict[int, int], shape):
    if not split:
        return x
    whole = [(-(-n // split[d]) * split[d]) if d in split else n for d, n in enumerate(shape)]
    x = x.reshape(whole)
    if list(whole) != list(shape):
        x = lax.slice(x, [0] * len(shape), list(shape))
    return x
