"""Running a generated kernel under Triton's interpreter, as a host callback."""

from __future__ import annotations

import threading

import numpy as np

from pallas_triton import denormal_mode, triton_runtime

_lock = threading.Lock()   # the interpreter patches triton.language globally while it runs


def fill_value(dtype):
    dtype = np.dtype(dtype)
    if np.issubdtype(dtype, np.inexact) or dtype.name == "bfloat16":
        return np.nan
    if np.issubdtype(dtype, np.integer):
        return np.iinfo(dtype).min
    return 0


def host_runner(kernel, gen):
    """A NumPy function (inputs -> outputs) that runs ``gen`` under the interpreter."""
    namespace = triton_runtime.interpreted(triton_runtime.load_module(gen.source, gen.name))
    fn = namespace[gen.name]
    aliases = {o: i for i, o in kernel.input_output_aliases}

    def run(*inputs):
        ins = [np.ascontiguousarray(np.asarray(x)) for x in inputs]
        outs = []
        for k, m in enumerate(kernel.out_mappings):
            if k in aliases:
                outs.append(np.array(ins[aliases[k]], copy=True))
            else:
                outs.append(np.full(m.array_shape, fill_value(m.dtype), dtype=m.dtype))
        # XLA's CPU mode: the float emitters give XLA's bits on denormals only in it
        with _lock, denormal_mode.as_xla_cpu():
            triton_runtime.run_interpreted(fn, gen.num_programs, ins + outs)
        return outs
    return run
