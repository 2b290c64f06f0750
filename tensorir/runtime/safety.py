"""Memory safety of kernels: allocation limits checked when building, and the
errors a kernel call raises when generated code reports a failure.

Every buffer size is known when a kernel is built, so a kernel whose heap
buffers cannot fit is refused then (:func:`check_memory`, run by
:func:`tensorir.runtime.compile_module` and so by every build), with the same
:class:`AllocationError` a call raises when an allocation fails at run time.
A kernel returns a status (see :mod:`tensorir.codegen.safety`);
:class:`SiteTable` turns a nonzero one into :class:`AllocationError` or, for a
checked build, :class:`OutOfBoundsError`.
"""
from __future__ import annotations

import ctypes
import json
import os
from dataclasses import dataclass

from tensorir.codegen.safety import OOB_SLOTS, is_heap, oob_symbol, sites_symbol
from tensorir.tir.ir import Allocate, For, IfThenElse, PrimFunc, Seq, walk_stmts


class AllocationError(MemoryError):
    """A kernel's heap buffer does not fit: refused when building, or its allocation failed in a call.

    Attributes: ``kernel``, ``buffer`` (names) and ``nbytes``.
    """

    def __init__(self, message: str, kernel: str | None = None, buffer: str | None = None,
                 nbytes: int | None = None):
        super().__init__(message)
        self.kernel, self.buffer, self.nbytes = kernel, buffer, nbytes


class OutOfBoundsError(IndexError):
    """A checked kernel (``build(..., checked=True)``) loaded or stored out of a buffer's bounds.

    Attributes: ``kernel``, ``buffer``, ``access`` ("load" or "store"), ``indices`` and ``shape``.
    """

    def __init__(self, message: str, kernel: str, buffer: str, access: str, indices: tuple, shape: tuple):
        super().__init__(message)
        self.kernel, self.buffer, self.access, self.indices, self.shape = kernel, buffer, access, indices, shape


def format_bytes(n: int) -> str:
    """``"68,719,476,736 bytes (64.0 GiB)"``."""
    short = short_bytes(n)
    return f"{n:,} bytes" + (f" ({short})" if not short.endswith(" bytes") else "")


def short_bytes(n: int) -> str:
    """``"64.0 GiB"``, ``"512 bytes"``."""
    for unit, size in (("TiB", 2 ** 40), ("GiB", 2 ** 30), ("MiB", 2 ** 20), ("KiB", 2 ** 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} bytes"


def describe_buffer(name: str, scope: str, shape, dtype: str | None = None) -> str:
    """``"buffer 'T' (intermediate, 64x250000000 float32)"``."""
    kind = {"global": "intermediate", "local": "local"}.get(scope, scope)
    dims = "x".join(map(str, shape)) if shape is not None else None
    detail = ", ".join(p for p in (kind, " ".join(p for p in (dims, dtype) if p)) if p)
    return f"buffer '{name}' ({detail})"


# ------------------------------------------------------------------ limits

@dataclass(frozen=True)
class MemoryLimits:
    """What a kernel's heap buffers may need, checked when it is built.

    Attributes
    ----------
    max_bytes : int or None
        A cap on any one heap buffer and on the buffers allocated at the same
        time (None: no cap of its own).
    available : bool
        Also refuse what exceeds the memory available when building: the
        ``MemAvailable`` of ``/proc/meminfo`` and, under an address-space
        limit (``RLIMIT_AS``), what this process may still map (True).

    ``MemoryLimits(available=False)`` refuses nothing at build time; an
    allocation that fails when the kernel runs still raises
    :class:`AllocationError` from the call.
    """
    max_bytes: int | None = None
    available: bool = True

    def __post_init__(self):
        if self.max_bytes is not None and (isinstance(self.max_bytes, bool) or not isinstance(self.max_bytes, int)
                                           or self.max_bytes < 0):
            raise ValueError(f"MemoryLimits.max_bytes must be None or an int >= 0, got {self.max_bytes!r}")

    def limit(self) -> tuple:
        """``(bytes or None, what the bound is)`` now."""
        best = (None, "")
        if self.max_bytes is not None:
            best = (self.max_bytes, "the cap MemoryLimits.max_bytes")
        if self.available:
            avail, source = available_memory()
            if avail is not None and (best[0] is None or avail < best[0]):
                best = (avail, source)
        return best


def _proc_kib(path: str, field: str) -> int | None:
    try:
        with open(path) as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def available_memory() -> tuple:
    """``(bytes or None, description)``: memory a new allocation of this process can use now.

    ``MemAvailable`` (or free physical pages where /proc is missing), lowered to
    the headroom under this process's ``RLIMIT_AS`` when it has one.
    """
    avail = _proc_kib("/proc/meminfo", "MemAvailable")
    source = "memory available (MemAvailable)"
    if avail is None:
        try:
            avail = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
            source = "free physical memory"
        except (ValueError, OSError, AttributeError):
            avail = None
    try:
        import resource
        soft = resource.getrlimit(resource.RLIMIT_AS)[0]
    except (ImportError, OSError, ValueError):
        soft = None
    if soft is not None and soft != resource.RLIM_INFINITY:
        used = _proc_kib("/proc/self/status", "VmSize") or 0
        headroom = max(0, soft - used)
        if avail is None or headroom < avail:
            avail, source = headroom, "address space this process may still map (RLIMIT_AS)"
    return avail, source


def heap_buffers(func: PrimFunc) -> list:
    """The distinct buffers ``func`` allocates on the heap, in program order."""
    seen, out = set(), []
    for s in walk_stmts(func.body):
        if isinstance(s, Allocate) and is_heap(s.buffer) and s.buffer not in seen:
            seen.add(s.buffer)
            out.append(s.buffer)
    return out


def peak_heap(stmt) -> tuple:
    """``(bytes, [buffer, ...])``: the most heap memory allocated at one time by one thread.

    Buffers allocated per iteration of a parallel loop are counted once
    (each thread has its own: a lower bound of the real peak).
    """
    if isinstance(stmt, Allocate):
        n, bufs = peak_heap(stmt.body)
        return (n + stmt.buffer.nbytes, [stmt.buffer] + bufs) if is_heap(stmt.buffer) else (n, bufs)
    if isinstance(stmt, For):
        return peak_heap(stmt.body)
    if isinstance(stmt, IfThenElse):
        parts = [stmt.then] + ([stmt.otherwise] if stmt.otherwise is not None else [])
        return max((peak_heap(p) for p in parts), key=lambda x: x[0])
    if isinstance(stmt, Seq):
        return max((peak_heap(p) for p in stmt.stmts), key=lambda x: x[0], default=(0, []))
    return 0, []


def check_memory(func: PrimFunc, memory: MemoryLimits | None = None) -> None:
    """Refuse ``func`` if one heap buffer, or those allocated at the same time, exceed the limit.

    Raises
    ------
    AllocationError
        One line naming the kernel, the buffer(s) and the bytes.
    """
    memory = memory or MemoryLimits()
    bufs = heap_buffers(func)
    if not bufs:
        return
    largest = max(bufs, key=lambda b: b.nbytes)
    peak, live = peak_heap(func.body)
    limit, source = memory.limit()
    if limit is None:
        return
    where = f"kernel '{func.name}'"
    if largest.nbytes > limit:
        raise AllocationError(f"{where}: {describe_buffer(largest.name, largest.scope.value, largest.shape, largest.dtype)} "
                              f"needs {format_bytes(largest.nbytes)}, more than the {short_bytes(limit)} of {source}",
                              func.name, largest.name, largest.nbytes)
    if peak > limit:
        names = ", ".join(f"'{b.name}'" for b in live)
        raise AllocationError(f"{where}: buffers {names} are allocated at the same time and need "
                              f"{format_bytes(peak)} together, more than the {short_bytes(limit)} of {source}",
                              func.name, live[0].name, peak)


INDEX_LIMIT = 2 ** 31    # index arithmetic is i32 (tensorir.codegen.module)


def check_index_range(func: PrimFunc) -> None:
    """Refuse loop extents and buffer dimensions that 32-bit index arithmetic cannot count.

    Loop counters are i64, but loop variables and index expressions are i32:
    an index past 2**31 - 1 would wrap around and address memory far outside
    its buffer.

    Raises
    ------
    CodegenError
        One line naming the loop or buffer.
    """
    from tensorir.codegen.types import CodegenError
    where = f"kernel '{func.name}'"
    why = "index arithmetic is 32-bit: loop extents and buffer dimensions must be below 2**31"
    bufs = list(func.params) + [s.buffer for s in walk_stmts(func.body) if isinstance(s, Allocate)]
    for b in bufs:
        if any(d >= INDEX_LIMIT for d in b.shape):
            raise CodegenError(f"{where}: buffer '{b.name}' has shape {'x'.join(map(str, b.shape))}; {why}")
    for s in walk_stmts(func.body):
        if isinstance(s, For) and s.extent >= INDEX_LIMIT:
            raise CodegenError(f"{where}: loop '{s.var.name}' has extent {s.extent:,}; {why}")


# ------------------------------------------------------------------ run-time status

class SiteTable:
    """A compiled kernel's failure sites: turns its nonzero return status into an exception.

    Parameters
    ----------
    name : str
        The kernel symbol.
    lookup : callable
        ``lookup(symbol) -> address`` in the loaded code (JIT or shared library);
        it may raise if the symbol is missing (code from an older version:
        errors are then reported by status number only).
    """

    def __init__(self, name: str, lookup):
        self.name = name
        self.sites, self.checked, self._oob = [], False, None
        try:
            text = ctypes.string_at(lookup(sites_symbol(name)))
            table = json.loads(text.decode())
            self.sites, self.checked = list(table["sites"]), bool(table["checked"])
            if self.checked:
                self._oob = lookup(oob_symbol(name))
        except Exception:  # noqa: BLE001, S110 - a missing or foreign table leaves bare status numbers
            pass

    def error(self, status: int) -> Exception:
        """The exception for a nonzero status of one call (reads the failing access of a checked kernel)."""
        where = f"kernel '{self.name}'"
        if not 1 <= status <= len(self.sites):
            return RuntimeError(f"{where} failed with status {status}")
        site = self.sites[status - 1]
        if site["kind"] == "alloc":
            buf = describe_buffer(site["buffer"], site["scope"], site.get("shape"), site.get("dtype"))
            return AllocationError(f"{where}: {buf} needs {format_bytes(site['bytes'])}; allocating it failed "
                                   "when the kernel ran (out of memory)", self.name, site["buffer"], site["bytes"])
        indices = ()
        if self._oob:
            rec = (ctypes.c_int64 * OOB_SLOTS).from_address(self._oob)
            if 1 <= rec[0] <= len(self.sites) and self.sites[rec[0] - 1]["kind"] != "alloc":
                site = self.sites[rec[0] - 1]      # the first failure, whose indices are recorded
                indices = tuple(rec[1:1 + min(len(site["shape"]), OOB_SLOTS - 1)])
        shape = tuple(site["shape"])
        shown = ", ".join(map(str, indices)) + (", ..." if len(shape) > len(indices) else "")
        return OutOfBoundsError(f"{where}: {site['kind']} {'to' if site['kind'] == 'store' else 'from'} "
                                f"{site['buffer']}[{shown}] out of bounds (shape {'x'.join(map(str, shape))})",
                                self.name, site["buffer"], site["kind"], indices, shape)


def table_symbols(name: str) -> tuple:
    """The data symbols a kernel object exports besides its function."""
    return sites_symbol(name), oob_symbol(name)
