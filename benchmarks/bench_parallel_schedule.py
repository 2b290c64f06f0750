"""Parallel loops in guided chunks or static blocks: whole models at 2 threads against onnxruntime,
on a quiet machine and with the other core busy (docs/decisions/042-parallel-loops-hand-out-guided-chunks.md).

    python benchmarks/bench_parallel_schedule.py [--models resnet18,bert_layer,mlp,se_block] [--threads 2]
                                                 [--rounds 9] [--no-hog]

Each model of ``tests/onnx_models.py`` is compiled untuned twice in this process, once with every parallel
loop handing out guided chunks from a shared counter (``tensorir.codegen.parallel.GUIDED``, the default)
and once with the static balanced blocks it replaced, and timed side by side with onnxruntime
(``ORT_ENABLE_ALL``, same threads, no spinning), alternating rounds with a pause at every switch. Figures:
the medians of per-round ratios, each build's speed over onnxruntime's, and guided over static. Phases:
quiet, then with one busy-looping process (``--no-hog`` skips it).
"""
from __future__ import annotations

import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)


def compiled(proto, threads: int, guided: bool):
    from tensorir.codegen import parallel
    from tensorir.runtime import clear_cache
    from tuner.model_api import compile_model
    saved = parallel.GUIDED
    parallel.GUIDED = guided
    clear_cache()                  # the kernel cache does not know the flag
    try:
        return compile_model(proto, threads=threads, log=[])
    finally:
        parallel.GUIDED = saved
        clear_cache()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="resnet18,bert_layer,mlp,se_block")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--no-hog", action="store_true")
    args = ap.parse_args(argv)
    import llvmlite.binding as llvm
    import numpy as np
    from bench_model import feeds_for, ort_session
    from busy_core import phases

    import tests.onnx_models as models
    from tuner.compare import limit_threads, paired_speedup, side_by_side
    from tuner.model_api import load
    print(f"host {llvm.get_host_cpu_name()}; {args.threads} threads, {args.rounds} paired rounds "
          f"(medians of per-round ratios)")
    print("| phase | model | guided vs onnxruntime | static vs onnxruntime | guided vs static | guided ms | static ms | onnxruntime ms |")
    print("|---|---|---|---|---|---|---|---|")
    builds = {}
    for model in args.models.split(","):
        proto = getattr(models, model)()
        feeds = feeds_for(proto, load(proto))
        g, s = compiled(proto, args.threads, True), compiled(proto, args.threads, False)
        want = s.run(feeds)
        for name, got in g.run(feeds).items():
            if not np.allclose(got, want[name], rtol=1e-4, atol=1e-4):
                raise SystemExit(f"{model}: guided and static builds disagree on {name}")
        builds[model] = (g, s, ort_session(proto, args.threads), feeds)
    for phase in phases(not args.no_hog):
        for model, (g, s, sess, feeds) in builds.items():
            with limit_threads(args.threads):
                res = side_by_side({"guided": lambda g=g, f=feeds: g.run(f), "static": lambda s=s, f=feeds: s.run(f),
                                    "ort": lambda o=sess, f=feeds: o.run(None, f)},
                                   rounds=args.rounds, min_repeat_ms=200, repeats_per_round=1)
            ms = {k: r["median"] * 1e3 for k, r in res.items()}
            print(f"| {phase} | {model} | {paired_speedup(res, 'guided', 'ort'):.2f} | "
                  f"{paired_speedup(res, 'static', 'ort'):.2f} | {paired_speedup(res, 'guided', 'static'):.2f} | "
                  f"{ms['guided']:.2f} | {ms['static']:.2f} | {ms['ort']:.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
