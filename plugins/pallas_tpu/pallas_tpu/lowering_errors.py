"""``LoweringException``: JAX's class, re-exported. This backend lowers through
JAX's Mosaic lowering, and the frontend re-raises a lowering error with its
own type (adding the kernel's line), so ``except pltpu.LoweringException``
catches under ours what it catches under JAX (e.g. an unsupported
``pipeline_mode=Buffered(n)``)."""

from __future__ import annotations

from jax.experimental.pallas.tpu import LoweringException

__all__ = ["LoweringException"]
