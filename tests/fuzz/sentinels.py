"""Arrays fenced by sentinels (out-of-bounds writes show), and the values outputs are poisoned with."""
from __future__ import annotations

import numpy as np

SENTINEL = {"float32": np.array([0x7FA5A5A5], np.uint32).view(np.float32)[0],
            "float64": np.array([0x7FF5A5A5A5A5A5A5], np.uint64).view(np.float64)[0],
            "int32": np.int32(0x5A5A5A5A)}
POISON = {"float32": np.float32(np.nan), "float64": np.float64(np.nan), "int32": np.int32(-0x3C3C3C3D)}
POISON2 = {"float32": np.float32(-12345.5), "float64": np.float64(-12345.5), "int32": np.int32(0x1234567)}


class Guarded:
    """An array that is a contiguous view in the middle of a bigger buffer filled with a sentinel.

    The view starts 16 bytes past a 64-byte boundary (as large numpy arrays do); ``guard`` bytes of
    sentinel lie on each side (64 KiB: the stray writes seen so far reached a few KiB; farther ones
    may crash, which the worker processes count).
    """

    def __init__(self, shape, dtype, guard: int = (64 << 10) + 16):
        dtype = np.dtype(dtype)
        n = int(np.prod(shape, dtype=np.int64))
        self.guard_elems = -(-guard // dtype.itemsize)
        total = n + 2 * self.guard_elems
        raw = np.empty(total * dtype.itemsize + 128, np.uint8)
        off = (16 - raw.ctypes.data) % 64
        self.buf = raw[off:off + total * dtype.itemsize].view(dtype)
        self.buf[...] = SENTINEL[dtype.name]
        self.n = n
        self.array = self.buf[self.guard_elems:self.guard_elems + n].reshape(shape)
        self._sentinel_bits = np.full(1, SENTINEL[dtype.name], dtype).view(uint_type(dtype))[0]

    def guards_intact(self) -> tuple:
        """(True, "") if every sentinel is intact, else (False, where the writes were)."""
        bits = self.buf.view(uint_type(self.buf.dtype))
        lo, hi = bits[:self.guard_elems], bits[self.guard_elems + self.n:]
        bad_lo = np.flatnonzero(lo != self._sentinel_bits)
        bad_hi = np.flatnonzero(hi != self._sentinel_bits)
        if len(bad_lo) or len(bad_hi):
            where = []
            if len(bad_lo):
                where.append(f"{len(bad_lo)} element(s) before it (as far as {self.guard_elems - bad_lo[0]} back)")
            if len(bad_hi):
                where.append(f"{len(bad_hi)} element(s) after it (as far as {bad_hi[-1] + 1} past the end)")
            return False, " and ".join(where)
        return True, ""


def uint_type(dtype):
    """The unsigned integer type of ``dtype``'s size (to compare values bit for bit)."""
    return {4: np.uint32, 8: np.uint64}[np.dtype(dtype).itemsize]
