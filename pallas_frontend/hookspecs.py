"""The pluggy hook specifications a backend plugin implements.

Kept apart from ``backend_api`` so that importing the frontend does not import
pluggy (and importlib.metadata); ``backend_api.hookimpl`` loads this module on
first use.
"""

from __future__ import annotations

from typing import Any

import pluggy

# No import of ``backend_api`` here, not even for typing: the contract imports
# this module, and the contract imports nothing back.
PROJECT_NAME = "pallas_frontend"

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)


class BackendHookSpecs:
    """Hooks a backend plugin implements (mark implementations with ``hookimpl``)."""

    @hookspec
    def pallas_frontend_backend(self) -> Any:
        """Return the plugin's ``backend_api.Backend`` (or a sequence of them,
        or None). Must be cheap: do not import compilers here; do that in
        ``Backend.lower``."""
