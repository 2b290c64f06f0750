"""``tensortune``: list workloads, tune one, report what the logs hold.

    tensortune workloads
    tensortune tune matmul M=512 N=512 K=512 --trials 64
    tensortune tune my_ops.py:stencil n=1000 --trials 32 --json
    tensortune report [--log PATH] [WORKLOAD [NAME=VALUE ...]] [--html report.html | --format md]
    tensortune logs show|merge|distill|verify ...     (tuner/cmd_logs.py)
    tensortune bench WORKLOAD [NAME=VALUE ...]        (tuner/cmd_bench.py)

Bad input ends with one line on stderr and exit status 2; no traceback.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

from .cmd_bench import add_parser as add_bench_parser
from .cmd_bench import run as cmd_bench
from .cmd_build import add_parser as add_build_parser
from .cmd_build import run as cmd_build
from .cmd_bench_model import add_parser as add_bench_model_parser
from .cmd_bench_model import run as cmd_bench_model
from .cmd_tune_model import add_parser as add_tune_model_parser
from .cmd_tune_model import run as cmd_tune_model
from .cmd_logs import add_parser as add_logs_parser
from .cmd_logs import run as cmd_logs
from .cmd_model import add_parser as add_model_parser
from .cmd_model import run as cmd_model
from .cmd_worker import add_parser as add_worker_parser
from .cmd_worker import run as cmd_worker
from .errors import CLIError, require_logs
from .report import ARMS  # who chose the measured candidates (TuneResult.arms)

EXIT_USAGE = 2


# ------------------------------------------------------------------ helpers

def _fail(msg: str) -> int:
    print(f"tensortune: error: {msg}", file=sys.stderr)
    return EXIT_USAGE


class Progress:
    """A one-line progress bar on stderr (a line per round when not a terminal)."""

    def __init__(self, label: str, enabled: bool = True):
        self.label = label
        self.enabled = enabled
        self.tty = sys.stderr.isatty()

    def __call__(self, ev: dict) -> None:
        if not self.enabled:
            return
        done, total = ev["measured"], ev["trials"]
        width = 24
        filled = int(width * done / max(total, 1))
        rate = done / ev["elapsed"] if ev["elapsed"] > 0 else 0.0
        line = (f"{self.label} [{'#' * filled}{'.' * (width - filled)}] {done}/{total} trials | "
                f"best {ev['best_gflops']:.1f} GFLOP/s | {rate:.2f} cand/s | errors {ev['errors']} | "
                f"{ev['elapsed']:.0f} s")
        if self.tty:
            print("\r" + line, end="", file=sys.stderr, flush=True)
        else:
            print(line, file=sys.stderr, flush=True)

    def close(self):
        if self.enabled and self.tty:
            print(file=sys.stderr)


def _open_log(path):
    from logs import LogError, TuningLog
    try:
        return TuningLog(path)
    except LogError as err:
        raise CLIError(str(err)) from None


def compare_with_numpy(spec, trace: dict, threads: int, rounds: int = 5, constants: tuple = ()):
    """Seconds per call of the tuned kernel, numpy and the default schedule, timed in this process.

    The arrays are placed as the measurer places them (:func:`tuner.layout.placed`). The packs of
    ``constants`` (input names) are made once, outside the timed calls, as the tuner timed them.
    """
    from schedules import Schedule
    from tensorir.runtime import build

    from .compare import limit_threads, side_by_side
    from .measure import MeasureConfig
    from .prepack import constant_indices, packed_arrays, prepack
    from .worker import check_outputs
    tensors = spec.tensors()
    inputs = spec.inputs(0)
    outs = spec.empty_outputs()
    schedule, packed = Schedule.from_json(tensors, trace), []
    pre = prepack(tensors, schedule, constant_indices(tensors, constants)) if constants else None
    if pre is not None:
        schedule, packed = pre.schedule, packed_arrays(pre, inputs)
    tuned = build(schedule.lower())
    tuned.threads = threads
    tuned(*inputs, *packed, *outs)
    # the kernel we report is checked again here, as the measurer checked it
    cfg = MeasureConfig()
    problem = check_outputs([t.name for t in spec.output_tensors()], outs, spec.reference(inputs), cfg.rtol,
                            cfg.atol, spec.reduction_length)
    if problem:
        raise CLIError(f"the best logged schedule computes a wrong result in this process ({problem}); "
                       "not reported")
    fns = {"tuned": tuned.bind(*inputs, *packed, *outs)}    # (bound: small kernels are timed, not the argument checks)
    impl = spec.numpy_impl()
    with limit_threads(threads):
        if impl is not None:
            fns["numpy"] = lambda: impl(inputs)
        timing = side_by_side(fns, rounds=rounds, min_repeat_ms=100, repeats_per_round=3)
        default = build(Schedule(tensors).lower())
        default.threads = threads
        run_default = default.bind(*inputs, *outs)
        t0 = time.perf_counter()
        run_default()
        first = time.perf_counter() - t0
        if first < 0.2:  # fast enough to time properly
            d = side_by_side({"default": run_default}, rounds=1, min_repeat_ms=50,
                             repeats_per_round=3)["default"]["median"]
        else:
            d = first
    return timing["tuned"]["median"], timing.get("numpy", {}).get("median"), d


# ---------------------------------------------------------------- commands

def cmd_workloads(args) -> int:
    from tensorir.ops.registry import list_workloads
    for w in list_workloads():
        params = " ".join(f"{p.name}={p.default}" for p in w.params)
        print(f"{w.name:<18} {w.description}")
        print(f"{'':<18} {params}")
    print("\nA workload can also be a file: path/to/file.py:function (keyword parameters -> tensors).")
    return 0


def cmd_tune(args) -> int:
    from logs import default_log_path

    from tensorir.te.evaluate import EvaluateError

    from .report import format_latency
    from .prepack import constant_indices
    from .search import TuneConfig, Tuner
    from .spec import SpecError, WorkloadSpec
    from .study import StorageError
    from .text import one_line
    from .worker import WorkerDied
    if args.trials < 1:
        raise CLIError(f"--trials must be a positive integer, got {args.trials}")
    if args.threads is not None and args.threads < 1:
        raise CLIError(f"--threads must be a positive integer, got {args.threads}")
    if args.timeout is not None and args.timeout <= 0:
        raise CLIError(f"--timeout must be positive, got {args.timeout}")
    if not 0 <= args.seed < 2 ** 32:
        raise CLIError(f"--seed must be an integer in [0, 2**32), got {args.seed}")
    try:
        spec = WorkloadSpec.parse(args.workload, args.params)
        spec.tensors()
        spec.check_memory()     # a tensor that cannot fit is one line here, not numpy's MemoryError later
    except SpecError as err:
        raise CLIError(str(err)) from None
    log_path = args.log or str(default_log_path())
    log = _open_log(log_path)
    storage = args.storage or f"sqlite:///{os.path.abspath(log_path)}.optuna.db"
    from .target import host_target
    threads = host_target(args.threads)["threads"]
    constants = tuple(n.strip() for part in args.const for n in part.split(",") if n.strip())
    try:
        constant_indices(spec.tensors(), constants)
    except ValueError as err:
        raise CLIError(f"--const: {err}") from None
    cfg = TuneConfig(trials=args.trials, sampler=args.sampler, seed=args.seed, cost_model=not args.no_cost_model,
                     timeout_s=args.timeout, threads=threads, constants=constants)
    cfg.measure.threads, cfg.measure.seed = threads, args.seed
    space = None
    if args.space:
        from schedules.knobs import KnobSpace

        from .spec import load_function
        try:
            space = KnobSpace(spec.tensors(), load_function(args.space, "space"))
            space.default_decisions()
        except SpecError as err:
            raise CLIError(str(err)) from None
        except Exception as err:  # noqa: BLE001 - the user's space function failed on its first use
            raise CLIError(f"space {args.space} failed: {type(err).__name__}: {err}") from None
    progress = Progress(spec.label, enabled=not args.quiet)
    model_path = os.path.abspath(log_path) + ".costmodel"
    from .distributed import SharedTuner
    from .study import is_shared
    if args.lease is not None and args.lease <= 0:
        raise CLIError(f"--lease must be positive, got {args.lease}")
    if args.workers is not None:
        if args.workers < 1:
            raise CLIError(f"--workers must be a positive integer, got {args.workers}")
        from .cmd_worker import tune_with_local_workers
        return tune_with_local_workers(args, spec, cfg, log, storage)
    try:
        if is_shared(storage):      # other processes may join the study (tensortune worker)
            tuner = SharedTuner(spec, cfg, storage=storage, lease_s=args.lease, log=log, model_path=model_path,
                                progress=progress, space=space, space_ref=args.space)
        else:
            tuner = Tuner(spec, cfg, log=log, storage=storage, model_path=model_path, progress=progress, space=space)
        result = tuner.run()
    except ImportError as err:
        raise CLIError(f"cannot use --storage {storage}: {err}") from None
    except StorageError as err:
        raise CLIError(str(err)) from None
    except EvaluateError as err:   # the measurer computes the reference outputs first
        raise CLIError(f"cannot compute the reference outputs of {spec.label}: {err}") from None
    except MemoryError as err:     # inputs or reference outputs beyond what check_memory could foresee
        raise CLIError(f"out of memory preparing {spec.label}: {one_line(err)}") from None
    except WorkerDied as err:      # e.g. the runner cannot hold the inputs under MeasureConfig.memory_limit_mb
        raise CLIError(f"cannot measure {spec.label}: {one_line(err)}") from None
    finally:
        progress.close()
    out = {"workload": spec.name, "params": spec.params, "trials": result.trials, "resumed": result.resumed,
           "best_gflops": None, "best_latency_s": None, "default_gflops": None, "numpy_gflops": None,
           "errors": dict(result.errors), "invalid": result.invalid, "asked": result.asked,
           "remeasured": result.remeasured,
           "chosen_by": {arm: {"measured": n, "new_best": w} for arm, (n, w) in result.arms.items()},
           "tune_seconds": round(result.tune_seconds, 3), "log": log.path, "stop_reason": result.stop_reason}
    t90 = result.time_to_fraction(0.9)
    out["time_to_90pct"] = {"trials": t90[0], "seconds": round(t90[1], 3)} if t90 else None
    best = result.best
    if best is None:
        print(f"no valid schedule found in {result.trials} trials ({dict(result.errors)})", file=sys.stderr)
        if args.json:
            print(json.dumps(out))
        return 1
    tuned_s, numpy_s, default_s = compare_with_numpy(spec, best.trace, threads, constants=constants)
    if numpy_s:     # kept in the log for reports (tensortune report: ratio to numpy)
        from .candidates import numpy_reference_record
        log.append(numpy_reference_record(best, tuned_s, numpy_s))
    gf = lambda s: spec.flops / s / 1e9 if s else None  # noqa: E731
    out.update(best_gflops=round(gf(tuned_s), 3), best_latency_s=tuned_s, default_gflops=round(gf(default_s), 3),
               numpy_gflops=round(gf(numpy_s), 3) if numpy_s else None,
               tuning_best_gflops=round(best.gflops or 0.0, 3),
               finalists=[{"tuning_gflops": round(a, 3), "confirmed_gflops": round(b, 3)} for a, b in result.finalists])
    from schedules import Schedule
    sch = Schedule.from_json(spec.tensors(), best.trace)
    work = f"{spec.flops / 1e9:.3f} GFLOP" if spec.flops >= 1e7 else f"{spec.flops:,.0f} FLOP"
    print(f"workload      {spec.label}  ({work}, threads={threads})")
    print(f"trials        {result.trials} measured in {result.tune_seconds:.1f} s "
          f"({result.invalid} invalid of {result.asked} asked; errors: {dict(result.errors) or 'none'})"
          + (f"; {result.remeasured} repeat measurements of the fastest" if result.remeasured else "")
          + (f"; {result.resumed} earlier records resumed" if result.resumed else ""))
    shared = getattr(tuner, "shared", None)     # a shared study (--storage postgresql://...)
    if shared:
        out["study"] = shared
        print(f"study         {shared['study']}: {shared['measured']} trials measured in this run by "
              f"{shared['processes']} process{'es' if shared['processes'] != 1 else ''} (tensortune worker)")
    if result.stop_reason:
        print(f"stopped early: {result.stop_reason}")
    print(f"best          {format_latency(tuned_s)}  {gf(tuned_s):.1f} GFLOP/s  (timed again here, side by side)")
    if tuned_s > 2 * best.median_cost:
        print(f"note          while tuning it measured {format_latency(best.median_cost)} "
              f"({best.gflops or 0:.1f} GFLOP/s); the re-timing ran {tuned_s / best.median_cost:.1f}x slower: "
              "the machine may be busy, or a tiny kernel's call overhead dominates")
    if numpy_s:
        print(f"numpy         {format_latency(numpy_s)}  {gf(numpy_s):.1f} GFLOP/s  -> tuned/numpy "
              f"{numpy_s / tuned_s:.2f}x")
    print(f"default       {format_latency(default_s)}  {gf(default_s):.2f} GFLOP/s  -> tuned/default "
          f"{default_s / tuned_s:.1f}x")
    if result.finalists:
        print(f"confirmed     the {len(result.finalists)} fastest re-timed side by side (GFLOP/s while tuning -> "
              "re-timed): " + ", ".join(f"{a:.1f} -> {b:.1f}" for a, b in result.finalists))
    if result.arms:
        print("chosen by     " + ", ".join(f"{ARMS.get(arm, arm)} {n} ({w} new best{'s' if w != 1 else ''})"
                                           for arm, (n, w) in result.arms.items()))
    if t90:
        print(f"90% of best   after {t90[0]} trials, {t90[1]:.1f} s")
    if constants:
        print(f"constants     {', '.join(constants)}: packed once outside the timed call (as a build with them does), "
              f"evicted from the caches before each call (as a model runs them)")
    print(f"log           {log.path}")
    if not result.best.decisions:
        print("note          no tuned schedule beat the default loop nest (compiled with LLVM -O3); builds use it")
    print("best schedule:")
    print("    " + sch.to_python().replace("\n", "\n    "))
    if args.json:
        print(json.dumps(out))
    return 0




def cmd_report(args) -> int:
    from .report import report
    from .spec import SpecError
    if args.top < 1:
        raise CLIError(f"--top must be a positive integer, got {args.top}")
    require_logs(args.log)
    from .report_files import ReportError, write
    try:
        if write(args):     # --html / --format md: a file report
            return 0
        text = report(args.log, args.workload, args.params, top=args.top, show_nest=args.loop_nest)
    except (SpecError, ReportError) as err:
        raise CLIError(str(err)) from None
    print(text)
    return 0


# ------------------------------------------------------------------- parser

def build_parser() -> argparse.ArgumentParser:
    from .study import SAMPLERS
    p = argparse.ArgumentParser(prog="tensortune", description="Schedule-autotuning tensor compiler for CPUs.")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.add_parser("workloads", help="list the built-in workloads and their parameters")
    t = sub.add_parser("tune", help="tune a workload", description="Tune WORKLOAD (a built-in name or "
                       "path/to/file.py:function) with NAME=VALUE parameters.")
    t.add_argument("workload")
    t.add_argument("params", nargs="*", metavar="NAME=VALUE")
    t.add_argument("--trials", type=int, default=64, help="new candidates to measure in this run, on top of any already in the log (default 64)")
    t.add_argument("--log", help="tuning log (default: the per-user log that builds read)")
    t.add_argument("--storage", help="Optuna storage URL (default: SQLite file next to the log)")
    t.add_argument("--threads", type=int, help="kernel threads (default: all cores)")
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--sampler", choices=SAMPLERS, default="tpe")
    t.add_argument("--no-cost-model", action="store_true", help="measure Optuna's proposals directly")
    t.add_argument("--timeout", type=float, help="stop starting new rounds after SECONDS")
    t.add_argument("--const", action="append", default=[], metavar="INPUT[,INPUT]",
                   help="inputs whose values are fixed when the kernel is built (weights): a schedule's packed "
                        "copy of them is made once, outside the timed call, as model builds do (repeatable)")
    t.add_argument("--space", metavar="FILE.py:FUNCTION", help="hand-written space fn(cfg, schedule) -> schedule "
                   "(define_split / define_reorder / define_knob) instead of the generated one")
    t.add_argument("--workers", type=int, help="with a shared --storage: start N local workers, each pinned to "
                   "cores of its own with --threads (default: cores/N) threads; they measure, this process waits")
    t.add_argument("--lease", type=float, metavar="SECONDS", help="with a shared --storage: a process silent for "
                   "SECONDS loses its trials to the others (default: 10 times the per-candidate timeout)")
    t.add_argument("--json", action="store_true", help="print one JSON object on the last line")
    t.add_argument("--quiet", action="store_true", help="no progress bar")
    r = sub.add_parser("report", help="show the best schedules in a tuning log")
    r.add_argument("workload", nargs="?")
    r.add_argument("params", nargs="*", metavar="NAME=VALUE")
    r.add_argument("--log", action="append", help="log to read (repeatable; default: per-user + shipped logs)")
    r.add_argument("--top", type=int, default=3, help="schedules shown per workload (default 3)")
    r.add_argument("--loop-nest", action="store_true", help="print the best schedule's lowered loop nest")
    from .report_files import add_arguments
    add_arguments(r)
    add_logs_parser(sub)
    add_bench_parser(sub)
    add_build_parser(sub)
    add_model_parser(sub)
    add_tune_model_parser(sub)
    add_bench_model_parser(sub)
    add_worker_parser(sub)
    return p


def main(argv=None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse already printed a one-line usage error
        return int(exc.code or 0)
    if args.command is None:
        parser.print_help()
        return EXIT_USAGE
    handlers = {"workloads": cmd_workloads, "tune": cmd_tune, "report": cmd_report, "logs": cmd_logs,
                "bench": cmd_bench, "build": cmd_build, "run": cmd_model, "graph": cmd_model, "compile": cmd_model,
                "tune-model": cmd_tune_model, "bench-model": cmd_bench_model, "worker": cmd_worker}
    import warnings
    saved = warnings.formatwarning
    # warnings (skipped log lines, fallbacks) are messages to the user: one line, no source excerpt
    warnings.formatwarning = lambda message, category, *_, **__: f"tensortune: warning: {message}\n"
    try:
        return handlers[args.command](args)
    except CLIError as err:
        return _fail(str(err))
    except MemoryError as err:   # e.g. a kernel's buffers refused when building (AllocationError): one line
        from .text import one_line
        return _fail(f"out of memory: {one_line(err)}")
    except BrokenPipeError:  # e.g. `tensortune workloads | head`
        sys.stderr.close()
        return 0
    except KeyboardInterrupt:
        print("\ninterrupted: every measured candidate is already in the log; run the same command to resume",
              file=sys.stderr)
        return 130
    finally:
        warnings.formatwarning = saved


if __name__ == "__main__":
    sys.exit(main())
