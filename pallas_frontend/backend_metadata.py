"""What a backend declares in its distribution's metadata, readable unimported.

Selection must not import a plugin it will not choose, yet the default backend
of a platform is the one of highest priority that serves it. So a plugin
declares its platforms and priority as entry point *names* of the group
``pallas_frontend.backend_info`` (entry point values must be object
references, names may be any dotted text; the values are never loaded)::

    [project.entry-points."pallas_frontend.backend_info"]
    "triton.platforms.cuda.rocm" = "pallas_triton.backend"
    "triton.priority.10" = "pallas_triton.backend"

A plugin that declares nothing is imported whenever a non-CPU default is
chosen. The declared platforms must include the ``Backend``'s ``platforms``
and the declared priority must be at least its ``priority`` (an upper bound:
a backend whose priority depends on the machine declares the highest); the
conformance suite checks both. Unknown keys are ignored, so
that later frontends may read more.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

INFO_GROUP = "pallas_frontend.backend_info"


@dataclasses.dataclass(frozen=True)
class Declared:
    """A backend's platforms and priority as its metadata states them."""
    platforms: tuple[str, ...]
    priority: int = 0


def parse_declarations(entry_names: Iterable[str]) -> dict[str, Declared]:
    """Backend name -> ``Declared`` from the entry point names of ``INFO_GROUP``."""
    platforms: dict[str, tuple[str, ...]] = {}
    priority: dict[str, int] = {}
    for entry in entry_names:
        name, _, rest = entry.partition(".")
        key, _, value = rest.partition(".")
        if key == "platforms" and value:
            platforms[name] = platforms.get(name, ()) + tuple(p for p in value.split(".") if p)
        elif key == "priority":
            try:
                priority[name] = int(value)
            except ValueError:
                continue        # unreadable: the backend counts as undeclared
    return {name: Declared(plats, priority.get(name, 0)) for name, plats in platforms.items()}


def declaration_entries(name: str, platforms: Iterable[str], priority: int) -> list[str]:
    """The entry point names that declare ``platforms`` and ``priority`` (for docs and tests)."""
    return [f"{name}.platforms.{'.'.join(platforms)}", f"{name}.priority.{int(priority)}"]
