"""Tune a whole model: tasks, the task scheduler, then the tuned model rebuilt, checked and timed.

:func:`tune_model` is what ``tensortune tune-model`` runs (and ``benchmarks/bench_tune_model.py``):

1. plan the graph (passes, fusion, one workload per group) and extract the tasks;
2. build the untuned model (heuristic starts only) and run it on seeded random inputs: the reference;
3. spend the trial budget with the task scheduler (the table after every round, if ``progress``);
   with a shared storage, across worker processes (:mod:`tuner.model_coordinator`);
4. rebuild the model with the log's best schedules, keep per task the tuned kernel or its start,
   whichever runs faster as a step of the model (:mod:`tuner.model_choice`, written to the log), check
   its outputs against the reference, and time it beside the untuned model and onnxruntime (when
   installed), side by side in this process.
"""
from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass

from .model_tasks import MIN_TUNED_FLOPS, extract_tasks, select_tasks
from .model_threads import model_threads
from .search import TuneConfig
from .study import is_shared
from .task_scheduler import SchedulerConfig, TaskScheduler


@dataclass
class ModelTuneOptions:
    trials: int = 256
    log: str | None = None            # default: the per-user log
    threads: int | None = None
    tasks: str | None = None          # "0,3,5": only these task ids
    timeout_s: float | None = None
    strategy: str = "gradient"
    seed: int = 0
    rounds: int = 15                  # alternating rounds of the final timing (model_timing.ROUNDS)
    progress: bool = True             # the task table on stderr after every round
    storage: str | None = None        # Optuna storage; a shared one (postgresql://) lets workers join
    workers: int = 0                  # with a shared storage: local worker processes (0: this one measures)
    lease_s: float | None = None      # with a shared storage: the lease of a silent process's trials


def tune_model(graph, model_path: str | None, options: ModelTuneOptions, say=None) -> dict:
    """Tune ``graph`` (imported from ``model_path``, used for onnxruntime and the records' model name).

    Returns a JSON-ready dict (see ``tensortune tune-model --json``). Raises GraphError for a graph the
    compiler cannot lower, ValueError for a bad ``tasks`` subset.
    """
    from logs import TuningLog, default_log_path
    from tensorir.te.check import check_outputs
    from .model_compile import assemble, build_kernels, plan_graph
    from .model_progress import TableProgress, task_rows
    from .model_timing import model_proto, ort_session, random_feeds, relative_error, time_models

    say = say or (lambda *a: None)
    started = time.perf_counter()
    plan = plan_graph(graph)
    tasks = extract_tasks(plan.graph, plan.groups, plan.lowered)
    chosen = select_tasks(tasks, options.tasks)
    log_path = options.log or str(default_log_path())
    model_name = os.path.basename(model_path) if model_path else graph.name
    say(f"{graph.name}: {_count(len(plan.groups), 'fused group')}, {_count(len(tasks), 'distinct kernel')}, "
        f"{len(chosen)} tuned (the rest use their heuristic start); {options.trials} trials; log {log_path}")
    if not any(t.tuned for t in tasks):
        say(f"nothing to tune: every kernel of this model has fewer than {MIN_TUNED_FLOPS:,} floating-point "
            "operations per run or no reduction, and runs its heuristic start; the log is not written")

    # a model too small for a second thread runs on one (decision 078): tune and time it there too
    threads, serial = model_threads(plan.lowered, options.threads)
    if serial:
        say(f"{graph.name} {serial}; its kernels are tuned on 1 thread")
    feeds = random_feeds(plan.graph, options.seed)
    starts = build_kernels(plan, log=[], threads=threads)      # heuristic starts only
    untuned = assemble(plan, starts)
    if threads:
        untuned.threads = threads
    reference = untuned.run(feeds)

    scheduler = result = shared = None
    if chosen:
        shared_storage = is_shared(options.storage)
        scheduler = TaskScheduler([t.task(model_name) for t in chosen],
                                  SchedulerConfig(trials=options.trials, strategy=options.strategy,
                                                  timeout_s=options.timeout_s),
                                  TuneConfig(threads=threads, seed=options.seed), log=TuningLog(log_path),
                                  storage=None if shared_storage else options.storage,
                                  progress=TableProgress(tasks, enabled=options.progress))
        if shared_storage:
            from .model_coordinator import SharedModelRun
            shared = SharedModelRun(scheduler, options.storage, TuningLog(log_path), threads,
                                    workers=options.workers, lease_s=options.lease_s, say=say)
            result = shared.run()
        else:
            result = scheduler.run()
    tune_s = time.perf_counter() - started

    kernels = build_kernels(plan, log=log_path, threads=threads, choices=False)
    checked = _in_model_check(plan, tasks, kernels, starts, feeds, threads, log_path, model_name, say)
    tuned = assemble(plan, kernels)
    if threads:
        tuned.threads = threads
    outputs = tuned.run(feeds)
    names = list(outputs)
    problem = check_outputs(names, [outputs[k] for k in names], [reference[k] for k in names],
                            reduction_length=max((t.spec.reduction_length for t in tasks), default=1))
    ort, ort_why = ort_session(model_proto(model_path) if model_path else None, options.threads)
    say("timing the model: tuned, untuned" + (" and onnxruntime" if ort is not None else "") + " side by side ...")
    ort_error = relative_error(outputs, ort, feeds) if ort is not None else None
    times = time_models({"tuned": tuned, "untuned": untuned}, feeds, options.threads, ort, rounds=options.rounds)
    estimated = result.latency if result is not None and math.isfinite(result.latency) else None
    return {"model": model_path or graph.name, "threads": options.threads, "kernel_threads": threads,
            "threads_note": serial, "strategy": options.strategy,
            "trials": result.trials if result else 0, "budget": options.trials,
            "tuning_seconds": round(tune_s, 2), "tasks": task_rows(scheduler, tasks) if scheduler else [],
            "task_seconds": {st.task.name: round(st.seconds, 2) for st in scheduler.states} if scheduler else {},
            "history": [[n, round(s, 2), lat] for n, s, lat in result.history] if result else [],
            "estimated_latency_s": estimated, "latency_s": times["tuned"], "untuned_latency_s": times["untuned"],
            "onnxruntime_latency_s": times.get("onnxruntime"),
            "speedup_vs_onnxruntime": times.speedup.get("tuned"),
            "onnxruntime_note": ort_why, "outputs_match_untuned": problem is None, "mismatch": problem,
            "max_relative_error_vs_onnxruntime": ort_error,
            "stop_reason": result.stop_reason if result else "no task needs tuning", "log": log_path,
            "workers": options.workers, "by_worker": shared.by_worker if shared is not None else None,
            "in_model_check": [{"task": c.label, "tuned_s": c.tuned_s, "start_s": c.start_s, "kept": c.kept}
                               for c in checked]}


def _in_model_check(plan, tasks, kernels: dict, starts: dict, feeds: dict, threads, log_path: str,
                    model_name: str, say) -> list:
    """Per task whose tuned kernel is not its start, keep the one that runs faster in the model
    (``kernels`` updated in place) and log the choice; returns the :class:`~tuner.model_choice.Choice` list."""
    from logs import TuningLog
    from .model_choice import choice_records, choose, differing
    start_of = differing(plan, kernels, starts)
    keys = list(start_of)
    if not keys:
        if any(t.tuned for t in tasks):
            say("in the model: every tuned task's best schedule is its start (nothing to weigh)")
        return []
    by_key = {t.spec.key: t for t in tasks}
    say(f"checking {len(keys)} tuned kernel(s) against their starts inside the model ...")
    checked = choose(plan, kernels, starts, keys, feeds, threads, {k: by_key[k].label for k in keys})
    log = TuningLog(log_path)
    for record in choice_records(kernels, checked, start_of, by_key, threads, model_name):
        log.append(record)
    for c in checked:
        if c.kept == "start":
            kernels[c.key] = starts[c.key]
    back = sum(c.kept == "start" for c in checked)
    say(f"in the model: {len(checked) - back} tuned kernel(s) kept, {back} replaced by their start (faster there)")
    return checked


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"
