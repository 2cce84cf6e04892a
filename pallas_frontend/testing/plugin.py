"""pytest plugin of the conformance suite (filled in by the plugin issue)."""
