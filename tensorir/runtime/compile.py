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
from tensorir.runtime.safety import MemoryLimits, check_index_range, check_memory, table_symbols
from tensorir.target import Target
from tensorir.tir.ir import For, ForKind, PrimFunc, walk_stmts

CACHE_SIZE = 512


_cache: OrderedDict = OrderedDict()
_cache_lock = threading.Lock()
_stats = {"hits": 0, "misses": 0}


def build(obj: PrimFunc, name: str | None = None, target: Target | None = None, checked: bool = False,
          memory: MemoryLimits | None = None) -> Kernel:
    """Compile a function into a callable :class:`Kernel`.

    Parameters
    ----------
    obj : PrimFunc
        A lowered function (``Schedule.lower()``).
    name : str, optional
        Rename the kernel symbol.
    target : Target, optional
        The CPU to compile for (default: the host).
    checked : bool
        Check every load and store index against its buffer's bounds: an
        access out of bounds makes the call raise
        :class:`~tensorir.runtime.safety.OutOfBoundsError` instead of touching
        memory.  For debugging lowering and hand-written loop IR; slower, so
        never used by the tuner.
    memory : MemoryLimits, optional
        What the kernel's heap buffers may need (default: the memory
        available now); checked by every ``build``, the kernel cached or not.

    Returns
    -------
    Kernel
        Identical functions (structurally equal PrimFuncs) share one compiled
        kernel through a bounded LRU cache (checked and unchecked kernels apart).

    Raises
    ------
    AllocationError
        A heap buffer, or those allocated at the same time, exceed ``memory``.
    """
    if not isinstance(obj, PrimFunc):
        raise TypeError(f"build() compiles a lowered PrimFunc, got {type(obj).__name__} "
                        f"(use Schedule(...).build() for a schedule or a workload)")
    func = obj
    if name is not None and name != func.name:
        func = dataclasses.replace(func, name=name)
    target = target or Target.host()
    checked = bool(checked)
    key = (func, target.cpu, target.features, checked)
    with _cache_lock:
        kernel = _cache.get(key)
        if kernel is not None:
            _cache.move_to_end(key)
            _stats["hits"] += 1
        else:
            _stats["misses"] += 1
    if kernel is not None:
        check_memory(func, memory)
        return kernel
    kernel = compile_func(func, target=target, checked=checked, memory=memory)
    with _cache_lock:
        _cache[key] = kernel
        while len(_cache) > CACHE_SIZE:
            # Dropping the last reference frees the JIT code (its resource tracker).
            _cache.popitem(last=False)
    return kernel


def compile_func(func: PrimFunc, opt: runtime.OptConfig = runtime.DEFAULT_OPT,
                 target: Target | None = None, checked: bool = False,
                 memory: MemoryLimits | None = None) -> Kernel:
    """Compile ``func`` without consulting the cache (see :func:`build`).

    Parameters
    ----------
    func : PrimFunc
        The function to compile.
    opt : runtime.OptConfig
        LLVM pipeline settings.
    target : Target, optional
        The CPU to compile for (default: the host; the JIT runs only host code).
    checked, memory
        As for :func:`build`.
    """
    t0 = time.perf_counter()
    mod, obj, uses_openmp = compile_module(func, opt, target, checked=checked, memory=memory)
    with runtime.LLVM_LOCK:
        tracker, address = jit_link(obj, func.name, need_omp=uses_openmp,
                                    extra_symbols=table_symbols(func.name))
    return Kernel(func, address, keepalive=tracker, module=mod, object_code=obj,
                  uses_openmp=uses_openmp, compile_seconds=time.perf_counter() - t0,
                  lookup=lambda symbol: tracker[symbol])


def compile_module(func: PrimFunc, opt: runtime.OptConfig = runtime.DEFAULT_OPT,
                   target: Target | None = None, checked: bool = False,
                   memory: MemoryLimits | None = None):
    """Loop IR -> optimized LLVM module and object image: ``(module, object bytes, uses_openmp)``.

    The one compilation pipeline: :func:`compile_func` links the object into
    this process; the tuner's builder processes send it to the runner instead.
    ``checked`` and ``memory`` as for :func:`build`.  Refuses, before code generation, a
    function whose heap buffers exceed ``memory`` (:class:`~tensorir.runtime.safety.AllocationError`)
    or whose loops or buffers are too long for 32-bit indices (``CodegenError``).
    """
    check_index_range(func)
    check_memory(func, memory)
    irmod = codegen(func, target or Target.host(), checked=checked)
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
