"""Ahead-of-time libraries (`tensortune build`): a library and header that programs without
tensortune can use, from Python (ctypes, in a process that cannot import tensortune) and from C."""
from __future__ import annotations

import ctypes
import json
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

from logs import TuningLog, TuningRecord, installed_version
from schedules import Schedule
from tensorir.runtime import load_library
from tensorir.runtime.aot import AotKernel, build_library
from tensorir.runtime.libinfo import LibraryTargetError
from tensorir.target import Target
from tuner.cli import main
from tuner.spec import WorkloadSpec

# the library under test: a parallel float32 product (from a log), a softmax (heap buffers: failure
# sites), a float64 product (untuned); shapes that no tile divides
MM = ("mm", "matmul", ["M=64", "N=48", "K=40"])
SM = ("sm", "softmax", ["rows=7", "cols=33"])
MM64 = ("mm64", "matmul", ["M=9", "N=11", "K=13", "dtype=float64"])
KERNELS = (MM, SM, MM64)
THREADS = 2
ALLOWED_NEEDED = {"libc.so.6", "libm.so.6", "libpthread.so.0"}


@pytest.fixture(autouse=True)
def _no_user_log(tmp_path, monkeypatch):
    # builds without --log read the per-user log: this user's tuning must not change the tests
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


def _cc() -> str:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.fail("these tests link a C program: install a C compiler (cc/gcc), e.g. apt-get install gcc")
    return cc


def _parallel_log(path) -> str:
    """A log whose only record is a tiled, parallel schedule of MM for this host at THREADS threads."""
    spec = WorkloadSpec.parse(MM[1], MM[2])
    s = Schedule(spec.tensors()).tile(["C.i", "C.j"], [8, 16]).parallel("C.i.0")
    rec = TuningRecord(workload_key=spec.key, workload_name=spec.name, workload_params=spec.params,
                       target=Target.host(THREADS).record(), trace=s.to_json(), costs=[1e-4], flops=spec.flops)
    TuningLog(path).append(rec)
    return str(path)


def _build_cli(*args):
    return main(["build", *args, "--quiet"])


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    """``(folder, library path)`` of the library built by the CLI from --workload specs and a log."""
    d = tmp_path_factory.mktemp("aot")
    log = _parallel_log(d / "tuned.jsonl")
    args = []
    for sym, wl, items in KERNELS:
        args += ["--workload", " ".join([f"{sym}={wl}", *items])]
    # the untuned kernels as naive nests: softmax's then allocates its intermediates (failure sites to test)
    code = _build_cli(*args, "--log", log, "--threads", str(THREADS), "--untuned", "naive", "-o", str(d / "libk.so"))
    assert code == 0
    return d, d / "libk.so"


def _inputs(rng_seed=0):
    """The inputs every consumer of the library uses (numpy's default_rng, so both sides can make them)."""
    rng = np.random.default_rng(rng_seed)
    out = {}
    for sym, wl, items in KERNELS:
        spec = WorkloadSpec.parse(wl, items)
        out[sym] = [rng.uniform(-1, 1, t.shape).astype(t.dtype) for t in spec.tensors() if t.is_placeholder]
    return out


def _reference(sym, arrays):
    a = arrays
    if sym == "sm":
        e = np.exp(a[0] - a[0].max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)
    return a[0] @ a[1]


def _metadata(path) -> dict:
    cdll = ctypes.CDLL(str(path))
    fn = cdll.tensortune_k_metadata
    fn.restype = ctypes.c_char_p
    return json.loads(fn())


# ------------------------------------------------------------------ the library file

def test_library_needs_only_libc_libm(lib):
    _, path = lib
    dyn = subprocess.run(["readelf", "-d", str(path)], capture_output=True, text=True, check=True).stdout
    needed = set(re.findall(r"\(NEEDED\)\s+Shared library: \[(.+?)\]", dyn))
    assert needed <= ALLOWED_NEEDED, f"unexpected dependencies: {needed - ALLOWED_NEEDED}"
    assert "libgomp.so.1" not in needed      # mm is parallel: it runs on the library's own pool
    exported = subprocess.run(["nm", "-D", "--defined-only", str(path)], capture_output=True, text=True,
                              check=True).stdout
    assert "tensortune_parallel_v1" not in exported and "tensortune_parallel_v1" in subprocess.run(
        ["nm", str(path)], capture_output=True, text=True, check=True).stdout     # inside, hidden
    assert "RPATH" not in dyn and "RUNPATH" not in dyn
    ldd = subprocess.run(["ldd", str(path)], capture_output=True, text=True, check=True).stdout
    assert "not found" not in ldd
    # C-callable names: the entry points and the metadata function, nothing else without a dot
    lines = subprocess.run(["nm", "-D", "--defined-only", str(path)], capture_output=True, text=True,
                           check=True).stdout.splitlines()
    public = {ln.split()[-1] for ln in lines if re.fullmatch(r"[A-Za-z_]\w*", ln.split()[-1])}
    assert public == {"mm", "sm", "mm64", "tensortune_k_metadata"}


def test_header_declares_each_kernel_in_workload_order(lib):
    d, _ = lib
    h = (d / "libk.h").read_text()
    assert "#ifndef TENSORTUNE_K_H\n#define TENSORTUNE_K_H" in h and h.rstrip().endswith("#endif /* TENSORTUNE_K_H */")
    assert "#include <stdint.h>" in h and 'extern "C"' in h
    decls = re.findall(r"^int (\w+)\((.*)\);$", h, re.M)
    assert decls == [("mm", "const float *A, const float *B, float *C"),
                     ("sm", "const float *X, float *Y"),
                     ("mm64", "const double *A, const double *B, double *C")]
    assert "const char *tensortune_k_metadata(void);" in h
    # shapes, dtypes and roles, per kernel
    assert re.search(r"A\s+input\s+float32\s+\[64\]\[40\]", h) and re.search(r"C\s+output\s+float32\s+\[64\]\[48\]", h)
    assert re.search(r"A\s+input\s+float64\s+\[9\]\[13\]", h) and re.search(r"Y\s+output\s+float32\s+\[7\]\[33\]", h)
    assert "row-major" in h and "aligned" in h and "returns 1: allocating" in h
    assert f"Parallel kernels run on the library's own thread pool: {THREADS} threads." in h
    assert "Link with -L<folder> -lk" in h and "needs libc and libm" in h


def test_metadata_function(lib):
    _, path = lib
    meta = _metadata(path)
    host = Target.host()
    assert meta["target"]["cpu"] == host.cpu and meta["target"]["features"] == host.features
    assert meta["threads"] == THREADS and meta["tensortune_version"] == installed_version()
    assert [k["symbol"] for k in meta["kernels"]] == ["mm", "sm", "mm64"]
    by = {k["symbol"]: k for k in meta["kernels"]}
    assert by["mm"]["uses_openmp"] and by["mm"]["schedule_source"].startswith("tuned")
    assert by["mm64"]["schedule_source"].startswith("untuned")
    assert len({k["schedule_hash"] for k in meta["kernels"]}) == 3
    assert all(re.fullmatch(r"[0-9a-f]{16}", k["schedule_hash"]) for k in meta["kernels"])
    assert [p["dtype"] for p in by["mm64"]["params"]] == ["float64"] * 3
    assert [p["role"] for p in by["sm"]["params"]] == ["input", "output"]
    assert [p["kind"] for p in by["sm"]["sites"]] and all(p["kind"] == "alloc" for p in by["sm"]["sites"])


# ------------------------------------------------------------------ Python without tensortune

_NO_TENSORTUNE = r'''
import ctypes, json, sys
import numpy as np
for mod in ("tensorir", "tuner", "logs", "schedules"):
    try:
        __import__(mod)
    except ImportError:
        continue
    sys.exit(f"{mod} is importable in the clean process")
kernels = json.loads(sys.argv[2])
lib = ctypes.CDLL(sys.argv[1])
rng = np.random.default_rng(0)
errors = {}
for sym, shapes, dtype in kernels:
    arrays = [rng.uniform(-1, 1, s).astype(dtype) for s in shapes[:-1]]
    out = np.full(shapes[-1], np.nan, dtype)
    fn = getattr(lib, sym)
    fn.restype = ctypes.c_int
    status = fn(*[ctypes.c_void_p(a.ctypes.data) for a in arrays + [out]])
    if sym == "sm":
        e = np.exp(arrays[0] - arrays[0].max(axis=1, keepdims=True))
        ref = e / e.sum(axis=1, keepdims=True)
    else:
        ref = arrays[0] @ arrays[1]
    errors[sym] = [status, float(np.abs(out - ref).max())]
fn = lib.tensortune_k_metadata
fn.restype = ctypes.c_char_p
print(json.dumps({"errors": errors, "cpu": json.loads(fn())["target"]["cpu"], "path": sys.path}))
'''


def test_ctypes_in_a_process_without_tensortune(lib, tmp_path):
    _, path = lib
    site_packages = os.path.dirname(os.path.dirname(np.__file__))
    kernels = []
    for sym, wl, items in KERNELS:
        spec = WorkloadSpec.parse(wl, items)
        kernels.append([sym, [list(t.shape) for t in spec.tensors()], spec.tensors()[0].dtype])
    # -I: no PYTHONPATH, no user site, not the script's folder; -S: no site-packages .pth files (the
    # editable install of tensortune is one); numpy's folder is added by hand
    script = f"import sys; sys.path.append({site_packages!r})\n" + _NO_TENSORTUNE
    proc = subprocess.run([sys.executable, "-I", "-S", "-c", script, str(path), json.dumps(kernels)],
                          capture_output=True, text=True, cwd=tmp_path, timeout=60,
                          env={"PATH": os.environ.get("PATH", ""), "OMP_NUM_THREADS": "2"})
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    # (the venv may live inside the checkout, as the README installs it: look for the packages, not the prefix)
    assert not any(os.path.isdir(os.path.join(p, pkg)) for p in out["path"]
                   for pkg in ("tensorir", "schedules", "tuner", "logs"))
    assert out["cpu"] == Target.host().cpu
    for sym, (status, err) in out["errors"].items():
        assert status == 0
        assert err < (1e-12 if sym == "mm64" else 1e-5), (sym, err)


# ------------------------------------------------------------------ C

_C_MAIN = r'''
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "libk.h"

static void fill_f(float *a, int n, int seed) { for (int i = 0; i < n; i++) a[i] = (float)sin(0.37 * i + seed); }
static void fill_d(double *a, int n, int seed) { for (int i = 0; i < n; i++) a[i] = sin(0.37 * i + seed); }

int main(void) {
    static float A[64 * 40], B[40 * 48], C[64 * 48], X[7 * 33], Y[7 * 33];
    static double A2[9 * 13], B2[13 * 11], C2[9 * 11];
    fill_f(A, 64 * 40, 1); fill_f(B, 40 * 48, 2); fill_f(X, 7 * 33, 3);
    fill_d(A2, 9 * 13, 4); fill_d(B2, 13 * 11, 5);
    int s = mm(A, B, C) | sm(X, Y) | mm64(A2, B2, C2);
    if (s != 0) { fprintf(stderr, "status %d\n", s); return 1; }
    printf("{\"mm\": [");
    for (int i = 0; i < 64 * 48; i++) printf(i ? ",%.9g" : "%.9g", C[i]);
    printf("], \"sm\": [");
    for (int i = 0; i < 7 * 33; i++) printf(i ? ",%.9g" : "%.9g", Y[i]);
    printf("], \"mm64\": [");
    for (int i = 0; i < 9 * 11; i++) printf(i ? ",%.17g" : "%.17g", C2[i]);
    printf("], \"meta\": %s}\n", tensortune_k_metadata());
    return 0;
}
'''


def _c_inputs():
    f = lambda n, seed, dt: np.sin(0.37 * np.arange(n) + seed).astype(dt)   # noqa: E731
    return {"mm": [f(64 * 40, 1, "float32").reshape(64, 40), f(40 * 48, 2, "float32").reshape(40, 48)],
            "sm": [f(7 * 33, 3, "float32").reshape(7, 33)],
            "mm64": [f(9 * 13, 4, "float64").reshape(9, 13), f(13 * 11, 5, "float64").reshape(13, 11)]}


def _check_c_output(stdout: str):
    out = json.loads(stdout)
    for sym, arrays in _c_inputs().items():
        ref = _reference(sym, arrays)
        got = np.array(out[sym]).reshape(ref.shape)
        tol = 1e-12 if sym == "mm64" else 1e-5
        np.testing.assert_allclose(got, ref, rtol=tol, atol=tol, err_msg=sym)
    assert out["meta"]["library"] == "k"


def _compile_and_run(cmd, exe, cwd):
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, timeout=60)
    assert proc.returncode == 0, f"{' '.join(cmd)}:\n{proc.stderr}"
    assert proc.stderr == "", proc.stderr       # -Wall -Wextra -pedantic: the header compiles cleanly
    run = subprocess.run([str(exe)], capture_output=True, text=True, cwd=cwd, timeout=60)
    assert run.returncode == 0, run.stderr
    return run.stdout


def test_c_program_links_the_shared_library(lib, tmp_path):
    d, _ = lib
    cc = _cc()
    (tmp_path / "main.c").write_text(_C_MAIN)
    cmd = [cc, "-std=c99", "-Wall", "-Wextra", "-pedantic", "-Werror", "main.c", f"-I{d}", f"-L{d}", "-lk",
           f"-Wl,-rpath,{d}", "-lm", "-o", "main"]
    _check_c_output(_compile_and_run(cmd, tmp_path / "main", tmp_path))


def test_object_file_from_json_workloads_links_statically(tmp_path):
    cc = _cc()
    log = _parallel_log(tmp_path / "tuned.jsonl")
    (tmp_path / "a.json").write_text(json.dumps([{"workload": MM[1], "symbol": "mm",
                                                   "params": {"M": 64, "N": 48, "K": 40}},
                                                  {"workload": "softmax", "symbol": "sm",
                                                   "params": {"rows": 7, "cols": 33}}]))
    (tmp_path / "b.json").write_text(json.dumps({"workload": "matmul", "symbol": "mm64",
                                                 "params": {"M": 9, "N": 11, "K": 13, "dtype": "float64"}}))
    obj = tmp_path / "libk.o"
    assert _build_cli(str(tmp_path / "a.json"), str(tmp_path / "b.json"), "--log", log, "-o", str(obj)) == 0
    assert obj.read_bytes()[:4] == b"\x7fELF" and (tmp_path / "libk.h").exists()
    (tmp_path / "main.c").write_text(_C_MAIN)
    cmd = [cc, "-std=c99", "-Wall", "-Wextra", "-pedantic", "-Werror", "main.c", "libk.o", "-lm", "-lpthread",
           "-o", "main"]
    _check_c_output(_compile_and_run(cmd, tmp_path / "main", tmp_path))


# ------------------------------------------------------------------ tensortune's loader

def test_load_library_runs_an_aot_kernel(lib):
    _, path = lib
    spec = WorkloadSpec.parse(SM[1], SM[2])
    kernel = load_library(path, Schedule(spec.tensors()).lower(), "sm")
    x = _inputs()["sm"]
    y = np.empty((7, 33), "float32")
    kernel(*x, y)
    np.testing.assert_allclose(y, _reference("sm", x), rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="does not define kernel 'nope'"):
        load_library(path, Schedule(spec.tensors()).lower(), "nope")
    other = WorkloadSpec.parse(SM[1], ["rows=8", "cols=33"])
    with pytest.raises(ValueError, match=r"parameter 0 \('X'\) is float32\[8, 33\] .* float32\[7, 33\]"):
        load_library(path, Schedule(other.tensors()).lower(), "sm")


def _feature_host_lacks() -> str:
    host = set(Target.host().features.split(","))
    for f in ("sse4a", "xop", "fma4", "tbm", "avx512fp16", "amx-tile", "avx512vp2intersect", "clzero", "avx2"):
        if f"-{f}" in host:
            return f
    pytest.fail(f"found no feature this host lacks among the candidates: {Target.host().features}")


def test_library_for_a_cpu_the_host_cannot_run_is_refused(tmp_path):
    host = Target.host()
    lacking = _feature_host_lacks()
    features = host.features.replace(f"-{lacking}", f"+{lacking}")
    other = Target(host.cpu, features, host.vector_bits, host.cores, host.threads)
    spec = WorkloadSpec.parse("matmul", ["M=8", "N=8", "K=8"])
    func = Schedule(spec.tensors()).lower()
    path = tmp_path / "other.so"
    build_library([AotKernel("mm", func)], path, target=other, version="test")
    with pytest.raises(LibraryTargetError, match=rf"compiled for CPU '{host.cpu}' and needs \+{lacking}, "
                                                 r"which this host .* lacks; rebuild it"):
        load_library(path, func, "mm")
    build_library([AotKernel("mm", func)], tmp_path / "here.so", version="test")   # the same, for this host
    assert load_library(tmp_path / "here.so", func, "mm").name == "mm.tensortune_kernel"
    # the same through the command line
    assert _build_cli("matmul", "M=8", "N=8", "K=8", "--name", "mm", "--target-features", features,
                      "-o", str(tmp_path / "cli.so")) == 0
    with pytest.raises(LibraryTargetError, match=rf"needs \+{lacking}, which this host"):
        load_library(tmp_path / "cli.so", func, "mm")


def test_cross_build_for_a_baseline_cpu_runs_here(tmp_path):
    """x86-64 with SSE2 only: 128-bit code, a record tuned for that CPU, runnable on any x86-64 host."""
    spec = WorkloadSpec.parse(MM[1], MM[2])
    s = Schedule(spec.tensors()).tile(["C.i", "C.j"], [8, 4]).parallel("C.i.0")
    s = s.reorder("C.i.0", "C.j.0", "C.k", "C.i.1", "C.j.1").vectorize("C.j.1")
    rec = TuningRecord(workload_key=spec.key, workload_name=spec.name, workload_params=spec.params,
                       target={"kind": "llvm", "cpu": "x86-64", "features": "+sse2", "threads": THREADS},
                       trace=s.to_json(), costs=[1e-4])
    TuningLog(tmp_path / "x86.jsonl").append(rec)
    out = tmp_path / "libx.so"
    assert _build_cli("--workload", "mm=" + " ".join([MM[1], *MM[2]]), "--workload", " ".join(["sm=softmax", *SM[2]]),
                      "--target-cpu", "x86-64", "--target-features", "+sse2", "--threads", str(THREADS),
                      "--log", str(tmp_path / "x86.jsonl"), "-o", str(out)) == 0
    meta = json.loads(_meta_of(out, "x"))
    assert meta["target"] == {"kind": "llvm", "cpu": "x86-64", "features": "+sse2", "vector_bits": 128}
    assert meta["kernels"][0]["schedule_source"].startswith("tuned") and meta["kernels"][0]["uses_openmp"]
    asm = subprocess.run(["objdump", "-d", str(out)], capture_output=True, text=True, check=True).stdout
    assert "%xmm" in asm and "%ymm" not in asm and "%zmm" not in asm
    for sym in ("mm", "sm"):
        spec = WorkloadSpec.parse(*{"mm": MM, "sm": SM}[sym][1:])
        kernel = load_library(out, Schedule(spec.tensors()).lower(), sym)
        arrays = _inputs()[sym]
        result = np.empty(spec.output_tensors()[0].shape, "float32")
        kernel(*arrays, result)
        np.testing.assert_allclose(result, _reference(sym, arrays), rtol=1e-5, atol=1e-5)


def _meta_of(path, lib) -> str:
    fn = getattr(ctypes.CDLL(str(path)), f"tensortune_{lib}_metadata")
    fn.restype = ctypes.c_char_p
    return fn().decode()


# ------------------------------------------------------------------ bad input

@pytest.mark.parametrize("args, message", [
    (["nosuchop", "-o", "{d}/x.so"], "unknown workload"),
    (["matmul", "M=0", "-o", "{d}/x.so"], "parameter 'M' must be positive"),
    (["matmul", "M=abc", "-o", "{d}/x.so"], "not an integer"),
    (["matmul", "-o", "{d}/missing/x.so"], "does not exist"),
    (["matmul", "-o", "{d}"], "must end in .so"),
    (["matmul", "-o", "{d}/x.dll"], "must end in .so (shared library) or .o"),
    (["matmul", "-o", "{d}/dir.so"], "is a directory"),
    (["matmul", "--name", "2mm", "-o", "{d}/x.so"], "not a C identifier"),
    (["matmul", "--name", "int", "-o", "{d}/x.so"], "keyword"),
    (["matmul", "--name", "tensortune_x", "-o", "{d}/x.so"], "reserved"),
    (["--workload", "matmul M=8", "--workload", "matmul M=16", "-o", "{d}/x.so"], "given to two kernels"),
    (["--workload", "free=softmax rows=4 cols=8", "--untuned", "naive", "-o", "{d}/x.so"], "a function the kernels call"),
    (["--workload", "=matmul", "-o", "{d}/x.so"], "expected '[SYMBOL=]WORKLOAD"),
    (["--workload", "mm=matmul", "--name", "x", "-o", "{d}/x.so"], "--name names the positional"),
    (["{d}/w.json", "matmul", "-o", "{d}/x.so"], "either JSON workload files or one WORKLOAD"),
    (["{d}/bad.json", "-o", "{d}/x.so"], "unknown key(s) shape"),
    (["{d}/none.json", "-o", "{d}/x.so"], "not found"),
    (["-o", "{d}/x.so"], "nothing to build"),
    (["matmul", "--threads", "-1", "-o", "{d}/x.so"], "--threads"),
    (["matmul", "--log", "{d}/nolog.jsonl", "-o", "{d}/x.so"], "tuning log"),
    (["matmul", "--target-cpu", "{other_cpu}", "-o", "{d}/x.so"], "needs --target-features"),
    (["matmul", "--target-features", "+avx2,+nosuchfeature", "-o", "{d}/x.so"], "'+nosuchfeature' is not"),
    (["matmul", "--target-cpu", "x86 64;", "--target-features", "+sse2", "-o", "{d}/x.so"], "not an LLVM CPU"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, args, message):
    (tmp_path / "dir.so").mkdir()
    (tmp_path / "w.json").write_text('{"workload": "matmul"}')
    (tmp_path / "bad.json").write_text('{"workload": "matmul", "shape": [3]}')
    other_cpu = "haswell" if Target.host().cpu != "haswell" else "znver3"
    code = main(["build", *[a.format(d=tmp_path, other_cpu=other_cpu) for a in args]])
    err = capsys.readouterr().err
    assert code == 2
    lines = [ln for ln in err.splitlines() if not ln.startswith("tensortune: warning:")]
    assert len(lines) == 1 and lines[0].startswith("tensortune: error: "), err
    assert message in lines[0]
    assert not (tmp_path / "x.so").exists()


def test_help_documents_the_forms(capsys):
    assert main(["build", "--help"]) == 0
    out = capsys.readouterr().out
    for text in ("--workload", "FILE.json", "OUT.h", "tensortune_<LIB>_metadata", "--threads", "libc and libm"):
        assert text in out


_INT_WORKLOAD = '''
from tensorir import te


def iscale(n=10):
    X = te.placeholder((n, 3), "int32", "X")
    Y = te.compute((n, 3), lambda i, j: X[i, j] * 3 + 1, "Y")
    return [X, Y]
'''


def test_int32_user_workload_and_no_c_compiler(tmp_path, monkeypatch, capsys):
    (tmp_path / "myops.py").write_text(_INT_WORKLOAD)
    (tmp_path / "w.json").write_text(json.dumps({"workload": "myops.py:iscale", "params": {"n": 5}}))
    assert _build_cli(str(tmp_path / "w.json"), "--log", _parallel_log(tmp_path / "l.jsonl"),
                      "-o", str(tmp_path / "libi.so")) == 0
    assert "int iscale(const int32_t *X, int32_t *Y);" in (tmp_path / "libi.h").read_text()
    fn = ctypes.CDLL(str(tmp_path / "libi.so")).iscale
    x = np.arange(-7, 8, dtype=np.int32).reshape(5, 3)
    y = np.zeros((5, 3), np.int32)
    assert fn(ctypes.c_void_p(x.ctypes.data), ctypes.c_void_p(y.ctypes.data)) == 0
    np.testing.assert_array_equal(y, x * 3 + 1)
    # without a C compiler: a shared library is refused in one line, an object file is still written
    monkeypatch.setattr("tensorir.runtime.aot.shutil.which", lambda name: None)
    capsys.readouterr()
    assert main(["build", "softmax", "rows=4", "cols=8", "-o", str(tmp_path / "x.so")]) == 1
    err = capsys.readouterr().err.splitlines()
    assert [ln for ln in err if "error" in ln] == [err[-1]] and "needs a C compiler" in err[-1]
    assert _build_cli("softmax", "rows=4", "cols=8", "-o", str(tmp_path / "x.o")) == 0
    assert (tmp_path / "x.o").read_bytes()[:4] == b"\x7fELF"


def test_require_tuned_names_the_untuned_workloads_and_untuned_picks_the_fallback(tmp_path, capsys):
    log = _parallel_log(tmp_path / "tuned.jsonl")
    mm, sm = (" ".join([f"{s}={w}", *items]) for s, w, items in (MM, SM))
    # MM has a record for this host at THREADS threads; SM has none
    assert _build_cli("--workload", mm, "--log", log, "--threads", str(THREADS), "--require-tuned",
                      "-o", str(tmp_path / "ok.so")) == 0
    code = main(["build", "--workload", mm, "--workload", sm, "--log", log, "--threads", str(THREADS),
                 "--require-tuned", "-o", str(tmp_path / "no.so")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.count("\n") == 0 and err.startswith("tensortune: error: "), err
    assert "softmax(rows=7, cols=33" in err and "tensortune tune softmax" in err and "matmul" not in err, err
    assert not (tmp_path / "no.so").exists()
    # without --require-tuned the untuned kernel is built; the header says how each schedule was chosen
    for untuned in ("heuristic", "naive"):
        out = tmp_path / f"{untuned}.so"
        assert _build_cli("--workload", sm, "--log", log, "--untuned", untuned, "-o", str(out)) == 0
        built = {"heuristic": "the heuristic start", "naive": "the naive loop nest"}[untuned]
        assert f"untuned: {built}" in out.with_suffix(".h").read_text()
