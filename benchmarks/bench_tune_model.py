"""Whole-model tuning benchmark: `tune-model` on ONNX models built in the repository, against onnxruntime.

    python benchmarks/bench_tune_model.py [--models mlp,resnet18,bert] [--trials 256] [--threads 2,1]
                                          [--strategy gradient,round-robin] [--timeout S] [--json FILE]

Every run starts from an empty log (no resume, no transfer from other runs). For each model,
thread count and strategy it reports: tasks tuned, trials, tuning wall time, end-to-end latency
of the untuned model (heuristic starts), of the tuned model and of onnxruntime (``ORT_ENABLE_ALL``,
the same threads, no spinning), all three timed side by side in one process, alternating rounds
with a pause at every switch, whether the tuned outputs match the untuned ones, their largest error
relative to onnxruntime's outputs, and per tuned task its share of the estimated latency. With two
strategies the estimated model latency after the same trials compares them.
Models (tests/onnx_models.py, random weights, batch 1 unless said): ``mlp`` 32x1024 -> 2048 -> 2048
-> 1000 (Gemm + Relu); ``resnet18`` 1x3x224x224 (BatchNorm after every conv, as exported);
``bert`` one BERT-base encoder layer, sequence 128, hidden 768, 12 heads (decomposed LayerNorm/Gelu);
``resnext56`` / ``resnext14`` ResNeXt-50 (32x4d) bottlenecks, 128 channels at 56x56 in 32 groups of 4 / 512
at 14x14 in 32 groups of 16; ``se_block`` an EfficientNet MBConv (Swish, depthwise 5x5, squeeze-excitation).
``gconv:C/K/H/G[/S[/R]]`` one grouped R x R conv (3 unless given; C -> K channels at H x H in G groups,
stride S) and its Relu.
Only the first three are default (``--models``): the others have no target of their own.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from tests import onnx_models  # noqa: E402  (the models the tests check numerically)
from tuner.model_api import load  # noqa: E402
from tuner.model_tune import ModelTuneOptions, tune_model  # noqa: E402

MODELS = {
    "mlp": lambda: onnx_models.mlp(batch=32, sizes=(1024, 2048, 2048, 1000)),
    "resnet18": lambda: onnx_models.resnet18(batch=1, size=224),
    "bert": lambda: onnx_models.bert_layer(seq=128, hidden=768, heads=12),
    "resnext56": onnx_models.resnext_g32_56,
    "resnext14": onnx_models.resnext_g32_14,
    "se_block": onnx_models.se_block,
}


def _model(name: str):
    """The ONNX model called ``name`` (:data:`MODELS`, else :func:`tests.onnx_models.by_name`)."""
    return MODELS[name]() if name in MODELS else onnx_models.by_name(name)


def _host() -> str:
    import llvmlite.binding as llvm
    return llvm.get_host_cpu_name()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="mlp,resnet18,bert", help="comma-separated; a gconv's fields joined by '/'")
    ap.add_argument("--trials", type=int, default=256)
    ap.add_argument("--threads", default="2,1")
    ap.add_argument("--strategy", default="gradient")
    ap.add_argument("--timeout", type=float, default=None, help="tuning time limit per run (seconds)")
    ap.add_argument("--rounds", type=int, default=15, help="alternating rounds of the final timing (default 15)")
    ap.add_argument("--json", metavar="FILE", help="write every run's result here")
    args = ap.parse_args(argv)
    import onnx
    rows, results = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models.split(","):
            name = name.replace("/", ",")
            path = os.path.join(tmp, f"{name.replace(':', '-').replace(',', '_')}.onnx")
            onnx.save(_model(name), path)
            graph = load(path)
            for threads in [int(t) for t in args.threads.split(",")]:
                for strategy in args.strategy.split(","):
                    log = os.path.join(tmp, f"{name}-{threads}-{strategy}.jsonl")
                    opts = ModelTuneOptions(trials=args.trials, log=log, threads=threads, strategy=strategy,
                                            timeout_s=args.timeout, rounds=args.rounds, progress=False)
                    print(f"# {name}, {threads} thread(s), {strategy}, {args.trials} trials ...", file=sys.stderr,
                          flush=True)
                    out = tune_model(graph, path, opts, say=lambda *a: print(*a, file=sys.stderr, flush=True))
                    out["host"] = _host()
                    results.append(out)
                    ort = out["onnxruntime_latency_s"]
                    rows.append((name, threads, strategy, sum(1 for t in out["tasks"] if t["state"] != "heuristic"),
                                 out["trials"], out["tuning_seconds"], out["untuned_latency_s"] * 1e3,
                                 out["latency_s"] * 1e3, ort * 1e3 if ort else float("nan"),
                                 out["speedup_vs_onnxruntime"] or float("nan"), out["outputs_match_untuned"],
                                 (out["estimated_latency_s"] or float("nan")) * 1e3))
    print(f"host {_host()}; side by side in one process, medians; the speed-up is the median of per-round ratios")
    print("| model | threads | strategy | tasks tuned | trials | tuning s | untuned ms | tuned ms | onnxruntime ms "
          "| tuned vs onnxruntime | outputs match | estimated ms |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r[0]} | {r[1]} | {r[2]} | {r[3]} | {r[4]} | {r[5]:.0f} | {r[6]:.2f} | {r[7]:.2f} | {r[8]:.2f} | "
              f"{r[9]:.2f}x | {'yes' if r[10] else 'NO'} | {r[11]:.2f} |")
    for out in results:
        est = sum(t["weighted_latency_s"] or 0.0 for t in out["tasks"]) or 1.0
        err = out.get("max_relative_error_vs_onnxruntime")
        print(f"\n{os.path.basename(out['model'])}, {out['threads']} thread(s): tuned tasks' share of the estimated "
              f"latency; outputs against onnxruntime: max relative error "
              f"{'n/a' if err is None else f'{err:.1e}'}")
        print("| task | weight | trials | GFLOP/s | latency ms | share |")
        print("|---|---|---|---|---|---|")
        for t in sorted(out["tasks"], key=lambda t: -(t["weighted_latency_s"] or 0.0)):
            if t["weighted_latency_s"]:
                print(f"| {t['name']} | {t['weight']} | {t['trials']} | {t['gflops'] or 0:.1f} | "
                      f"{t['latency_s'] * 1e3:.3f} | {t['weighted_latency_s'] / est:.0%} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
