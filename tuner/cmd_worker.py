"""``tensortune worker``: join the open studies of a shared storage that match this machine.

    tensortune worker --storage postgresql://user@host/db [--threads T] [--log PATH]
                      [--idle-exit SECONDS] [--lease SECONDS]

A worker lists the studies that ``tensortune tune --storage URL`` registered (:mod:`tuner.registry`),
joins one of its own target (CPU name, features, threads) with trials left, measures on its own
CPU and appends to its log (locked, as every log append is) until the study's budget is measured,
then looks for the next; it exits after ``--idle-exit`` seconds with nothing to do.  The studies of a
whole-model run (``tensortune tune-model --storage URL``) are measured a round at a time, on the
task the run wants and no other worker measures (:mod:`tuner.model_workers`); ``--model-run ID``
works on that run only and exits once it is over.  Also here:
``tune --workers N`` (:func:`tune_with_local_workers`), which starts N such workers on this machine.
"""
from __future__ import annotations

import json
import os
import sys
import time

from .errors import CLIError

POLL_S = 0.5        # between looks for an open study


def add_parser(sub) -> None:
    w = sub.add_parser("worker", help="measure trials of shared studies (tune --storage URL) on this machine",
                       description="Join the open studies in a shared Optuna storage whose target (CPU name, "
                       "features, threads) is this machine's, measure their trials, exit when idle.")
    w.add_argument("--storage", required=True, help="the shared Optuna storage (postgresql://user@host/db)")
    w.add_argument("--threads", type=int, help="kernel threads (default: all cores); the studies joined are "
                   "those tuned at this thread count")
    w.add_argument("--log", help="tuning log to append to (default: the per-user log that builds read)")
    w.add_argument("--idle-exit", type=float, default=300.0, metavar="SECONDS",
                   help="exit after SECONDS with no open study to work on (default 300)")
    w.add_argument("--lease", type=float, metavar="SECONDS",
                   help="lease of the trials this worker asks (default: the one the study was registered with)")
    w.add_argument("--study", metavar="NAME", help="work on this study only; exit once its run is over")
    w.add_argument("--model-run", metavar="ID", help="work on the tasks of this whole-model run only (tune-model "
                   "--workers starts its workers so); exit once the run is over")
    w.add_argument("--quiet", action="store_true", help="no line per study joined")


def _check(args) -> None:
    from .study import is_shared
    if not is_shared(args.storage):
        raise CLIError(f"--storage must be a database server several processes share (postgresql://...), "
                       f"got {args.storage!r}")
    if args.threads is not None and args.threads < 1:
        raise CLIError(f"--threads must be a positive integer, got {args.threads}")
    if args.idle_exit < 0:
        raise CLIError(f"--idle-exit must be >= 0 seconds, got {args.idle_exit}")
    if args.lease is not None and args.lease <= 0:
        raise CLIError(f"--lease must be positive, got {args.lease}")


def run(args) -> int:
    """The worker loop; 0 when it exits idle (or its ``--study`` is over)."""
    from logs import LogError, TuningLog, default_log_path

    from .study import target_fingerprint
    from .target import host_target
    _check(args)
    try:
        log = TuningLog(args.log or str(default_log_path()))
    except LogError as err:
        raise CLIError(str(err)) from None
    fingerprint = target_fingerprint(host_target(args.threads))
    say = (lambda msg: None) if args.quiet else (lambda msg: print(f"worker: {msg}", flush=True))
    say(f"target {fingerprint}; waiting for studies in {_safe_url(args.storage)}")
    if args.model_run:
        return _serve_model_run(args, log, say)
    return _serve(args, log, say, fingerprint)


def _storage_error(args, err) -> CLIError:
    from .study import StorageError
    return CLIError(str(StorageError(f"cannot open the Optuna storage {_safe_url(args.storage)}: "
                                     f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}")))


def _serve_model_run(args, log, say) -> int:
    from .model_workers import ModelWorker, serve
    from .study import retry_schema_race
    try:
        import optuna
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        retry_schema_race(lambda: optuna.get_all_study_summaries(args.storage, include_best_trial=False))
    except ImportError as err:
        raise CLIError(f"cannot use --storage {args.storage}: {err}") from None
    except Exception as err:  # noqa: BLE001 - SQLAlchemy/Optuna errors of a bad URL or unreachable server
        raise _storage_error(args, err) from None
    worker = ModelWorker(args.storage, log, args.threads, run=args.model_run, lease_s=args.lease, say=say)
    n = serve(worker, args.idle_exit)
    say(f"model run {args.model_run}: measured {n} trials")
    return 0


def _serve(args, log, say, fingerprint: str) -> int:
    """Join studies until idle (a single workload's to its end; a model run's a round at a time)."""
    from .model_workers import ModelWorker
    from .registry import lookup, open_studies
    from .study import retry_schema_race
    skip, passed, idle_since = set(), set(), time.monotonic()
    models = None       # a ModelWorker, once a model run's study is seen
    while True:
        try:
            found, other = retry_schema_race(lambda: open_studies(args.storage, fingerprint, args.study))
        except ImportError as err:
            raise CLIError(f"cannot use --storage {args.storage}: {err}") from None
        except Exception as err:  # noqa: BLE001 - SQLAlchemy/Optuna errors of a bad URL or unreachable server
            raise _storage_error(args, err) from None
        for reg in other:
            if reg.name not in passed:      # measurements of another target must not enter it
                passed.add(reg.name)
                say(f"{reg.name}: another target ({reg.fingerprint}), not joined")
        reg = next((r for r in found if r.run is None and r.name not in skip and _has_work(args.storage, r)), None)
        if reg is None and (models is not None or any(r.run is not None for r in found)):
            models = models or ModelWorker(args.storage, log, args.threads, lease_s=args.lease, say=say)
            if models.step() or models.finish_closed():     # a whole-model run's task (tuner.model_workers)
                idle_since = time.monotonic()
                continue
        if reg is None:
            mine = lookup(args.storage, args.study) if args.study else None
            if mine is not None and not mine.open:
                return 0        # its run is over
            if time.monotonic() - idle_since >= args.idle_exit:
                if models is not None:
                    models.finish_closed(everything=True)
                say(f"idle for {args.idle_exit:g} s; exiting")
                return 0
            time.sleep(POLL_S)
            continue
        try:
            result = _work_on(reg, args, log)
        except CLIError as err:       # this study cannot be rebuilt here (e.g. its workload file is missing)
            print(f"tensortune: warning: skipping study {reg.name}: {err}", file=sys.stderr)
            skip.add(reg.name)
            continue
        say(f"{reg.name}: measured {result.trials} trials in {result.tune_seconds:.1f} s"
            + (f", best {result.best_gflops:.1f} GFLOP/s" if result.best is not None else ""))
        idle_since = time.monotonic()


def _has_work(storage: str, reg) -> bool:
    import optuna

    from .lease import tally
    from .registry import connect
    study = optuna.load_study(study_name=reg.name, storage=connect(storage))
    t = tally(study, reg.budget)
    return reg.budget - t.measured - len(t.admitted) > 0


def _safe_url(url: str) -> str:
    """``url`` without its password."""
    head, sep, tail = str(url).partition("@")
    if not sep or ":" not in head.split("//", 1)[-1]:
        return url
    scheme, _, cred = head.partition("//")
    return f"{scheme}//{cred.split(':', 1)[0]}:***@{tail}"


def _work_on(reg, args, log):
    from .distributed import SharedTuner
    from .search import TuneConfig
    from .spec import SpecError, WorkloadSpec, load_function
    try:
        spec = WorkloadSpec.from_json(reg.spec)
        spec.tensors()
        space = None
        if reg.space:
            from schedules.knobs import KnobSpace
            space = KnobSpace(spec.tensors(), load_function(reg.space, "space"))
    except SpecError as err:
        raise CLIError(str(err)) from None
    threads = reg.target["threads"]
    # a seed of its own: two workers with one seed would propose the same candidates
    cfg = TuneConfig(trials=reg.budget, sampler=reg.sampler, seed=(reg.seed + os.getpid()) % 2 ** 32,
                     cost_model=reg.cost_model, threads=threads, constants=reg.constants)
    cfg.measure.threads, cfg.measure.seed = threads, reg.seed
    model_path = os.path.abspath(log.path) + ".costmodel"
    tuner = SharedTuner(spec, cfg, storage=args.storage, lease_s=args.lease or reg.lease_s, join=reg.name,
                        log=log, model_path=model_path, space=space)
    return tuner.run()


def tune_with_local_workers(args, spec, cfg, log, storage: str) -> int:
    """``tune --storage URL --workers N``: register the study, start N pinned local workers, wait
    until they have measured the budget, print the study's best.  The exit status."""
    from .distributed import LocalWorkers, SharedTuner, tune_with_workers
    from .study import StorageError, is_shared
    cores = len(os.sched_getaffinity(0))
    if not is_shared(storage):
        raise CLIError("--workers needs a --storage that several processes share (postgresql://...)")
    if args.workers > cores:
        raise CLIError(f"--workers {args.workers} exceeds the {cores} cores this process may use")
    threads = args.threads or cores // args.workers
    cfg.threads = cfg.measure.threads = threads
    tuner = SharedTuner(spec, cfg, storage=storage, lease_s=args.lease, log=log, space_ref=args.space)
    try:
        workers = LocalWorkers(args.workers, threads, storage, tuner.study_name(), log.path, tuner.lease_s)
        summary = tune_with_workers(tuner, workers, progress=None if args.quiet else _progress(spec.label))
    except ValueError as err:
        raise CLIError(str(err)) from None
    except StorageError as err:
        raise CLIError(str(err)) from None
    except RuntimeError as err:
        print(f"tensortune: error: {err}", file=sys.stderr)
        return 1
    finally:
        if not args.quiet and sys.stderr.isatty():
            print(file=sys.stderr)
    records = [r for r in log.for_workload(spec.key, tuner.target) if r.ok and not r.model_choice]
    best = min(records, key=lambda r: r.rank_key) if records else None
    out = {"workload": spec.name, "params": spec.params, "trials": summary["measured"], "workers": args.workers,
           "threads": threads, "by_worker": summary["by_worker"], "expired": summary["expired"],
           "tune_seconds": round(summary["seconds"], 3), "study": tuner.study_name(), "log": log.path,
           "stop_reason": summary["stop_reason"],
           "best_gflops": round(best.gflops, 3) if best is not None and best.gflops else None}
    print(f"workload      {spec.label}  ({args.workers} workers x {threads} thread{'s' if threads != 1 else ''})")
    print(f"trials        {summary['measured']} measured in {summary['seconds']:.1f} s: "
          + ", ".join(f"{n} by {owner}" for owner, n in sorted(summary["by_worker"].items()))
          + (f"; {summary['expired']} lost with their worker and asked again" if summary["expired"] else ""))
    if summary["stop_reason"]:
        print(f"stopped early: {summary['stop_reason']}")
    if best is not None:
        print(f"best          {best.gflops or 0:.1f} GFLOP/s while tuning (the log's fastest for this target)")
    print(f"study         {tuner.study_name()}")
    print(f"log           {log.path}")
    if args.json:
        print(json.dumps(out))
    return 0 if best is not None else 1


def _progress(label: str):
    """A progress line on stderr: redrawn on a terminal, a new line per measured trial elsewhere."""
    tty, last = sys.stderr.isatty(), [None]

    def show(ev: dict) -> None:
        if not tty and ev["measured"] == last[0]:
            return
        last[0] = ev["measured"]
        print(f"{chr(13) if tty else ''}{label} {ev['measured']}/{ev['trials']} trials | best "
              f"{ev['best_gflops']:.1f} GFLOP/s | {ev['elapsed']:.0f} s", end="" if tty else "\n", file=sys.stderr,
              flush=True)
    return show
