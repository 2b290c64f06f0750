"""Convolutions of ResNet-18 and MobileNet-V2, tuned, against onnxruntime side by side.

    python benchmarks/bench_conv.py [--net resnet18,mobilenetv2] [--only LAYER,...] [--threads 1,2]
                                    [--trials 64] [--heuristic] [--form nchw|nchwc|model] [--seed 0] [--json PATH]
                                    [--variant "Y.kb=32 Y.qt=14" ...]

Every distinct convolution of the two networks (batch 1, fp32, NCHW) is tuned from an empty log
with ``--trials`` trials through the tuner's Python API (``--heuristic``: no search, the generated
space's first trial), then timed against onnxruntime in this process: a one-node ONNX model with
the same convolution (constant weights, as in a model), ``intra_op_num_threads`` = threads,
``session.intra_op.allow_spinning=0``, ``ORT_ENABLE_ALL``; alternating rounds with a pause at every
switch, medians.  Prints per layer GFLOP/s of both, the ratio (ours / onnxruntime: above 1 is faster),
the fraction of this machine's FMA peak (``tuner.machine_peak``), and the geometric mean per network.
Where ours runs on blocked data (``--form nchwc`` / ``model``), onnxruntime's NCHWc kernel is timed
alone too, without the reorders its one-node model runs in the call (``ort_nchwc.py``); the ratio
is then against that, and the one against the whole one-node model is printed beside it.

onnxruntime is a benchmark dependency only (the ``dev`` extra); the library never imports it.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time

import numpy as np

from logs import TuningLog
from schedules import Schedule
from schedules.decisions import DecisionSource
from schedules.errors import ScheduleError
from schedules.space import FixedDecisions, GeneratedSpace
import ort_nchwc
from ort_nchwc import conv_alone
from tensorir.ops.library import unpack_nchwc
from tensorir.ops.winograd import winograd_weights
from tensorir.runtime import build
from tuner.compare import side_by_side
from tuner.machine_peak import machine_peak
from tuner.prepack import constant_indices, packed_arrays, prepack
from tuner.search import TuneConfig, Tuner
from tuner.spec import WorkloadSpec
from tuner.target import host_target


def _conv(C, H, K, R, stride, pad):
    return ("conv2d", dict(N=1, C=C, H=H, W=H, K=K, R=R, S=R, stride=stride, pad=pad))


def _dw(C, H, stride):
    return ("depthwise_conv2d", dict(N=1, C=C, H=H, W=H, R=3, S=3, stride=stride, pad=1))


def _pool(workload, C, H, R, stride, pad):
    return (workload, dict(N=1, C=C, H=H, W=H, R=R, S=R, stride=stride, pad=pad))


# name -> (workload, parameters); the input size is the layer's, not the network's
LAYERS = {
    "resnet18": {
        "stem7x7s2": _conv(3, 224, 64, 7, 2, 3),
        "c3x3_64@56": _conv(64, 56, 64, 3, 1, 1),
        "c3x3_128@28": _conv(128, 28, 128, 3, 1, 1),
        "c3x3_256@14": _conv(256, 14, 256, 3, 1, 1),
        "c3x3_512@7": _conv(512, 7, 512, 3, 1, 1),
        "c3x3s2_64-128@56": _conv(64, 56, 128, 3, 2, 1),
        "c3x3s2_128-256@28": _conv(128, 28, 256, 3, 2, 1),
        "c3x3s2_256-512@14": _conv(256, 14, 512, 3, 2, 1),
        "c1x1s2_64-128@56": _conv(64, 56, 128, 1, 2, 0),
        "c1x1s2_128-256@28": _conv(128, 28, 256, 1, 2, 0),
        "c1x1s2_256-512@14": _conv(256, 14, 512, 1, 2, 0),
    },
    "mobilenetv2": {
        "stem3x3s2": _conv(3, 224, 32, 3, 2, 1),
        "dw32@112": _dw(32, 112, 1),
        "dw96s2@112": _dw(96, 112, 2),
        "dw144@56": _dw(144, 56, 1),
        "dw144s2@56": _dw(144, 56, 2),
        "dw192@28": _dw(192, 28, 1),
        "dw192s2@28": _dw(192, 28, 2),
        "dw384@14": _dw(384, 14, 1),
        "dw576@14": _dw(576, 14, 1),
        "dw576s2@14": _dw(576, 14, 2),
        "dw960@7": _dw(960, 7, 1),
        "pw32-16@112": _conv(32, 112, 16, 1, 1, 0),
        "pw16-96@112": _conv(16, 112, 96, 1, 1, 0),
        "pw96-24@56": _conv(96, 56, 24, 1, 1, 0),
        "pw24-144@56": _conv(24, 56, 144, 1, 1, 0),
        "pw144-24@56": _conv(144, 56, 24, 1, 1, 0),
        "pw144-32@28": _conv(144, 28, 32, 1, 1, 0),
        "pw32-192@28": _conv(32, 28, 192, 1, 1, 0),
        "pw192-32@28": _conv(192, 28, 32, 1, 1, 0),
        "pw192-64@14": _conv(192, 14, 64, 1, 1, 0),
        "pw64-384@14": _conv(64, 14, 384, 1, 1, 0),
        "pw384-64@14": _conv(384, 14, 64, 1, 1, 0),
        "pw384-96@14": _conv(384, 14, 96, 1, 1, 0),
        "pw96-576@14": _conv(96, 14, 576, 1, 1, 0),
        "pw576-96@14": _conv(576, 14, 96, 1, 1, 0),
        "pw576-160@7": _conv(576, 7, 160, 1, 1, 0),
        "pw160-960@7": _conv(160, 7, 960, 1, 1, 0),
        "pw960-160@7": _conv(960, 7, 160, 1, 1, 0),
        "pw960-320@7": _conv(960, 7, 320, 1, 1, 0),
        "pw320-1280@7": _conv(320, 7, 1280, 1, 1, 0),
    },
    "other": {     # odd shapes of no network here: that a rule fits causes, not these networks' shapes
        "c3x3_96@20": _conv(96, 20, 96, 3, 1, 1),
        "c3x3s2_48-80@37": _conv(48, 37, 80, 3, 2, 1),
        "c1x1_200-72@17": _conv(200, 17, 72, 1, 1, 0),
        "c5x5_32@24": _conv(32, 24, 32, 5, 1, 2),
        "dw120s2@30": _dw(120, 30, 2),
        "c1x1_40-136@23": _conv(40, 23, 136, 1, 1, 0),
        "c3x3_24-40@45": _conv(24, 45, 40, 3, 1, 1),
        "c1x1_72-20@31": _conv(72, 31, 20, 1, 1, 0),
        "dw72@25": _dw(72, 25, 1),
    },
    "bottleneck": {  # the stride-1 1x1 convs of ResNet-50 / ResNeXt bottlenecks: most of those networks' FLOPs
        "c1x1_256-64@56": _conv(256, 56, 64, 1, 1, 0),
        "c1x1_64-256@56": _conv(64, 56, 256, 1, 1, 0),
        "c1x1_256-128@56": _conv(256, 56, 128, 1, 1, 0),
        "c1x1_128-256@56": _conv(128, 56, 256, 1, 1, 0),
        "c1x1_512-128@28": _conv(512, 28, 128, 1, 1, 0),
        "c1x1_1024-256@14": _conv(1024, 14, 256, 1, 1, 0),
        "c1x1_2048-512@7": _conv(2048, 7, 512, 1, 1, 0),
    },
    "pooling": {   # not convolutions: reported apart, no target
        "maxpool3x3s2@112": ("max_pool2d", dict(N=1, C=64, H=112, W=112, R=3, S=3, stride=2, pad=1)),
        "avgpool2x2s2@28": ("avg_pool2d", dict(N=1, C=128, H=28, W=28, R=2, S=2, stride=2, pad=0)),
    },
    "pools": {     # more pooling shapes (strides 1 and 2, odd sizes, a global-ish window), no target
        "maxpool3x3s1@28": _pool("max_pool2d", 96, 28, 3, 1, 1),
        "maxpool2x2s2@56": _pool("max_pool2d", 64, 56, 2, 2, 0),
        "maxpool3x3s2@57": _pool("max_pool2d", 48, 57, 3, 2, 1),
        "avgpool3x3s1@14": _pool("avg_pool2d", 160, 14, 3, 1, 1),
        "avgpool7x7@7": _pool("avg_pool2d", 512, 7, 7, 1, 0),
        "avgpool3x3s2@35": _pool("avg_pool2d", 72, 35, 3, 2, 0),
    },
}


def onnx_session(workload: str, p: dict, weights: np.ndarray, threads: int):
    """(session, serialized model): onnxruntime running one Conv node with constant weights (the layer as a
    model holds it)."""
    from onnx import TensorProto, helper, numpy_helper
    if workload in ("max_pool2d", "avg_pool2d"):
        return _pool_session(workload, p, threads)
    depthwise = workload == "depthwise_conv2d"
    C = p["C"]
    K = C if depthwise else p["K"]
    P = (p["H"] + 2 * p["pad"] - p["R"]) // p["stride"] + 1
    Q = (p["W"] + 2 * p["pad"] - p["S"]) // p["stride"] + 1
    node = helper.make_node("Conv", ["X", "Wt"], ["Y"], kernel_shape=[p["R"], p["S"]],
                            strides=[p["stride"]] * 2, pads=[p["pad"]] * 4, group=C if depthwise else 1)
    return _session([node], [helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, C, p["H"], p["W"]])],
                    [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [1, K, P, Q])],
                    [numpy_helper.from_array(weights, "Wt")], threads)


def _session(nodes, inputs, outputs, initializers, threads):
    import onnx
    import onnxruntime as ort
    from onnx import helper
    graph = helper.make_graph(nodes, "layer", inputs, outputs, initializer=initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.add_session_config_entry("session.intra_op.allow_spinning", ort_nchwc.SPINNING)
    data = model.SerializeToString()
    return ort.InferenceSession(data, so, providers=["CPUExecutionProvider"]), data


def _pool_session(workload: str, p: dict, threads: int):
    from onnx import TensorProto, helper
    P = (p["H"] + 2 * p["pad"] - p["R"]) // p["stride"] + 1
    Q = (p["W"] + 2 * p["pad"] - p["S"]) // p["stride"] + 1
    extra = {"count_include_pad": 1} if workload == "avg_pool2d" else {}
    node = helper.make_node("MaxPool" if workload == "max_pool2d" else "AveragePool", ["X"], ["Y"],
                            kernel_shape=[p["R"], p["S"]], strides=[p["stride"]] * 2, pads=[p["pad"]] * 4, **extra)
    return _session([node], [helper.make_tensor_value_info("X", TensorProto.FLOAT, [p["N"], p["C"], p["H"], p["W"]])],
                    [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [p["N"], p["C"], P, Q])], [], threads)


def constants_of(spec: WorkloadSpec, per_call: bool) -> tuple:
    """The weights, constant as in a model (onnxruntime packs its constant weights once, when the
    session is created; our model builds pack them once too, tuner.prepack), unless ``per_call``.
    ``conv2d_nchwc`` takes its weights packed already."""
    names = [t.name for t in spec.tensors() if t.is_placeholder]
    return () if per_call or spec.name in BLOCKED_FORMS or "Wt" not in names else ("Wt",)


BLOCKED_FORMS = ("conv2d_nchwc", "conv2d_winograd_nchwc", "depthwise_conv2d_nchwc")
ORT_ALONE = "onnxruntime without reorders"


def best_trace(spec: WorkloadSpec, threads: int, trials: int, seed: int, heuristic: bool, constants: tuple = ()):
    """(trace, tuning seconds): the heuristic start, or the best of a fresh ``trials``-trial run."""
    t0 = time.perf_counter()
    if heuristic:
        space = GeneratedSpace(spec.tensors())
        s = space.apply(FixedDecisions(space.default_decisions()))
        return s.to_json(), time.perf_counter() - t0
    with tempfile.TemporaryDirectory() as tmp:
        cfg = TuneConfig(trials=trials, seed=seed, threads=threads, constants=constants)
        cfg.measure.threads = threads
        res = Tuner(spec, cfg, log=TuningLog(f"{tmp}/log.jsonl"), storage=f"sqlite:///{tmp}/log.jsonl.optuna.db",
                    model_path=f"{tmp}/log.jsonl.costmodel").run()
    return res.best.trace, time.perf_counter() - t0


def layer_spec(workload: str, params: dict, form: str) -> WorkloadSpec:
    """The layer as ``form`` computes it: ``nchw`` the built-in as it is; ``nchwc`` a conv2d as
    ``conv2d_nchwc``; ``model`` as a model build does: by Winograd (``conv2d_winograd_nchwc``) where
    the graph level uses it (``graph.lower.linalg.winograd_shape_fits``), else as ``nchwc``."""
    if form == "model" and workload == "depthwise_conv2d":
        # blocked, in the block the expand conv before it writes (decision 037), weights prepacked
        from graph.lower.layout import out_blocks
        return WorkloadSpec("depthwise_conv2d_nchwc", {**params, "cb": channel_block(params["C"], out_blocks())})
    if workload != "conv2d" or form == "nchw":
        return WorkloadSpec(workload, params)
    if form == "model":
        from graph.lower.linalg import winograd_shape_fits, winograd_tile
        p = params
        out = ((p["H"] + 2 * p["pad"] - p["R"]) // p["stride"] + 1, (p["W"] + 2 * p["pad"] - p["S"]) // p["stride"] + 1)
        if winograd_shape_fits(p["C"], p["K"], (p["R"], p["S"]), p["stride"], p["pad"], p.get("dilation", 1), 1, out):
            return WorkloadSpec("conv2d_winograd_nchwc", dict(N=p["N"], C=p["C"], H=p["H"], W=p["W"], K=p["K"],
                                                              cb=channel_block(p["C"], (32, 16, 8)),
                                                              kb=channel_block(p["K"], (32, 16, 8)),
                                                              tile=winograd_tile(out)))
        # a model blocks an output row too narrow for a two-vector register tile in one vector (AVX2,
        # decision 055); its producer, at this input's width, likewise
        from graph.lower.flat import FLAT_MAX_WIDTH
        from graph.lower.layout import out_block
        spec = blocked_spec(workload, params)
        q = spec.params
        q = {**q, "cb": min(q["cb"], out_block(q["C"], q["W"])), "kb": min(q["kb"], out_block(q["K"], out[1]))}
        if (p["R"], p["S"], p["stride"], p["pad"]) == (1, 1, 1, 0) and 2 <= p["H"] and p["W"] <= FLAT_MAX_WIDTH:
            # a 1x1 on a narrow plane: computed as one row of H*W positions (graph/lower/flat.py)
            q.update(H=1, W=p["H"] * p["W"])
        return WorkloadSpec("conv2d_nchwc", q)
    return blocked_spec(workload, params)


def conv_flops(spec: WorkloadSpec) -> int:
    """The direct convolution's FLOPs (a Winograd form's GFLOP/s are direct-equivalent, as cuDNN and
    oneDNN report theirs: the same work done in less time)."""
    if spec.name != "conv2d_winograd_nchwc":
        return spec.flops
    p = spec.params
    return WorkloadSpec("conv2d", dict(N=p["N"], C=p["C"], H=p["H"], W=p["W"], K=p["K"], R=3, S=3, stride=1,
                                       pad=1)).flops


def blocked_spec(workload: str, params: dict) -> WorkloadSpec:
    """The layer as ``conv2d_nchwc`` (blocks of 16 channels, else 8, else all of them)."""
    p = {k: v for k, v in params.items() if k != "dilation"}
    return WorkloadSpec("conv2d_nchwc", {**p, "cb": channel_block(p["C"]), "kb": channel_block(p["K"])})


def channel_block(n: int, sizes: tuple = (16, 8)) -> int:
    """The first of ``sizes`` that divides ``n`` channels, else ``n``."""
    return next((b for b in sizes if n % b == 0), n)


def compare_with_onnxruntime(spec: WorkloadSpec, trace: dict, threads: int, rounds: int = 5,
                             constants: tuple = (), plane: tuple | None = None) -> tuple:
    """(ours, onnxruntime, onnxruntime without reorders or None) seconds per call, timed side by side;
    our output checked against onnxruntime's.

    For the blocked forms the data is packed and the weights prepacked outside the timing (the graph
    level keeps activations blocked and packs constant weights at build time); onnxruntime gets them
    in NCHW / KCRS, and its one-node model reorders the data and the output inside the call, so its
    NCHWc kernel is also timed alone on data it blocked itself (``ort_nchwc``): the like-for-like figure."""
    t = compare_variants(spec, {"ours": trace}, threads, rounds, constants, plane)
    return t["ours"], t["onnxruntime"], t.get(ORT_ALONE)


def compare_variants(spec: WorkloadSpec, traces: dict, threads: int, rounds: int = 5, constants: tuple = (),
                     plane: tuple | None = None) -> dict:
    """Seconds per call of each of ``traces`` (name -> trace) and of onnxruntime, side by side; the packs of
    ``constants`` (input names) are made before the timing, as a model build makes them; ``plane``: the
    layer's (H, W) where ``spec`` computes a 1x1 on it as one row (onnxruntime gets the layer's plane)."""
    inputs = spec.inputs(0)
    params = dict(spec.params)
    x, w = inputs[0], inputs[1] if len(inputs) > 1 else None
    if spec.name == "conv2d_nchwc":
        x = unpack_nchwc(x)
        K, C, R, S = params["K"], params["C"], params["R"], params["S"]
        w = np.ascontiguousarray(w.transpose(0, 5, 1, 4, 2, 3).reshape(K, C, R, S))
    if spec.name == "depthwise_conv2d_nchwc":
        x = unpack_nchwc(x)
        C, R, S = params["C"], params["R"], params["S"]
        w = np.ascontiguousarray(w.transpose(0, 3, 1, 2).reshape(C, 1, R, S))
    if spec.name == "conv2d_winograd_nchwc":     # U from KCRS weights, transformed once (as a model build does)
        x = unpack_nchwc(x)
        params.update(R=3, S=3, stride=1, pad=1)
        w = (np.random.default_rng(1).standard_normal((params["K"], params["C"], 3, 3)) /
             math.sqrt(9 * params["C"])).astype(np.float32)
        inputs = [inputs[0], winograd_weights(w, params.get("tile", 2))]
    if plane is not None and (params["H"], params["W"]) != tuple(plane):
        x = x.reshape(*x.shape[:2], *plane)
        params.update(H=plane[0], W=plane[1])
    sess, model_bytes = onnx_session("depthwise_conv2d" if spec.name == "depthwise_conv2d_nchwc" else
                        "conv2d" if spec.name in BLOCKED_FORMS else spec.name, params, w, threads)
    feed = {"X": x}
    ref = sess.run(None, feed)[0]
    fns = {}
    for name, trace in traces.items():
        # (a trace may come with a spec of its own: the same layer as another view of the same bytes)
        tspec, trace = trace if isinstance(trace, tuple) else (spec, trace)
        ins = [a.reshape(t.shape) for a, t in zip(inputs, tspec.tensors())]
        outs = tspec.empty_outputs()
        schedule, packed = Schedule.from_json(tspec.tensors(), trace), []
        pre = prepack(tspec.tensors(), schedule, constant_indices(tspec.tensors(), constants)) if constants else None
        if pre is not None:
            schedule, packed = pre.schedule, packed_arrays(pre, ins)
        kernel = build(schedule.lower())
        kernel.threads = threads
        kernel(*ins, *packed, *outs)
        got = unpack_nchwc(outs[0]) if spec.name in BLOCKED_FORMS else outs[0]
        got = got.reshape(ref.shape)
        if not np.allclose(got, ref, rtol=1e-3, atol=1e-3 * math.sqrt(spec.reduction_length)):
            raise SystemExit(f"bench_conv: {spec.label} ({name}): our output differs from onnxruntime's "
                             f"(max |diff| {float(np.max(np.abs(got - ref))):g})")
        fns[name] = kernel.bind(*ins, *packed, *outs)
    fns["onnxruntime"] = lambda: sess.run(None, feed)
    if spec.name in BLOCKED_FORMS:
        # our blocked forms run on blocked data: onnxruntime's blocked kernel without its reorders too
        alone = conv_alone(model_bytes, threads, x, ref)
        if alone is not None:
            fns[ORT_ALONE] = alone
    timing = side_by_side(fns, rounds=rounds, min_repeat_ms=50, repeats_per_round=3)
    return {name: t["median"] for name, t in timing.items()}


def parse_variant(text: str) -> dict:
    """``"Y.kb=32 Y.qt=14"`` -> decisions (ints, booleans, else strings)."""
    out = {}
    for item in text.split():
        name, _, value = item.partition("=")
        out[name] = True if value == "True" else False if value == "False" else \
            int(value) if value.lstrip("-").isdigit() else value
    return out


class _Variant(DecisionSource):
    """The heuristic start with ``override`` changed; a start value that the change made unavailable
    (a pack's vector width after a new channel block) becomes the nearest choice offered, and a
    decision the start does not make (another path of the rule) the heuristic's ``fallback``."""

    def __init__(self, start: dict, override: dict, fallback: dict | None = None):
        super().__init__()
        self.start, self.override = {**(fallback or {}), **start}, override

    def _pick(self, name, choices):
        if name in self.override:
            v = self.override[name]
            if v not in choices:
                raise SystemExit(f"bench_conv: decision {name!r} = {v!r} is not one of its choices {choices}")
            return v
        v = self.start.get(name)
        if v in choices:
            return v
        if isinstance(v, (int, float)) and not isinstance(v, bool) and all(isinstance(c, int) for c in choices):
            return min(choices, key=lambda c: (abs(c - v), -c))
        return choices[0]


def run_variants(net: str, name: str, threads: int, args) -> list:
    """The heuristic start and each ``--variant`` (decisions changed from it) against onnxruntime."""
    workload, params = LAYERS[net][name]
    spec = layer_spec(workload, params, args.form)
    space = GeneratedSpace(spec.tensors())
    start = space.default_decisions()
    traces = {"heuristic": space.apply(FixedDecisions(start)).to_json()}
    for v in args.variant:
        override = parse_variant(v)
        try:
            fallback = space.default_decisions(override)
        except ScheduleError:
            fallback = {}
        traces[v] = space.apply(_Variant(start, override, fallback)).to_json()
    t = compare_variants(spec, traces, threads, args.rounds, constants_of(spec, args.pack_per_call),
                         (params["H"], params["W"]))
    print(f"{net} {name} t={threads}: heuristic start {' '.join(f'{k}={v}' for k, v in start.items())}")
    rows = []
    theirs = t.get(ORT_ALONE, t["onnxruntime"])
    for v in traces:
        rows.append(dict(net=net, layer=name, threads=threads, variant=v, gflops=conv_flops(spec) / t[v] / 1e9,
                         ratio=theirs / t[v], ratio_with_reorders=t["onnxruntime"] / t[v]))
        print(f"  {v:<40} {rows[-1]['gflops']:7.1f} GFLOP/s  ours/ort {rows[-1]['ratio']:.2f}x "
              f"(onnxruntime with its reorders: {rows[-1]['ratio_with_reorders']:.2f}x)", flush=True)
    return rows


def run_layer(net: str, name: str, threads: int, args, peak) -> dict:
    workload, params = LAYERS[net][name]
    spec = layer_spec(workload, params, args.form)
    constants = constants_of(spec, args.pack_per_call)
    trace, tune_s = best_trace(spec, threads, args.trials, args.seed, args.heuristic, constants)
    ours, with_reorders, alone = compare_with_onnxruntime(spec, trace, threads, args.rounds, constants,
                                                          (params["H"], params["W"]))
    theirs = alone or with_reorders
    flops = conv_flops(spec)
    gflops = flops / ours / 1e9
    return dict(net=net, layer=name, workload=spec.label, threads=threads, trials=0 if args.heuristic else args.trials,
                gflops=gflops, ort_gflops=flops / theirs / 1e9, ratio=theirs / ours,
                ratio_with_reorders=with_reorders / ours, ort_without_reorders=alone is not None,
                peak_fraction=gflops / peak.peak_gflops if peak else None,
                ort_peak_fraction=flops / theirs / 1e9 / peak.peak_gflops if peak else None,
                tune_s=tune_s)


def geomean(values) -> float:
    values = list(values)
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--net", default="resnet18,mobilenetv2",
                    help="resnet18, mobilenetv2, other (odd shapes), pooling, pools (more pooling shapes) "
                         "(comma-separated)")
    ap.add_argument("--only", default="", help="comma-separated layer names (see LAYERS); default: all")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--trials", type=int, default=64)
    ap.add_argument("--form", choices=("nchw", "nchwc", "model"), default="nchw",
                    help="nchw: tune the NCHW conv2d (data packed in the kernel, per call); "
                         "nchwc: tune conv2d_nchwc (blocked data in and out, weights prepacked as the graph "
                         "level packs constant weights; depthwise layers stay NCHW); model: the form a model "
                         "build computes the layer in (Winograd F(2x2, 3x3) or F(4x4, 3x3) where the graph level uses it, "
                         "else nchwc; depthwise layers as depthwise_conv2d_nchwc in the block a model gives them; "
                         "its GFLOP/s direct-equivalent)")
    ap.add_argument("--heuristic", action="store_true", help="no search: time the space's first trial")
    ap.add_argument("--pack-per-call", action="store_true",
                    help="pack the weights in every call (default: once, outside the timing, as onnxruntime "
                         "and our model builds do; tuning times kernels the same way)")
    ap.add_argument("--variant", action="append", default=[], metavar="DECISIONS",
                    help='time the heuristic start with these decisions changed, e.g. "Y.kb=32 Y.qt=14" '
                         "(repeatable; no tuning), side by side with the start and onnxruntime")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rounds", type=int, default=5, help="alternating timing rounds")
    ap.add_argument("--json", metavar="PATH", help="also write the rows as JSON")
    ap.add_argument("--ort-spinning", action="store_true",
                    help="let onnxruntime's idle threads spin (its own default) instead of blocking at once")
    args = ap.parse_args(argv)
    if args.ort_spinning:
        ort_nchwc.SPINNING = "1"
    nets = [n for n in args.net.split(",") if n]
    unknown = [n for n in nets if n not in LAYERS]
    if unknown:
        ap.error(f"unknown network {unknown[0]!r}; choose from {', '.join(LAYERS)}")
    only = [x for x in args.only.split(",") if x]
    known = {name for n in nets for name in LAYERS[n]}
    if set(only) - known:
        ap.error(f"unknown layer {sorted(set(only) - known)[0]!r}; layers: {', '.join(sorted(known))}")
    threads_list = [int(t) for t in args.threads.split(",")]
    cpu = host_target()["cpu"]
    print(f"host {cpu}; {'heuristic start' if args.heuristic else f'{args.trials} trials'}; threads {threads_list}; "
          f"form {args.form}",
          flush=True)
    rows = []
    if args.variant:
        for threads in threads_list:
            for net in nets:
                for name in LAYERS[net]:
                    if not only or name in only:
                        rows += run_variants(net, name, threads, args)
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"host": cpu, "form": args.form, "variants": rows}, f, indent=1)
        return 0
    for threads in threads_list:
        peak = machine_peak(cpu, threads)
        for net in nets:
            for name in LAYERS[net]:
                if only and name not in only:
                    continue
                r = run_layer(net, name, threads, args, peak)
                rows.append(r)
                print(f"{net:<12} {name:<20} t={threads}: ours {r['gflops']:7.1f} GFLOP/s, onnxruntime "
                      f"{r['ort_gflops']:7.1f}, ratio {r['ratio']:.2f}x, peak {100 * (r['peak_fraction'] or 0):.0f}% "
                      f"(ort {100 * (r['ort_peak_fraction'] or 0):.0f}%), with its reorders "
                      f"{r['ratio_with_reorders']:.2f}x, tuning {r['tune_s']:.0f} s", flush=True)
    print("\n| network | layer | threads | ours GFLOP/s | onnxruntime GFLOP/s | ours/ort | ours % peak | ort % peak "
          "| ours/ort with its reorders |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        # (onnxruntime's GFLOP/s: its NCHWc kernel alone where it has one and ours runs on blocked data, marked *)
        star = "*" if r["ort_without_reorders"] else ""
        print(f"| {r['net']} | {r['layer']} | {r['threads']} | {r['gflops']:.1f} | {r['ort_gflops']:.1f}{star} | "
              f"{r['ratio']:.2f}x | {100 * (r['peak_fraction'] or 0):.0f}% | {100 * (r['ort_peak_fraction'] or 0):.0f}% "
              f"| {r['ratio_with_reorders']:.2f}x |")
    print("\n| network | threads | layers | geomean ours/ort | min | max |")
    print("|---|---|---|---|---|---|")
    for net in nets:
        for threads in threads_list:
            sel = [r["ratio"] for r in rows if r["net"] == net and r["threads"] == threads]
            if sel:
                print(f"| {net} | {threads} | {len(sel)} | {geomean(sel):.2f}x | {min(sel):.2f}x | {max(sel):.2f}x |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"host": cpu, "trials": args.trials, "heuristic": args.heuristic, "form": args.form, "rows": rows},
                  f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
