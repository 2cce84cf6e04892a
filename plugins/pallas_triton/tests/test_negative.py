"""What the backend refuses, and how it says so (before any code generation or launch)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import pallas_frontend as pl
import pallas_triton as pt
from pallas_frontend.backend_api import BackendCapabilityError, kernel_primitive

TRITON = dict(interpret=pt.InterpretParams())


def _copy(x_ref, o_ref):
    o_ref[...] = x_ref[...]


def test_reshape_of_a_padded_block_names_the_kernel_line():
    # (24,) blocks are padded to 32 lanes (padding.py); a reshape would mix padding into data
    def body(x_ref, o_ref):
        o_ref[...] = x_ref[...].reshape(4, 6)
    f = pl.pallas_call(body, out_shape=jax.ShapeDtypeStruct((8, 6), jnp.float32), grid=(2,),
                       in_specs=[pl.BlockSpec((24,), lambda i: (i,))],
                       out_specs=pl.BlockSpec((4, 6), lambda i: (i, 0)), **TRITON)
    with pytest.raises(BackendCapabilityError, match=r"reshape from \(24,\) to \(4, 6\).*"
                                                     r"kernel 'body'.*test_negative.py"):
        f(jnp.ones(48, jnp.float32))


def test_other_backends_primitive_is_named():
    foreign = kernel_primitive("tpu_only_thing", owner="tpu")
    foreign.def_abstract_eval(lambda x: x)

    def body(x_ref, o_ref):
        o_ref[...] = foreign.bind(x_ref[...])
    f = pl.pallas_call(body, out_shape=jax.ShapeDtypeStruct((16,), jnp.float32), **TRITON)
    with pytest.raises(BackendCapabilityError, match="tpu_only_thing.*'tpu'"):
        f(jnp.ones(16, jnp.float32))


def test_unsupported_primitive_names_primitive_and_line():
    def body(x_ref, o_ref):
        o_ref[...] = jnp.sort(x_ref[...])      # JAX's Triton lowering has no sort either
    f = pl.pallas_call(body, out_shape=jax.ShapeDtypeStruct((16,), jnp.float32), **TRITON)
    with pytest.raises(BackendCapabilityError, match=r"'sort'.*test_negative.py:\d+"):
        f(jnp.ones(16, jnp.float32))


def test_scratch_under_a_triton_primitive_is_refused():
    # Scratch lives in registers; a primitive that addresses memory cannot reach it.
    def body(x_ref, o_ref, s_ref):
        s_ref[...] = x_ref[...]
        pt.atomic_add(s_ref, pl.ds(0, 16), x_ref[...])
        o_ref[...] = s_ref[...]
    f = pl.pallas_call(body, out_shape=jax.ShapeDtypeStruct((16,), jnp.float32),
                       scratch_shapes=[pl.MemorySpace.DEFAULT((16,), jnp.float32)], **TRITON)
    with pytest.raises(BackendCapabilityError,
                       match=r"scratch_shapes\[0\].*'triton_atomic_rmw' at .*test_negative.py:\d+"):
        f(jnp.ones(16, jnp.float32))


def test_compiler_params_on_cpu_point_to_interpret_params():
    from pallas_frontend.backend_api import BackendUnavailableError
    f = pl.pallas_call(_copy, out_shape=jax.ShapeDtypeStruct((16,), jnp.float32),
                       compiler_params=pt.CompilerParams())
    with pytest.raises(BackendUnavailableError, match="does not serve platform 'cpu'.*interpret"):
        jax.jit(f)(np.ones(16, np.float32))


@pytest.mark.parametrize("field, value, rule", [
    ("num_warps", 1024, "a power of two from 1 to 32"),
    ("num_warps", 3, "a power of two from 1 to 32"),
    ("num_warps", 0, "a power of two from 1 to 32"),
    ("num_stages", -1, "an integer >= 1"),
    ("num_ctas", 0, "an integer from 1 to 16"),
    ("maxnreg", -5, "an integer from 1 to 255"),
    ("compute_capability", -1, "an integer >= 70"),
    ("ptx_version", 0, "an integer >= 60"),
    ("num_stages", 0, "an integer >= 1"),
])
def test_compiler_params_refuse_bad_warps_and_stages(field, value, rule):
    """Refused when the params are made, naming the field, the rule and the fix (Triton
    took num_warps=1024 and num_stages=-1 and failed only when compiling or launching)."""
    with pytest.raises(ValueError, match=rf"CompilerParams\({field}={value!r}\): {field} must "
                                         rf"be {rule} .*Pass e\.g\. {field}=\d+, or leave it None"):
        pt.CompilerParams(**{field: value})


@pytest.mark.parametrize("field, value", [("num_warps", True), ("num_warps", 4.0),
                                          ("num_warps", "4"), ("num_stages", 2.5)])
def test_compiler_params_refuse_non_integer_warps_and_stages(field, value):
    """A value of the wrong type is a TypeError, in the words the frontend's field
    check uses (CompilerParams.<field> must be ...)."""
    with pytest.raises(TypeError, match=rf"CompilerParams\.{field} must be .* or None, got "
                                        rf".*Pass e\.g\. {field}=\d+"):
        pt.CompilerParams(**{field: value})


def test_compiler_params_refuse_an_unknown_dot_precision():
    with pytest.raises(ValueError, match=r"dot_input_precision must be one of 'tf32', 'tf32x3', "
                                         r"'ieee'.*Pass e\.g\. dot_input_precision='ieee'"):
        pt.CompilerParams(dot_input_precision="bogus")


def test_compiler_params_take_every_valid_warp_count():
    for n in (1, 2, 4, 8, 16, 32):
        assert pt.CompilerParams(num_warps=n, num_stages=1).triton_options()["num_warps"] == n
    assert pt.CompilerParams(num_warps=np.int64(8)).num_warps == 8
