"""Ahead-of-time libraries: lowered functions -> one shared library or object file + a C header.

>>> lib = build_library([AotKernel("matmul", func)], "out/kernels.so", threads=0, version="0.1.0")
>>> lib.header                       # out/kernels.h: int matmul(const float *A, const float *B, float *C);

Every kernel is compiled by the one pipeline (:func:`tensorir.runtime.compile_module`)
under an internal name (:func:`tensorir.runtime.libinfo.kernel_symbol`); the
C entry points and the metadata function are a small LLVM IR module linked
with the kernels into one LLVM module, from which one object is emitted for
the library's target.  The entry points are generated as LLVM IR, not C: an
object file (``-o OUT.o``) then needs no C compiler at all, the wrapper and
the kernels are compiled for exactly the same target by the same
TargetMachine, and nothing depends on which C compiler (or flags) the build
machine has.  Only a shared library is linked by the system C compiler
(``cc -shared``), against libm (and libc's pthreads: parallel kernels carry their own thread pool).
"""
from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import subprocess
import tempfile
import time

import llvmlite.binding as llvm

from tensorir.runtime import libinfo
from tensorir.runtime import llvm as runtime
from tensorir.codegen import parallel
from tensorir.runtime.compile import compile_module
from tensorir.runtime.jit import calls_pool, pool_module
from tensorir.runtime.kernel import ToolchainError
from tensorir.target import Target
from tensorir.tir.ir import PrimFunc, Store, walk_stmts

C_TYPES = {"float32": "float", "float64": "double", "int32": "int32_t", "bool": "uint8_t"}
"""The C element type of each tensor dtype."""

KINDS = (".so", ".o")
"""The output kinds, by file extension: shared library, relocatable object."""

_C_KEYWORDS = frozenset("""auto break case char const continue default do double else enum extern float for goto
if inline int long register restrict return short signed sizeof static struct switch typedef union unsigned void
volatile while _Bool _Complex _Imaginary bool true false alignas alignof asm class delete friend namespace new
operator private protected public template this throw try typename using virtual main""".split())
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


class LibraryError(ValueError):
    """A library cannot be built as asked (bad symbol, path or extension); one line."""


@dataclasses.dataclass(frozen=True)
class AotKernel:
    """One public kernel of a library.

    Attributes
    ----------
    symbol : str
        The C function name.
    func : PrimFunc
        The lowered function (lowered for the library's target).
    title : str
        One line for the header, e.g. ``"matmul(M=64, N=64, K=64): matrix product"``.
    info : dict
        More JSON metadata for this kernel (workload, parameters, schedule hash...).
    """
    symbol: str
    func: PrimFunc
    title: str = ""
    info: dict = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class Library:
    """What :func:`build_library` wrote: ``path``, ``header``, ``metadata`` (dict) and ``seconds``."""
    path: str
    header: str
    metadata: dict
    seconds: float


# ------------------------------------------------------------------ names

def check_symbol(symbol: str) -> str:
    """``symbol`` if it can name an exported C function, else :class:`LibraryError`."""
    if not isinstance(symbol, str) or not _IDENT.match(symbol):
        raise LibraryError(f"symbol {symbol!r} is not a C identifier (letters, digits, '_'; not starting "
                           "with a digit)")
    if symbol in _C_KEYWORDS:
        raise LibraryError(f"symbol {symbol!r} is a C or C++ keyword (or main); choose another name")
    if symbol.startswith("__") or (symbol[0] == "_" and symbol[1:2].isupper()):
        raise LibraryError(f"symbol {symbol!r} is reserved in C (starts with '__' or '_' and a capital)")
    if symbol.startswith("tensortune_"):
        raise LibraryError(f"symbol {symbol!r}: names starting with 'tensortune_' are reserved for the "
                           "library's metadata function")
    return symbol


def c_identifier(text: str) -> str:
    """``text`` made into a C identifier (other characters become '_'); the default symbol of a workload."""
    ident = re.sub(r"[^A-Za-z0-9_]", "_", str(text)) or "kernel"
    return f"k_{ident}" if ident[0].isdigit() else ident


def library_name(path) -> str:
    """The library's name in ``tensortune_<name>_metadata``: the file's stem without a ``lib`` prefix."""
    stem = os.path.basename(os.fspath(path)).rsplit(".", 1)[0]
    if stem.startswith("lib") and len(stem) > 3:
        stem = stem[3:]
    return c_identifier(stem)


def header_path(path) -> str:
    """``OUT.h`` beside ``OUT.so`` / ``OUT.o``."""
    return os.path.splitext(os.fspath(path))[0] + ".h"


def check_output(path) -> str:
    """The output kind (``".so"`` or ``".o"``) of ``path``, once it is known to be writable.

    Raises
    ------
    LibraryError
        Another extension, a directory, or a folder that is missing or not writable.
    """
    path = os.fspath(path)
    ext = os.path.splitext(path)[1]
    if ext not in KINDS:
        raise LibraryError(f"output {path!r} must end in .so (shared library) or .o (object file), "
                           f"not {ext or 'no extension'!r}")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise LibraryError(f"cannot write {path!r}: folder {folder} does not exist")
    for p in (path, header_path(path)):
        if os.path.isdir(p):
            raise LibraryError(f"cannot write {p!r}: it is a directory")
        if (os.path.exists(p) and not os.access(p, os.W_OK)) or not os.access(folder, os.W_OK):
            raise LibraryError(f"cannot write {p!r}: permission denied")
    return ext


# ------------------------------------------------------------------ build

def build_library(kernels, path, *, target: Target | None = None, threads: int = 0,
                  version: str = "unknown", command: str | None = None) -> Library:
    """Compile ``kernels`` into one shared library (``.so``) or object file (``.o``) plus a C header.

    Parameters
    ----------
    kernels : list of AotKernel
        The public kernels, each its own C symbol (unique in the library).
    path : str or os.PathLike
        ``OUT.so`` or ``OUT.o``; the header is written to ``OUT.h``.
    target : Target, optional
        The CPU to compile for (default: the host).  Loading the library
        through :func:`tensorir.runtime.load_library` on a host that lacks its
        features is refused.
    threads : int
        The thread count the C entry points pass to parallel kernels (0: ``OMP_NUM_THREADS``
        if set, else every core the process may use).
    version : str
        The tensortune version recorded in the metadata.
    command : str, optional
        The command that built the library, quoted in the header.

    Raises
    ------
    LibraryError
        A bad or duplicate symbol, a bad output path.
    ToolchainError
        No C compiler to link a shared library, or linking failed.
    """
    t0 = time.perf_counter()
    kind = check_output(path)
    kernels = list(kernels)
    if not kernels:
        raise LibraryError("a library needs at least one kernel")
    seen = set()
    for k in kernels:
        check_symbol(k.symbol)
        if k.symbol in seen:
            raise LibraryError(f"symbol {k.symbol!r} is given to two kernels; name them apart")
        seen.add(k.symbol)
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 0:
        raise LibraryError(f"threads must be an integer >= 0 (0: all cores), got {threads!r}")
    cc = find_cc() if kind == ".so" else None     # before compiling anything
    host = Target.host()
    target = target or host
    lib = library_name(path)
    compiled = [_compile(k, target) for k in kernels]
    meta = {"format": libinfo.FORMAT, "library": lib, "tensortune_version": version,
            "target": {"kind": "llvm", "cpu": target.cpu, "features": target.features,
                       "vector_bits": target.vector_bits},
            "threads": threads, "uses_openmp": any(c["uses_openmp"] for c in compiled),
            "kernels": [c["meta"] for c in compiled]}
    calls = set().union(*(c["calls"] for c in compiled))
    for k in kernels:
        if k.symbol in calls:
            raise LibraryError(f"symbol {k.symbol!r} is a function the kernels call; choose another name")
    obj = _emit(compiled, meta, lib, threads, target, host)
    path = os.fspath(path)
    if kind == ".o":
        _write(path, obj)
    else:
        _link(cc, path, obj, meta["uses_openmp"])
    header = header_path(path)
    with open(header, "w") as f:
        f.write(header_text(meta, [k.title for k in kernels], os.path.basename(path), command))
    return Library(path, header, meta, time.perf_counter() - t0)


def _compile(k: AotKernel, target: Target) -> dict:
    func = dataclasses.replace(k.func, name=libinfo.kernel_symbol(k.symbol))
    mod, _obj, uses_openmp = compile_module(func, target=target)
    outputs = {s.buffer for s in walk_stmts(func.body) if isinstance(s, Store)}
    params = []
    for b in func.params:
        if b.dtype not in C_TYPES:
            raise LibraryError(f"kernel {k.symbol!r}: parameter {b.name!r} has dtype {b.dtype}, which has no C type")
        params.append({"name": b.name, "dtype": b.dtype, "shape": [int(d) for d in b.shape],
                       "role": "output" if b in outputs else "input"})
    with runtime.LLVM_LOCK:
        text = str(mod)
        calls = {f.name for f in mod.functions if f.is_declaration}
    meta = {"symbol": k.symbol, "params": params, "uses_openmp": bool(uses_openmp),
            "sites": _sites(text, func.name), **k.info}
    return {"module": mod, "func": func, "meta": meta, "uses_openmp": uses_openmp, "calls": calls}


def _sites(text: str, name: str) -> list:
    """The failure sites of kernel ``name``, read from its module's exported site table."""
    m = re.search(r'^@"?' + re.escape(f"{name}.tensortune_sites") + r'"? = .*? c"(.*)"\s*(,.*)?$', text, re.M)
    if m is None:
        return []
    raw = re.sub(rb"\\([0-9A-Fa-f]{2})", lambda g: bytes([int(g.group(1), 16)]), m.group(1).encode())
    return json.loads(raw.rstrip(b"\0").decode())["sites"]


def _ir_string(text: str) -> tuple:
    data = text.encode() + b"\0"
    body = "".join(chr(b) if 32 <= b < 127 and chr(b) not in '"\\' else f"\\{b:02X}" for b in data)
    return len(data), body


def wrapper_ir(meta: dict, lib: str, threads: int) -> str:
    """The LLVM IR of the C entry points and the metadata function."""
    n, body = _ir_string(json.dumps(meta, sort_keys=True))
    meta_fn = libinfo.metadata_function(lib)
    lines = [f'@"tensortune.metadata.json" = private unnamed_addr constant [{n} x i8] c"{body}", align 1',
             f"define ptr @{meta_fn}() nounwind {{", "  ret ptr @\"tensortune.metadata.json\"", "}"]
    for k in meta["kernels"]:
        sym, inner = k["symbol"], libinfo.kernel_symbol(k["symbol"])
        args = [f"ptr %p{i}" for i in range(len(k["params"]))]
        lines += [f'@"{libinfo.metadata_symbol(sym)}" = alias ptr (), ptr @{meta_fn}',
                  f'declare i32 @"{inner}"({", ".join(["ptr"] * len(args) + ["i32"])})',
                  f"define i32 @{sym}({', '.join(a.replace('ptr', 'ptr noalias') for a in args)}) nounwind {{",
                  f'  %status = call i32 @"{inner}"({", ".join(args + [f"i32 {threads}"])})',
                  "  ret i32 %status", "}"]
    return "\n".join(lines) + "\n"


def _target_machine(target: Target, host: Target):
    if (target.cpu, target.features) == (host.cpu, host.features):
        return runtime.target_machine()
    return llvm.Target.from_triple(llvm.get_process_triple()).create_target_machine(
        cpu=target.cpu, features=target.features, opt=3, reloc="pic", codemodel="default")


def _emit(compiled, meta, lib, threads, target, host) -> bytes:
    with runtime.LLVM_LOCK:
        mod = llvm.parse_assembly(wrapper_ir(meta, lib, threads))
        runtime.prepare_module(mod)
        pooled = any(calls_pool(c["module"]) for c in compiled)
        for c in compiled:
            mod.link_in(c["module"])      # consumes the kernel's module; internal names are renamed apart
        if pooled:
            mod.link_in(pool_module())    # the library's own thread pool (hidden: one per library)
        mod.verify()
        return _target_machine(target, host).emit_object(mod)


def _write(path: str, data: bytes) -> None:
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def find_cc() -> str:
    """The system C compiler (cc, gcc or clang on PATH), or :class:`ToolchainError`."""
    cc = next((shutil.which(c) for c in ("cc", "gcc", "clang") if shutil.which(c)), None)
    if cc is None:
        raise ToolchainError("building a shared library needs a C compiler to link it (none of cc, gcc, "
                             "clang is on PATH); -o OUT.o writes an object file without one")
    return cc


def gomp_flags(uses_openmp: bool) -> list:
    """The link flags to try in turn for libgomp: none when the kernels run on their own thread pool
    (only the A/B settings of ``parallel.POOL`` call libgomp); ``-l:libgomp.so.1`` finds the runtime
    library when the compiler has no libgomp.so of its own."""
    if not uses_openmp or parallel.POOL:
        return [[]]
    return [["-lgomp"], ["-l:libgomp.so.1"]]


def _link(cc: str, path: str, obj: bytes, uses_openmp: bool) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "kernels.o")
        _write(src, obj)
        out = os.path.join(tmp, os.path.basename(path))
        # the library carries its thread pool: it needs nothing but libc and libm from the system
        # (-lpthread for a glibc older than 2.34)
        base = [cc, "-shared", "-o", out, src, f"-Wl,-soname,{os.path.basename(path)}", "-Wl,-z,noexecstack",
                "-Wl,--no-undefined"]
        for gomp in gomp_flags(uses_openmp):
            cmd = base + gomp + ["-lm", "-lpthread"]
            proc = subprocess.run(cmd, capture_output=True, text=True)
            if proc.returncode == 0:
                break
        if proc.returncode != 0:
            last = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
            raise ToolchainError(f"linking {path} failed ({' '.join(cmd)}): {last}")
        shutil.move(out, path)     # a rename on the same file system


# ------------------------------------------------------------------ header

def c_param_names(params) -> list:
    """C parameter names for the tensors ``params`` (their names, made into distinct C identifiers)."""
    names, seen = [], set()
    for p in params:
        name = c_identifier(p["name"])
        if name in _C_KEYWORDS or name.startswith("__"):
            name += "_"
        while name in seen:
            name += "_"
        seen.add(name)
        names.append(name)
    return names


def _comment(text: str) -> str:
    """``text`` safe inside a C block comment, on one line."""
    return " ".join(str(text).split()).replace("*/", "* /")


def _link_hint(filename: str, uses_openmp: bool) -> str:
    # the parallel kernels' thread pool is inside the library and uses libc's pthreads
    libs = "libc and libm" + (" (pthreads: -lpthread on a glibc older than 2.34)" if uses_openmp else "")
    if filename.endswith(".o"):
        return f"Link {filename} into a program with -lm" + (" -lpthread" if uses_openmp else "") + f" ({libs})."
    stem = os.path.splitext(filename)[0]
    flag = f"-l{stem[3:]}" if stem.startswith("lib") and len(stem) > 3 else filename
    return f"Link with -L<folder> {flag} (with -Wl,-rpath,<folder> or LD_LIBRARY_PATH to run); it needs {libs}."


def header_text(meta: dict, titles, filename: str, command: str | None = None) -> str:
    """The C header of a library described by ``meta`` (see :func:`build_library`)."""
    titles = [_comment(t) for t in titles]
    command = _comment(command) if command else None
    lib = meta["library"]
    guard = f"TENSORTUNE_{lib.upper()}_H"
    target = meta["target"]
    threads = meta["threads"]
    thread_text = f"{threads}" if threads else "OMP_NUM_THREADS if set, else every core the process may use"
    out = [f"/* {os.path.splitext(filename)[0]}.h: C interface of {filename}, generated by tensortune "
           f"{meta['tensortune_version']}. Do not edit.",
           *([f" * Built with: {command}"] if command else []),
           " *",
           f" * Compiled for CPU {target['cpu']} ({target['vector_bits']}-bit vectors); the code may use every",
           " * feature listed in the metadata's target, and a CPU without them may fault (SIGILL).",
           f" * Parallel kernels run on the library's own thread pool: {thread_text} threads.",
           f" * {_link_hint(filename, meta['uses_openmp'])}",
           " *",
           " * Every argument is a dense row-major (C-contiguous) array of the shape and element type given,",
           " * aligned at least to its element size (64-byte alignment is best; any 4- or 8-byte aligned",
           " * pointer of the element type works). Outputs are written in full and must not overlap any",
           " * other argument; inputs are only read. Functions are thread-safe (no global state).",
           " * Return value: 0 on success; k > 0 means failure site k of that kernel (listed with it below:",
           " * a heap buffer of the kernel could not be allocated, i.e. out of memory); the outputs are then",
           " * incomplete and everything the call allocated is freed.",
           " */",
           f"#ifndef {guard}", f"#define {guard}", "", "#include <stdint.h>", "",
           "#ifdef __cplusplus", 'extern "C" {', "#endif", ""]
    for k, title in zip(meta["kernels"], titles):
        out.append(f"/* {k['symbol']}: {title}" if title else f"/* {k['symbol']}")
        width = max(len(p["name"]) for p in k["params"])
        for p in k["params"]:
            shape = "".join(f"[{d}]" for d in p["shape"]) or "[1] (scalar)"
            out.append(f" *   {p['name']:<{width}}  {p['role']:<6}  {p['dtype']:<7}  {shape}")
        if k.get("schedule_hash"):
            out.append(f" * schedule {k['schedule_hash']} ({_comment(k.get('schedule_source', 'schedule'))})")
        sites = k.get("sites") or []
        if sites:
            for i, s in enumerate(sites, 1):
                what = (f"allocating {_comment(s.get('buffer'))} ({s.get('bytes')} bytes) failed" if s.get("kind") == "alloc"
                        else f"{s.get('kind')} of {s.get('buffer')} out of bounds")
                out.append(f" * returns {i}: {what}")
        else:
            out.append(" * always returns 0 (allocates nothing on the heap)")
        out.append(" */")
        args = ", ".join(f"{'const ' if p['role'] == 'input' else ''}{C_TYPES[p['dtype']]} *{name}"
                         for p, name in zip(k["params"], c_param_names(k["params"])))
        out += [f"int {k['symbol']}({args});", ""]
    out += ["/* JSON: format, library, tensortune_version, target {cpu, features, vector_bits}, threads,",
            " * kernels [{symbol, params [{name, dtype, shape, role}], schedule_hash, sites, ...}].",
            " * A static string; do not free it. */",
            f"const char *{libinfo.metadata_function(lib)}(void);", "",
            "#ifdef __cplusplus", "}", "#endif", f"#endif /* {guard} */", ""]
    return "\n".join(out)
