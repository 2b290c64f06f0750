"""Per fused group of a whole model: time, FLOPs, bytes, GB/s and its kernel's loop nest, at each thread count.

    python benchmarks/profile_model.py [--models bert_layer] [--onnx FILE] [--log TUNING_LOG] [--threads 1,2]
                                       [--rounds 7] [--ab-decisions rows=False,inline=True] [--nests] [--out FILE]

A model of ``tests/onnx_models.py`` (or ``--onnx FILE``) is compiled untuned (heuristic starts, weights
packed at build time, as ``bench_model.py`` does), or with a tuning log's records (``--log``, as ``run`` uses them); each step's kernel is then timed alone on its real
buffers: ``--rounds`` rounds of a burst of >= 2 ms of calls, the median of the rounds' per-call means
(and the fastest round); "in seq" is the median of single calls timed where they run in the model
(5 runs of all steps per round), with the caches as the steps before leave them (weights not warm). Bytes are every distinct buffer the step reads or writes once (what it must
move at least); FLOPs are ``tensorir.te.evaluate.count_flops`` of the group's workload. The last lines
compare the sum of the steps with the whole ``model.run`` (the difference is the time between kernels
and the feeds/outputs copies).

``--ab-decisions key=value,...`` also builds every group whose heuristic start has such decisions
(matched on the name after the last dot, e.g. ``softmax0.rows``) with them overridden, and times the
two kernels of each such group side by side in the same rounds, and the two whole models too: how a
default of the generated space was chosen (docs/decisions/026-row-groups.md). ``--ab-set
package.module.NAME=VALUE`` does the same for every group whose start's loop nest a module constant changes
(``--ab-set schedules.elementwise.FUSE_PARTLY=False``).
"""
from __future__ import annotations

import argparse
import ast
import os
import statistics
import sys
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))   # tests.onnx_models


def _burst(call, min_s: float = 0.002) -> float:
    """Mean seconds per call over a burst of at least ``min_s``."""
    n, t0 = 0, time.perf_counter()
    while True:
        call()
        n += 1
        dt = time.perf_counter() - t0
        if dt >= min_s:
            return dt / n


def nest_summary(schedule) -> str:
    """One line: the output stage's loops (``p`` parallel, ``v`` vectorized, ``u`` unrolled) and
    the stages computed inside it."""
    if schedule is None:
        return "(no schedule)"
    from schedules.state import AttachKind
    state = schedule.stage_graph()
    out = [st for st in state.stages if st.is_output][-1]
    tags = {"parallel": "p", "vectorized": "v", "unrolled": "u"}
    loops = " ".join(f"{n}[{out.loops[n].extent}]{tags.get(getattr(out.ann.get(n), 'value', ''), '')}"
                     for n in out.leaf)
    attached = [st.name for st in state.stages if st.attach.kind is AttachKind.AT]
    inlined = sum(1 for st in state.stages if st.attach.kind is AttachKind.INLINE)
    roots = [st.name for st in state.stages if st.attach.kind is AttachKind.ROOT and st is not out]
    extra = (f"; inside: {', '.join(attached)}" if attached else "") + \
            (f"; also at root: {', '.join(roots)}" if roots else "") + (f"; {inlined} inlined" if inlined else "")
    return f"{out.name}: {loops}{extra}"


def _override(tensors, overrides: dict, threads: int):
    """The kernel of ``tensors``' heuristic start with decisions ending in an ``overrides`` key
    replaced, or None when it has no such decision."""
    from schedules.decisions import FixedDecisions
    from schedules.errors import DecisionError
    from schedules.space import GeneratedSpace
    from tensorir.runtime import build as build_func
    space = GeneratedSpace(list(tensors))
    dec = space.default_decisions()
    hit = {k: overrides[k.rsplit(".", 1)[-1]] for k in dec if k.rsplit(".", 1)[-1] in overrides}
    if not hit or all(dec[k] == v for k, v in hit.items()):
        return None
    # decisions the start does not make (another path of a rule, e.g. pool_rows=False) are the heuristic's
    try:
        schedule = space.apply(FixedDecisions({**space.default_decisions(hit), **dec, **hit}))
    except DecisionError as e:      # (qt=4 where a 1x1 conv's row is one column): that group keeps its start
        print(f"  (override not applied to {tensors[-1].name}: {e})")
        return None
    kernel = build_func(schedule.lower())
    kernel.threads = threads
    kernel.schedule = schedule
    return kernel


def _under_setting(tensors, chosen: tuple, threads: int):
    """The kernel of ``tensors``' heuristic start with a module constant set (``chosen``: module, name,
    value), or None when its loop nest and its assembly are the same as without (a code generation
    constant such as ``tensorir.codegen.vector.STRIDED_LOADS`` changes the assembly only)."""
    from schedules.decisions import FixedDecisions
    from schedules.space import GeneratedSpace
    from start_setting import setting
    from tensorir.runtime import build as build_func
    from tensorir.runtime import clear_cache
    space = GeneratedSpace(list(tensors))
    default = space.apply(FixedDecisions(space.default_decisions())).lower()
    with setting(*chosen):
        schedule = space.apply(FixedDecisions(space.default_decisions()))
        func = schedule.lower()
        same_nest = str(func) == str(default)
        if same_nest:
            clear_cache()      # the same loop nest: a code generation constant may still change the kernel
        try:
            kernel = build_func(func)
        finally:
            if same_nest:
                clear_cache()
    if same_nest and kernel.asm() == build_func(default).asm():
        return None
    kernel.threads = threads
    kernel.schedule = schedule
    return kernel


def profile(name: str, model, threads: int, rounds: int, overrides: dict | None, log, nests: bool,
            tuned=None, chosen: tuple | None = None) -> None:
    """``overrides`` (decisions) or ``chosen`` (a module constant: module, name, value) build the alternative
    kernels timed beside the model's."""
    import numpy as np
    from tensorir.te.evaluate import count_flops
    from tuner.model_api import compile_model, load
    from tuner.model_compile import assemble
    from tuner.model_timing import random_feeds
    graph = load(model)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        compiled = compile_model(graph, log=tuned, threads=threads)
    feeds = random_feeds(graph)
    plan, kernels = compiled.info["plan"], compiled.info["kernels"]
    by_label = {g.name: (g, lw) for g, lw in zip(plan.groups, plan.lowered)}
    other = None
    if overrides or chosen:
        alt = dict(kernels)
        for lw in plan.lowered:
            if not (lw.key in alt and alt[lw.key] is kernels[lw.key]):
                continue
            k = _override(lw.tensors, overrides, threads) if overrides else _under_setting(lw.tensors, chosen, threads)
            if k is not None:
                alt[lw.key] = k
        other = assemble(plan, alt, {})
        other.threads = threads
        other.run(feeds)
    compiled.run(feeds)
    steps = compiled.steps
    calls = list(compiled._bound)
    alt_calls = list(other._bound) if other is not None else [None] * len(calls)
    times = [[] for _ in steps]
    alt_times = [[] for _ in steps]
    run_times, alt_run = [], []
    in_seq = [[] for _ in steps]
    for _ in range(rounds):
        for _ in range(5):          # each step timed where it runs in the model: the caches as the model leaves them
            for n, call in enumerate(calls):
                t0 = time.perf_counter()
                call()
                in_seq[n].append(time.perf_counter() - t0)
        for n, call in enumerate(calls):
            times[n].append(_burst(call))
            if alt_calls[n] is not None and steps[n].kernel is not other.steps[n].kernel:
                alt_times[n].append(_burst(alt_calls[n]))
        run_times.append(_burst(lambda: compiled.run(feeds), 0.05))
        if other is not None:
            time.sleep(0.1)
            alt_run.append(_burst(lambda: other.run(feeds), 0.05))
        time.sleep(0.1)
    print(f"\n{name}, {threads} thread(s): {len(steps)} steps; per step the median of {rounds} rounds [fastest]",
          file=log)
    head = f"{'step':>4} {'ms':>8} {'[min]':>8} {'in seq':>8} {'MFLOP':>8} {'KiB':>7} {'GB/s':>6} {'GFLOP/s':>7}  group"
    if other is not None:
        what = ",".join(f"{k}={v}" for k, v in overrides.items()) if overrides else \
            f"{chosen[0].__name__}.{chosen[1]}={chosen[2]!r}"
        head += f"   | with {what}: ms"
    print(head, file=log)
    total = {"matmul": 0.0, "other": 0.0, "seq": 0.0}
    for n, step in enumerate(steps):
        g, lw = by_label.get(step.label, (None, None))
        med, best = statistics.median(times[n]), min(times[n])
        arrays = {b: compiled._arrays[b] for b in step.args}
        nbytes = sum(a.nbytes for a in arrays.values())
        flops = count_flops(lw.tensors) if lw is not None else 0
        ops = "+".join(g.ops) if g is not None else step.label
        kind = "matmul" if g is not None and any(o in ("MatMul", "Gemm", "Conv") for o in g.ops) else "other"
        total[kind] += med
        seq = statistics.median(in_seq[n])
        total["seq"] += seq
        line = (f"{n:>4} {med * 1e3:8.3f} {best * 1e3:8.3f} {seq * 1e3:8.3f} {flops / 1e6:8.1f} {nbytes / 1024:7.0f} "
                f"{nbytes / med / 1e9:6.1f} {flops / med / 1e9:7.1f}  {ops}")
        if alt_times[n]:
            line += f"   | {statistics.median(alt_times[n]) * 1e3:.3f}"
        print(line, file=log)
        if nests:
            print(f"{'':>6}{nest_summary(getattr(step.kernel, 'schedule', None))}", file=log)
    run = statistics.median(run_times)
    steps_sum = total["matmul"] + total["other"]
    print(f"sum of steps {steps_sum * 1e3:.3f} ms (matrix-product/conv groups {total['matmul'] * 1e3:.3f}, other "
          f"groups {total['other'] * 1e3:.3f}); model.run {run * 1e3:.3f} ms (between kernels and copies: "
          f"{(run - steps_sum) * 1e3:.3f}); steps timed in sequence {total['seq'] * 1e3:.3f} ms", file=log)
    if other is not None:
        print(f"model.run with the overridden decisions {statistics.median(alt_run) * 1e3:.3f} ms (a second model "
              f"assembled apart, with its own copies of the weights: compare the steps, not these two); raw ms: "
              f"default {' '.join(f'{t * 1e3:.3f}' for t in run_times)} | overridden "
              f"{' '.join(f'{t * 1e3:.3f}' for t in alt_run)}", file=log)
    log.flush()
    del np


def _overrides(text: str) -> dict:
    out = {}
    for item in filter(None, text.split(",")):
        key, _, value = item.partition("=")
        try:
            out[key.strip()] = ast.literal_eval(value.strip())
        except (ValueError, SyntaxError):
            raise SystemExit(f"profile_model.py: error: --ab-decisions item {item!r} is not key=python-literal")
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="bert_layer", help="builders of tests/onnx_models.py or gconv:C/K/H/G[/S[/R]], comma separated")
    p.add_argument("--onnx", help="profile this ONNX file instead (static shapes)")
    p.add_argument("--log", action="append", help="tuning log whose records the build uses (repeatable)")
    p.add_argument("--threads", default="1,2")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--ab-decisions", default="", help="e.g. rows=False,inline=True (see the module docstring)")
    p.add_argument("--ab-set", metavar="MODULE.NAME=VALUE", help="time each group whose start's loop nest "
                   "this module constant changes beside the default (instead of --ab-decisions)")
    p.add_argument("--nests", action="store_true", help="print each step's loop nest summary")
    p.add_argument("--out", help="also write the output to FILE")
    args = p.parse_args(argv)
    import llvmlite.binding as llvm
    overrides = _overrides(args.ab_decisions)
    chosen = None
    if args.ab_set:
        from start_setting import parse_setting
        chosen = parse_setting(args.ab_set, "profile_model.py")
    logs = [sys.stdout] + ([open(args.out, "w")] if args.out else [])

    class Tee:
        def write(self, text):
            for f in logs:
                f.write(text)

        def flush(self):
            for f in logs:
                f.flush()
    log = Tee()
    print(f"host {llvm.get_host_cpu_name()}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}", file=log)
    if args.onnx:
        import onnx
        models = [(os.path.basename(args.onnx), onnx.load(args.onnx))]
    else:
        import tests.onnx_models as builders
        models = [(n, builders.by_name(n)) for n in args.models.split(",")]
    for threads in [int(t) for t in args.threads.split(",")]:
        for name, model in models:
            profile(name, model, threads, args.rounds, overrides, log, args.nests, args.log, chosen)
    return 0


if __name__ == "__main__":
    sys.exit(main())
