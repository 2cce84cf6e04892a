"""Sphinx configuration of the pallas-frontend docs site (tox -e docs).

Sphinx + MyST (see docs/contributing.md for why): the pages are the Markdown
files of docs/ as they are, the API reference is autodoc over the installed
frontend and plugins, and the build runs with -W (a warning fails it).
"""

import pallas_frontend

project = "pallas-frontend"
release = version = pallas_frontend.__version__
author = "pallas-frontend contributors"
copyright = "pallas-frontend contributors"

extensions = ["myst_parser", "sphinx.ext.autodoc"]
source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "requirements.txt"]

myst_heading_anchors = 3
myst_enable_extensions = ["colon_fence"]
# Markdown links to repository files outside docs/ (README.md, plugins/...)
# are fine on GitHub; the site does not host those files.
suppress_warnings = ["myst.xref_missing"]

autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_default_options = {"members": True, "undoc-members": False, "show-inheritance": True}

html_theme = "alabaster"
html_title = f"pallas-frontend {release}"
