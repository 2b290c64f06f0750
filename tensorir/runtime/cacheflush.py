"""Evicting arrays from every CPU cache level, so a kernel can be timed the way a model runs it.

A model runs each kernel once per inference: by the time a kernel runs again, the other kernels'
weights have pushed its own out of the caches, while its input was just written by the kernel
before it.  Timing a kernel in a loop instead keeps its weights warm and ranks schedules by a speed
the model never sees (docs/decisions/031-cold-constants.md).  On x86 the arrays' cache lines are
written back and invalidated with ``clflushopt`` (``clflush`` on CPUs without it: what Apache TVM's
``cache_flush_cpu_non_first_arg`` does, but ordered, about 20x slower on this machine); elsewhere a buffer a few times the size of the private caches is read through, which
evicts them from L1 and L2 (not from a large shared L3).

>>> evict([weights])      # doctest: +SKIP   (then time one call)
"""
from __future__ import annotations

import ctypes
import os

import numpy as np

_LINE = 64
_IR = r"""
declare void @llvm.x86.FLUSH(ptr)
declare void @llvm.x86.sse2.mfence()
define void @tensortune_clflush(ptr %p, i64 %n) {
entry:
  %any = icmp sgt i64 %n, 0
  br i1 %any, label %loop, label %done
loop:
  %i = phi i64 [0, %entry], [%next, %loop]
  %q = getelementptr i8, ptr %p, i64 %i
  call void @llvm.x86.FLUSH(ptr %q)
  %next = add i64 %i, 64
  %more = icmp slt i64 %next, %n
  br i1 %more, label %loop, label %done
done:
  call void @llvm.x86.sse2.mfence()
  ret void
}
"""
_state: dict = {}


def _clflush():
    """The JIT-compiled clflush loop, or None on a CPU without it."""
    if "clflush" not in _state:
        import llvmlite.binding as llvm

        from tensorir.runtime import jit
        from tensorir.runtime import llvm as tl
        fn = None
        if llvm.get_process_triple().split("-")[0] in ("x86_64", "i686", "i386"):
            tl.initialize()
            opt = llvm.get_host_cpu_features().get("clflushopt", False)
            with tl.LLVM_LOCK:
                mod = llvm.parse_assembly(_IR.replace("FLUSH", "clflushopt" if opt else "sse2.clflush"))
            tl.prepare_module(mod)
            tracker, address = jit.jit_link(tl.emit_object(mod), "tensortune_clflush")
            fn = (tracker, ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64)(address))
        _state["clflush"] = fn
    fn = _state["clflush"]
    return None if fn is None else fn[1]


def private_cache_bytes() -> int:
    """The largest cache of one core that is not the last level (L2 from sysfs; 2 MiB if unknown)."""
    base = "/sys/devices/system/cpu/cpu0/cache"
    sizes = {}
    try:
        for entry in os.listdir(base):
            try:
                with open(os.path.join(base, entry, "level")) as f:
                    level = int(f.read())
                with open(os.path.join(base, entry, "size")) as f:
                    text = f.read().strip()
            except (OSError, ValueError):
                continue
            mult = {"K": 1024, "M": 1024 ** 2, "G": 1024 ** 3}.get(text[-1:].upper(), 1)
            digits = text[:-1] if text[-1:].isalpha() else text
            if digits.isdigit():
                sizes[level] = max(sizes.get(level, 0), int(digits) * mult)
    except OSError:
        pass
    private = [s for lvl, s in sizes.items() if lvl < max(sizes)] if len(sizes) > 1 else []
    return max(private) if private else 2 * 1024 ** 2


def method() -> str:
    """How :func:`evict` works on this machine: ``"clflushopt"``, ``"clflush"`` or ``"read-through"``."""
    if _clflush() is None:
        return "read-through"
    import llvmlite.binding as llvm
    return "clflushopt" if llvm.get_host_cpu_features().get("clflushopt", False) else "clflush"


def evict(arrays) -> None:
    """Write back and drop the cache lines of ``arrays`` (numpy arrays) from every cache level."""
    fn = _clflush()
    if fn is None:
        if "sweep" not in _state:
            _state["sweep"] = np.ones(4 * private_cache_bytes() // 8, np.int64)
        int(_state["sweep"].sum())
        return
    for a in arrays:
        if a is None or a.size == 0:
            continue
        low, high = np.lib.array_utils.byte_bounds(a)    # (a view may be strided or reversed)
        start = low - low % _LINE
        fn(start, high - start)
