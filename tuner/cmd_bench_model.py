"""``tensortune bench-model MODEL.onnx``: the compiled model against onnxruntime, side by side.

The model is built with the logs' best schedules (the heuristic start where there are none),
then it and onnxruntime (``ORT_ENABLE_ALL``, the same threads, no spinning) are timed in this
process, alternating rounds with a pause at every switch; the medians are printed, and the ratio
as the median of the per-round ratios (``tuner.compare.paired_speedup``).
"""
from __future__ import annotations

import json

from .errors import CLIError, require_logs


def add_parser(sub) -> None:
    p = sub.add_parser("bench-model", help="time a compiled ONNX model against onnxruntime side by side")
    p.add_argument("model", metavar="MODEL.onnx")
    p.add_argument("--log", action="append", help="tuning log searched first (repeatable)")
    p.add_argument("--threads", type=int, default=None, help="threads of both (default: all cores)")
    p.add_argument("--shape", action="append", default=[], metavar="NAME=DIMS")
    p.add_argument("--rounds", type=int, default=15, help="alternating rounds (default 15)")
    p.add_argument("--json", action="store_true")


def run(args) -> int:
    from graph.ir import GraphError
    from tensorir.te.check import check_outputs
    from .cmd_model import load_graph, parse_shapes
    from .model_compile import compile_graph
    from .model_timing import model_proto
    from .model_timing import ort_session, random_feeds, time_models
    from .text import one_line

    if args.threads is not None and args.threads < 1:
        raise CLIError(f"--threads must be >= 1, got {args.threads}")
    if args.rounds < 1:
        raise CLIError(f"--rounds must be >= 1, got {args.rounds}")
    require_logs(args.log)
    graph = load_graph(args.model, parse_shapes(args.shape))
    try:
        model = compile_graph(graph, log=args.log, threads=args.threads)
    except GraphError as err:
        raise CLIError(one_line(err)) from None
    feeds = random_feeds(graph)
    ours = model.run(feeds)
    ort, why = ort_session(model_proto(args.model), args.threads)
    mismatch = None
    if ort is not None:
        ref = dict(zip([o.name for o in ort.get_outputs()], ort.run(None, feeds)))
        names = [n for n in ours if n in ref]
        mismatch = check_outputs(names, [ours[n] for n in names], [ref[n] for n in names], rtol=1e-3, atol=1e-4)
    times = time_models({"tensortune": model}, feeds, args.threads, ort, rounds=args.rounds)
    out = {"model": args.model, "threads": args.threads, "latency_s": times["tensortune"],
           "onnxruntime_latency_s": times.get("onnxruntime"),
           "ratio": times.speedup.get("tensortune"),
           "schedules": model.info.get("schedules") if model.info else None,
           "kernel_threads": model.threads, "threads_note": model.info.get("serial"),
           "onnxruntime_note": why, "outputs_match_onnxruntime": None if ort is None else mismatch is None,
           "mismatch": mismatch}
    if args.json:
        print(json.dumps(out, indent=2, default=str))
    else:
        line = f"{args.model}: {times['tensortune'] * 1e3:.3f} ms"
        if "onnxruntime" in times:
            line += f", onnxruntime {times['onnxruntime'] * 1e3:.3f} ms: {out['ratio']:.2f}x onnxruntime's speed"
        else:
            line += f" ({why})"
        print(line)
        if model.info.get("serial"):
            print(f"  {model.info['serial']}")
        if mismatch:
            print(f"  outputs differ from onnxruntime's: {mismatch}")
    return 0 if mismatch is None else 1
