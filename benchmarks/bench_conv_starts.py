"""A constant of the convolution start against its default: each layer's heuristic start under both, side by side.

    python benchmarks/bench_conv_starts.py --set schedules.conv_start.GUARDED_COST=6 [--net resnet18,other]
                                           [--only LAYER,...] [--threads 1,2] [--form model|nchw|nchwc]
                                           [--rounds 7] [--json PATH]

For every layer of ``bench_conv.py``'s networks, the generated space's first trial is taken with the module's
constant as it is ("old") and with ``--set`` ("new"; restored after). Layers whose start (its schedule: the
decisions and what the rule does with them) is the same under both are listed and not timed; the others are timed in one process with onnxruntime's kernel (``bench_conv.compare_variants``:
alternating rounds, a pause at every switch, medians), and the line gives both tiles, GFLOP/s, ratios to
onnxruntime and new/old. The geometric mean of new/old over the changed layers closes each thread count: the
figure a decision note quotes for a start's default.
"""
from __future__ import annotations

import argparse
import json
import math
import sys

import bench_conv as bc
from schedules.space import FixedDecisions, GeneratedSpace
from start_setting import parse_setting, setting
from tuner.target import host_target


def starts(spec, module, name: str, value) -> tuple:
    """(old decisions, old trace, new decisions, new trace) of ``spec``'s space."""
    out = []
    for v in (getattr(module, name), value):
        with setting(module, name, v):
            space = GeneratedSpace(spec.tensors())
            d = space.default_decisions()
            out += [d, space.apply(FixedDecisions(d)).to_json()]
    return tuple(out)


def tile(d: dict) -> str:
    keys = [k for k in d if k.split(".")[-1] in ("kb", "pt", "qt", "q2", "p2", "order")]
    return " ".join(f"{k.split('.')[-1]}={d[k]}" for k in keys[:6])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--set", required=True, metavar="MODULE.NAME=VALUE")
    ap.add_argument("--net", default="resnet18,mobilenetv2,other")
    ap.add_argument("--only", default="")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--form", choices=("nchw", "nchwc", "model"), default="model")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--json", metavar="PATH")
    args = ap.parse_args(argv)
    module, name, value = parse_setting(args.set, "bench_conv_starts")
    nets = [n for n in args.net.split(",") if n]
    for n in nets:
        if n not in bc.LAYERS:
            ap.error(f"unknown network {n!r}; choose from {', '.join(bc.LAYERS)}")
    only = {x for x in args.only.split(",") if x}
    print(f"host {host_target()['cpu']}; form {args.form}; {module.__name__}.{name}: "
          f"{getattr(module, name)!r} (old) -> {value!r} (new)", flush=True)
    rows = []
    for threads in [int(t) for t in args.threads.split(",")]:
        ratios = []
        for net in nets:
            for layer, (workload, params) in bc.LAYERS[net].items():
                if only and layer not in only:
                    continue
                spec = bc.layer_spec(workload, params, args.form)
                old_d, old_t, new_d, new_t = starts(spec, module, name, value)
                if old_t == new_t:
                    print(f"t={threads} {net} {layer}: same start", flush=True)
                    continue
                t = bc.compare_variants(spec, {"old": old_t, "new": new_t}, threads, args.rounds,
                                        bc.constants_of(spec, False), (params["H"], params["W"]))
                theirs = t.get(bc.ORT_ALONE, t["onnxruntime"])
                flops = bc.conv_flops(spec)
                row = dict(threads=threads, net=net, layer=layer, old=old_d, new=new_d,
                           old_gflops=flops / t["old"] / 1e9, new_gflops=flops / t["new"] / 1e9,
                           old_vs_ort=theirs / t["old"], new_vs_ort=theirs / t["new"], new_over_old=t["old"] / t["new"])
                rows.append(row)
                ratios.append(row["new_over_old"])
                print(f"t={threads} {net} {layer}: old {tile(old_d)} {row['old_gflops']:.1f} GFLOP/s "
                      f"({row['old_vs_ort']:.2f}x ort) | new {tile(new_d)} {row['new_gflops']:.1f} "
                      f"({row['new_vs_ort']:.2f}x) | new/old {row['new_over_old']:.2f}", flush=True)
        if ratios:
            g = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
            print(f"t={threads}: {len(ratios)} layers changed, new/old geomean {g:.3f}x "
                  f"(range {min(ratios):.2f}-{max(ratios):.2f})", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"host": host_target()["cpu"], "set": args.set, "form": args.form, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
