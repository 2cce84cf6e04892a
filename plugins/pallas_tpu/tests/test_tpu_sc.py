"""pallas_tpu.tpu_sc: PackFormat matches JAX's; every name of JAX's tpu_sc is
provided, a class where JAX's is one, with JAX's parameter names.
pltpu.GridDimensionSemantics matches JAX's and CompilerParams takes it."""

import inspect

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
def test_every_sparsecore_name_is_provided_with_jaxs_signature(name):
    ours = getattr(plsc, name)
    if not hasattr(jax_plsc, name):      # JAX 0.10/0.11 lack a few of 0.12's names
        assert JAX_VERSION < (0, 12), name
        return
    theirs = getattr(jax_plsc, name)
    assert isinstance(ours, type) == isinstance(theirs, type), name
    if callable(theirs) and not isinstance(theirs, type):
        assert (list(inspect.signature(ours).parameters)
                == list(inspect.signature(theirs).parameters)), name


def test_grid_dimension_semantics_match_jax_and_are_taken_by_compiler_params():
    assert [(m.name, m.value) for m in pltpu.GridDimensionSemantics] == \
        [(m.name, m.value) for m in jax_pltpu.GridDimensionSemantics]
    sem = pltpu.GridDimensionSemantics
    assert sem.PARALLEL == pltpu.PARALLEL and sem.ARBITRARY == pltpu.ARBITRARY
    params = pltpu.CompilerParams(dimension_semantics=(sem.PARALLEL, sem.ARBITRARY))
    assert params.dimension_semantics == (pltpu.PARALLEL, pltpu.ARBITRARY)
