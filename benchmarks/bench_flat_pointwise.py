"""Decision 061 A/B: the heuristic start of 1x1 stride-1 convs with their plane as it is and as one row.

    python benchmarks/bench_flat_pointwise.py --threads 1,2 [--only pw960-320@7,c1x1_40-136@23]

Each layer's two starts, in the form a model build computes it: "before" with ``FLAT_MAX_WIDTH = 0`` (rows kept)
and ``SMALL_BLOCK_WEIGHTS = 1``, "after" with the defaults; timed side by side with onnxruntime's NCHWc
kernel in one process (``bench_conv.compare_variants``: 7 alternating rounds, a pause at every switch),
both read the same bytes (a blocked (1, C/b, H, W, b) buffer is the (1, C/b, 1, H*W, b) one).
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_conv as bc  # noqa: E402
import graph.lower.flat as flat  # noqa: E402
import schedules.conv_space as cs  # noqa: E402
from schedules.decisions import FixedDecisions  # noqa: E402
from schedules.space import GeneratedSpace  # noqa: E402

DEFAULTS = (flat.FLAT_MAX_WIDTH, cs.SMALL_BLOCK_WEIGHTS)


def start(workload: str, params: dict, width: int, factor: int) -> tuple:
    """(spec, trace, decisions) of the layer's start with the two defaults set to ``width``, ``factor``."""
    flat.FLAT_MAX_WIDTH, cs.SMALL_BLOCK_WEIGHTS = width, factor
    try:
        spec = bc.layer_spec(workload, params, "model")
        space = GeneratedSpace(spec.tensors())
        d = space.default_decisions()
        return spec, space.apply(FixedDecisions(d)).to_json(), d
    finally:
        flat.FLAT_MAX_WIDTH, cs.SMALL_BLOCK_WEIGHTS = DEFAULTS


def pointwise_layers() -> list:
    """(net, name) of the 1x1 stride-1 layers the defaults flatten."""
    return [(net, name) for net in ("mobilenetv2", "other") for name, (w, p) in bc.LAYERS[net].items()
            if w == "conv2d" and (p["R"], p["stride"], p["pad"]) == (1, 1, 0) and p["W"] <= DEFAULTS[0]]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--only", default="", help="comma-separated layer names (default: every flattened layer)")
    args = ap.parse_args(argv)
    layers = [(n, k) for n, k in pointwise_layers() if not args.only or k in args.only.split(",")]
    short = ("kb", "pt", "qt", "q2", "order")
    for threads in [int(t) for t in args.threads.split(",")]:
        for net, name in layers:
            w, p = bc.LAYERS[net][name]
            s0, t0, d0 = start(w, p, 0, 1)
            s1, t1, d1 = start(w, p, *DEFAULTS)
            t = bc.compare_variants(s0, {"before": t0, "after": (s1, t1)}, threads, 7, bc.constants_of(s0, False),
                                    (p["H"], p["W"]))
            ort = t.get(bc.ORT_ALONE, t["onnxruntime"])
            f = bc.conv_flops(s0)

            def desc(spec, d):
                return f"{spec.params['H']}x{spec.params['W']} " + " ".join(
                    f"{k.split('.', 1)[1]}={v}" for k, v in d.items() if k.split(".", 1)[1] in short)
            print(f"{name:<16} t={threads} before {f / t['before'] / 1e9:6.1f} ({ort / t['before']:.2f}x ort) "
                  f"after {f / t['after'] / 1e9:6.1f} ({ort / t['after']:.2f}x) after/before "
                  f"{t['before'] / t['after']:.2f}x ort {f / ort / 1e9:.1f} | {desc(s0, d0)} -> {desc(s1, d1)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
