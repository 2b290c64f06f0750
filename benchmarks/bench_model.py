"""Whole models, untuned (heuristic starts), against onnxruntime, side by side in one process.

    python benchmarks/bench_model.py [--models mlp,resnet18,mobilenet_block,bert_layer] [--threads 1,2]
                                     [--rounds 5] [--layouts-ab] [--blocked-ab] [--winograd-ab] [--f4-ab]
                                     [--out FILE]

For each model of ``tests/onnx_models.py`` (random weights, seeded; ``gconv:C/K/H/G[/S[/R]]`` one conv,
:func:`tests.onnx_models.by_name`):

- import time (``tuner.model_api.load``) and compile time (``compile_model``: passes, fusion,
  lowering, one kernel per distinct group with its heuristic start; the kernel cache is cleared
  first, so it is a cold compile), and onnxruntime's session creation time;
- the outputs checked against onnxruntime (max relative error, ``ORT_DISABLE_ALL``, 1 thread);
- latency of ``model.run(feeds)`` and of ``InferenceSession.run`` (``ORT_ENABLE_ALL``, the same
  intra-op thread count, ``session.intra_op.allow_spinning=0``, sequential execution), timed by
  :func:`tuner.compare.side_by_side` (alternating rounds, a 0.2 s pause at each switch, medians);
- with ``--layouts-ab``, also the model compiled with conv outputs channels-innermost (``layouts=True``;
  the default is row-major, NCHW), timed in the same rounds (docs/decisions/024-model-conv-nhwc-layout.md);
- with ``--blocked-ab``, also the model compiled with every value row-major (``blocked=False``; the
  default keeps activations blocked between convolutions), timed in the same rounds, and the paired
  speed-ups (:func:`tuner.compare.paired_speedup`, the median of per-round ratios) of both over
  onnxruntime and of blocked over row-major (docs/decisions/035-blocked-activations-between-convs.md);
- with ``--winograd-ab``, also the model compiled with every convolution direct
  (``graph.lower.linalg.WINOGRAD = False``), timed in the same rounds, and the paired speed-ups
  (docs/decisions/044-winograd-3x3.md);
- with ``--f4-ab``, also the model compiled with F(2x2, 3x3) only (``graph.lower.linalg.WINOGRAD_F4 =
  False``), timed in the same rounds, and the paired speed-ups (docs/decisions/046-winograd-f4x4.md).
"""
from __future__ import annotations

import argparse
import os
import sys
import time
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))   # tests.onnx_models

MODELS = ("mlp", "resnet18", "mobilenet_block", "bert_layer")


def ort_session(model, threads: int, optimize: bool = True):
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.graph_optimization_level = (ort.GraphOptimizationLevel.ORT_ENABLE_ALL if optimize
                                   else ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def feeds_for(model, graph, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    weights = {t.name for t in model.graph.initializer}
    return {i.name: rng.standard_normal(graph.types[i.name].shape).astype(graph.types[i.name].dtype)
            for i in model.graph.input if i.name not in weights}


def bench(name: str, threads: int, rounds: int, log, layouts_ab: bool = False, blocked_ab: bool = False,
          winograd_ab: bool = False, f4_ab: bool = False, space_ab: str | None = None) -> dict:
    import tests.onnx_models as models
    from tensorir.runtime import clear_cache
    from tuner.compare import side_by_side
    from tuner.model_api import compile_model, load
    model = models.by_name(name)
    t0 = time.perf_counter()
    graph = load(model)
    t1 = time.perf_counter()
    clear_cache()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        compiled = compile_model(graph, threads=threads)
    t2 = time.perf_counter()
    sess = ort_session(model, threads)
    t3 = time.perf_counter()
    feeds = feeds_for(model, graph)
    want = ort_session(model, 1, optimize=False).run(None, feeds)
    got = compiled.run(feeds)
    err = max(float(np.abs(got[o.name] - w).max() / (np.abs(w).max() or 1.0))
              for o, w in zip(model.graph.output, want))
    fns = {"tensortune": lambda: compiled.run(feeds), "onnxruntime": lambda: sess.run(None, feeds)}
    if layouts_ab:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            nhwc = compile_model(graph, threads=threads, layouts=True)
        compiled.threads = threads
        fns["tensortune-nhwc"] = lambda: nhwc.run(feeds)
    if blocked_ab:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            rowmajor = compile_model(graph, threads=threads, blocked=False)
        fns["tensortune-rowmajor"] = lambda: rowmajor.run(feeds)
    if winograd_ab:
        direct = _compiled_with(graph, threads, "WINOGRAD")
        fns["tensortune-direct"] = lambda: direct.run(feeds)
    if f4_ab:
        f2 = _compiled_with(graph, threads, "WINOGRAD_F4")
        fns["tensortune-f2"] = lambda: f2.run(feeds)
    if space_ab:
        other = _compiled_with_space(graph, threads, space_ab, model)
        fns["tensortune-space"] = lambda: other.run(feeds)
    # many short rounds for the A/B: its paired ratios then see the host's slow spells on both sides
    ab = blocked_ab or winograd_ab or f4_ab or bool(space_ab)
    res = side_by_side(fns, rounds=rounds, min_repeat_ms=200, repeats_per_round=1 if ab else 3)
    info = compiled.info
    row = {"model": name, "threads": threads, "nodes": len(graph.nodes), "groups": info["groups"],
           "kernels": info["distinct_kernels"], "import_s": t1 - t0, "compile_s": t2 - t1, "ort_session_s": t3 - t2,
           "rel_err": err, "tt_ms": res["tensortune"]["median"] * 1e3, "ort_ms": res["onnxruntime"]["median"] * 1e3,
           "tt_all": res["tensortune"]["all"], "ort_all": res["onnxruntime"]["all"],
           "memory": compiled.memory.summary()}
    print(f"{name} threads={threads}: nodes {row['nodes']} groups {row['groups']} kernels {row['kernels']} | "
          f"import {row['import_s']:.2f} s compile {row['compile_s']:.2f} s (ort session {row['ort_session_s']:.2f} s) "
          f"| rel err {err:.1e} | tensortune {row['tt_ms']:.2f} ms, onnxruntime {row['ort_ms']:.2f} ms "
          f"({row['ort_ms'] / row['tt_ms']:.2f}x) | {row['memory']}", file=log, flush=True)
    if layouts_ab:
        row["nhwc_ms"] = res["tensortune-nhwc"]["median"] * 1e3
        print(f"  NHWC conv outputs (layouts=True) {row['nhwc_ms']:.2f} ms: row-major (the default) is "
              f"{row['nhwc_ms'] / row['tt_ms']:.2f}x faster; raw ms: "
              f"{' '.join(f'{v * 1e3:.3f}' for v in res['tensortune-nhwc']['all'])}", file=log)
    if blocked_ab:
        _ab(row, res, "rowmajor", "blocked", "every value row-major (blocked=False)", "blocked", "row-major", log)
    if winograd_ab:
        _ab(row, res, "direct", "winograd", "every conv direct (WINOGRAD=False)", "default", "direct", log)
    if f4_ab:
        _ab(row, res, "f2", "f4", "F(2x2, 3x3) only (WINOGRAD_F4=False)", "default", "F(2x2) only", log)
    if space_ab:
        where = "" if "." in space_ab.split("=")[0] else "schedules.space."
        _ab(row, res, "space", "default", f"with {where}{space_ab}", "default", space_ab, log)
    print(f"  raw tensortune ms: {' '.join(f'{v * 1e3:.3f}' for v in row['tt_all'])}", file=log)
    print(f"  raw onnxruntime ms: {' '.join(f'{v * 1e3:.3f}' for v in row['ort_all'])}", file=log, flush=True)
    return row


def _compiled_with(graph, threads: int, flag: str):
    """The model compiled with ``graph.lower.linalg.<flag>`` off (restored after)."""
    from graph.lower import linalg
    from start_setting import compiled_with_setting
    return compiled_with_setting(graph, threads, linalg, flag, False)


def _compiled_with_space(graph, threads: int, text: str, model=None):
    """The model compiled with ``schedules.space.NAME`` (or ``package.module.NAME``) set to the VALUE of
    ``text`` ("NAME=VALUE"; restored after): a heuristic start's constant against its default."""
    from start_setting import parse_setting
    module, name, value = parse_setting(text, "bench_model", default_module="schedules.space")
    from start_setting import compiled_with_setting
    return compiled_with_setting(graph, threads, module, name, value, model)


def _ab(row: dict, res: dict, other: str, ours: str, what: str, ours_text: str, other_text: str, log) -> None:
    """Row fields and a line for an A/B: the ``tensortune-<other>`` build against the default one and
    onnxruntime, paired speed-ups (the median of per-round ratios)."""
    from tuner.compare import paired_speedup
    row[f"{other}_ms"] = res[f"tensortune-{other}"]["median"] * 1e3
    row[f"{ours}_vs_ort"] = paired_speedup(res, "tensortune", "onnxruntime")
    row[f"{other}_vs_ort"] = paired_speedup(res, f"tensortune-{other}", "onnxruntime")
    row[f"{ours}_vs_{other}"] = paired_speedup(res, "tensortune", f"tensortune-{other}")
    print(f"  {what} {row[f'{other}_ms']:.2f} ms; paired speed-ups: {ours_text} {row[f'{ours}_vs_ort']:.3f}x "
          f"onnxruntime, {other_text} {row[f'{other}_vs_ort']:.3f}x, {ours_text} over {other_text} "
          f"{row[f'{ours}_vs_{other}']:.3f}x; raw ms: "
          f"{' '.join(f'{v * 1e3:.3f}' for v in res[f'tensortune-{other}']['all'])}", file=log)


def table(rows) -> str:
    out = ["| model | threads | groups / kernels | import s | compile s | rel err vs ORT | tensortune ms | "
           "onnxruntime ms | ORT / tensortune |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {r['model']} | {r['threads']} | {r['groups']} / {r['kernels']} | {r['import_s']:.2f} | "
                   f"{r['compile_s']:.2f} | {r['rel_err']:.1e} | {r['tt_ms']:.2f} | {r['ort_ms']:.2f} | "
                   f"{r['ort_ms'] / r['tt_ms']:.2f}x |")
    return "\n".join(out)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default=",".join(MODELS))
    p.add_argument("--threads", default="1,2")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--layouts-ab", action="store_true", help="also time the model with NHWC conv outputs")
    p.add_argument("--blocked-ab", action="store_true",
                   help="also time the model with every value row-major (blocked=False)")
    p.add_argument("--winograd-ab", action="store_true",
                   help="also time the model with every convolution direct (no Winograd)")
    p.add_argument("--f4-ab", action="store_true",
                   help="also time the model with F(2x2, 3x3) only (no F(4x4, 3x3))")
    p.add_argument("--space-ab", metavar="NAME=VALUE",
                   help="also time the model built with schedules.space.NAME (or package.module.NAME) = VALUE, "
                        "e.g. FEW_ROWS_TASK_COLUMNS=256 or graph.lower.layout.BLOCKS_FIT_ROWS=0")
    p.add_argument("--set", metavar="NAME=VALUE", action="append", default=[],
                   help="build every model (both sides of --space-ab) with package.module.NAME = VALUE, e.g. "
                        "tuner.model_threads.SERIAL_MODEL_SECONDS=0 (repeatable)")
    p.add_argument("--out", help="also write the raw output to FILE")
    args = p.parse_args(argv)
    import llvmlite.binding as llvm
    from start_setting import parse_setting
    for text in args.set:
        module, name, value = parse_setting(text, "bench_model")
        setattr(module, name, value)
    log = open(args.out, "w") if args.out else sys.stdout
    print(f"host {llvm.get_host_cpu_name()}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"
          + "".join(f"; {t}" for t in args.set), file=log)
    rows = []
    for threads in [int(t) for t in args.threads.split(",")]:
        for name in args.models.split(","):
            rows.append(bench(name, threads, args.rounds, log, args.layouts_ab, args.blocked_ab, args.winograd_ab,
                              args.f4_ab, args.space_ab))
    text = table(rows)
    print(text, file=log)
    if log is not sys.stdout:
        log.close()
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
