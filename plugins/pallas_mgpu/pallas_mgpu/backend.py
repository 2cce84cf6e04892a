"""The Mosaic GPU backend's registration: discoverable, but not yet able to lower."""

from pallas_frontend import backend_api

import pallas_mgpu


class MosaicGpuBackend(backend_api.Backend):
    name = "mgpu"
    distribution = "pallas-mgpu"
    version = pallas_mgpu.__version__
    api_version = (1, 0)
    platforms = ("cuda",)
    priority = -10           # never the default until it can lower
    compiler_params_type = pallas_mgpu.CompilerParams
    pip_extra = "mgpu"

    def is_available(self):
        return False, "pallas_mgpu cannot lower kernels yet (its Mosaic GPU lowering is not written)"

    def check(self, kernel):
        raise backend_api.BackendCapabilityError(
            f"Backend 'mgpu' cannot lower kernel '{kernel.name}' ({kernel.source}): the Mosaic "
            "GPU lowering is not written yet. Use pallas_triton on GPUs, or interpret=True.")


@backend_api.hookimpl
def pallas_frontend_backend():
    return MosaicGpuBackend()
