"""The conformance suite backends run against themselves."""
