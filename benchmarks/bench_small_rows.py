"""Products with few rows (a model's batch or sequence) against onnxruntime: the heuristic start
with and without reduction blocks (docs/decisions/027-small-row-products-block-the-reduction.md),
and with the register tiles of decisions 038 and 040 replaced (``--ab-tiles``; narrow products
such as ``784x384x96`` may be given with ``--shapes``).

    python benchmarks/bench_small_rows.py [--threads 1,2] [--rounds 5] [--shapes 32x2048x2048,...] [--ab-tiles]

Each shape ``MxKxN`` is ``dense`` (``max(X @ W.T + bias, 0)``, a Gemm + Relu of a model) with its
weights constant: packed once, outside the timing, as a model build packs them (``tuner.prepack``)
and as onnxruntime packs its constant weights when the session is created. Timed side by side in
this process, alternating rounds with a pause at every switch, medians: the generated space's
heuristic start (``blocked``), the same start without the reduction blocks (``unblocked``), and
onnxruntime (a Gemm + Relu model, ``ORT_ENABLE_ALL``, same threads, no spinning). With ``--ab-tiles``
the unblocked column is replaced by the blocked start with the register tiles before decisions 038
and 040 (6 rows, else 4, 8, 3, 2, by 4 vectors however few the columns: ``previous tiles``), and ratios are medians of per-round ratios.
With ``--ab-dividing`` it is the start without decision 043's register tiles that divide a few rows (at most
128 rows: 128 in 8 x 3 tiles, 49 in 7 x 3, rather than 6-row tiles and a guarded edge: ``no dividing tile``).
With ``--set package.module.NAME=VALUE`` it is the start with that constant set (``--set
schedules.matmul_start.K_BLOCK=64``; a tuple for the tile lists); shapes whose start it leaves unchanged are listed, not timed.
"""
from __future__ import annotations

import argparse
import contextlib
import sys

import numpy as np

import schedules.matmul_start as start_module
from schedules.decisions import FixedDecisions
from schedules.space import GeneratedSpace
from tensorir.runtime import build
from tuner.compare import paired_speedup, side_by_side
from tuner.prepack import packed_arrays, prepack
from tuner.spec import WorkloadSpec
from tuner.target import host_target
from start_setting import parse_setting, setting

# the MLP's and the BERT layer's products, then shapes that are in no model of the repository
SHAPES = "32x1024x2048,32x2048x2048,32x2048x1000,128x768x3072,128x3072x768,16x4096x1024,64x1536x1536,8x1024x4096,100x2000x500"


def ort_gemm_relu(w: np.ndarray, b: np.ndarray, m: int, threads: int):
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper
    n, k = w.shape
    nodes = [helper.make_node("Gemm", ["X", "W", "b"], ["G"], transB=1), helper.make_node("Relu", ["G"], ["Y"])]
    graph = helper.make_graph(nodes, "gemm_relu", [helper.make_tensor_value_info("X", TensorProto.FLOAT, [m, k])],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [m, n])],
                              [numpy_helper.from_array(w, "W"), numpy_helper.from_array(b, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def built(spec: WorkloadSpec, decisions: dict, inputs: list, threads: int) -> tuple:
    """(the bound kernel of ``decisions``, checked against numpy once, and the packed constants it reads)."""
    tensors = spec.tensors()
    sch = GeneratedSpace(tensors).apply(FixedDecisions(decisions))
    pre = prepack(tensors, sch, {1})
    packed = packed_arrays(pre, inputs) if pre is not None else []
    k = build((pre.schedule if pre is not None else sch).lower())
    k.threads = threads
    outs = spec.empty_outputs()
    k(*inputs, *packed, *outs)
    want = np.maximum(inputs[0] @ inputs[1].T + inputs[2], 0)
    if not np.allclose(outs[0], want, rtol=1e-3, atol=1e-3 * np.sqrt(inputs[0].shape[1])):
        raise SystemExit(f"{spec.label}: wrong result with {decisions}")
    return k.bind(*inputs, *packed, *outs), packed


def kernel(spec: WorkloadSpec, decisions: dict, inputs: list, threads: int):
    return built(spec, decisions, inputs, threads)[0]


def unblocked_decisions(tensors) -> dict:
    saved = start_module.K_BLOCK_MAX_ROWS
    start_module.K_BLOCK_MAX_ROWS = 0
    try:
        return GeneratedSpace(tensors).default_decisions()
    finally:
        start_module.K_BLOCK_MAX_ROWS = saved


# decision 027's register tiles of a few-row product, before decision 038
PREVIOUS_TILES = ((6, 4), (4, 4), (8, 4), (3, 4), (2, 4))


def previous_tile_decisions(tensors) -> dict:
    """The start before decisions 038 and 040 (4-vector tiles however few the columns)."""
    saved = start_module.FEW_ROW_TILES, start_module.NARROW_VECTORS
    start_module.FEW_ROW_TILES, start_module.NARROW_VECTORS = PREVIOUS_TILES, 0
    try:
        return GeneratedSpace(tensors).default_decisions()
    finally:
        start_module.FEW_ROW_TILES, start_module.NARROW_VECTORS = saved


def no_dividing_tile_decisions(tensors) -> dict:
    """The start without decision 043's dividing tiles."""
    saved = start_module.DIVIDING_TILES
    start_module.DIVIDING_TILES = False
    try:
        return GeneratedSpace(tensors).default_decisions()
    finally:
        start_module.DIVIDING_TILES = saved


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--shapes", default=SHAPES, help="MxKxN,... (rows x reduction x columns)")
    ap.add_argument("--ab-tiles", action="store_true", help="compare with decision 027's register tiles "
                    "instead of the unblocked start")
    ap.add_argument("--ab-dividing", action="store_true", help="compare with the start without decision 043's "
                    "dividing tiles instead of the unblocked start")
    ap.add_argument("--set", metavar="MODULE.NAME=VALUE", action="append", default=[],
                    help="compare with the start under this constant (repeatable)")
    args = ap.parse_args(argv)
    chosen = [parse_setting(text, "bench_small_rows") for text in args.set]
    paired = args.ab_tiles or args.ab_dividing or bool(chosen)
    other = "previous tiles" if args.ab_tiles else "no dividing tile" if args.ab_dividing else \
        "set" if chosen else "unblocked"
    if chosen:
        print("set: " + "; ".join(args.set))
    print(f"host {host_target()['cpu']}; side by side in one process, medians of {args.rounds} rounds", flush=True)
    print(f"| shape MxKxN | threads | blocked GFLOP/s | {other} | onnxruntime | blocked/ort | {other}/ort |")
    print("|---|---|---|---|---|---|---|")
    for threads in [int(t) for t in args.threads.split(",")]:
        for shape in args.shapes.split(","):
            m, k, n = (int(v) for v in shape.split("x"))
            spec = WorkloadSpec("dense", {"batch": m, "in_features": k, "out_features": n})
            inputs = spec.inputs(0)
            tensors = spec.tensors()
            start = GeneratedSpace(tensors).default_decisions()
            if chosen:
                # built under the setting too: a constant may change the choices the decisions are read against
                with contextlib.ExitStack() as stack:
                    for c in chosen:
                        stack.enter_context(setting(*c))
                    alt = GeneratedSpace(tensors).default_decisions()
                    alt_fn = kernel(spec, alt, inputs, threads) if alt != start else None
                if alt_fn is None:
                    print(f"| {shape} | {threads} | same start |", flush=True)
                    continue
            else:
                alt = previous_tile_decisions(tensors) if args.ab_tiles else no_dividing_tile_decisions(tensors) \
                    if args.ab_dividing else unblocked_decisions(tensors)
                alt_fn = kernel(spec, alt, inputs, threads)
            fns = {"blocked": kernel(spec, start, inputs, threads), "unblocked": alt_fn}
            sess = ort_gemm_relu(inputs[1], inputs[2], m, threads)
            feed = {"X": inputs[0]}
            fns["onnxruntime"] = lambda sess=sess, feed=feed: sess.run(None, feed)
            res = side_by_side(fns, rounds=args.rounds)
            t = {name: r["median"] for name, r in res.items()}
            gf = {name: spec.flops / s / 1e9 for name, s in t.items()}
            ratio = {name: paired_speedup(res, name, "onnxruntime") if paired else t["onnxruntime"] / t[name]
                     for name in ("blocked", "unblocked")}
            print(f"| {shape} | {threads} | {gf['blocked']:.1f} | {gf['unblocked']:.1f} | {gf['onnxruntime']:.1f} | "
                  f"{ratio['blocked']:.2f}x | {ratio['unblocked']:.2f}x |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
