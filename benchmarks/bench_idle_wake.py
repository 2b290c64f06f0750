"""Whole models called after an idle pause, with and without a code generation setting, side by side.

    python benchmarks/bench_idle_wake.py [--models mlp,bert_layer,resnet18] [--threads 2] [--pause-ms 50]
                                         [--calls 3] [--rounds 15] [--set tensorir.codegen.spread.SPREAD_WORKERS=False]
                                         [--busy]

A served model is rarely called back to back: between two requests its OpenMP workers go to sleep,
and the next call has to wake them. Each round runs, for every build in turn, an idle pause
(``--pause-ms``, the host's cores left idle) and then ``--calls`` calls, each timed; the first call
after the pause and the rest are reported apart (medians over the rounds), with onnxruntime
(``ORT_ENABLE_ALL``, same threads, no spinning) timed the same way as the reference. The builds
alternate within every round, so a slow phase of the host falls on all of them
(docs/decisions/075-workers-move-off-the-masters-core.md). ``--busy`` repeats every measurement with one
busy-looping process beside it (another program on the other core).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))   # tests.onnx_models


def _builds(graph, model, threads: int, text: str) -> tuple:
    """(default build, build under the setting ``text``) and an onnxruntime session (or None)."""
    from start_setting import compiled_with_setting, parse_setting
    from tuner.model_api import compile_model
    from tuner.model_timing import ort_session
    module, name, value = parse_setting(text, "bench_idle_wake")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        builds = {"default": compile_model(graph, threads=threads)}
    builds[text] = compiled_with_setting(graph, threads, module, name, value)
    for m in builds.values():
        m.threads = threads
    sess, why = ort_session(model, threads)
    if sess is None:
        print(f"  (no onnxruntime reference: {why})")
    return builds, sess


def run(name: str, threads: int, pause_s: float, calls: int, rounds: int, text: str, phase: str) -> None:
    from tests import onnx_models
    from tuner.model_api import load
    from tuner.model_timing import random_feeds
    model = onnx_models.by_name(name)
    graph = load(model)
    feeds = random_feeds(graph)
    builds, sess = _builds(graph, model, threads, text)
    fns = {k: (lambda m=m: m.run(feeds)) for k, m in builds.items()}
    if sess is not None:
        fns["onnxruntime"] = lambda: sess.run(None, feeds)
    for f in fns.values():
        f()
    first = {k: [] for k in fns}
    rest = {k: [] for k in fns}
    for _ in range(rounds):
        for k, f in fns.items():
            time.sleep(pause_s)
            for n in range(calls):
                t0 = time.perf_counter()
                f()
                (first if n == 0 else rest)[k].append(time.perf_counter() - t0)
    ms = {k: (statistics.median(first[k]) * 1e3, statistics.median(rest[k]) * 1e3 if rest[k] else float("nan"))
          for k in fns}
    print(f"{name}, {threads} thread(s), {phase}, {pause_s * 1e3:g} ms idle before each {calls} calls, {rounds} rounds:")
    for k, (a, b) in ms.items():
        print(f"  {k:<50} first call {a:7.2f} ms   later calls {b:7.2f} ms")
    d, o = ms["default"], ms[text]
    print(f"  default over {text}: first call {o[0] / d[0]:.2f}x, later calls {o[1] / d[1]:.2f}x", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="mlp,bert_layer,resnet18")
    ap.add_argument("--threads", default="2")
    ap.add_argument("--pause-ms", type=float, default=50.0)
    ap.add_argument("--calls", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--set", default="tensorir.codegen.spread.SPREAD_WORKERS=False", metavar="MODULE.NAME=VALUE")
    ap.add_argument("--busy", action="store_true", help="then again beside a busy-looping process")
    args = ap.parse_args()
    from busy_core import phases
    import llvmlite.binding as llvm
    print(f"host {llvm.get_host_cpu_name()}; {time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC")
    for phase in phases(hog=args.busy):
        for t in (int(x) for x in args.threads.split(",")):
            for name in args.models.split(","):
                run(name, t, args.pause_ms / 1e3, args.calls, args.rounds, args.set, phase)


if __name__ == "__main__":
    main()
