"""``tensortune tune-model MODEL.onnx --trials N``: tune a whole model within one trial budget.

Every distinct fused group with a reduction is a task (``tuner.model_tasks``); the task scheduler
(``tuner.task_scheduler``) spends the budget where the estimated model latency drops most, and
prints the task table after every round. At the end the model is rebuilt with every kernel at its
best, checked against the untuned model's outputs, and timed end to end beside the untuned model
(and onnxruntime when it is installed), side by side in this process.

``--storage postgresql://...`` keeps each task's study in a shared database: ``tensortune worker``
processes may join, ``--trials`` counts their trials too, and ``--workers N`` starts N local
workers, each pinned to cores of its own, while this process coordinates
(:mod:`tuner.model_coordinator`).  A SQLite ``--storage`` keeps the studies for one process.
"""
from __future__ import annotations

import json
import os
import sys

from .errors import CLIError


def add_parser(sub) -> None:
    p = sub.add_parser("tune-model", help="tune every kernel of an ONNX model within one trial budget",
                       description="Tune the kernels of an ONNX model with one trial budget (Ansor's task "
                       "scheduler); the same command continues from the log.")
    p.add_argument("model", metavar="MODEL.onnx")
    p.add_argument("--trials", type=int, default=256, help="measured trials for the whole model (default 256)")
    p.add_argument("--log", help="tuning log (default: the per-user log)")
    p.add_argument("--threads", type=int, default=None, help="kernel threads (default: all cores)")
    p.add_argument("--tasks", default=None, metavar="IDS", help="tune only these task ids, e.g. 0,3,5")
    p.add_argument("--timeout", type=float, default=None, metavar="SECONDS", help="no new round after this")
    p.add_argument("--strategy", choices=("gradient", "round-robin"), default="gradient")
    p.add_argument("--shape", action="append", default=[], metavar="NAME=DIMS",
                   help="pin an input's shape, e.g. x=1x3x224x224 (repeatable)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--rounds", type=int, default=15,
                   help="alternating rounds of the final timing (default 15)")
    p.add_argument("--json", action="store_true", help="print one JSON object with the results")
    p.add_argument("--quiet", action="store_true", help="no task table while tuning")
    p.add_argument("--storage", help="Optuna storage URL; a shared one (postgresql://...) lets workers join "
                   "(tensortune worker) and counts their trials in --trials")
    p.add_argument("--workers", type=int, help="with a shared --storage: start N local workers, each pinned to "
                   "cores of its own (--threads each, default cores/N), while this process coordinates")
    p.add_argument("--lease", type=float, metavar="SECONDS", help="with a shared --storage: a process silent for "
                   "this long loses its trials to the others (default 10x the measurement timeout)")


def _check(args) -> None:
    if args.trials < 1:
        raise CLIError(f"--trials must be >= 1, got {args.trials}")
    if args.threads is not None and args.threads < 1:
        raise CLIError(f"--threads must be >= 1, got {args.threads}")
    if args.rounds < 1:
        raise CLIError(f"--rounds must be >= 1, got {args.rounds}")
    if args.timeout is not None and args.timeout <= 0:
        raise CLIError(f"--timeout must be > 0, got {args.timeout:g}")
    if args.lease is not None and args.lease <= 0:
        raise CLIError(f"--lease must be positive, got {args.lease:g}")
    if args.workers is not None:
        from .study import is_shared
        cores = len(os.sched_getaffinity(0))
        if args.workers < 1:
            raise CLIError(f"--workers must be a positive integer, got {args.workers}")
        if not is_shared(args.storage):
            raise CLIError("--workers needs a --storage that several processes share (postgresql://...)")
        if args.workers * (args.threads or 1) > cores:
            raise CLIError(f"--workers {args.workers} x --threads {args.threads or 1} exceeds the {cores} cores "
                           "this process may use")


def _check_storage(url: str) -> None:
    """Open ``url`` once before the model is planned: a bad URL is one line, at once."""
    from .study import retry_schema_race
    try:
        import optuna
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        retry_schema_race(lambda: optuna.get_all_study_summaries(url, include_best_trial=False))
    except ImportError as err:
        raise CLIError(f"cannot use --storage {url}: {err}") from None
    except Exception as err:  # noqa: BLE001 - SQLAlchemy/Optuna errors of a bad URL or unreachable server
        first = str(err).splitlines()[0] if str(err) else ""
        raise CLIError(f"cannot open the Optuna storage {url!r}: {type(err).__name__}: {first}") from None


def run(args) -> int:
    from graph.ir import GraphError
    from logs import LogError, TuningLog

    from .cmd_model import load_graph, parse_shapes
    from .model_tune import ModelTuneOptions, tune_model
    from .study import StorageError
    from .text import one_line
    _check(args)
    if args.storage:
        _check_storage(args.storage)
    threads = args.threads
    if args.workers and threads is None:
        threads = len(os.sched_getaffinity(0)) // args.workers
    if args.log:
        try:        # before the model is planned; nothing is created yet (a model may need no tuning)
            TuningLog(args.log, mode="r").check_is_a_log()
        except LogError as err:
            raise CLIError(str(err)) from None
    graph = load_graph(args.model, parse_shapes(args.shape))
    quiet = args.quiet or args.json
    say = (lambda *a: None) if quiet else (lambda *a: print(*a, file=sys.stderr, flush=True))
    options = ModelTuneOptions(trials=args.trials, log=args.log, threads=threads, tasks=args.tasks,
                               timeout_s=args.timeout, strategy=args.strategy, seed=args.seed, rounds=args.rounds,
                               progress=not quiet, storage=args.storage, workers=args.workers or 0,
                               lease_s=args.lease)
    try:
        out = tune_model(graph, args.model, options, say)
    except (GraphError, ValueError, StorageError, LogError) as err:
        raise CLIError(one_line(err)) from None
    except RuntimeError as err:        # every local worker ended early
        print(f"tensortune: error: {one_line(err)}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(out, indent=2, default=str))
    else:
        ms = {k: (out[k] * 1e3 if out[k] else None) for k in ("latency_s", "untuned_latency_s", "onnxruntime_latency_s")}
        print(f"{out['model']}: {out['trials']} trials in {out['tuning_seconds']:.0f} s "
              f"({out['stop_reason'] or 'budget spent'})")
        print(f"  end to end: {ms['latency_s']:.3f} ms tuned, {ms['untuned_latency_s']:.3f} ms untuned"
              + (f", onnxruntime {ms['onnxruntime_latency_s']:.3f} ms ({out['speedup_vs_onnxruntime']:.2f}x)"
                 if ms["onnxruntime_latency_s"] else f" ({out['onnxruntime_note']})"))
        print("  outputs match the untuned model" if out["mismatch"] is None else f"  OUTPUTS DIFFER: {out['mismatch']}")
        if out["by_worker"]:
            print("  trials by process: " + ", ".join(f"{n} by {w}" for w, n in sorted(out["by_worker"].items())))
        written = os.path.exists(out["log"]) and os.path.getsize(out["log"]) > 0
        print(f"  log: {out['log']}" if written else "  log: none written (nothing was tuned)")
    return 0 if out["mismatch"] is None else 1
