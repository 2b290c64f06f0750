"""Where kernels find their arrays when they are measured and compared.

Imported by the runner process too, so it needs nothing but numpy.
"""
from __future__ import annotations

import numpy as np

PAGE = 4096
PAGE_OFFSET = 16


def placed(a) -> np.ndarray:
    """A C-contiguous copy of ``a`` that starts ``PAGE_OFFSET`` (16) bytes past a page boundary.

    Where a kernel's arrays start changes its speed: a 64-byte vector access to
    an array that is not 64-byte aligned touches two cache lines, and arrays at
    the same offset within a page compete for the same L1 sets (4K aliasing).
    Side by side on matmul 1024 (Zen 4), a schedule that reads B and writes C
    in place ran at 114-191 GFLOP/s depending on its arrays' offsets, one that
    packs B and accumulates C in registers at 201-216.  Large numpy arrays come
    from glibc's mmap, 16 bytes past a page boundary, so kernels are measured
    and compared on arrays placed that way: a schedule that is fast only on
    aligned arrays is not fast for users.  Why: docs/decisions/008-arrays-placed-like-numpy.md
    """
    a = np.ascontiguousarray(a)
    buf = np.empty(a.nbytes + PAGE + PAGE_OFFSET, np.uint8)
    start = (PAGE_OFFSET - buf.ctypes.data) % PAGE
    out = buf[start:start + a.nbytes].view(a.dtype).reshape(a.shape)
    out[...] = a
    return out


def placed_empty(shape, dtype) -> np.ndarray:
    """An uninitialised array placed as :func:`placed` places a copy."""
    return placed(np.empty(shape, dtype))
