"""Hostile-input probes, one module per category (issue 24); see common.py."""
