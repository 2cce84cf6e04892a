"""pallas_tpu.tpu_sc: the plain-data names JAX's SparseCore code needs to import
(PackFormat) match JAX's; every SparseCore kernel name is refused with the
reason. pltpu.GridDimensionSemantics matches JAX's and CompilerParams takes it."""

import pytest
from jax.experimental.pallas import tpu as jax_pltpu
from jax.experimental.pallas import tpu_sc as jax_plsc

import pallas_tpu as pltpu
from pallas_frontend.jax_window import JAX_VERSION
from pallas_tpu import tpu_sc as plsc


def test_pack_format_matches_jax():
    assert [(m.name, m.value) for m in plsc.PackFormat] == \
        [(m.name, m.value) for m in jax_plsc.PackFormat]


@pytest.mark.parametrize("name", sorted(plsc.SPARSECORE_NAMES))
def test_sparsecore_kernel_names_are_refused_with_the_reason(name):
    # a name JAX 0.12 has, not a typo of ours (JAX 0.10 lacks a few of them)
    assert hasattr(jax_plsc, name) or JAX_VERSION < (0, 12)
    with pytest.raises(AttributeError, match=f"tpu_sc.{name}: SparseCore kernels are not "
                                             "provided by pallas-tpu.*jax.experimental"):
        getattr(plsc, name)


def test_grid_dimension_semantics_match_jax_and_are_taken_by_compiler_params():
    assert [(m.name, m.value) for m in pltpu.GridDimensionSemantics] == \
        [(m.name, m.value) for m in jax_pltpu.GridDimensionSemantics]
    sem = pltpu.GridDimensionSemantics
    assert sem.PARALLEL == pltpu.PARALLEL and sem.ARBITRARY == pltpu.ARBITRARY
    params = pltpu.CompilerParams(dimension_semantics=(sem.PARALLEL, sem.ARBITRARY))
    assert params.dimension_semantics == (pltpu.PARALLEL, pltpu.ARBITRARY)
