"""A constant of the generated space against its default on built-in workloads: each workload's heuristic
start under both, side by side.

    python benchmarks/bench_workload_starts.py --set schedules.elementwise.TRANSCENDENTAL_VECTORS=1
                                               [--only elementwise_chain,softmax] [--param n=153600 ...]
                                               [--threads 1,2] [--rounds 9]

For every built-in workload (``tensortune workloads``; ``--only`` picks some, ``--param`` sets a parameter
where a workload has it), the space's first trial is built with the constant as it is ("default") and with
``--set`` ("set"; restored after), both checked against the workload's numpy reference. Workloads whose start is
the same under both are listed, not timed; the others are timed in one process (``tuner.compare.side_by_side``:
alternating rounds, a pause at every switch, medians) and the line gives both starts' changed decisions,
milliseconds and the ratio set/default (> 1: the default is faster).
"""
from __future__ import annotations

import argparse
import warnings

from schedules.decisions import FixedDecisions
from schedules.space import GeneratedSpace
from start_setting import parse_setting, setting
from tensorir.ops.registry import list_workloads
from tuner.spec import WorkloadSpec
from tuner.worker import check_outputs
from tensorir.runtime import build
from tuner.compare import side_by_side
from tuner.target import host_target


def _start(tensors, threads: int):
    space = GeneratedSpace(list(tensors))
    dec = space.default_decisions()
    kernel = build(space.apply(FixedDecisions(dec)).lower())
    kernel.threads = threads
    return dec, kernel


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--set", required=True, metavar="MODULE.NAME=VALUE")
    ap.add_argument("--only", default="", help="comma-separated workload names (default: all)")
    ap.add_argument("--param", action="append", default=[], metavar="NAME=VALUE",
                    help="a workload parameter (integer), for the workloads that have it")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=9)
    args = ap.parse_args(argv)
    module, name, value = parse_setting(args.set, "bench_workload_starts")
    params = {}
    for p in args.param:
        key, sep, v = p.partition("=")
        if not sep or not v.lstrip("-").isdigit():
            raise SystemExit(f"bench_workload_starts: write --param as NAME=INTEGER, not {p!r}")
        params[key] = int(v)
    only = set(filter(None, args.only.split(",")))
    print(f"host {host_target()['cpu']}; {module.__name__}.{name}: default {getattr(module, name)!r}, set {value!r}")
    for threads in (int(t) for t in args.threads.split(",")):
        fns, lines = {}, []
        for w in list_workloads():
            if only and w.name not in only:
                continue
            spec = WorkloadSpec.parse(w.name, [f"{k}={v}" for k, v in params.items() if k in w.defaults])
            tensors = spec.tensors()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                d_old, k_old = _start(tensors, threads)
                with setting(module, name, value):
                    d_new, k_new = _start(tensors, threads)
            if d_old == d_new:
                print(f"  {spec.label}: same start")
                continue
            ins = spec.inputs()
            want = spec.reference(ins)
            for tag, k in (("default", k_old), ("set", k_new)):
                outs = spec.empty_outputs()
                k(*ins, *outs)
                problem = check_outputs([t.name for t in spec.output_tensors()], outs, want, 1e-4, 1e-5,
                                        spec.reduction_length)
                if problem:
                    raise SystemExit(f"bench_workload_starts: {spec.label} {tag} start: wrong result ({problem})")
                fns[(spec.label, tag)] = k.bind(*ins, *outs)
            changed = {k: (d_old.get(k), d_new.get(k)) for k in set(d_old) | set(d_new) if d_old.get(k) != d_new.get(k)}
            lines.append((spec.label, changed))
        if not fns:
            continue
        res = side_by_side(fns, rounds=args.rounds)
        print(f"\n{threads} thread(s), median ms of {args.rounds} rounds")
        for wname, changed in lines:
            old, new = res[(wname, "default")]["median"], res[(wname, "set")]["median"]
            print(f"  {wname} {changed}: default {old * 1e3:.3f}  set {new * 1e3:.3f}  set/default {new / old:.2f}x")


if __name__ == "__main__":
    main()
