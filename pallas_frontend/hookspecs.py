"""The pluggy hook specifications a backend plugin implements.

Kept apart from ``backend_api`` so that importing the frontend does not import
pluggy (and importlib.metadata); ``backend_api.hookimpl`` loads this module on
first use.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:
    from pallas_frontend.backend_api import Backend

PROJECT_NAME = "pallas_frontend"

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)


class BackendHookSpecs:
    """Hooks a backend plugin implements (mark implementations with ``hookimpl``)."""

    @hookspec
    def pallas_frontend_backend(self) -> Backend | Sequence[Backend] | None:
        """Return the plugin's ``Backend`` (or several). Must be cheap: do not
        import compilers here; do that in ``Backend.lower``."""
