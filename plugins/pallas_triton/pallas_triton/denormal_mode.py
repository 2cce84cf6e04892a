"""The processor's denormal mode while a kernel runs under Triton's interpreter.

XLA on CPU computes with denormal operands read as zero and denormal results
flushed to zero, and the interpreter's float emitters (``float_edges``,
``reductions``, ``interpret_math``) give XLA's bits only when NumPy computes in
that mode too. Up to JAX 0.12.0.1 a host callback ran with the mode XLA had set
for its own code; from JAX 0.12.1 it runs in the default mode (denormals kept),
measured: ``x * 1.0`` of the float32 2**-149 is 0 in XLA and in 0.12.0.1's
callback, 2**-149 in 0.12.1's. So the interpreter sets the mode itself around a
kernel run, through the C library's ``fegetmode``/``fesetmode`` (x86-64: MXCSR's
DAZ and FTZ bits; AArch64: FPCR.FZ), and gives the caller's mode back after.
Where the mode cannot be set, a warning says once that results on denormals keep
them (a GPU keeps float32 denormals too).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import functools
import platform
import warnings

import numpy as np

# femode_t's bytes, and where in them (byte offset, bits) the denormal controls are
_MODES = {
    "x86_64": (8, 4, 0x8040),        # struct {u16 x87 control; u16; u32 mxcsr}: DAZ | FTZ
    "AMD64": (8, 4, 0x8040),
    "aarch64": (4, 0, 1 << 24),      # femode_t is FPCR: FZ
    "arm64": (4, 0, 1 << 24),
}
_TINY = np.full(4, 2.0 ** -149, np.float32)           # the smallest float32 denormal
_HALF_NORMAL = np.full(4, 2.0 ** -126, np.float32)    # times 0.5: a denormal result


def flushing() -> bool:
    """Whether this thread now reads float32 denormals as zero and flushes them."""
    return not (_TINY * np.float32(1.0)).any() and not (_HALF_NORMAL * np.float32(0.5)).any()


class _Control:
    def __init__(self, lib, size: int, offset: int, bits: int):
        self._lib, self._size, self._offset, self._bits = lib, size, offset, bits

    def get(self):
        mode = ctypes.create_string_buffer(self._size)
        if self._lib.fegetmode(mode) != 0:
            raise OSError("fegetmode failed")
        return mode

    def set(self, mode) -> None:
        if self._lib.fesetmode(mode) != 0:
            raise OSError("fesetmode failed")

    def flushing_copy(self, mode):
        out = ctypes.create_string_buffer(mode.raw, self._size)
        word = ctypes.c_uint32.from_buffer(out, self._offset)
        word.value |= self._bits
        return out


@functools.cache
def _control() -> _Control | None:
    """The C library's mode control on this platform, or None where there is none
    known to work (checked: setting it makes this thread flush)."""
    layout = _MODES.get(platform.machine())
    name = ctypes.util.find_library("m")
    if layout is None or name is None:
        return None
    try:
        lib = ctypes.CDLL(name)
        lib.fegetmode.argtypes = lib.fesetmode.argtypes = [ctypes.c_void_p]
        control = _Control(lib, *layout)
        saved = control.get()
        control.set(control.flushing_copy(saved))
        try:
            works = flushing()
        finally:
            control.set(saved)
    except (OSError, AttributeError):    # no such library or function (musl, macOS)
        return None
    return control if works else None


@functools.cache
def _warn_once() -> None:
    warnings.warn(
        f"pallas_triton: cannot set the denormals-are-zero mode on this platform "
        f"({platform.system()} {platform.machine()}); under Triton's interpreter, float "
        "results on denormal operands keep the denormals where XLA on CPU reads them as "
        "zero (max, min, sign, clamp, sums, ...). Compare such results with denormals "
        "read as zero.", RuntimeWarning, stacklevel=3)


@contextlib.contextmanager
def as_xla_cpu():
    """Run the block in XLA's CPU denormal mode (flushed), then restore the caller's."""
    if flushing():              # already (a host callback of JAX 0.12.0.1 or older)
        yield
        return
    control = _control()
    if control is None:
        _warn_once()
        yield
        return
    saved = control.get()
    control.set(control.flushing_copy(saved))
    try:
        yield
    finally:
        control.set(saved)
