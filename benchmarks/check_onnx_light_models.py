"""Real networks end to end: the "light" models the onnx package ships as backend test data
(AlexNet, DenseNet-121, Inception v1/v2, ResNet-50, ShuffleNet, SqueezeNet, VGG-19, ZFNet-512)
imported, compiled and compared with onnxruntime.

    python benchmarks/check_onnx_light_models.py [--only resnet50,squeezenet] [--threads 2] [--out FILE]

The models are read from the installed onnx package (``onnx/backend/test/data/light``; nothing
is downloaded, nothing is copied into the repository). They are opset 9: each is converted
with ``onnx.version_converter`` to opset 13 (the importer's oldest) before import. Their weights
are ``ConstantOfShape`` constants, which would make any two implementations agree; they are
replaced by random ones (He-scaled convolution and Gemm weights, positive BatchNorm scales and
variances), and the final Softmax is dropped so the logits are compared (a saturated softmax
matches anything). onnxruntime runs the same randomized opset-9 model (``ORT_DISABLE_ALL``).
A model matches when ``|ours - ort| <= 1e-4 |ort| + 1e-5 max|ort|`` everywhere.
"""
from __future__ import annotations

import argparse
import glob
import os
import sys
import time

import numpy as np
import onnx
from onnx import helper, numpy_helper, version_converter

from graph.ir import GraphError
from graph.onnx_import import load_onnx
from tuner.model_api import compile_model

LIGHT = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")


def randomized(model: onnx.ModelProto, seed: int = 1) -> onnx.ModelProto:
    """``model`` with random weights for its ConstantOfShape ones and without its final Softmax."""
    rng = np.random.default_rng(seed)
    consts = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    positive = {n.input[i] for n in model.graph.node if n.op_type == "BatchNormalization" for i in (1, 4)}
    keep, weights = [], []
    for node in model.graph.node:
        if node.op_type != "ConstantOfShape" or node.input[0] not in consts:
            keep.append(node)
            continue
        shape, out = [int(d) for d in consts[node.input[0]]], node.output[0]
        if out in positive:
            a = rng.uniform(0.5, 1.5, shape)
        elif len(shape) >= 2:
            a = rng.standard_normal(shape) * np.sqrt(2.0 / np.prod(shape[1:]))
        else:
            a = rng.standard_normal(shape) * 0.1
        weights.append(numpy_helper.from_array(a.astype(np.float32), out))
        model.graph.input.append(helper.make_tensor_value_info(out, onnx.TensorProto.FLOAT, shape))
    if keep[-1].op_type == "Softmax":
        logits = keep.pop().input[0]
        elem = model.graph.output[0].type.tensor_type.elem_type
        del model.graph.output[:]
        model.graph.output.append(helper.make_tensor_value_info(logits, elem, None))
    del model.graph.node[:]
    model.graph.node.extend(keep)
    model.graph.initializer.extend(weights)
    return model


def onnxruntime_outputs(model: onnx.ModelProto, feeds: dict, threads: int) -> list:
    import onnxruntime as ort
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.intra_op_num_threads = threads
    options.log_severity_level = 3
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def check(path: str, threads: int) -> str:
    """One line: the model's import and compile times and whether it matches onnxruntime, or why not."""
    name = os.path.basename(path)[len("light_"):-len(".onnx")]
    model = randomized(onnx.load(path))
    weights = {t.name for t in model.graph.initializer}
    (x_info,) = [i for i in model.graph.input if i.name not in weights]
    shape = [d.dim_value for d in x_info.type.tensor_type.shape.dim]
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    (want,) = onnxruntime_outputs(model, {x_info.name: x}, threads)
    t0 = time.perf_counter()
    try:
        graph = load_onnx(version_converter.convert_version(model, 13))
    except GraphError as e:
        return f"{name}: does not import: {e}"
    t1 = time.perf_counter()
    try:
        compiled = compile_model(graph, threads=threads)
    except GraphError as e:
        return f"{name}: does not compile: {e}"
    t2 = time.perf_counter()
    (got,) = compiled.run({graph.inputs[0]: x}).values()
    scale = float(np.abs(want).max())
    ok = got.shape == want.shape and np.all(np.abs(got - want) <= 1e-4 * np.abs(want) + 1e-5 * scale)
    err = float(np.abs(got - want).max()) / scale
    kinds = ", ".join(f"{k} {v}" for k, v in sorted(graph.op_counts().items()))
    return (f"{name}: {'MATCHES' if ok else 'DIFFERS FROM'} onnxruntime (max error {err:.1e} of max |logit| "
            f"{scale:.3g}); import {t1 - t0:.1f} s (with the opset conversion), compile {t2 - t1:.1f} s; "
            f"ops after import: {kinds}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default="", help="comma-separated model names (e.g. resnet50,squeezenet)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", help="also write the lines to this file")
    args = parser.parse_args(argv)
    paths = sorted(glob.glob(os.path.join(LIGHT, "light_*.onnx")))
    if not paths:
        print(f"no light models under {LIGHT} (this onnx package ships none)", file=sys.stderr)
        return 2
    only = {s for s in args.only.split(",") if s}
    lines = []
    for path in paths:
        if only and os.path.basename(path)[len("light_"):-len(".onnx")] not in only:
            continue
        lines.append(check(path, args.threads))
        print(lines[-1], flush=True)
    if args.out:
        import llvmlite.binding as llvm
        import onnxruntime
        head = (f"# python benchmarks/check_onnx_light_models.py {' '.join(argv if argv is not None else sys.argv[1:])}\n"
                f"# host {llvm.get_host_cpu_name()}, {args.threads} threads, onnx {onnx.__version__}, "
                f"onnxruntime {onnxruntime.__version__}\n")
        with open(args.out, "w") as f:
            f.write(head + "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
