"""Vector loads of every other element: two contiguous loads and a shuffle, never past the last element."""
from __future__ import annotations

import ctypes
import mmap

import numpy as np
import pytest

from tensorir.codegen import codegen
from tensorir.te.expr import Var
from tensorir.tir.ir import PrimFunc
from tests.loopir import VECTORIZED, buf, ld, loop, prepared, rand, run, st


def _at_page_end(n):
    """An n-float array whose last element is the last before a PROT_NONE page (reading past it faults)."""
    page = mmap.PAGESIZE
    mm = mmap.mmap(-1, 2 * page)
    raw = np.frombuffer(mm, dtype=np.uint8)
    libc = ctypes.CDLL(None)
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    assert libc.mprotect(raw.ctypes.data + page, page, 0) == 0
    return raw[page - 4 * n:page].view(np.float32)


def _every_other(n, lanes, offset):
    A, B = buf("A", (2 * n - 1 + offset,)), buf("B", (n,))
    i, j = Var("i"), Var("j")
    body = loop(j, lanes, st(B, (i * lanes + j,), ld(A, (i * lanes + j) * 2 + offset)), VECTORIZED)
    return PrimFunc(f"every_other_{n}_{lanes}_{offset}", (A, B), loop(i, n // lanes, body))


@pytest.mark.parametrize("n,lanes", [(16, 16), (32, 8), (8, 4), (4, 2), (48, 16)])
@pytest.mark.parametrize("offset", [0, 1])
def test_stride2_load_matches_numpy_and_reads_nothing_past_the_last_element(n, lanes, offset):
    f = _every_other(n, lanes, offset)
    text = str(codegen(prepared(f)))
    assert "shufflevector" in text and "masked.gather" not in text
    a = _at_page_end(2 * n - 1 + offset)
    a[:] = rand(a.shape)
    out = np.zeros(n, np.float32)
    run(f, a, out)
    np.testing.assert_array_equal(out, a[offset::2])


def test_stride3_loads_one_lane_at_a_time_and_reads_nothing_past_the_last_lane():
    # decision 070: no gather of a vector of addresses; the last element read ends a guarded page
    n = 16
    A, B = buf("A", (3 * n - 2,)), buf("B", (n,))
    j = Var("j")
    f = PrimFunc("every_third", (A, B), loop(j, n, st(B, (j,), ld(A, j * 3)), VECTORIZED))
    assert "masked.gather" not in str(codegen(prepared(f)))
    a = _at_page_end(3 * n - 2)
    a[:] = rand(a.shape)
    out = np.zeros(n, np.float32)
    run(f, a, out)
    np.testing.assert_array_equal(out, a[::3])


@pytest.mark.parametrize("lanes", [16, 8, 2])
def test_a_masked_stride2_load_reads_only_the_enabled_lanes(lanes):
    """Lanes past the row are off: their elements lie past the guarded page and must not be read."""
    n = 3 * lanes // 2          # the last vector has lanes // 2 enabled lanes
    A, B = buf("A", (2 * n - 1,)), buf("B", (2 * lanes,))
    i, j = Var("i"), Var("j")
    q = i * lanes + j
    from tensorir.te.expr import Binary, BinOp, Const
    from tensorir.tir.ir import IfThenElse
    body = IfThenElse(Binary(BinOp.LT, q, Const(n, "int32")), st(B, (q,), ld(A, q * 2)))
    f = PrimFunc(f"masked_every_other_{lanes}", (A, B), loop(i, 2, loop(j, lanes, body, VECTORIZED)))
    text = str(codegen(prepared(f)))
    assert "masked.load" in text and "masked.gather" not in text
    a = _at_page_end(2 * n - 1)
    a[:] = rand(a.shape)
    out = np.zeros(2 * lanes, np.float32)
    run(f, a, out)
    np.testing.assert_array_equal(out[:n], a[::2])
