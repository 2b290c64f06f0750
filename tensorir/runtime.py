"""LLVM process state: host target, optimizer, OpenMP runtime and the JIT.

Everything here is created once per process and reused by every build: the
target machine, the pass builder and the ORC JIT.  LLVM's global context is not
thread-safe, so every call into LLVM that builds, optimizes or links code holds
:data:`LLVM_LOCK`.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import glob
import itertools
import os
import site
import sys
import sysconfig
import threading
from dataclasses import dataclass

import llvmlite.binding as llvm

LLVM_LOCK = threading.RLock()

_SYSTEM_LIBGOMP = "/usr/lib/x86_64-linux-gnu/libgomp.so.1"
# Wheels that vendor a libgomp copy (auditwheel renames it libgomp-<hash>.so*).
_WHEEL_LIB_DIRS = ("scikit_learn.libs", "xgboost_cpu.libs", "xgboost.libs", "torch/lib",
                   "scipy.libs", "numpy.libs")

# Symbols generated code may call; resolved explicitly so the JIT never depends
# on how the dynamic loader scoped the libraries.
_OMP_SYMBOLS = ("GOMP_parallel", "GOMP_barrier", "omp_get_thread_num", "omp_get_num_threads")
_LIBC_SYMBOLS = ("aligned_alloc", "free")


@dataclass(frozen=True)
class OptConfig:
    """Which LLVM optimization pipeline a kernel gets.

    Attributes
    ----------
    pipeline : str
        ``"fast"``: a short function pipeline (SROA, DSE, InstCombine,
        SimplifyCFG) for code the schedule already vectorized and unrolled;
        code generation emits it in the shape LLVM's loop passes and GVN would
        have produced (hoisted pointer chains, i64 counters, register
        promotion of accumulator tiles, register tiles unrolled), so it runs
        about as fast as after ``-O3`` and compiles several times faster.
        (NewGVN, the only GVN llvmlite exposes, hits an assertion on some
        kernels and aborts the process: it is not used.)  ``"default"``: LLVM's standard
        ``-O<speed_level>`` pipeline, which adds auto-vectorization for loops a
        schedule left scalar.  ``"auto"`` (the default): ``"fast"`` when the
        kernel has a vectorized loop, else ``"default"``.
    speed_level : int
        The ``-O`` level of the default pipeline, 0-3.
    loop_unrolling : bool
        Let LLVM unroll loops in the default pipeline.  Off by default:
        unrolling is a schedule decision (UNROLLED loops), and on tiled kernels
        LLVM's unrollers cost up to ~40% of the optimization time without
        making the code faster.
    loop_vectorization, slp_vectorization : bool
        LLVM's auto-vectorizers in the default pipeline.
    """
    pipeline: str = "auto"
    speed_level: int = 3
    loop_unrolling: bool = False
    loop_vectorization: bool = True
    slp_vectorization: bool = True

    def __post_init__(self):
        if self.pipeline not in ("auto", "fast", "default"):
            raise ValueError(f"OptConfig.pipeline must be 'auto', 'fast' or 'default', "
                             f"got {self.pipeline!r}")


FAST_PASSES = ("sroa", "dead_store_elimination", "instruction_combine", "simplify_cfg")


DEFAULT_OPT = OptConfig()


class RuntimeLibraryError(RuntimeError):
    """A runtime library the generated code needs (libgomp) could not be found."""


_state: dict = {}
_library_names = itertools.count()


def _initialize() -> None:
    if not _state.get("initialized"):
        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        _state["initialized"] = True


def _vector_bits(features: str) -> int:
    flags = set(features.split(","))
    if "+avx512f" in flags:
        return 512
    if "+avx" in flags or "+avx2" in flags:
        return 256
    return 128


def host_target() -> dict:
    """Describe the host CPU.

    Returns
    -------
    dict
        ``cpu`` (LLVM CPU name), ``features`` (LLVM feature string, e.g.
        ``"+avx2,+fma,..."``), ``vector_bits`` (widest SIMD register: 512, 256
        or 128) and ``num_cores`` (CPUs this process may run on).
    """
    if "host" not in _state:
        with LLVM_LOCK:
            _initialize()
            cpu = llvm.get_host_cpu_name()
            features = llvm.get_host_cpu_features().flatten()
            _state["host"] = dict(cpu=cpu, features=features,
                                  vector_bits=_vector_bits(features),
                                  num_cores=len(os.sched_getaffinity(0)))
    return dict(_state["host"])


def target_machine() -> llvm.TargetMachine:
    """The process-wide host target machine (PIC, small code model, -O3)."""
    if "tm" not in _state:
        with LLVM_LOCK:
            host = host_target()
            target = llvm.Target.from_triple(llvm.get_process_triple())
            # PIC so the same object works in the JIT and in a shared library.
            _state["tm"] = target.create_target_machine(
                cpu=host["cpu"], features=host["features"], opt=3,
                reloc="pic", codemodel="default")
    return _state["tm"]


def prepare_module(mod: llvm.ModuleRef) -> None:
    """Stamp ``mod`` with the host triple and data layout."""
    tm = target_machine()
    mod.triple = tm.triple
    mod.data_layout = str(tm.target_data)


def optimize(mod: llvm.ModuleRef, config: OptConfig = DEFAULT_OPT, vectorized: bool = False) -> str:
    """Optimize ``mod`` in place; returns the pipeline used (``"fast"`` or ``"default"``).

    ``vectorized`` tells whether the kernel has explicitly vectorized loops
    (how ``config.pipeline == "auto"`` chooses).
    """
    kind = config.pipeline
    if kind == "auto":
        kind = "fast" if vectorized else "default"
    key = ("passes", kind, config if kind == "default" else None)
    with LLVM_LOCK:
        if key not in _state:
            pto = llvm.create_pipeline_tuning_options(
                speed_level=config.speed_level if kind == "default" else 2)
            pto.loop_unrolling = config.loop_unrolling
            pto.loop_vectorization = config.loop_vectorization
            pto.slp_vectorization = config.slp_vectorization
            _state[key] = (pto, llvm.create_pass_builder(target_machine(), pto))
        pto, pb = _state[key]
        # A fresh pass manager per module: pipelines are cheap to build and
        # this keeps no analysis state alive between unrelated modules.
        if kind == "default":
            pb.getModulePassManager().run(mod, pb)
        else:
            mpm = llvm.create_new_module_pass_manager()
            for name in FAST_PASSES:
                getattr(mpm, f"add_{name}_pass")()
            mpm.run(mod, pb)
    return kind


def emit_object(mod: llvm.ModuleRef) -> bytes:
    """Compile ``mod`` to an ELF object file image."""
    with LLVM_LOCK:
        return target_machine().emit_object(mod)


def emit_assembly(mod: llvm.ModuleRef) -> str:
    """Compile ``mod`` to host assembly text."""
    with LLVM_LOCK:
        return target_machine().emit_assembly(mod)


# ---------------------------------------------------------------- libgomp

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
        _initialize()
        _state["jit"] = llvm.create_lljit_compiler()
    return _state["jit"]


def _runtime_symbols(need_omp: bool) -> dict:
    key = ("symbols", need_omp)
    if key not in _state:
        names = list(_LIBC_SYMBOLS)
        if need_omp:
            load_libgomp()
            names += _OMP_SYMBOLS
        addresses = {n: llvm.address_of_symbol(n) for n in names}
        _state[key] = {n: a for n, a in addresses.items() if a}
    return _state[key]


def jit_link(obj: bytes, symbol: str, need_omp: bool = False):
    """Load an object image into the JIT and look up ``symbol``.

    Parameters
    ----------
    obj : bytes
        ELF object produced by :func:`emit_object`.
    symbol : str
        The exported function to look up.
    need_omp : bool
        Whether the object calls libgomp (loaded on demand).

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
        tracker = builder.link(_jit(), f"tensortune_kernel_{next(_library_names)}")
        return tracker, tracker[symbol]
