"""The built-in reference interpreter backend."""

import sys

from pallas_frontend import grid_analysis as _grid_analysis

# The grid analysis moved to ``pallas_frontend.grid_analysis`` (the contract
# uses it too); the old module path keeps working.
sys.modules[__name__ + ".grid_analysis"] = _grid_analysis
grid_analysis = _grid_analysis
