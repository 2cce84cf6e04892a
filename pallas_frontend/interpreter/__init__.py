"""The built-in reference interpreter backend."""
