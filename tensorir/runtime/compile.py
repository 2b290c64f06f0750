"""Compile loop IR into kernels, with a process-wide cache.

>>> kernel = build(schedule.lower())   # a PrimFunc
>>> kernel(a, b, c)                    # numpy arrays in parameter order; outputs in place
"""
from __future__ import annotations

import dataclasses
import threading
import time
from collections import OrderedDict

import llvmlite.binding as llvm

from tensorir.codegen import codegen
from tensorir.runtime import llvm as runtime
from tensorir.runtime.jit import jit_link
from tensorir.runtime.kernel import Kernel
from tensorir.target import Target
from tensorir.tir.ir import For, ForKind, PrimFunc, walk_stmts

CACHE_SIZE = 512


_cache: OrderedDict = OrderedDict()
_cache_lock = threading.Lock()
_stats = {"hits": 0, "misses": 0}


def build(obj: PrimFunc, name: str | None = None, target: Target | None = None) -> Kernel:
    """Compile a function into a callable :class:`Kernel`.

    Parameters
    ----------
    obj : PrimFunc
        A lowered function (``Schedule.lower()``).
    name : str, optional
        Rename the kernel symbol.
    target : Target, optional
        The CPU to compile for (default: the host).

    Returns
    -------
    Kernel
        Identical functions (structurally equal PrimFuncs) share one compiled
        kernel through a bounded LRU cache.
    """
    if not isinstance(obj, PrimFunc):
        raise TypeError(f"build() compiles a lowered PrimFunc, got {type(obj).__name__} "
                        f"(use Schedule(...).build() for a schedule or a workload)")
    func = obj
    if name is not None and name != func.name:
        func = dataclasses.replace(func, name=name)
    target = target or Target.host()
    key = (func, target.cpu, target.features)
    with _cache_lock:
        kernel = _cache.get(key)
        if kernel is not None:
            _cache.move_to_end(key)
            _stats["hits"] += 1
            return kernel
        _stats["misses"] += 1
    kernel = compile_func(func, target=target)
    with _cache_lock:
        _cache[key] = kernel
        while len(_cache) > CACHE_SIZE:
            # Dropping the last reference frees the JIT code (its resource tracker).
            _cache.popitem(last=False)
    return kernel


def compile_func(func: PrimFunc, opt: runtime.OptConfig = runtime.DEFAULT_OPT,
                 target: Target | None = None) -> Kernel:
    """Compile ``func`` without consulting the cache (see :func:`build`).

    Parameters
    ----------
    func : PrimFunc
        The function to compile.
    opt : runtime.OptConfig
        LLVM pipeline settings.
    target : Target, optional
        The CPU to compile for (default: the host; the JIT runs only host code).
    """
    t0 = time.perf_counter()
    mod, obj, uses_openmp = compile_module(func, opt, target)
    with runtime.LLVM_LOCK:
        tracker, address = jit_link(obj, func.name, need_omp=uses_openmp)
    return Kernel(func, address, keepalive=tracker, module=mod, object_code=obj,
                  uses_openmp=uses_openmp, compile_seconds=time.perf_counter() - t0)


def compile_module(func: PrimFunc, opt: runtime.OptConfig = runtime.DEFAULT_OPT,
                   target: Target | None = None):
    """Loop IR -> optimized LLVM module and object image: ``(module, object bytes, uses_openmp)``.

    The one compilation pipeline: :func:`compile_func` links the object into
    this process; the tuner's builder processes send it to the runner instead.
    """
    irmod = codegen(func, target or Target.host())
    text = str(irmod)
    with runtime.LLVM_LOCK:
        mod = llvm.parse_assembly(text)
        runtime.prepare_module(mod)
        mod.verify()
        runtime.optimize(mod, opt, vectorized=has_vector_loop(func))
        obj = runtime.emit_object(mod)
    return mod, obj, bool(irmod.uses_openmp)


def has_vector_loop(func: PrimFunc) -> bool:
    """Whether ``func`` has an explicitly VECTORIZED loop (picks the fast LLVM pipeline)."""
    return any(isinstance(s, For) and s.kind is ForKind.VECTORIZED and s.extent > 1
               for s in walk_stmts(func.body))


def clear_cache() -> None:
    """Forget every cached kernel (kernels still referenced elsewhere keep working)."""
    with _cache_lock:
        _cache.clear()
        _stats.update(hits=0, misses=0)


def cache_info() -> dict:
    """``{"size", "capacity", "hits", "misses"}`` of the kernel cache."""
    with _cache_lock:
        return dict(size=len(_cache), capacity=CACHE_SIZE, **_stats)
