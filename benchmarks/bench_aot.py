"""Ahead-of-time libraries: build time with and without a tuning log, library size, load time.

    python benchmarks/bench_aot.py [--rounds 5] [--out FILE]

Libraries: each of matmul 512, softmax 512x1024 and conv2d (ResNet 3x3, 64 channels) alone, and
the three in one library.  "with a log": ``--log`` the shipped pre-tuned logs (records of these
workloads measured on other CPUs; the lookup takes the nearest); "without": ``--log`` an empty log
(the logs' fallback schedule).  Build time is measured in process (``tuner.cli.main``, kernel and
log caches cleared before each build) and as the whole command in a fresh process
(``python -m tuner.cli build``, Python start and imports included); the two variants alternate
round by round with a pause at each switch; the in-process builds' CPU time (this process and the C
compiler) is given too, as other processes' load changes it less than the wall time.  Load time is measured in fresh processes: ``dlopen``
of the library and the lookup of its entry points (ctypes, no tensortune), tensortune's
``load_library`` (which also reads and checks the metadata), against building the same kernels
from the log with the JIT (``logs.build``), alternating.  Medians.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import pathlib
import resource
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

LIBS = {
    "matmul": [("matmul", "matmul", [])],
    "softmax": [("softmax", "softmax", [])],
    "conv2d": [("conv2d", "conv2d", [])],
    "all three": [("matmul", "matmul", []), ("softmax", "softmax", []), ("conv2d", "conv2d", [])],
}
PAUSE_S = 0.5


def _cli_args(kernels, log_args, out):
    args = ["build", "--quiet"]
    for sym, wl, items in kernels:
        args += ["--workload", " ".join([f"{sym}={wl}", *items])]
    return args + log_args + ["-o", out]


def _in_process_build(kernels, log_args, out) -> float:
    import logs
    from tensorir.runtime import clear_cache
    from tuner.cli import main
    clear_cache()
    logs.clear_cache()
    t0, c0 = time.perf_counter(), _cpu_seconds()
    code = main(_cli_args(kernels, log_args, out))
    elapsed, cpu = time.perf_counter() - t0, _cpu_seconds() - c0
    if code != 0:
        raise SystemExit(f"build failed: {kernels} {log_args}")
    return elapsed, cpu


def _cpu_seconds() -> float:
    """CPU time of this process and its finished children (the C compiler): other processes' load aside."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def _cli_build(kernels, log_args, out) -> float:
    env = dict(os.environ, PYTHONPATH=ROOT)
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "tuner.cli", *_cli_args(kernels, log_args, out)], check=True, env=env,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t0


_DLOPEN = r'''
import ctypes, sys, time
t0 = time.perf_counter()
lib = ctypes.CDLL(sys.argv[1])
for s in sys.argv[2:]:
    getattr(lib, s)
print(time.perf_counter() - t0)
'''

_LOAD = r'''
import sys, time
sys.path.insert(0, sys.argv[1])
from schedules import Schedule
from tensorir.runtime import load_library
from tuner.spec import WorkloadSpec
import logs
specs = [(s, WorkloadSpec.parse(w, [])) for s, w in (a.split("=") for a in sys.argv[4:])]
funcs = [(s, Schedule(spec.tensors()).lower()) for s, spec in specs]
t0 = time.perf_counter()
if sys.argv[3] == "aot":
    kernels = [load_library(sys.argv[2], f, s) for s, f in funcs]
else:
    kernels = [logs.build(spec.tensors(), log=sys.argv[2].split(","), warn=False) for _, spec in specs]
print(time.perf_counter() - t0)
'''


def _time_child(args) -> float:
    out = subprocess.run([sys.executable, *args], check=True, capture_output=True, text=True)
    return float(out.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", help="also write the raw measurements (JSON lines) here")
    ap.add_argument("--only", action="append", choices=list(LIBS), help="these libraries only (repeatable)")
    args = ap.parse_args(argv)
    import llvmlite.binding as llvm
    logs_shipped = sorted(glob.glob(os.path.join(ROOT, "logs", "pretuned", "*.jsonl")))
    tmp = tempfile.mkdtemp(prefix="bench_aot_")
    empty = os.path.join(tmp, "empty.jsonl")
    open(empty, "w").close()
    variants = {"with a log": [a for p in logs_shipped for a in ("--log", p)], "without": ["--log", empty]}
    raw = []
    print(f"# host {llvm.get_host_cpu_name()}, {os.cpu_count()} CPUs, {args.rounds} rounds, "
          f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}")
    rows = []
    import warnings
    warnings.simplefilter("ignore")
    for name, kernels in LIBS.items():
        if args.only and name not in args.only:
            continue
        times = {(v, how): [] for v in variants for how in ("in process", "in process CPU", "command")}
        last = None
        for r in range(args.rounds):
            for v, log_args in (variants.items() if r % 2 == 0 else reversed(variants.items())):
                if last is not None and last != v:
                    time.sleep(PAUSE_S)
                last = v
                out = os.path.join(tmp, f"lib_{v.replace(' ', '_')}.so")
                wall, cpu = _in_process_build(kernels, log_args, out)
                times[(v, "in process")].append(wall)
                times[(v, "in process CPU")].append(cpu)
                times[(v, "command")].append(_cli_build(kernels, log_args, out))
        so = os.path.join(tmp, "lib_with_a_log.so")
        obj = os.path.join(tmp, "lib_with_a_log.o")
        _cli_build(kernels, variants["with a log"], obj)
        size = {"so": os.path.getsize(so), "o": os.path.getsize(obj),
                "h_lines": len(pathlib.Path(os.path.splitext(so)[0] + ".h").read_text().splitlines())}
        syms = [s for s, _, _ in kernels]
        specs = [f"{s}={w}" for s, w, _ in kernels]
        load = {"dlopen": [], "load_library": [], "jit": []}
        for r in range(args.rounds):
            load["dlopen"].append(_time_child(["-I", "-S", "-c", _DLOPEN, so, *syms]))
            time.sleep(PAUSE_S)
            load["load_library"].append(_time_child(["-c", _LOAD, ROOT, so, "aot", *specs]))
            time.sleep(PAUSE_S)
            load["jit"].append(_time_child(["-c", _LOAD, ROOT, ",".join(logs_shipped), "jit", *specs]))
            time.sleep(PAUSE_S)
        med = {f"{v} / {how}": statistics.median(t) for (v, how), t in times.items()}
        med.update({f"load {k}": statistics.median(t) for k, t in load.items()})
        raw.append({"library": name, "build_s": {f"{v} / {how}": t for (v, how), t in times.items()},
                    "load_s": load, "size": size})
        rows.append((name, med, size))
        print(json.dumps(raw[-1]), flush=True)
    print()
    print("| library | build with a log: in process (CPU) / command | build without a log: in process (CPU) / "
          "command | .so bytes | .o bytes | dlopen | load_library | JIT build from the log |")
    print("|---|---|---|---|---|---|---|---|")
    ms = lambda m, v: (f"{m[f'{v} / in process'] * 1e3:.0f} ({m[f'{v} / in process CPU'] * 1e3:.0f}) ms / "  # noqa: E731
                       f"{m[f'{v} / command'] * 1e3:.0f} ms")
    for name, m, size in rows:
        print(f"| {name} | {ms(m, 'with a log')} | {ms(m, 'without')} "
              f"| {size['so']:,} | {size['o']:,} | {m['load dlopen'] * 1e3:.2f} ms "
              f"| {m['load load_library'] * 1e3:.1f} ms | {m['load jit'] * 1e3:.0f} ms |")
    if args.out:
        with open(args.out, "w") as f:
            for r in raw:
                f.write(json.dumps(r) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
