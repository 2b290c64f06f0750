"""Does the cost model earn its place?  Search strategies compared on equal trial budgets.

    python benchmarks/bench_search.py [--trials 256] [--seeds 0,1,2] [--only matmul1024,conv2d]
                                      [--strategies random,optuna,...] [--out PATH] [--keep-logs DIR]

Strategies: random search (Optuna RandomSampler, no model), Optuna alone (TPE,
each ask measured) and Optuna + cost model (the default tuner: once the model
has 24 samples, 3 TPE asks per measured candidate; a quarter of each batch is
TPE's first asks in its order, the rest the XGBoost model's top picks among the
other asks), the mutant-picking policy the default replaced (half of each batch the model's picks
among 2 asks and 4 mutants of the best schedules per measured candidate; why it was replaced:
docs/decisions/001-search-policy-model-screens-tpe-asks.md), the default with the model ranking
from its first training (8 samples, round 2), and the default with transfer:
its log starts with the records of three other
workloads (matmul 512, dense, a conv2d of another shape; tuned once per
benchmark run, 64 trials each), which pretrain the model before the first
round, as a user's per-user log would.  Every other run starts from an empty log and, so
that the comparison is about the search, WITHOUT the space's heuristic first
trial (``--with-heuristic`` puts it back, as `tensortune tune` does).  Reports, after
16/32/64/128/256 trials, the best schedule so far (by its measurement while
tuning), and the fastest of the 4 best so far (what `tensortune tune` keeps: it
re-times its 4 finalists at the end), re-timed at the end of its run side by side
with numpy, as a ratio to numpy: on this shared host the single best of many measurements taken at
different times is biased upward (a lucky measurement), and absolute GFLOP/s
drift between runs, so the best-while-tuning GFLOP/s are listed as well but
the ratios are the comparison.  Median and range over seeds; then the cost model's
pairwise ranking accuracy and top-k recall on held-out measured candidates of
each workload (train on 80% of the distinct candidates, test on the other 20%,
5 random splits), the same for models trained on only 8, 16, ... of the
training candidates (a learning curve), and the same test sets ranked by a
model pretrained on the other workloads only.  Results are written to --out as they come, so an
interrupted run keeps what it measured; by default to a new dated file in benchmarks/results/
(``YYYY-MM-DD-search[-WORKLOADS]-NNNtrials-seedsS.json``, never overwriting an earlier one).
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import statistics
import sys
import tempfile

import numpy as np

from cost_model import CostModel, extract_features, pairwise_accuracy, topk_recall
from logs import TuningLog
from schedules.lowering import SCHEDULED
from schedules.space import FixedDecisions, GeneratedSpace
from tuner.search import TuneConfig, Tuner
from tuner.spec import WorkloadSpec

WORKLOADS = {
    "matmul1024": ("matmul", ["M=1024", "N=1024", "K=1024"]),
    "matmul512": ("matmul", ["M=512", "N=512", "K=512"]),
    "conv2d": ("conv2d", ["N=1", "C=64", "H=56", "W=56", "K=64", "R=3", "S=3", "pad=1"]),
}
STRATEGIES = {"random": ("random", False, {}), "optuna": ("tpe", False, {}),
              "optuna+cost model": ("tpe", True, {}),
              "optuna+cost model+transfer": ("tpe", True, {}),
              # the model ranks from its first training (8 samples; the default waits for 24,
              # why: docs/decisions/002-cost-model-warmup-24-samples.md)
              "optuna+cost model from round 2": ("tpe", True, {"model_warmup": 0}),
              # the policy the default replaced: half of each batch the model's picks among 2 TPE asks
              # and 4 mutants of the best schedules per measured candidate
              # (why: docs/decisions/001-search-policy-model-screens-tpe-asks.md)
              "optuna+cost model+mutants": ("tpe", True, {"mutants_per_measure": 4, "asks_per_measure": 2,
                                                          "epsilon": 0.5})}
LEARNING_CURVE = (8, 16, 24, 32, 64, 128, 256, 512)
# Other workloads, tuned once per benchmark run (64 trials each, as `tensortune tune` would) into a
# log that the "transfer" strategy starts from: its model is pretrained on them before the first round.
TRANSFER_SOURCES = (("matmul", ["M=512", "N=512", "K=512"]), ("dense", []),
                    ("conv2d", ["N=1", "C=128", "H=28", "W=28", "K=128", "R=3", "S=3", "pad=1"]))
CHECKPOINTS = (16, 32, 64, 128, 256)
RESULTS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
DEFAULT_WORKLOADS = "matmul1024,conv2d"


def default_out(trials: int, seeds: list, only: str, day: str | None = None) -> str:
    """A new dated path in benchmarks/results/ saying what was run, e.g.
    ``2026-11-25-search-256trials-seeds012.json`` (``-2``, ``-3``, ... when that name is taken)."""
    what = "search" + ("" if only == DEFAULT_WORKLOADS else "-" + only.replace(",", "-"))
    sep = "" if all(0 <= s < 10 for s in seeds) else "_"
    stem = f"{day or datetime.date.today().isoformat()}-{what}-{trials}trials-seeds{sep.join(map(str, seeds))}"
    path, n = os.path.join(RESULTS_DIR, f"{stem}.json"), 2
    while os.path.exists(path):
        path, n = os.path.join(RESULTS_DIR, f"{stem}-{n}.json"), n + 1
    return path


def best_after(history: list, n: int) -> float:
    vals = [g for i, _, g, _ in history if i <= n]
    return max(vals) if vals else 0.0


def retimed_ratios(spec: WorkloadSpec, records: list, points: list, finalists=(1, 4)) -> dict:
    """{k: {n: numpy time / time of the fastest of the k best-so-far schedules after n measured trials}}.

    All timed side by side now.  k = 1 is the single best by its measurement while tuning; k = 4
    is what `tensortune tune` delivers (its ``finalists``: the 4 fastest as measured while tuning
    are re-timed side by side at the end and the fastest confirmed one is kept), which also
    protects a strategy that measures many near-equal schedules from keeping a lucky measurement.
    """
    from schedules import Schedule
    from tensorir.runtime import build
    from tuner.compare import side_by_side
    from tuner.search import estimates
    measured = [r for r in records if not r.confirmed and r.error_kind not in ("schedule", "lower")]
    key = lambda r: json.dumps(r.decisions, sort_keys=True)   # noqa: E731
    trial_at = [i for i, r in enumerate(measured) if not r.remeasured and r.decisions]   # repeats and the default are not trials
    tops = {}
    for n in points:       # a run that stopped early: its final best stands for the checkpoints it missed
        # the tuner's ranking after n trials: each schedule by the median of its measurements so far
        upto = measured[:trial_at[min(n, len(trial_at)) - 1] + 1] if trial_at else []
        est = estimates([r for r in upto if r.ok and r.gflops])
        first = {}
        for r in upto:
            first.setdefault(key(r), r)
        ranked = sorted(est, key=lambda k: -est[k][1])[:max(finalists)]
        if ranked:
            tops[n] = [first[k] for k in ranked]
    inputs = spec.inputs(0)
    fns, names = {}, {}
    for top in tops.values():
        for r in top:
            if key(r) not in names:
                names[key(r)] = f"s{len(names)}"
                kernel = build(Schedule.from_json(spec.tensors(), r.trace).lower())
                outs = spec.empty_outputs()
                kernel(*inputs, *outs)
                fns[names[key(r)]] = kernel.bind(*inputs, *outs)
    impl = spec.numpy_impl()
    fns["numpy"] = lambda: impl(inputs)
    t = {k: v["median"] for k, v in side_by_side(fns, rounds=3, min_repeat_ms=50, repeats_per_round=3).items()}
    return {k: {n: t["numpy"] / min(t[names[key(r)]] for r in top[:k]) for n, top in tops.items()}
            for k in finalists}


def build_transfer_log(path: str, benchmarked: list) -> dict:
    """Tune the transfer sources into ``path``; returns {source label: tuning seconds}."""
    out = {}
    for name, params in TRANSFER_SOURCES:
        spec = WorkloadSpec.parse(name, params)
        if spec.key in {WorkloadSpec.parse(*WORKLOADS[w]).key for w in benchmarked}:
            raise SystemExit(f"transfer source {name} {params} is a benchmarked workload; bench it without "
                             "the transfer strategy")
        res = Tuner(spec, TuneConfig(trials=64, seed=100), log=TuningLog(path)).run()
        out[f"{name} {' '.join(params)}".strip()] = round(res.tune_seconds, 1)
        print("transfer source:", name, params, f"{res.tune_seconds:.0f} s", flush=True)
    return out


def trained(X, y) -> CostModel:
    """A fresh model fitted on (X, y), once (``update`` fits a new model when it has enough samples)."""
    m = CostModel()
    m.update(X, y, ["w"] * len(y))
    if not m.is_trained:
        m.fit()
    return m


def model_accuracy(spec: WorkloadSpec, records: list, splits: int = 5, k: int = 10, transfer_log=None) -> dict:
    space = GeneratedSpace(spec.tensors())
    from tuner.search import estimates
    X, y = [], []
    for decisions, gflops in estimates(records).values():    # each schedule once, at its median
        if not decisions:
            continue
        try:
            func = space.apply(FixedDecisions(decisions, strict=True)).lower(until=SCHEDULED)
        except Exception:  # noqa: BLE001 - a record the current space cannot rebuild
            continue
        X.append(extract_features(func))
        y.append(gflops)
    X, y = np.stack(X), np.array(y)
    rng = np.random.default_rng(0)
    acc, rec, tacc, trec = [], [], [], []
    curve = {n: ([], []) for n in LEARNING_CURVE if n < int(0.8 * len(y))}
    transfer = None
    if transfer_log is not None:     # a model that saw only the other workloads (what a new run starts from)
        from tuner.search import host_target, pretrain_from_log
        transfer = CostModel()
        pretrain_from_log(transfer, TuningLog(transfer_log), spec.key, host_target(None))
    for _ in range(splits):
        idx = rng.permutation(len(y))
        cut = int(0.8 * len(y))
        tr, te = idx[:cut], idx[cut:]
        m = trained(X[tr], y[tr])
        pred = m.predict(X[te])
        acc.append(pairwise_accuracy(pred, y[te]))
        rec.append(topk_recall(pred, y[te], min(k, len(te))))
        for n, (ca, cr) in curve.items():     # the same test set, a model trained on only n samples
            pred = trained(X[tr[:n]], y[tr[:n]]).predict(X[te])
            ca.append(pairwise_accuracy(pred, y[te]))
            cr.append(topk_recall(pred, y[te], min(k, len(te))))
        if transfer is not None and transfer.is_trained:
            pred = transfer.predict(X[te])
            tacc.append(pairwise_accuracy(pred, y[te]))
            trec.append(topk_recall(pred, y[te], min(k, len(te))))
    out = {"candidates": int(len(y)), "pairwise_accuracy": float(np.mean(acc)),
           "topk_recall": float(np.mean(rec)), "k": k,
           "learning_curve": {n: [float(np.mean(ca)), float(np.mean(cr))] for n, (ca, cr) in curve.items()}}
    if tacc:
        out.update(transfer_pairwise_accuracy=float(np.mean(tacc)), transfer_topk_recall=float(np.mean(trec)))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=256)
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--only", default=DEFAULT_WORKLOADS)
    ap.add_argument("--out", metavar="PATH",
                    help="results JSON (default: a new dated file in benchmarks/results/, see default_out)")
    ap.add_argument("--with-heuristic", action="store_true")
    ap.add_argument("--remeasure", type=int, default=TuneConfig.remeasure,
                    help="measurements of each of the run's fastest schedules (1: no repeats)")
    ap.add_argument("--keep-logs", metavar="DIR", help="copy each run's tuning log into DIR")
    ap.add_argument("--strategies", default=",".join(STRATEGIES),
                    help="comma-separated subset of: " + ", ".join(STRATEGIES))
    args = ap.parse_args(argv)
    strategies = [s.strip() for s in args.strategies.split(",")]
    unknown = [s for s in strategies if s not in STRATEGIES]
    if unknown:
        ap.error(f"unknown strategy {unknown[0]!r}; choose from: {', '.join(STRATEGIES)}")
    seeds = [int(s) for s in args.seeds.split(",")]
    if args.out is None:
        os.makedirs(RESULTS_DIR, exist_ok=True)
        args.out = default_out(args.trials, seeds, args.only)
        print("results go to", args.out, flush=True)
    out = {"trials": args.trials, "seeds": seeds, "heuristic_first_trial": args.with_heuristic,
           "remeasure": args.remeasure, "runs": [],
           "model": {}}
    points = [c for c in CHECKPOINTS if c <= args.trials]
    keep = tempfile.TemporaryDirectory()
    transfer_log = None
    if any(s.endswith("transfer") for s in strategies):
        transfer_log = f"{keep.name}/transfer.jsonl"
        out["transfer_sources"] = build_transfer_log(transfer_log, args.only.split(","))
    for wkey in args.only.split(","):
        name, params = WORKLOADS[wkey]
        spec = WorkloadSpec.parse(name, params)
        all_records = []
        for strat in strategies:
            sampler, cm, extra = STRATEGIES[strat]
            for seed in seeds:
                with tempfile.TemporaryDirectory() as tmp:
                    if strat.endswith("transfer"):
                        shutil.copy(transfer_log, f"{tmp}/log.jsonl")
                    log = TuningLog(f"{tmp}/log.jsonl")
                    cfg = TuneConfig(trials=args.trials, sampler=sampler, cost_model=cm, seed=seed,
                                     seed_heuristic=args.with_heuristic, remeasure=args.remeasure, **extra)
                    res = Tuner(spec, cfg, log=log).run()
                    own = [r for r in log.records() if r.workload_key == spec.key]
                    if args.keep_logs:
                        os.makedirs(args.keep_logs, exist_ok=True)
                        shutil.copy(f"{tmp}/log.jsonl", os.path.join(
                            args.keep_logs, f"{wkey}-{strat.replace(' ', '_')}-{seed}.jsonl"))
                    all_records += own
                    ratios = retimed_ratios(spec, own, points)
                run = {"workload": wkey, "strategy": strat, "seed": seed, "tune_s": res.tune_seconds,
                       "measured": res.trials, "stop_reason": res.stop_reason,
                       "best_after": {n: best_after(res.history, n) for n in points},
                       "retimed_ratio": ratios[1], "retimed_ratio_top4": ratios[4],
                       "errors": dict(res.errors), "invalid": res.invalid, "asked": res.asked,
                       "remeasured": res.remeasured, "arms": res.arms}
                out["runs"].append(run)
                print(json.dumps(run), flush=True)
                with open(args.out, "w") as f:
                    json.dump(out, f, indent=1)
        out["model"][wkey] = model_accuracy(spec, all_records, transfer_log=transfer_log)
        print(wkey, "cost model on held-out candidates:", out["model"][wkey], flush=True)
        with open(args.out, "w") as f:
            json.dump(out, f, indent=1)
    print_tables(out)
    return 0


def print_tables(out: dict) -> None:
    points = [c for c in CHECKPOINTS if c <= out["trials"]]
    for wkey in dict.fromkeys(r["workload"] for r in out["runs"]):
        runs = [r for r in out["runs"] if r["workload"] == wkey]
        for field, what in (("retimed_ratio", "best-so-far schedule"),
                            ("retimed_ratio_top4", "fastest of the 4 best-so-far schedules (as tune's finalists)")):
            if not all(field in r for r in runs):
                continue
            print(f"\n{wkey}: {what} after N measured trials re-timed side by side with numpy "
                  f"(ratio to numpy), median [min-max] over seeds {out['seeds']}")
            print("| strategy | " + " | ".join(str(n) for n in points) + " |")
            print("|---|" + "---|" * len(points))
            for strat in STRATEGIES:
                sr = [r for r in runs if r["strategy"] == strat]
                if sr:
                    cells = []
                    for n in points:
                        v = [r[field].get(str(n), r[field].get(n, 0.0)) for r in sr]
                        cells.append(f"{statistics.median(v):.2f}x [{min(v):.2f}-{max(v):.2f}]")
                    print(f"| {strat} | " + " | ".join(cells) + " |")
        print(f"\n{wkey}: best GFLOP/s as measured while tuning after N trials, median [min-max] over seeds "
              f"{out['seeds']}")
        print("| strategy | " + " | ".join(str(n) for n in points) + " | tuning s (median) |")
        print("|---|" + "---|" * (len(points) + 1))
        for strat in STRATEGIES:
            runs = [r for r in out["runs"] if r["workload"] == wkey and r["strategy"] == strat]
            if not runs:
                continue
            cells = []
            for n in points:
                v = [r["best_after"][str(n)] if str(n) in r["best_after"] else r["best_after"][n] for r in runs]
                cells.append(f"{statistics.median(v):.1f} [{min(v):.1f}-{max(v):.1f}]")
            print(f"| {strat} | " + " | ".join(cells) + f" | {statistics.median(r['tune_s'] for r in runs):.0f} |")
        for r in out["runs"]:
            if r["workload"] == wkey and r["measured"] < out["trials"]:
                print(f"{r['strategy']} seed {r['seed']} stopped after {r['measured']} trials "
                      f"({r['stop_reason']}); its final best stands for the later checkpoints")
        m = out["model"].get(wkey)
        if m:
            print(f"cost model, held-out: pairwise accuracy {m['pairwise_accuracy']:.3f}, top-{m['k']} recall "
                  f"{m['topk_recall']:.3f} ({m['candidates']} distinct measured candidates, 5 splits of 80/20)")
            if m.get("learning_curve"):
                print("trained on n random samples only (pairwise accuracy / top-k recall, same test sets): " +
                      ", ".join(f"{n}: {a:.3f}/{r:.2f}" for n, (a, r) in m["learning_curve"].items()))
            if "transfer_pairwise_accuracy" in m:
                print(f"model pretrained on the other workloads only, same test sets: pairwise accuracy "
                      f"{m['transfer_pairwise_accuracy']:.3f}, top-{m['k']} recall {m['transfer_topk_recall']:.3f}")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--tables":
        print_tables(json.load(open(sys.argv[2])))
    else:
        sys.exit(main())
