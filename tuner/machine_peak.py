"""What this machine can do at best: FMA throughput and memory bandwidth, measured once and cached.

Reports place a schedule against these two ceilings (a roofline).  Both come from short
microbenchmarks compiled with our own LLVM set-up and run on ``threads`` Python threads
(a ctypes call releases the GIL, so the threads run in parallel):

- **FMA peak**: a loop of independent ``llvm.fma`` chains on the widest native vector
  (16 chains of 512-bit vectors with AVX-512, 12 of 256-bit ones otherwise: enough
  independent chains to cover the FMA latency on two FMA ports, few enough to stay in
  registers).  2 FLOPs per lane per FMA.
- **Memory bandwidth**: a streaming read (a vector sum with 8 accumulators) of an array
  several times the last-level cache, each thread over its own contiguous part.

Each is the best of a few short repeats (a ceiling, not a typical value: on a busy machine the
best of several short runs is the likeliest to have had the cores to itself).  Results are cached in
``machine.json`` beside the per-user tuning log, keyed by CPU name and thread count, so a
machine is measured once; :func:`machine_peak` with ``measure=False`` only reads the cache.
"""
from __future__ import annotations

import ctypes
import json
import os
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

CACHE_FILENAME = "machine.json"


@dataclass(frozen=True)
class MachinePeak:
    """Ceilings of one machine at one thread count.

    Attributes
    ----------
    cpu : str
        LLVM CPU name.
    threads : int
        Threads the ceilings were measured with.
    peak_gflops : float
        FP32 FMA throughput, GFLOP/s.
    bandwidth_gbs : float
        Streaming read bandwidth from memory, GB/s (1e9 bytes).
    source : str
        ``"measured"``, ``"cache"`` or ``"given"`` (passed by the caller).
    """
    cpu: str
    threads: int
    peak_gflops: float
    bandwidth_gbs: float
    source: str = "measured"


def cache_path() -> Path:
    """``machine.json`` in the per-user tensortune cache directory (beside the tuning log)."""
    from logs import default_log_path
    return default_log_path().parent / CACHE_FILENAME


def cache_key(cpu: str, threads: int) -> str:
    return f"{cpu}/threads={int(threads)}"


def read_cache(path=None) -> dict:
    """The cached entries (``{}`` if the file is missing or unreadable: it is only a cache)."""
    try:
        with open(path or cache_path()) as f:
            data = json.load(f)
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def _write_cache(entries: dict, path) -> None:
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".machine-", suffix=".json")
        with os.fdopen(fd, "w") as f:
            json.dump(entries, f, indent=1, sort_keys=True)
        os.replace(tmp, path)          # readers see the old file or the new one, never half
    except OSError:
        pass


def machine_peak(cpu: str, threads: int, measure: bool = True, path=None, refresh: bool = False) -> MachinePeak | None:
    """The ceilings of CPU ``cpu`` at ``threads`` threads: from the cache, else measured here.

    Measuring happens only when ``measure`` is true and ``cpu`` is this host's CPU (a log
    written on another machine is not compared with this one's ceilings); the result is cached.
    ``refresh`` ignores a cached entry (e.g. one measured while the machine was busy: a
    microbenchmark sharing its cores reads low).  Returns None when neither is possible.
    """
    from .target import host_target
    path = path or cache_path()
    entry = None if refresh else read_cache(path).get(cache_key(cpu, threads))
    if isinstance(entry, dict) and {"peak_gflops", "bandwidth_gbs"} <= set(entry):
        return MachinePeak(cpu, int(threads), float(entry["peak_gflops"]), float(entry["bandwidth_gbs"]), "cache")
    if not measure or cpu != host_target()["cpu"] or threads < 1:
        return None
    entry = {"peak_gflops": round(measure_fma_peak(threads), 2), "bandwidth_gbs": round(measure_bandwidth(threads), 2)}
    entries = read_cache(path)
    entries[cache_key(cpu, threads)] = entry
    _write_cache(entries, path)
    # (rounded as cached: a report made now and one made from the cache later are the same bytes)
    return MachinePeak(cpu, int(threads), entry["peak_gflops"], entry["bandwidth_gbs"], "measured")


# ------------------------------------------------------------------ microbenchmarks

def _tree_sum(vt: str, n: int) -> tuple:
    """``(IR lines, final value)`` adding the loop's ``%n0 .. %n{n-1}`` pairwise."""
    sums = [f"%n{c}" for c in range(n)]
    adds, k = [], 0
    while len(sums) > 1:
        a, b = sums.pop(0), sums.pop(0)
        adds.append(f"  %s{k} = fadd {vt} {a}, {b}")
        sums.append(f"%s{k}")
        k += 1
    return "\n".join(adds), sums[0]


def _attributes(lanes: int) -> str:
    return (f'attributes #0 = {{ "min-legal-vector-width"="{lanes * 32}" '
            f'"prefer-vector-width"="{lanes * 32}" }}')

def _fma_ir(lanes: int, chains: int) -> str:
    vt = f"<{lanes} x float>"
    splat = lambda v: "<" + ", ".join([f"float {v}"] * lanes) + ">"   # noqa: E731
    phis = "\n".join(f"  %a{c} = phi {vt} [ {splat(f'{1.0 + c / 64:.6e}')}, %entry ], [ %n{c}, %loop ]"
                     for c in range(chains))
    fmas = "\n".join(f"  %n{c} = call {vt} @llvm.fma.v{lanes}f32({vt} %a{c}, {vt} %x, {vt} %y)"
                     for c in range(chains))
    adds, total = _tree_sum(vt, chains)      # keep every chain live: their sum is stored
    return f"""
declare {vt} @llvm.fma.v{lanes}f32({vt}, {vt}, {vt})
define void @fma_peak(i64 %n, ptr %xy, ptr %out) #0 {{
entry:
  %x = load {vt}, ptr %xy, align 4
  %yp = getelementptr {vt}, ptr %xy, i64 1
  %y = load {vt}, ptr %yp, align 4
  br label %loop
loop:
  %i = phi i64 [ 0, %entry ], [ %i1, %loop ]
{phis}
{fmas}
  %i1 = add i64 %i, 1
  %more = icmp ult i64 %i1, %n
  br i1 %more, label %loop, label %exit
exit:
{adds}
  store {vt} {total}, ptr %out, align 4
  ret void
}}
{_attributes(lanes)}"""


def _stream_ir(lanes: int, accs: int) -> str:
    vt = f"<{lanes} x float>"
    zero = "zeroinitializer"
    phis = "\n".join(f"  %a{c} = phi {vt} [ {zero}, %entry ], [ %n{c}, %loop ]" for c in range(accs))
    body = "\n".join(f"  %o{c} = add i64 %i, {c}\n  %p{c} = getelementptr {vt}, ptr %src, i64 %o{c}\n"
                     f"  %v{c} = load {vt}, ptr %p{c}, align 4\n  %n{c} = fadd {vt} %a{c}, %v{c}"
                     for c in range(accs))
    adds, total = _tree_sum(vt, accs)
    return f"""
define void @stream_read(ptr %src, i64 %nvec, ptr %out) #0 {{
entry:
  br label %loop
loop:
  %i = phi i64 [ 0, %entry ], [ %i1, %loop ]
{phis}
{body}
  %i1 = add i64 %i, {accs}
  %more = icmp ult i64 %i1, %nvec
  br i1 %more, label %loop, label %exit
exit:
{adds}
  store {vt} {total}, ptr %out, align 4
  ret void
}}
{_attributes(lanes)}"""


_compiled: dict = {}


def _compile(ir: str, symbol: str):
    """JIT ``ir`` (already optimal: no optimizer passes) and return ``(tracker, address)``."""
    import llvmlite.binding as llvm

    from tensorir.runtime import llvm as rt
    from tensorir.runtime.jit import jit_link
    rt.initialize()
    with rt.LLVM_LOCK:
        mod = llvm.parse_assembly(ir)
        rt.prepare_module(mod)
        mod.verify()
        obj = rt.emit_object(mod)
    return jit_link(obj, symbol)


def _lanes() -> int:
    """32-bit lanes of the host's widest vector register."""
    from tensorir.target import vector_bits_of

    from .target import host_target
    return vector_bits_of(host_target()["features"]) // 32


def _run_threads(call, threads: int) -> float:
    """Wall seconds for ``threads`` threads each running ``call(t)`` once, started together."""
    barrier = threading.Barrier(threads + 1)
    done = []

    def work(t):
        barrier.wait()
        call(t)
        done.append(time.perf_counter())
    pool = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    for th in pool:
        th.start()
    barrier.wait()
    t0 = time.perf_counter()
    for th in pool:
        th.join()
    return max(done) - t0


def measure_fma_peak(threads: int, repeats: int = 9, seconds: float = 0.02) -> float:
    """FP32 FMA GFLOP/s of ``threads`` threads (best of ``repeats`` runs of about ``seconds``)."""
    lanes = _lanes()
    chains = 16 if lanes >= 16 else 12
    key = ("fma", lanes, chains)
    if key not in _compiled:
        _compiled[key] = _compile(_fma_ir(lanes, chains), "fma_peak")
    _tracker, addr = _compiled[key]     # (the tracker, kept in _compiled, keeps the code alive)
    fn = ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p)(addr)
    xy = np.concatenate([np.full(lanes, 0.9999999, np.float32), np.full(lanes, 1e-7, np.float32)])
    outs = np.zeros((max(threads, 1), lanes), np.float32)
    n = 1 << 12
    while True:          # calibrate on one thread: a call of about `seconds`
        t0 = time.perf_counter()
        fn(n, xy.ctypes.data, outs[0].ctypes.data)
        dt = time.perf_counter() - t0
        if dt >= seconds / 4 or n >= 1 << 34:
            break
        n *= 4
    n = max(1, int(n * seconds / max(dt, 1e-9)))
    best = min(_run_threads(lambda t: fn(n, xy.ctypes.data, outs[t].ctypes.data), threads) for _ in range(repeats))
    return threads * n * chains * lanes * 2 / best / 1e9


def _stream_bytes() -> int:
    try:
        l3 = os.sysconf("SC_LEVEL3_CACHE_SIZE")
    except (ValueError, OSError):
        l3 = 0
    want = max(256 << 20, 4 * max(l3, 0))
    try:
        avail = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        avail = 4 << 30
    return int(min(want, 1 << 30, max(avail // 4, 32 << 20)))


def measure_bandwidth(threads: int, repeats: int = 5, nbytes: int | None = None) -> float:
    """Streaming read GB/s of ``threads`` threads over an array of ``nbytes`` (default: several times
    the last-level cache, at least 256 MiB) (best of ``repeats``)."""
    lanes, accs = _lanes(), 8
    key = ("stream", lanes, accs)
    if key not in _compiled:
        _compiled[key] = _compile(_stream_ir(lanes, accs), "stream_read")
    _tracker, addr = _compiled[key]     # (the tracker, kept in _compiled, keeps the code alive)
    fn = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p)(addr)
    block = lanes * accs
    n = max((nbytes or _stream_bytes()) // 4 // (block * threads), 1) * (block * threads)
    data = np.ones(n, np.float32)           # (written once: every page is mapped before timing)
    part = n // threads
    outs = np.zeros((threads, lanes), np.float32)
    call = lambda t: fn(data[t * part:].ctypes.data, part // lanes, outs[t].ctypes.data)  # noqa: E731
    best = min(_run_threads(call, threads) for _ in range(repeats))
    return data.nbytes / best / 1e9
