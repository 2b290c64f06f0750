"""The compiled kernel: callable on numpy arrays, exportable as an object file or shared library.

>>> kernel(a, b, c)                 # numpy arrays in parameter order; outputs in place
"""
from __future__ import annotations

import ctypes
import dataclasses
import os
import shutil
import subprocess
import tempfile
import threading

import llvmlite.binding as llvm_binding
import numpy as np

from tensorir.runtime import libinfo
from tensorir.runtime import llvm as runtime
from tensorir.runtime.jit import calls_pool, libgomp_path, pool_module
from tensorir.runtime.safety import SiteTable
from tensorir.target import Target
from tensorir.tir.ir import PrimFunc, Store, walk_stmts


class ToolchainError(RuntimeError):
    """No usable C compiler/linker for :meth:`Kernel.export_library`."""


@dataclasses.dataclass(frozen=True)
class _ParamSpec:
    name: str
    dtype: np.dtype
    shape: tuple
    is_output: bool


class Kernel:
    """A compiled :class:`~tensorir.tir.ir.PrimFunc`, callable on numpy arrays.

    A call raises :class:`~tensorir.runtime.safety.AllocationError` (a
    ``MemoryError``) when a heap buffer of the kernel cannot be allocated, and
    a checked kernel (``build(func, checked=True)``)
    :class:`~tensorir.runtime.safety.OutOfBoundsError` (an ``IndexError``)
    naming the buffer, the indices and the shape of an access out of bounds;
    either way the outputs are incomplete and every buffer the kernel
    allocated is freed.

    C interface (object files and shared libraries): the kernel is
    ``int32_t <name>(void *p0, ..., void *pN, int32_t num_threads)``, one
    pointer per parameter in order (dense, row-major, C-contiguous, outputs
    not overlapping any other argument; ``num_threads`` <= 0 means
    ``OMP_NUM_THREADS`` if set, else every core the process may use).  It returns 0 on success, or k > 0: site k of the JSON table
    exported as the NUL-terminated string ``<name>.tensortune_sites``
    (``{"checked": ..., "sites": [{"kind": "alloc", "buffer", "scope",
    "bytes", "shape", "dtype"} | {"kind": "load" | "store", "buffer", "shape"},
    ...]}``) failed, and the kernel freed what it had allocated; a checked
    kernel also writes ``[site, index, ...]`` of its first failing access to
    ``int64_t <name>.tensortune_oob[32]`` (so calls of one checked kernel
    take turns).  Kernels were ``void`` before the status was added: callers
    of older exported libraries must check the status now.
    :func:`tensorir.runtime.safety.SiteTable` decodes it.

    Attributes
    ----------
    func : PrimFunc
        The loop-nest function this kernel was compiled from.
    name : str
        The symbol name (``func.name``).
    threads : int
        Threads used by parallel loops (default: the usable cores).
    compile_seconds : float
        Wall time of codegen + optimization + machine code + JIT link.
    checked : bool
        Whether every load and store is checked against its buffer's bounds.
    """

    def __init__(self, func: PrimFunc, address: int, *, keepalive=None, module=None,
                 object_code: bytes | None = None, uses_openmp: bool = False,
                 compile_seconds: float = 0.0, lookup=None):
        # lookup(symbol) -> address in the loaded code: finds the site table (see above)
        self.func = func
        self.name = func.name
        self.compile_seconds = compile_seconds
        self.uses_openmp = uses_openmp
        self._address = address
        self._keepalive = keepalive      # JIT resource tracker or ctypes.CDLL
        self._module = module            # optimized llvmlite.binding module (JIT only)
        self._object = object_code
        self._llvm_ir = None
        self._threads = Target.host().cores
        outputs = {s.buffer for s in walk_stmts(func.body) if isinstance(s, Store)}
        self._specs = tuple(_ParamSpec(b.name, np.dtype(b.dtype), tuple(b.shape), b in outputs)
                            for b in func.params)
        proto = ctypes.CFUNCTYPE(ctypes.c_int32, *([ctypes.c_void_p] * len(func.params)), ctypes.c_int32)
        self._cfunc = proto(address)
        self._sites = SiteTable(self.name, lookup or _no_symbols)
        self.checked = self._sites.checked
        # a checked kernel's failure record is one per kernel: its calls take turns
        self._lock = threading.Lock() if self.checked else None

    # -------------------------------------------------------- properties
    @property
    def threads(self) -> int:
        return self._threads

    @threads.setter
    def threads(self, n: int) -> None:
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
            raise ValueError(f"kernel '{self.name}': threads must be a positive int, got {n!r}")
        self._threads = int(n)

    @property
    def param_shapes(self) -> tuple:
        """The shape of each parameter, in order."""
        return tuple(s.shape for s in self._specs)

    @property
    def llvm_ir(self) -> str | None:
        """Optimized LLVM IR text (None for a kernel loaded from a shared library)."""
        if self._llvm_ir is None and self._module is not None:
            with runtime.LLVM_LOCK:
                self._llvm_ir = str(self._module)
        return self._llvm_ir

    def asm(self) -> str:
        """Host assembly of the kernel, generated on demand."""
        if self._module is None:
            raise RuntimeError(f"kernel '{self.name}' was loaded from a library; no IR to assemble")
        return runtime.emit_assembly(self._module)

    def __repr__(self) -> str:
        params = ", ".join(f"{s.name}: {s.dtype}{list(s.shape)}" for s in self._specs)
        return f"<Kernel {self.name}({params}) threads={self.threads}>"

    # -------------------------------------------------------- calling
    def _check(self, arrays) -> list:
        specs = self._specs
        if len(arrays) != len(specs):
            names = ", ".join(s.name for s in specs)
            raise TypeError(f"kernel '{self.name}' takes {len(specs)} arrays ({names}), "
                            f"got {len(arrays)}")
        ptrs, spans = [], []
        for i, (a, s) in enumerate(zip(arrays, specs)):
            where = f"kernel '{self.name}': argument {i} ('{s.name}')"
            if not isinstance(a, np.ndarray):
                raise TypeError(f"{where} must be a numpy.ndarray, got {type(a).__name__}")
            if a.dtype != s.dtype:
                raise TypeError(f"{where} has dtype {a.dtype}, expected {s.dtype}")
            if a.shape != s.shape:
                raise ValueError(f"{where} has shape {a.shape}, expected {s.shape}")
            if not a.flags.c_contiguous:
                raise ValueError(f"{where} is not C-contiguous (use np.ascontiguousarray)")
            if s.is_output and not a.flags.writeable:
                raise ValueError(f"{where} is written by the kernel but the array is read-only")
            ptr = a.ctypes.data
            ptrs.append(ptr)
            spans.append((ptr, ptr + a.nbytes, i))
        # Parameters are declared noalias: an output may not overlap another array.
        for i0 in range(len(spans)):
            for i1 in range(i0 + 1, len(spans)):
                (lo0, hi0, _), (lo1, hi1, _) = spans[i0], spans[i1]
                if (specs[i0].is_output or specs[i1].is_output) and lo0 < hi1 and lo1 < hi0:
                    raise ValueError(f"kernel '{self.name}': arguments {i0} ('{specs[i0].name}') "
                                     f"and {i1} ('{specs[i1].name}') overlap in memory")
        return ptrs

    def __call__(self, *arrays) -> None:
        """Run the kernel on ``arrays`` (parameter order); outputs are written in place.

        Raises
        ------
        AllocationError
            A heap buffer of the kernel could not be allocated.
        OutOfBoundsError
            Checked kernels: an access out of its buffer's bounds (not executed).
        """
        ptrs = self._check(arrays)
        self._run(ptrs, self._threads)

    def _run(self, ptrs, threads: int) -> None:
        if self._lock is None:
            status = self._cfunc(*ptrs, threads)
            if status:
                raise self._sites.error(status)
            return
        with self._lock:
            status = self._cfunc(*ptrs, threads)
            if status:
                raise self._sites.error(status)

    def bind(self, *arrays):
        """A no-argument callable that runs the kernel on ``arrays``, checked once, now.

        For timing small kernels: a call skips the per-call checks of shapes
        and dtypes (microseconds, more than a tiny kernel runs).  The callable
        keeps the arrays and the kernel's code alive (the compile cache may drop
        the kernel); it uses the thread count set at bind time.
        """
        return self.bind_slots(*arrays)[0]

    def bind_slots(self, *arrays):
        """``(run, ptrs, written)``: :meth:`bind`'s callable, the list of data pointers it reads at
        every call, and per argument whether the kernel writes it. The caller may replace
        ``ptrs[i]`` with the address of another array of argument i's dtype and shape, C-contiguous,
        overlapping no other argument if either is written, and must keep that array alive while the
        callable may run (a model's call on its caller's arrays)."""
        ptrs = self._check(arrays)
        cfunc, threads, sites = self._cfunc, self._threads, self._sites
        written = tuple(s.is_output for s in self._specs)
        if self._lock is not None:
            return (lambda _keep=arrays: self._run(ptrs, threads)), ptrs, written     # holds self

        def run(_keep=arrays, _code=self):
            status = cfunc(*ptrs, threads)
            if status:
                raise sites.error(status)
        return run, ptrs, written

    # -------------------------------------------------------- export
    def export_object(self, path) -> None:
        """Write the kernel as an ELF relocatable object file (PIC).

        The object defines ``int32_t <name>(void *p0, ..., void *pN, int32_t num_threads)``,
        which returns a status (0: success; see the class docstring), and its
        site table; a parallel kernel's object carries the thread pool it runs on
        (:mod:`tensorir.codegen.pool`; libc's pthreads at link time).
        """
        if self._object is None:
            raise RuntimeError(f"kernel '{self.name}' has no object code (loaded from a library)")
        obj = self._object
        if self.uses_openmp and self._module is not None:
            with runtime.LLVM_LOCK:
                if calls_pool(self._module):
                    mod = llvm_binding.parse_assembly(str(self._module))
                    mod.link_in(pool_module())
                    obj = runtime.emit_object(mod)
        with open(path, "wb") as f:
            f.write(obj)

    def export_library(self, path) -> None:
        """Link the kernel into a shared library with the system C compiler.

        Load it back with :func:`load_library`.

        Raises
        ------
        ToolchainError
            If no C compiler is found or linking fails.
        """
        cc = next((shutil.which(c) for c in ("cc", "gcc", "clang") if shutil.which(c)), None)
        if cc is None:
            raise ToolchainError("export_library needs a C compiler to link a shared library "
                                 "(none of cc, gcc, clang is on PATH); export_object() works "
                                 "without one")
        libs = ["-lm", "-lpthread"]
        if self.uses_openmp and not (self._module is not None and calls_pool(self._module)):
            gomp = libgomp_path()         # a region on libgomp: the A/B settings of parallel.POOL
            libs = [gomp, f"-Wl,-rpath,{os.path.dirname(gomp)}"] + libs
        with tempfile.TemporaryDirectory() as tmp:
            obj = os.path.join(tmp, f"{self.name}.o")
            self.export_object(obj)
            cmd = [cc, "-shared", "-o", os.fspath(path), obj] + libs
            proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise ToolchainError(f"linking '{path}' failed ({' '.join(cmd)}):\n{proc.stderr}")


def load_library(path, func: PrimFunc, symbol: str | None = None) -> Kernel:
    """Load a kernel from a shared library as a Kernel.

    The library is one written by :meth:`Kernel.export_library`, or by
    ``tensortune build`` (:func:`tensorir.runtime.aot.build_library`): then
    the kernel behind its C entry point ``symbol`` is loaded, after checking
    that this host has every CPU feature the library was compiled for.

    Parameters
    ----------
    path : str or os.PathLike
        The shared library.
    func : PrimFunc
        The function it was built from, or one with the same parameters (gives
        the parameter checks, and the symbol of an ``export_library`` library).
    symbol : str, optional
        The kernel's symbol (default: ``func.name``).

    Raises
    ------
    LibraryTargetError
        The library was compiled for CPU features this host lacks.
    """
    lib = ctypes.CDLL(os.fspath(os.path.abspath(path)))
    symbol = symbol or func.name
    meta = libinfo.read_metadata(lib, symbol, path)
    if meta is not None:
        libinfo.check_target(meta, Target.host(), path)
        libinfo.check_params(meta, symbol, [(b.name, b.dtype, b.shape) for b in func.params], path)
        func = dataclasses.replace(func, name=libinfo.kernel_symbol(symbol))
    try:
        sym = getattr(lib, func.name)
    except AttributeError:
        raise ValueError(f"library '{path}' does not define kernel '{symbol}'") from None
    address = ctypes.cast(sym, ctypes.c_void_p).value

    def lookup(symbol):
        return ctypes.cast(lib[symbol], ctypes.c_void_p).value
    return Kernel(func, address, keepalive=lib, lookup=lookup)


def _no_symbols(symbol):
    raise KeyError(symbol)

