"""onnxruntime's blocked convolution without the layout changes of a one-node model.

With ``ORT_ENABLE_ALL`` onnxruntime's NCHWc transformer runs a one-node ``Conv`` model as
``ReorderInput -> nchwc Conv -> ReorderOutput``: the data is blocked before the convolution and
unblocked after it, inside the timed call. In a whole model consecutive convolutions keep the
blocked layout and those reorders happen only at its edges, as ours do (the graph level keeps
activations blocked, decision 035). Our blocked forms (``conv2d_nchwc``, ``depthwise_conv2d_nchwc``,
Winograd) are timed on blocked data, so the like-for-like figure is onnxruntime's convolution
alone: :func:`split_sessions` cuts onnxruntime's own optimized graph into its three parts, so the
middle one (its NCHWc kernel with the weights it reordered itself) can be timed on data its
``ReorderInput`` produced.
"""
from __future__ import annotations

import os
import tempfile

import numpy as np

# onnxruntime's intra-op threads: "0" blocks idle workers at once (the issues' protocol), "1" lets them
# spin first (onnxruntime's own default); bench_conv.py --ort-spinning sets "1"
SPINNING = "0"


def _options(threads: int, level):
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.graph_optimization_level = level
    so.log_severity_level = 3
    so.add_session_config_entry("session.intra_op.allow_spinning", SPINNING)
    return so


def _model(opt, nodes, inputs: list, outputs: list):
    from onnx import helper
    used = {i for n in nodes for i in n.input}
    inits = [t for t in opt.graph.initializer if t.name in used]
    graph = helper.make_graph(nodes, "part", [helper.make_tensor_value_info(i, 1, None) for i in inputs],
                              [helper.make_tensor_value_info(o, 1, None) for o in outputs], initializer=inits)
    model = helper.make_model(graph, opset_imports=list(opt.opset_import))
    model.ir_version = opt.ir_version
    return model.SerializeToString()


def split_sessions(model_bytes: bytes, threads: int):
    """``(reorder_in, conv, reorder_out)`` sessions of onnxruntime's optimized one-node model, or None
    when its optimized graph is not ``ReorderInput -> ... -> ReorderOutput`` (no NCHWc kernel)."""
    import onnx
    import onnxruntime as ort
    with tempfile.TemporaryDirectory() as tmp:
        so = _options(threads, ort.GraphOptimizationLevel.ORT_ENABLE_ALL)
        so.optimized_model_filepath = os.path.join(tmp, "optimized.onnx")
        ort.InferenceSession(model_bytes, so, providers=["CPUExecutionProvider"])
        opt = onnx.load(so.optimized_model_filepath)
    nodes = list(opt.graph.node)
    ins = [n for n in nodes if n.op_type == "ReorderInput" and n.input[0] == opt.graph.input[0].name]
    outs = [n for n in nodes if n.op_type == "ReorderOutput" and n.output[0] == opt.graph.output[0].name]
    if len(ins) != 1 or len(outs) != 1:
        return None
    middle = [n for n in nodes if n is not ins[0] and n is not outs[0]]
    level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL       # (already optimized: run as it is)
    parts = ((ins, [opt.graph.input[0].name], [ins[0].output[0]]),
             (middle, [ins[0].output[0]], [outs[0].input[0]]),
             (outs, [outs[0].input[0]], [opt.graph.output[0].name]))
    return tuple(ort.InferenceSession(_model(opt, n, i, o), _options(threads, level),
                                      providers=["CPUExecutionProvider"]) for n, i, o in parts)


def conv_alone(model_bytes: bytes, threads: int, x: np.ndarray, expect: np.ndarray):
    """A no-argument call of onnxruntime's NCHWc convolution on ``x`` already blocked by its own
    ``ReorderInput``, checked once: its output unblocked must be ``expect`` (the whole model's).
    None where onnxruntime runs no NCHWc kernel for the model."""
    parts = split_sessions(model_bytes, threads)
    if parts is None:
        return None
    reorder_in, conv, reorder_out = parts
    xb = reorder_in.run(None, {reorder_in.get_inputs()[0].name: x})[0]
    feed = {conv.get_inputs()[0].name: xb}
    yb = conv.run(None, feed)[0]
    y = reorder_out.run(None, {reorder_out.get_inputs()[0].name: yb})[0]
    if not np.allclose(y, expect, rtol=1e-5, atol=1e-5):
        raise SystemExit("ort_nchwc: onnxruntime's convolution cut from its reorders computes another output")
    return lambda: conv.run(None, feed)
