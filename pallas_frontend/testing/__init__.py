"""The conformance suite: the tests every backend runs against itself.

``pytest --pyargs pallas_frontend.testing --pallas-backend=NAME`` runs it; the
pytest plugin (``plugin.py``) selects the backend, applies capability markers
and manifests; ``kernels.py`` holds the kernels and their NumPy references.
"""
