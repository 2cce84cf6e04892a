"""The backend's capability error, raised by check() and by code generation."""

from __future__ import annotations

from pallas_frontend.backend_api import BackendCapabilityError


class TritonCapabilityError(BackendCapabilityError):
    """A kernel uses something the Triton backend cannot express."""


def unsupported(what: str) -> TritonCapabilityError:
    return TritonCapabilityError(f"The Triton backend does not support {what}.")
