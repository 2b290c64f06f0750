"""``tensortune tune-model MODEL.onnx --trials N``: tune a whole model within one trial budget.

Every distinct fused group with a reduction is a task (``tuner.model_tasks``); the task scheduler
(``tuner.task_scheduler``) spends the budget where the estimated model latency drops most, and
prints the task table after every round. At the end the model is rebuilt with every kernel at its
best, checked against the untuned model's outputs, and timed end to end beside the untuned model
(and onnxruntime when it is installed), side by side in this process.
"""
from __future__ import annotations

import json
import math
import os
import sys
import time

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
    p.add_argument("--rounds", type=int, default=5, help="alternating rounds of the final timing (default 5)")
    p.add_argument("--json", action="store_true", help="print one JSON object with the results")
    p.add_argument("--quiet", action="store_true", help="no task table while tuning")


def _check(args) -> None:
    if args.trials < 1:
        raise CLIError(f"--trials must be >= 1, got {args.trials}")
    if args.threads is not None and args.threads < 1:
        raise CLIError(f"--threads must be >= 1, got {args.threads}")
    if args.rounds < 1:
        raise CLIError(f"--rounds must be >= 1, got {args.rounds}")
    if args.timeout is not None and args.timeout <= 0:
        raise CLIError(f"--timeout must be > 0, got {args.timeout:g}")


def run(args) -> int:
    from graph.ir import GraphError
    from logs import TuningLog, default_log_path
    from tensorir.te.check import check_outputs
    from .cmd_model import load_graph, parse_shapes
    from .model_compile import assemble, build_kernels, plan_graph
    from .model_progress import TableProgress, task_rows
    from .model_tasks import extract_tasks, select_tasks
    from .model_timing import ort_session, random_feeds, time_models
    from .search import TuneConfig
    from .task_scheduler import SchedulerConfig, TaskScheduler
    from .text import one_line

    _check(args)
    started = time.perf_counter()
    graph = load_graph(args.model, parse_shapes(args.shape))
    try:
        plan = plan_graph(graph)
    except GraphError as err:
        raise CLIError(one_line(err)) from None
    tasks = extract_tasks(plan.graph, plan.groups, plan.lowered)
    try:
        chosen = select_tasks(tasks, args.tasks)
    except ValueError as err:
        raise CLIError(str(err)) from None
    log_path = args.log or str(default_log_path())
    model_name = os.path.basename(args.model)
    log = TuningLog(log_path)
    say = (lambda *a: None) if args.quiet or args.json else (lambda *a: print(*a, file=sys.stderr, flush=True))
    say(f"{graph.name}: {len(plan.groups)} fused groups, {len(tasks)} distinct kernels, {len(chosen)} tuned "
        f"(the rest use their heuristic start); {args.trials} trials; log {log_path}")

    feeds = random_feeds(plan.graph, args.seed)
    untuned = assemble(plan, build_kernels(plan, log=[], threads=args.threads))   # heuristic starts only
    if args.threads:
        untuned.threads = args.threads
    reference = untuned.run(feeds)

    result = None
    if chosen:
        scheduler = TaskScheduler([t.task(model_name) for t in chosen],
                                  SchedulerConfig(trials=args.trials, strategy=args.strategy, timeout_s=args.timeout),
                                  TuneConfig(threads=args.threads, seed=args.seed), log=log,
                                  progress=TableProgress(tasks, enabled=not (args.quiet or args.json)))
        result = scheduler.run()
    tune_s = time.perf_counter() - started

    tuned = assemble(plan, build_kernels(plan, log=log_path, threads=args.threads))
    if args.threads:
        tuned.threads = args.threads
    outputs = tuned.run(feeds)
    problem = check_outputs(list(outputs), [outputs[k] for k in outputs], [reference[k] for k in outputs],
                            reduction_length=max((t.spec.reduction_length for t in tasks), default=1))
    from .model_timing import model_proto
    proto = model_proto(args.model)
    ort, ort_why = ort_session(proto, args.threads) if proto is not None else (None, "model not readable by onnx")
    say("timing the model: tuned, untuned" + (" and onnxruntime" if ort is not None else "") + " side by side ...")
    times = time_models({"tuned": tuned, "untuned": untuned}, feeds, args.threads, ort, rounds=args.rounds)

    rows = task_rows(scheduler, tasks) if result is not None else []
    out = {"model": args.model, "trials": result.trials if result else 0, "budget": args.trials,
           "tuning_seconds": round(tune_s, 2), "tasks": rows,
           "estimated_latency_s": result.latency if result and math.isfinite(result.latency) else None,
           "latency_s": times["tuned"], "untuned_latency_s": times["untuned"],
           "onnxruntime_latency_s": times.get("onnxruntime"),
           "speedup_vs_onnxruntime": times["onnxruntime"] / times["tuned"] if "onnxruntime" in times else None,
           "onnxruntime_note": ort_why, "outputs_match_untuned": problem is None, "mismatch": problem,
           "stop_reason": result.stop_reason if result else "no task needs tuning", "log": log_path}
    if args.json:
        print(json.dumps(out, indent=2, default=str))
    else:
        print(f"{graph.name}: {out['trials']} trials in {tune_s:.0f} s ({out['stop_reason'] or 'budget spent'})")
        print(f"  end to end: {times['tuned'] * 1e3:.3f} ms tuned, {times['untuned'] * 1e3:.3f} ms untuned"
              + (f", onnxruntime {times['onnxruntime'] * 1e3:.3f} ms ({out['speedup_vs_onnxruntime']:.2f}x)"
                 if "onnxruntime" in times else f" ({ort_why})"))
        print("  outputs match the untuned model" if problem is None else f"  OUTPUTS DIFFER: {problem}")
        print(f"  log: {log_path}")
    return 0 if problem is None else 1
