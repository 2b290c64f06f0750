"""The JIT and the runtime libraries generated code links against (its thread pool, libc; libgomp
for the A/B of parallel.POOL)."""
from __future__ import annotations

import ctypes
import ctypes.util
import glob
import itertools
import os
import site
import sys
import sysconfig

import llvmlite.binding as llvm

from tensorir.codegen import parallel, pool, spread
from tensorir.runtime.llvm import LLVM_LOCK, emit_object, initialize, prepare_module

_SYSTEM_LIBGOMP = "/usr/lib/x86_64-linux-gnu/libgomp.so.1"
# Wheels that vendor a libgomp copy (auditwheel renames it libgomp-<hash>.so*).
_WHEEL_LIB_DIRS = ("scikit_learn.libs", "xgboost_cpu.libs", "xgboost.libs", "torch/lib",
                   "scipy.libs", "numpy.libs")

# Pauses an idle libgomp thread spins before it sleeps (GOMP_SPINCOUNT; a pause is 10-50 ns).
# why: docs/decisions/052-openmp-threads-spin-briefly-then-sleep.md
SPIN_COUNT = 300

# Symbols generated code may call; resolved explicitly so the JIT never depends
# on how the dynamic loader scoped the libraries.
_OMP_SYMBOLS = ("GOMP_parallel", "GOMP_barrier", "omp_get_thread_num", "omp_get_num_threads")
_LIBC_SYMBOLS = ("aligned_alloc", "free")


class RuntimeLibraryError(RuntimeError):
    """A runtime library the generated code needs (libgomp) could not be found."""



_state: dict = {}
_library_names = itertools.count()


def _site_dirs() -> list:
    dirs = []
    for getter in (site.getsitepackages, lambda: [site.getusersitepackages()]):
        try:
            dirs.extend(getter())
        except Exception:  # pragma: no cover - unusual interpreters
            pass
    dirs.append(sysconfig.get_paths()["purelib"])
    dirs.extend(p for p in sys.path if p.endswith("site-packages"))
    seen, out = set(), []
    for d in dirs:
        if d not in seen and os.path.isdir(d):
            seen.add(d)
            out.append(d)
    return out


def libgomp_candidates() -> list:
    """Paths (or sonames) where libgomp may be found, in order of preference."""
    found = []
    name = ctypes.util.find_library("gomp")
    if name:
        found.append(name)
    if os.path.exists(_SYSTEM_LIBGOMP):
        found.append(_SYSTEM_LIBGOMP)
    for d in _site_dirs():
        for sub in _WHEEL_LIB_DIRS:
            found.extend(sorted(glob.glob(os.path.join(d, sub, "libgomp*.so*"))))
    return found


def load_libgomp() -> str:
    """Load libgomp into the process so JIT code can call ``GOMP_parallel``.

    Returns
    -------
    str
        The path or soname that was loaded.

    Raises
    ------
    RuntimeLibraryError
        If no libgomp copy can be found or loaded.
    """
    if "gomp" in _state:
        return _state["gomp"]
    # libgomp reads its wait policy when it loads. Its default spins idle threads for about 300,000
    # pauses (3-15 ms) after every region and barrier: on a shared machine a spinning worker uses up its
    # time slice and the next region waits for it behind another process (decision 041). Sleeping at
    # once instead costs a wake-up at every barrier, 40-100 us on a virtual machine. SPIN_COUNT pauses
    # (about 10 us) catch a thread that arrives within a chunk of the others, and give the core up soon
    # after. A user's own setting is kept.
    # why: docs/decisions/052-openmp-threads-spin-briefly-then-sleep.md
    if "OMP_WAIT_POLICY" not in os.environ and "GOMP_SPINCOUNT" not in os.environ:
        os.environ["GOMP_SPINCOUNT"] = str(SPIN_COUNT)
    with LLVM_LOCK:
        errors = []
        for cand in libgomp_candidates():
            try:
                lib = ctypes.CDLL(cand, mode=ctypes.RTLD_GLOBAL)
                llvm.load_library_permanently(cand)
            except (OSError, RuntimeError) as exc:
                errors.append(f"{cand}: {exc}")
                continue
            _state["gomp"] = cand
            _state["gomp_lib"] = lib
            return cand
        tried = "; ".join(errors) or "no candidates"
        raise RuntimeLibraryError(
            "tensortune needs the GNU OpenMP runtime (libgomp) for parallel loops, but none "
            "was found (looked via ctypes.util.find_library('gomp'), "
            f"{_SYSTEM_LIBGOMP} and libgomp copies bundled in site-packages wheels; {tried}). "
            "Install it, e.g. 'apt-get install libgomp1' or 'pip install scikit-learn'.")


def libgomp_path() -> str:
    """Absolute path of the loaded libgomp (resolving a bare soname)."""
    cand = load_libgomp()
    if os.path.isabs(cand):
        return cand
    # Resolve a soname such as 'libgomp.so.1' through the loaded symbol.
    addr = ctypes.cast(_state["gomp_lib"].GOMP_parallel, ctypes.c_void_p).value

    class _DlInfo(ctypes.Structure):
        _fields_ = [("dli_fname", ctypes.c_char_p), ("dli_fbase", ctypes.c_void_p),
                    ("dli_sname", ctypes.c_char_p), ("dli_saddr", ctypes.c_void_p)]
    info = _DlInfo()
    libdl = ctypes.CDLL(None)
    if libdl.dladdr(ctypes.c_void_p(addr), ctypes.byref(info)) and info.dli_fname:
        return os.path.realpath(info.dli_fname.decode())
    return cand


# ---------------------------------------------------------------- JIT

def _jit() -> llvm.LLJIT:
    if "jit" not in _state:
        initialize()
        _state["jit"] = llvm.create_lljit_compiler()
    return _state["jit"]


def pool_symbols() -> dict:
    """Addresses of the thread pool's entry points (:mod:`tensorir.codegen.pool`), compiled into
    the JIT once per process and kept for its lifetime (its workers run its code)."""
    key = ("pool", spread.SPREAD_WORKERS, pool.YIELD_AFTER_POST)
    with LLVM_LOCK:
        if key not in _state:
            mod = llvm.parse_assembly(pool.pool_ir(shared=False, spread=spread.SPREAD_WORKERS))
            prepare_module(mod)
            mod.verify()
            builder = llvm.JITLibraryBuilder().add_object_img(emit_object(mod)).add_current_process()
            for name in pool.SYMBOLS:
                builder.export_symbol(name)
            tracker = builder.link(_jit(), f"tensortune_pool_{next(_library_names)}")
            _state[key] = (tracker, {n: tracker[n] for n in pool.SYMBOLS})
        return _state[key][1]


def pool_module() -> llvm.ModuleRef:
    """A fresh module of the thread pool for an object or shared library (``linkonce_odr``
    hidden entry points: one pool per library); ``link_in`` it where parallel kernels call it."""
    with LLVM_LOCK:
        mod = llvm.parse_assembly(pool.pool_ir(shared=True, spread=spread.SPREAD_WORKERS))
        prepare_module(mod)
        return mod


def calls_pool(mod) -> bool:
    """Whether the module (llvmlite.binding) calls the thread pool's entry points."""
    return any(f.name in pool.SYMBOLS and f.is_declaration for f in mod.functions)


def _runtime_symbols(need_omp: bool) -> dict:
    on_gomp = not (parallel.POOL and parallel.GUIDED)      # the A/B settings that still call libgomp
    key = ("symbols", need_omp, on_gomp, spread.SPREAD_WORKERS, pool.YIELD_AFTER_POST)
    if key not in _state:
        names = list(_LIBC_SYMBOLS)
        if need_omp and on_gomp:
            load_libgomp()
            names += _OMP_SYMBOLS
        addresses = {n: llvm.address_of_symbol(n) for n in names}
        if need_omp:
            addresses.update(pool_symbols())
        _state[key] = {n: a for n, a in addresses.items() if a}
    return _state[key]


def jit_link(obj: bytes, symbol: str, need_omp: bool = False, extra_symbols=()):
    """Load an object image into the JIT and look up ``symbol``.

    Parameters
    ----------
    obj : bytes
        ELF object produced by :func:`emit_object`.
    symbol : str
        The exported function to look up.
    need_omp : bool
        Whether the object calls libgomp (loaded on demand).
    extra_symbols : iterable of str
        Other symbols of the object to export (look them up as ``tracker[name]``),
        e.g. a kernel's site table (:func:`tensorir.runtime.safety.table_symbols`).

    Returns
    -------
    (tracker, int)
        The resource tracker that keeps the code alive (drop it to free the JIT
        memory) and the function's address.
    """
    with LLVM_LOCK:
        builder = llvm.JITLibraryBuilder().add_object_img(obj).add_current_process()
        for name, addr in _runtime_symbols(need_omp).items():
            builder.import_symbol(name, addr)
        builder.export_symbol(symbol)
        for name in extra_symbols:
            builder.export_symbol(name)
        tracker = builder.link(_jit(), f"tensortune_kernel_{next(_library_names)}")
        return tracker, tracker[symbol]
