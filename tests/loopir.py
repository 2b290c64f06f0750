"""Helpers for tests that write loop IR by hand."""
from __future__ import annotations

import numpy as np

from tensorir.runtime import build
from tensorir.te.expr import Const
from tensorir.tir.ir import Buffer, For, ForKind, Load, Scope, Store

SERIAL, PARALLEL, VECTORIZED, UNROLLED = (ForKind.SERIAL, ForKind.PARALLEL,
                                          ForKind.VECTORIZED, ForKind.UNROLLED)
rng = np.random.default_rng(0)


def buf(name, shape, dtype="float32", scope=Scope.PARAM):
    return Buffer(name, tuple(shape), dtype, scope)


def ld(b, *idx):
    return Load(b, tuple(_e(i) for i in idx))


def st(b, idx, value):
    return Store(b, tuple(_e(i) for i in idx), value)


def _e(x):
    return Const(x, "int32") if isinstance(x, int) else x


def c(value, dtype="float32"):
    return Const(value, dtype)


def loop(var, extent, body, kind=SERIAL):
    return For(var, extent, kind, body)


def rand(shape, dtype="float32"):
    if dtype == "int32":
        return rng.integers(-50, 50, size=shape).astype(np.int32)
    return rng.standard_normal(shape).astype(dtype)


def prepared(func):
    """``func`` through the lowering passes that prepare a nest for codegen (promote, vector_chunks),
    as a lowered schedule goes through them: what codegen compiled from it before those were passes."""
    from schedules.lowering import apply_passes
    return apply_passes(func, names=["promote", "vector_chunks"])


def run(func, *arrays, threads=None):
    """Compile hand-written ``func`` as lowering would prepare it (:func:`prepared`) and run it."""
    k = build(prepared(func))
    if threads is not None:
        k.threads = threads
    k(*arrays)
    return k


