"""ONNX models built with ``onnx.helper`` for tests and benchmarks (random seeded weights).

Each builder returns an ``onnx.ModelProto`` that passes ``onnx.checker`` and runs in onnxruntime,
with one float32 input named ``input`` and one output named ``output``. Node and value names
follow the PyTorch exporter's style (``/layer1/layer1.0/conv1/Conv_output_0``).
"""
from __future__ import annotations

import inspect
import itertools
import math

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


class ModelMaker:
    """Accumulates nodes and initializers; names nodes ``{scope}/{Op}`` like the PyTorch exporter."""

    def __init__(self, seed: int = 0, opset: int = 13):
        self.rng = np.random.default_rng(seed)
        self.opset = opset
        self.nodes: list = []
        self.initializers: list = []
        self._names: set = set()

    def _unique(self, name: str) -> str:
        base, i = name, 1
        while name in self._names:
            name, i = f"{base}_{i}", i + 1
        self._names.add(name)
        return name

    def init(self, name: str, array) -> str:
        """An initializer (weights or a constant input)."""
        name = self._unique(name)
        self.initializers.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def weight(self, name: str, shape: tuple, scale: float) -> str:
        return self.init(name, (self.rng.standard_normal(shape) * scale).astype(np.float32))

    def ints(self, name: str, values) -> str:
        return self.init(name, np.asarray(values, np.int64))

    def scalar(self, name: str, value: float) -> str:
        return self.init(name, np.asarray(value, np.float32))

    def node(self, op: str, inputs, scope: str, outputs: int = 1, **attrs):
        """Add ``op``; returns its output name (a list when ``outputs`` > 1)."""
        name = self._unique(f"{scope}/{op}")
        outs = [f"{name}_output_{i}" for i in range(outputs)]
        self.nodes.append(helper.make_node(op, list(inputs), outs, name=name, **attrs))
        return outs[0] if outputs == 1 else outs

    def axes(self, node_inputs: list, scope: str, axes, since: int) -> dict:
        """Axes as an attribute before opset ``since``, else as an added int64 input."""
        if self.opset >= since:
            node_inputs.append(self.ints(f"{scope}/axes", axes))
            return {}
        return {"axes": list(axes)}

    def reduce_mean(self, x: str, scope: str, axes) -> str:
        ins = [x]
        attrs = self.axes(ins, scope, axes, since=18)
        return self.node("ReduceMean", ins, scope, keepdims=1, **attrs)

    def model(self, name: str, input_shape: tuple, output: str, output_shape: tuple) -> onnx.ModelProto:
        for node in self.nodes:        # the last node defines the graph output under its ONNX name
            node.output[:] = ["output" if o == output else o for o in node.output]
            node.input[:] = ["output" if i == output else i for i in node.input]
        graph = helper.make_graph(
            self.nodes, name, [helper.make_tensor_value_info("input", TensorProto.FLOAT, list(input_shape))],
            [helper.make_tensor_value_info("output", TensorProto.FLOAT, list(output_shape))], self.initializers)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", self.opset)],
                                  producer_name="tensortune-tests")
        model.ir_version = min(model.ir_version, 8)    # readable by older onnxruntime builds too
        onnx.checker.check_model(model)
        return model


# ------------------------------------------------------------------ MLP

def mlp(batch: int = 32, sizes=(1024, 2048, 2048, 1000), seed: int = 0, opset: int = 13) -> onnx.ModelProto:
    """Gemm (transB=1, as exported from nn.Linear) + Relu layers; no Relu after the last Gemm."""
    m = ModelMaker(seed, opset)
    x = "input"
    for i, (n_in, n_out) in enumerate(itertools.pairwise(sizes)):
        scope = f"/fc{i}"
        w = m.weight(f"fc{i}.weight", (n_out, n_in), 1 / math.sqrt(n_in))
        b = m.weight(f"fc{i}.bias", (n_out,), 0.1)
        x = m.node("Gemm", [x, w, b], scope, alpha=1.0, beta=1.0, transB=1)
        if i < len(sizes) - 2:
            x = m.node("Relu", [x], f"/relu{i}")
    return m.model("mlp", (batch, sizes[0]), x, (batch, sizes[-1]))


# ------------------------------------------------------------------ ResNet-18

def _conv_bn(m: ModelMaker, x: str, scope: str, c_in: int, c_out: int, k: int, stride: int, relu: bool,
             dilation: int = 1) -> str:
    param = scope.strip("/").replace("/", ".")      # weights are named like module parameters
    w = m.weight(f"{param}.conv.weight", (c_out, c_in, k, k), math.sqrt(2 / (c_in * k * k)))
    y = m.node("Conv", [x, w], f"{scope}/conv", kernel_shape=[k, k], strides=[stride, stride],
               pads=[dilation * (k // 2)] * 4, dilations=[dilation, dilation], group=1)
    bn = [m.init(f"{param}.bn.{p}", v.astype(np.float32)) for p, v in (
        ("weight", m.rng.uniform(0.5, 1.5, c_out)), ("bias", m.rng.uniform(-0.2, 0.2, c_out)),
        ("running_mean", m.rng.uniform(-0.2, 0.2, c_out)), ("running_var", m.rng.uniform(0.5, 1.5, c_out)))]
    y = m.node("BatchNormalization", [y] + bn, f"{scope}/bn", epsilon=1e-5, momentum=0.9)
    return m.node("Relu", [y], f"{scope}/relu") if relu else y


def resnet18(batch: int = 1, size: int = 224, seed: int = 0, classes: int = 1000,
             opset: int = 13) -> onnx.ModelProto:
    """torchvision's ResNet-18 as exported without BatchNorm folding (random weights)."""
    m = ModelMaker(seed, opset)
    x = _conv_bn(m, "input", "/conv1", 3, 64, 7, 2, relu=True)
    x = m.node("MaxPool", [x], "/maxpool", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    c_in = 64
    for layer, c_out in enumerate((64, 128, 256, 512), start=1):
        for block in range(2):
            scope = f"/layer{layer}/layer{layer}.{block}"
            stride = 2 if block == 0 and layer > 1 else 1
            y = _conv_bn(m, x, f"{scope}/conv1", c_in, c_out, 3, stride, relu=True)
            y = _conv_bn(m, y, f"{scope}/conv2", c_out, c_out, 3, 1, relu=False)
            short = _conv_bn(m, x, f"{scope}/downsample", c_in, c_out, 1, stride, relu=False) \
                if stride != 1 or c_in != c_out else x
            x = m.node("Relu", [m.node("Add", [y, short], scope)], f"{scope}/relu")
            c_in = c_out
    x = m.node("GlobalAveragePool", [x], "/avgpool")
    x = m.node("Flatten", [x], "/flatten", axis=1)
    w = m.weight("fc.weight", (classes, 512), 1 / math.sqrt(512))
    x = m.node("Gemm", [x, w, m.weight("fc.bias", (classes,), 0.1)], "/fc", alpha=1.0, beta=1.0, transB=1)
    return m.model("resnet18", (batch, 3, size, size), x, (batch, classes))


# ------------------------------------------------------------------ MobileNet-V2 block

def mobilenet_block(batch: int = 1, channels: int = 32, expansion: int = 6, size: int = 56, seed: int = 0,
                    opset: int = 13) -> onnx.ModelProto:
    """An inverted residual block (BatchNorm folded into biased convs, as exported for inference):
    1x1 expand + ReLU6, depthwise 3x3 (group = channels) + ReLU6, 1x1 project, residual Add.
    ReLU6 is Clip with min/max inputs (opset 13)."""
    m = ModelMaker(seed, opset)
    hidden = channels * expansion
    lo, hi = m.scalar("relu6.min", 0.0), m.scalar("relu6.max", 6.0)

    def conv(x, scope, c_in, c_out, k, group):
        param = scope.strip("/").replace("/", ".")
        w = m.weight(f"{param}.weight", (c_out, c_in // group, k, k), math.sqrt(2 / (c_in // group * k * k)))
        b = m.weight(f"{param}.bias", (c_out,), 0.1)
        return m.node("Conv", [x, w, b], scope, kernel_shape=[k, k], pads=[k // 2] * 4, group=group)

    y = m.node("Clip", [conv("input", "/conv/0", channels, hidden, 1, 1), lo, hi], "/conv/0/relu6")
    y = m.node("Clip", [conv(y, "/conv/1", hidden, hidden, 3, hidden), lo, hi], "/conv/1/relu6")
    y = conv(y, "/conv/2", hidden, channels, 1, 1)
    y = m.node("Add", ["input", y], "/add")
    shape = (batch, channels, size, size)
    return m.model("mobilenet_block", shape, y, shape)


def mobilenet_chain(batch: int = 1, channels: int = 24, size: int = 56, seed: int = 0,
                    blocks: tuple = ((6, 32, 2), (6, 32, 1), (6, 64, 2))) -> onnx.ModelProto:
    """Consecutive MobileNet-V2 inverted residual blocks (BatchNorm folded into biased convs, ReLU6
    as Clip): each ``(expansion, output channels, stride)`` is 1x1 expand + ReLU6, depthwise 3x3 of
    that stride + ReLU6, 1x1 project, and a residual Add where the shape is kept. The default
    starts at 24@56 (stage 3 of MobileNet-V2: 144 channels expanded, a stride-2 depthwise)."""
    m = ModelMaker(seed, 13)
    lo, hi = m.scalar("relu6.min", 0.0), m.scalar("relu6.max", 6.0)

    def conv(x, scope, c_in, c_out, k, group, stride=1):
        param = scope.strip("/").replace("/", ".")
        w = m.weight(f"{param}.weight", (c_out, c_in // group, k, k), math.sqrt(2 / (c_in // group * k * k)))
        b = m.weight(f"{param}.bias", (c_out,), 0.1)
        return m.node("Conv", [x, w, b], scope, kernel_shape=[k, k], pads=[k // 2] * 4, group=group,
                      strides=[stride, stride])

    x, c, hw = "input", channels, size
    for i, (expansion, c_out, stride) in enumerate(blocks):
        hidden = c * expansion
        y = m.node("Clip", [conv(x, f"/b{i}/expand", c, hidden, 1, 1), lo, hi], f"/b{i}/expand/relu6")
        y = m.node("Clip", [conv(y, f"/b{i}/dw", hidden, hidden, 3, hidden, stride), lo, hi], f"/b{i}/dw/relu6")
        y = conv(y, f"/b{i}/project", hidden, c_out, 1, 1)
        x = m.node("Add", [x, y], f"/b{i}/add") if (stride, c_out) == (1, c) else y
        c, hw = c_out, -(-hw // stride)
    return m.model("mobilenet_chain", (batch, channels, size, size), x, (batch, c, hw, hw))


def mobilenet_tail(batch: int = 1) -> onnx.ModelProto:
    """MobileNet-V2's last stages, 96@14 to 320@7 (its 1x1 convs on 14x14 and 7x7 planes, decision 061)."""
    return mobilenet_chain(batch, channels=96, size=14,
                           blocks=((6, 96, 1), (6, 160, 2), (6, 160, 1), (6, 160, 1), (6, 320, 1)))


# ------------------------------------------------------------------ BERT encoder layer

def _layer_norm(m: ModelMaker, x: str, scope: str, hidden: int) -> str:
    """LayerNorm as older exporters decompose it."""
    param = scope.strip("/").replace("/", ".")
    mean = m.reduce_mean(x, f"{scope}/mean", [-1])
    d = m.node("Sub", [x, mean], scope)
    var = m.reduce_mean(m.node("Pow", [d, m.scalar(f"{scope}/two", 2.0)], scope), f"{scope}/var", [-1])
    s = m.node("Sqrt", [m.node("Add", [var, m.scalar(f"{scope}/eps", 1e-12)], scope)], scope)
    n = m.node("Div", [d, s], scope)
    gamma = m.init(f"{param}.weight", m.rng.uniform(0.8, 1.2, hidden).astype(np.float32))
    return m.node("Add", [m.node("Mul", [n, gamma], scope), m.weight(f"{param}.bias", (hidden,), 0.1)], scope)


def _gelu(m: ModelMaker, x: str, scope: str) -> str:
    """x * 0.5 * (1 + erf(x / sqrt 2)) in the exporters' Div/Erf/Add/Mul/Mul order."""
    e = m.node("Erf", [m.node("Div", [x, m.scalar(f"{scope}/sqrt2", math.sqrt(2))], scope)], scope)
    y = m.node("Mul", [x, m.node("Add", [e, m.scalar(f"{scope}/one", 1.0)], scope)], scope)
    return m.node("Mul", [y, m.scalar(f"{scope}/half", 0.5)], scope)


def _linear(m: ModelMaker, x: str, scope: str, n_in: int, n_out: int) -> str:
    param = scope.strip("/").replace("/", ".")
    w = m.weight(f"{param}.weight", (n_in, n_out), 0.02 * math.sqrt(768 / n_in))
    return m.node("Add", [m.node("MatMul", [x, w], scope), m.weight(f"{param}.bias", (n_out,), 0.02)], scope)


def _dims(m: ModelMaker, x: str, scope: str, which) -> list:
    """Unsqueezed dimensions of ``x`` (Shape -> Gather -> Unsqueeze), the exporters' shape plumbing."""
    shape = m.node("Shape", [x], scope)
    out = []
    for i in which:
        g = m.node("Gather", [shape, m.init(f"{scope}/idx{i}", np.asarray(i, np.int64))], scope, axis=0)
        ins = [g]
        attrs = m.axes(ins, scope, [0], since=13)
        out.append(m.node("Unsqueeze", ins, scope, **attrs))
    return out


def bert_layer(seq: int = 128, hidden: int = 768, heads: int = 12, batch: int = 1, intermediate: int | None = None,
               seed: int = 0, opset: int = 13) -> onnx.ModelProto:
    """A BERT encoder layer (post-LayerNorm) as older exporters emit it: MatMul + Add linears, heads
    split with Reshape/Transpose whose shapes come from Shape/Gather/Unsqueeze/Concat, scaled
    batched MatMul, Softmax, LayerNorm and Gelu decomposed into elementwise ops and ReduceMean."""
    m = ModelMaker(seed, opset)
    inter = intermediate or 4 * hidden
    head = hidden // heads
    x = "input"
    b, s = _dims(m, x, "/attention/self", (0, 1))
    split = m.node("Concat", [b, s, m.ints("/attention/self/heads", [heads]),
                              m.ints("/attention/self/head_size", [head])], "/attention/self", axis=0)

    def heads_of(name, perm):
        y = m.node("Reshape", [_linear(m, x, f"/attention/self/{name}", hidden, hidden), split],
                   f"/attention/self/{name}")
        return m.node("Transpose", [y], f"/attention/self/{name}", perm=perm)

    q = heads_of("query", [0, 2, 1, 3])
    k = heads_of("key", [0, 2, 3, 1])
    v = heads_of("value", [0, 2, 1, 3])
    scores = m.node("Div", [m.node("MatMul", [q, k], "/attention/self"),
                            m.scalar("/attention/self/scale", math.sqrt(head))], "/attention/self")
    probs = m.node("Softmax", [scores], "/attention/self", axis=-1)
    ctx = m.node("Transpose", [m.node("MatMul", [probs, v], "/attention/self")], "/attention/self",
                 perm=[0, 2, 1, 3])
    b2, s2 = _dims(m, ctx, "/attention/self/merge", (0, 1))
    merge = m.node("Concat", [b2, s2, m.ints("/attention/self/all_head_size", [hidden])], "/attention/self",
                   axis=0)
    ctx = m.node("Reshape", [ctx, merge], "/attention/self")
    attn = _linear(m, ctx, "/attention/output/dense", hidden, hidden)
    h1 = _layer_norm(m, m.node("Add", [attn, x], "/attention/output"), "/attention/output/LayerNorm", hidden)
    ff = _gelu(m, _linear(m, h1, "/intermediate/dense", hidden, inter), "/intermediate/gelu")
    out = m.node("Add", [_linear(m, ff, "/output/dense", inter, hidden), h1], "/output")
    out = _layer_norm(m, out, "/output/LayerNorm", hidden)
    return m.model("bert_layer", (batch, seq, hidden), out, (batch, seq, hidden))


# ------------------------------------------------------------------ ResNeXt block and UNet decoder step

def resnext_block(batch: int = 2, channels: int = 64, groups: int = 4, size: int = 56, seed: int = 0,
                  opset: int = 13) -> onnx.ModelProto:
    """A ResNeXt bottleneck (BatchNorm folded into biased convs): 1x1 + Relu, grouped 3x3 + Relu,
    1x1, residual Add + Relu."""
    m = ModelMaker(seed, opset)

    def conv(x, scope, c_in, c_out, k, group):
        param = scope.strip("/").replace("/", ".")
        w = m.weight(f"{param}.weight", (c_out, c_in // group, k, k), math.sqrt(2 / (c_in // group * k * k)))
        return m.node("Conv", [x, w, m.weight(f"{param}.bias", (c_out,), 0.1)], scope, kernel_shape=[k, k],
                      pads=[k // 2] * 4, group=group)

    y = m.node("Relu", [conv("input", "/conv1", channels, channels, 1, 1)], "/relu1")
    y = m.node("Relu", [conv(y, "/conv2", channels, channels, 3, groups)], "/relu2")
    y = m.node("Relu", [m.node("Add", [conv(y, "/conv3", channels, channels, 1, 1), "input"], "/add")], "/relu")
    shape = (batch, channels, size, size)
    return m.model("resnext_block", shape, y, shape)


def vgg_small(batch: int = 2, height: int = 64, width: int = 96, classes: int = 64, seed: int = 0,
              opset: int = 13) -> onnx.ModelProto:
    """A small VGG-style net: three stages of two biased 3x3 convs with LeakyRelu (0.1) and a 2x2 max
    pool (16, 32, 48 channels; the first conv reads the 3-channel image), then Flatten, Gemm and Softmax."""
    m = ModelMaker(seed, opset)
    x, c = "input", 3
    for i, co in enumerate((16, 32, 48)):
        for j in range(2):
            w = m.weight(f"stage{i}.conv{j}.weight", (co, c, 3, 3), math.sqrt(2 / (c * 9)))
            y = m.node("Conv", [x, w, m.weight(f"stage{i}.conv{j}.bias", (co,), 0.1)], f"/stage{i}/conv{j}",
                       kernel_shape=[3, 3], pads=[1] * 4)
            x, c = m.node("LeakyRelu", [y], f"/stage{i}/relu{j}", alpha=0.1), co
        x = m.node("MaxPool", [x], f"/stage{i}/pool", kernel_shape=[2, 2], strides=[2, 2])
    x = m.node("Flatten", [x], "/flatten", axis=1)
    features = c * (height // 8) * (width // 8)
    w = m.weight("fc.weight", (classes, features), 1 / math.sqrt(features))
    x = m.node("Gemm", [x, w, m.weight("fc.bias", (classes,), 0.1)], "/fc", transB=1)
    x = m.node("Softmax", [x], "/softmax", axis=1)
    return m.model("vgg_small", (batch, 3, height, width), x, (batch, classes))


def squeezenet(batch: int = 1, size: int = 113, classes: int = 1000, seed: int = 0, opset: int = 13) -> onnx.ModelProto:
    """A SqueezeNet 1.1 cut to its first three fire modules: a 3x3 s2 stem, a 3x3 s2 max pool (ceil mode),
    fires (1x1 squeeze; 1x1 and 3x3 expands concatenated), then its classifier: a 1x1 conv to ``classes``
    channels, Relu, global average pool, flatten."""
    m = ModelMaker(seed, opset)

    def conv(x, scope, c_in, c_out, k, stride=1, pad=None):
        w = m.weight(f"{scope}.weight", (c_out, c_in, k, k), math.sqrt(2 / (c_in * k * k)))
        pad = k // 2 if pad is None else pad
        y = m.node("Conv", [x, w, m.weight(f"{scope}.bias", (c_out,), 0.1)], f"/{scope}", kernel_shape=[k, k],
                   strides=[stride] * 2, pads=[pad] * 4)
        return m.node("Relu", [y], f"/{scope}/relu")

    x = conv("input", "features.0", 3, 64, 3, 2, 0)
    x = m.node("MaxPool", [x], "/features.2", kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)
    for i, (c_in, sq, ex) in enumerate(((64, 16, 64), (128, 16, 64), (128, 32, 128)), start=3):
        s_ = conv(x, f"features.{i}.squeeze", c_in, sq, 1)
        x = m.node("Concat", [conv(s_, f"features.{i}.expand1x1", sq, ex, 1),
                              conv(s_, f"features.{i}.expand3x3", sq, ex, 3)], f"/features.{i}/concat", axis=1)
    x = m.node("GlobalAveragePool", [conv(x, "classifier.1", 256, classes, 1)], "/classifier.3")
    x = m.node("Flatten", [x], "/flatten", axis=1)
    return m.model("squeezenet", (batch, 3, size, size), x, (batch, classes))


def densenet_block(batch: int = 1, channels: int = 32, growth: int = 12, layers: int = 4, size: int = 36,
                   seed: int = 0, opset: int = 13) -> onnx.ModelProto:
    """A DenseNet-BC dense block as exported (BatchNorm unfolded): each layer BN + Relu, 1x1 conv to
    ``4 * growth``, BN + Relu, 3x3 conv to ``growth`` channels, concatenated onto its input; then a 2x2
    average pool (the transition's)."""
    m = ModelMaker(seed, opset)

    def bn_relu(x, scope, c):
        bn = [m.init(f"{scope}.bn.{p}", v.astype(np.float32)) for p, v in (
            ("weight", m.rng.uniform(0.5, 1.5, c)), ("bias", m.rng.uniform(-0.2, 0.2, c)),
            ("running_mean", m.rng.uniform(-0.2, 0.2, c)), ("running_var", m.rng.uniform(0.5, 1.5, c)))]
        return m.node("Relu", [m.node("BatchNormalization", [x] + bn, f"/{scope}/bn", epsilon=1e-5)], f"/{scope}/relu")

    def conv(x, scope, c_in, c_out, k):
        w = m.weight(f"{scope}.conv.weight", (c_out, c_in, k, k), math.sqrt(2 / (c_in * k * k)))
        return m.node("Conv", [x, w], f"/{scope}/conv", kernel_shape=[k, k], pads=[k // 2] * 4)

    x, c = "input", channels
    for i in range(layers):
        y = conv(bn_relu(x, f"layer{i}.1", c), f"layer{i}.1", c, 4 * growth, 1)
        y = conv(bn_relu(y, f"layer{i}.2", 4 * growth), f"layer{i}.2", 4 * growth, growth, 3)
        x, c = m.node("Concat", [x, y], f"/layer{i}/concat", axis=1), c + growth
    y = m.node("AveragePool", [x], "/pool", kernel_shape=[2, 2], strides=[2, 2])
    return m.model("densenet_block", (batch, channels, size, size), y, (batch, c, size // 2, size // 2))


def grouped_conv(channels: int = 128, out_channels: int | None = None, size: int = 56, groups: int = 32,
                 stride: int = 1, kernel: int = 3, batch: int = 1, seed: int = 0, opset: int = 13) -> onnx.ModelProto:
    """One grouped conv (biased, ``kernel`` x ``kernel``, padding ``kernel // 2``) and its Relu."""
    m = ModelMaker(seed, opset)
    k = out_channels or channels
    w = m.weight("conv.weight", (k, channels // groups, kernel, kernel), math.sqrt(2 / (channels // groups * kernel ** 2)))
    y = m.node("Relu", [m.node("Conv", ["input", w, m.weight("conv.bias", (k,), 0.1)], "/conv", kernel_shape=[kernel] * 2,
                               pads=[kernel // 2] * 4, strides=[stride] * 2, group=groups)], "/relu")
    out = (size + 2 * (kernel // 2) - kernel) // stride + 1
    return m.model("grouped_conv", (batch, channels, size, size), y, (batch, k, out, out))


def shufflenet_unit(batch: int = 1, channels: int = 116, size: int = 28, seed: int = 0, opset: int = 13) -> onnx.ModelProto:
    """A ShuffleNet-V2 unit (stride 1): the channels split in halves, one half through 1x1 + Relu, depthwise
    3x3, 1x1 + Relu, concatenated with the other, then the channel shuffle (Reshape, Transpose, Reshape)."""
    m = ModelMaker(seed, opset)
    half = channels // 2

    def conv(x, scope, k, group=1):
        w = m.weight(f"{scope}.weight", (half, half // group, k, k), math.sqrt(2 / (half // group * k * k)))
        return m.node("Conv", [x, w, m.weight(f"{scope}.bias", (half,), 0.1)], f"/{scope}", kernel_shape=[k, k],
                      pads=[k // 2] * 4, group=group)
    a, b = m.node("Split", ["input", m.ints("split", [half, half])], "/split", outputs=2, axis=1)
    y = m.node("Relu", [conv(b, "branch.0", 1)], "/branch/relu0")
    y = m.node("Relu", [conv(conv(y, "branch.1", 3, group=half), "branch.2", 1)], "/branch/relu1")
    y = m.node("Concat", [a, y], "/concat", axis=1)
    y = m.node("Reshape", [y, m.ints("shuffle.shape0", [batch, 2, half, size, size])], "/shuffle/reshape0")
    y = m.node("Transpose", [y], "/shuffle/transpose", perm=[0, 2, 1, 3, 4])
    y = m.node("Reshape", [y, m.ints("shuffle.shape1", [batch, channels, size, size])], "/shuffle/reshape1")
    return m.model("shufflenet_unit", (batch, channels, size, size), y, (batch, channels, size, size))


def convnext_block(batch: int = 1, channels: int = 96, size: int = 28, seed: int = 0, opset: int = 17) -> onnx.ModelProto:
    """A ConvNeXt block as exported: depthwise 7x7, to channels-last (Transpose), LayerNormalization, a 4x
    MatMul + bias, exact GELU (Erf), MatMul back + bias, to channels-first, residual Add."""
    m = ModelMaker(seed, opset)
    c = channels
    w = m.weight("dwconv.weight", (c, 1, 7, 7), math.sqrt(2 / 49))
    y = m.node("Conv", ["input", w, m.weight("dwconv.bias", (c,), 0.1)], "/dwconv", kernel_shape=[7, 7], pads=[3] * 4,
               group=c)
    y = m.node("Transpose", [y], "/permute0", perm=[0, 2, 3, 1])
    y = m.node("LayerNormalization", [y, m.weight("norm.weight", (c,), 0.1), m.weight("norm.bias", (c,), 0.1)],
               "/norm", axis=-1, epsilon=1e-6)
    y = m.node("Add", [m.node("MatMul", [y, m.weight("pwconv1.weight", (c, 4 * c), 1 / math.sqrt(c))], "/pwconv1"),
                       m.weight("pwconv1.bias", (4 * c,), 0.1)], "/pwconv1/add")
    gelu = m.node("Add", [m.node("Erf", [m.node("Div", [y, m.scalar("sqrt2", math.sqrt(2))], "/act/div")], "/act/erf"),
                          m.scalar("one", 1.0)], "/act/add")
    y = m.node("Mul", [m.node("Mul", [y, gelu], "/act/mul0"), m.scalar("half", 0.5)], "/act/mul1")
    y = m.node("Add", [m.node("MatMul", [y, m.weight("pwconv2.weight", (4 * c, c), 1 / math.sqrt(4 * c))], "/pwconv2"),
                       m.weight("pwconv2.bias", (c,), 0.1)], "/pwconv2/add")
    y = m.node("Transpose", [y], "/permute1", perm=[0, 3, 1, 2])
    y = m.node("Add", ["input", y], "/residual")
    return m.model("convnext_block", (batch, c, size, size), y, (batch, c, size, size))


def groupnorm_block(batch: int = 1, channels: int = 64, size: int = 32, groups: int = 8, seed: int = 0,
                    opset: int = 13) -> onnx.ModelProto:
    """A diffusion UNet's residual piece with GroupNorm as PyTorch exports it: Reshape to (N, G, -1),
    InstanceNormalization, Reshape back, per-channel Mul and Add, SiLU (x * Sigmoid(x)), 3x3 conv, residual Add."""
    m = ModelMaker(seed, opset)
    c = channels
    y = m.node("Reshape", ["input", m.ints("norm.shape0", [batch, groups, -1])], "/norm/reshape0")
    y = m.node("InstanceNormalization", [y, m.init("norm.ones", np.ones(groups, np.float32)),
                                         m.init("norm.zeros", np.zeros(groups, np.float32))], "/norm/instance", epsilon=1e-5)
    y = m.node("Reshape", [y, m.ints("norm.shape1", [batch, c, size, size])], "/norm/reshape1")
    y = m.node("Add", [m.node("Mul", [y, m.weight("norm.weight", (c, 1, 1), 0.1)], "/norm/mul"),
                       m.weight("norm.bias", (c, 1, 1), 0.1)], "/norm/add")
    y = m.node("Mul", [y, m.node("Sigmoid", [y], "/act/sigmoid")], "/act/mul")
    w = m.weight("conv.weight", (c, c, 3, 3), math.sqrt(2 / (c * 9)))
    y = m.node("Conv", [y, w, m.weight("conv.bias", (c,), 0.1)], "/conv", kernel_shape=[3, 3], pads=[1] * 4)
    y = m.node("Add", ["input", y], "/residual")
    return m.model("groupnorm_block", (batch, c, size, size), y, (batch, c, size, size))


def yolo_neck(batch: int = 1, channels: int = 64, size: int = 52, seed: int = 0, opset: int = 13) -> onnx.ModelProto:
    """A YOLO-style neck step: 3x3 stride-2 conv to twice the channels, 1x1 conv back, nearest Resize x2, Concat with
    the input, 3x3 conv; every conv with LeakyRelu (0.1)."""
    m = ModelMaker(seed, opset)

    def conv(x, scope, c_in, c_out, k, stride=1):
        w = m.weight(f"{scope[1:]}.weight", (c_out, c_in, k, k), math.sqrt(2 / (c_in * k * k)))
        y = m.node("Conv", [x, w, m.weight(f"{scope[1:]}.bias", (c_out,), 0.1)], scope, kernel_shape=[k, k],
                   pads=[k // 2] * 4, strides=[stride] * 2)
        return m.node("LeakyRelu", [y], scope + "/act", alpha=0.1)
    if size % 2:
        raise ValueError(f"yolo_neck: size {size} is odd; the upsampled half would not match the input")
    c = channels
    y = conv(conv("input", "/down", c, 2 * c, 3, stride=2), "/reduce", 2 * c, c, 1)
    y = m.node("Resize", [y, "", m.init("up.scales", np.array([1, 1, 2, 2], np.float32))], "/up", mode="nearest")
    y = conv(m.node("Concat", [y, "input"], "/cat", axis=1), "/merge", 2 * c, c, 3)
    return m.model("yolo_neck", (batch, c, size, size), y, (batch, c, size, size))


def dcgan_generator(batch: int = 1, channels: int = 128, size: int = 8, out_channels: int = 3, seed: int = 0,
                    opset: int = 13) -> onnx.ModelProto:
    """A DCGAN generator's tail: two ConvTranspose (4x4, stride 2, pads 1) + Relu, each halving the channels and
    doubling the size, then a 3x3 conv to ``out_channels`` and Tanh."""
    m = ModelMaker(seed, opset)
    y, c = "input", channels
    for n in range(2):
        w = m.weight(f"up{n}.weight", (c, c // 2, 4, 4), math.sqrt(2 / (c * 16)))
        y = m.node("ConvTranspose", [y, w, m.weight(f"up{n}.bias", (c // 2,), 0.1)], f"/up{n}", kernel_shape=[4, 4],
                   strides=[2, 2], pads=[1, 1, 1, 1])
        y, c = m.node("Relu", [y], f"/up{n}/relu"), c // 2
    w = m.weight("out.weight", (out_channels, c, 3, 3), math.sqrt(2 / (c * 9)))
    y = m.node("Conv", [y, w, m.weight("out.bias", (out_channels,), 0.1)], "/out", kernel_shape=[3, 3], pads=[1] * 4)
    y = m.node("Tanh", [y], "/out/tanh")
    return m.model("dcgan_generator", (batch, channels, size, size), y, (batch, out_channels, 4 * size, 4 * size))


def lenet(batch: int = 64, classes: int = 10, seed: int = 0, opset: int = 13) -> onnx.ModelProto:
    """A LeNet-style MNIST classifier: 5x5 convs 1 -> 32 and 32 -> 64 (no padding) with Relu and 2x2 max pools,
    Flatten, Gemm 1024 -> 128 + Relu, Gemm to ``classes``, LogSoftmax; 28x28 grey images in batches."""
    m = ModelMaker(seed, opset)
    y = "input"
    for i, (c_in, c_out) in enumerate(((1, 32), (32, 64))):
        w = m.weight(f"conv{i}.weight", (c_out, c_in, 5, 5), math.sqrt(2 / (c_in * 25)))
        y = m.node("Conv", [y, w, m.weight(f"conv{i}.bias", (c_out,), 0.1)], f"/conv{i}", kernel_shape=[5, 5])
        y = m.node("MaxPool", [m.node("Relu", [y], f"/relu{i}")], f"/pool{i}", kernel_shape=[2, 2], strides=[2, 2])
    y = m.node("Flatten", [y], "/flatten", axis=1)
    y = m.node("Relu", [m.node("Gemm", [y, m.weight("fc0.weight", (128, 1024), 0.03), m.weight("fc0.bias", (128,), 0.1)],
                               "/fc0", transB=1)], "/relu2")
    y = m.node("Gemm", [y, m.weight("fc1.weight", (classes, 128), 0.09), m.weight("fc1.bias", (classes,), 0.1)],
               "/fc1", transB=1)
    return m.model("lenet", (batch, 1, 28, 28), m.node("LogSoftmax", [y], "/log_softmax", axis=1), (batch, classes))


def aspp(batch: int = 1, channels: int = 256, out_channels: int = 128, size: int = 33, rates: str = "6,12,18",
         seed: int = 0, opset: int = 13) -> onnx.ModelProto:
    """DeepLab-v3's atrous spatial pyramid pooling head (BatchNorm unfolded): a 1x1 conv, 3x3 convs dilated by
    each of ``rates``, an image-pool branch (global pool, 1x1 conv, bilinear Resize back to the plane), their
    Concat and a 1x1 projection, Relu after each."""
    m = ModelMaker(seed, opset)
    dils = [int(r) for r in str(rates).replace("/", ",").split(",")]
    branches = [_conv_bn(m, "input", "/aspp0", channels, out_channels, 1, 1, True)]
    branches += [_conv_bn(m, "input", f"/aspp{i + 1}", channels, out_channels, 3, 1, True, dilation=d)
                 for i, d in enumerate(dils)]
    g = m.node("Relu", [_conv_bn(m, m.node("GlobalAveragePool", ["input"], "/pool"), "/pool", channels,
                                 out_channels, 1, 1, False)], "/pool")
    sizes = m.ints("/pool/sizes", [batch, out_channels, size, size])
    branches.append(m.node("Resize", [g, "", "", sizes], "/pool", mode="linear"))
    y = m.node("Concat", branches, "/cat", axis=1)
    y = _conv_bn(m, y, "/project", len(branches) * out_channels, out_channels, 1, 1, True)
    return m.model("aspp", (batch, channels, size, size), y, (batch, out_channels, size, size))


def tf_mobilenet(batch: int = 1, size: int = 96, channels: int = 32, seed: int = 0, opset: int = 13) -> onnx.ModelProto:
    """A MobileNet-V1 start as tf2onnx exports it: an NHWC input transposed to NCHW, every SAME padding an explicit
    Pad before a VALID Conv, ReLU6 as Clip; a 3x3 s2 stem, depthwise 3x3 + 1x1 twice (the second depthwise
    strided), the output transposed back to NHWC. ``size`` must be a multiple of 4."""
    if size % 4:
        raise ValueError(f"tf_mobilenet: size {size} is not a multiple of 4")
    m = ModelMaker(seed, opset)

    def conv(x, scope, c_in, c_out, k, stride=1, group=1, pads=None):
        if pads:
            x = m.node("Pad", [x, m.ints(f"{scope}/pads", [0, 0, pads[0], pads[1], 0, 0, pads[2], pads[3]])], scope)
        w = m.weight(f"{scope}.w", (c_out, c_in // group, k, k), math.sqrt(2 / (c_in // group * k * k)))
        y = m.node("Conv", [x, w, m.weight(f"{scope}.b", (c_out,), 0.1)], scope, kernel_shape=[k, k],
                   strides=[stride, stride], group=group)
        return m.node("Clip", [y, m.scalar(f"{scope}/lo", 0.0), m.scalar(f"{scope}/hi", 6.0)], scope)
    x = m.node("Transpose", ["input"], "/to_nchw", perm=[0, 3, 1, 2])
    x = conv(x, "/stem", 3, channels, 3, stride=2, pads=(0, 0, 1, 1))      # SAME at stride 2: pad after only
    x = conv(conv(x, "/dw1", channels, channels, 3, group=channels, pads=(1, 1, 1, 1)), "/pw1", channels, 2 * channels, 1)
    c = 2 * channels
    x = conv(conv(x, "/dw2", c, c, 3, stride=2, group=c, pads=(0, 0, 1, 1)), "/pw2", c, c, 1)
    y = m.node("Transpose", [x], "/to_nhwc", perm=[0, 2, 3, 1])
    return m.model("tf_mobilenet", (batch, size, size, 3), y, (batch, size // 4, size // 4, c))


def conv1d(channels: int = 64, out_channels: int = 64, length: int = 1000, kernel: int = 3, stride: int = 1,
           dilation: int = 1, groups: int = 1, batch: int = 1, seed: int = 0, opset: int = 13) -> onnx.ModelProto:
    """One 1-d conv (biased, ``kernel`` taps, padding ``dilation * (kernel // 2)``) and its Relu: an audio or
    sequence model's layer."""
    m = ModelMaker(seed, opset)
    w = m.weight("conv.weight", (out_channels, channels // groups, kernel), math.sqrt(2 / (channels // groups * kernel)))
    pad = dilation * (kernel // 2)
    y = m.node("Relu", [m.node("Conv", ["input", w, m.weight("conv.bias", (out_channels,), 0.1)], "/conv",
                               kernel_shape=[kernel], pads=[pad, pad], strides=[stride], dilations=[dilation],
                               group=groups)], "/relu")
    out = (length + 2 * pad - dilation * (kernel - 1) - 1) // stride + 1
    return m.model("conv1d", (batch, channels, length), y, (batch, out_channels, out))


def resnext_g32_56(batch: int = 1) -> onnx.ModelProto:
    """ResNeXt-50 (32x4d)'s first-stage bottleneck width: 128 channels at 56x56 in 32 groups of 4."""
    return resnext_block(batch=batch, channels=128, groups=32, size=56)


def resnext_g32_14(batch: int = 1) -> onnx.ModelProto:
    """ResNeXt-50 (32x4d)'s third-stage bottleneck width: 512 channels at 14x14 in 32 groups of 16."""
    return resnext_block(batch=batch, channels=512, groups=32, size=14)


def espcn(batch: int = 1, size: int = 128, channels: int = 1, upscale: int = 2, seed: int = 0,
          opset: int = 13) -> onnx.ModelProto:
    """An ESPCN super-resolution net: a 5x5 conv to 64 channels and a 3x3 to 32 (Tanh after each), a 3x3 conv
    to ``channels * upscale**2`` and DepthToSpace: its last conv writes few channels, row-major."""
    m = ModelMaker(seed, opset)
    x, c = "input", channels
    for i, (co, k) in enumerate(((64, 5), (32, 3), (channels * upscale ** 2, 3))):
        w = m.weight(f"conv{i}.weight", (co, c, k, k), math.sqrt(1 / (c * k * k)))
        x = m.node("Conv", [x, w, m.weight(f"conv{i}.bias", (co,), 0.1)], f"/conv{i}", kernel_shape=[k, k],
                   pads=[k // 2] * 4)
        if i < 2:
            x = m.node("Tanh", [x], f"/tanh{i}")
        c = co
    x = m.node("DepthToSpace", [x], "/shuffle", blocksize=upscale, mode="CRD")
    return m.model("espcn", (batch, channels, size, size), x, (batch, channels, size * upscale, size * upscale))


def dncnn(batch: int = 1, size: int = 96, channels: int = 1, features: int = 32, depth: int = 5, seed: int = 0,
          opset: int = 13) -> onnx.ModelProto:
    """A DnCNN-style denoiser: a 3x3 conv with Relu, ``depth - 2`` 3x3 convs with BatchNorm and Relu, a 3x3 conv
    back to ``channels`` (the noise), subtracted from the input."""
    m = ModelMaker(seed, opset)
    x, c = "input", channels
    for i in range(depth):
        co = channels if i == depth - 1 else features
        w = m.weight(f"conv{i}.weight", (co, c, 3, 3), math.sqrt(2 / (c * 9)))
        x = m.node("Conv", [x, w] + ([m.weight(f"conv{i}.bias", (co,), 0.1)] if i in (0, depth - 1) else []),
                   f"/conv{i}", kernel_shape=[3, 3], pads=[1] * 4)
        if 0 < i < depth - 1:
            bn = [m.init(f"bn{i}.{k}", np.asarray(v, np.float32)) for k, v in (("scale", 1 + 0.1 * m.rng.standard_normal(co)),
                                                        ("bias", 0.1 * m.rng.standard_normal(co)),
                                                        ("mean", 0.1 * m.rng.standard_normal(co)),
                                                        ("var", 1 + 0.1 * m.rng.random(co)))]
            x = m.node("BatchNormalization", [x] + [b for b in bn], f"/bn{i}")
        if i < depth - 1:
            x = m.node("Relu", [x], f"/relu{i}")
        c = co
    x = m.node("Sub", ["input", x], "/residual")
    return m.model("dncnn", (batch, channels, size, size), x, (batch, channels, size, size))


def unet_up(batch: int = 2, channels: int = 64, size: int = 28, seed: int = 0, opset: int = 13) -> onnx.ModelProto:
    """A UNet decoder step: ConvTranspose (k2 s2, halving the channels), Concat with a skip tensor
    (here the input upsampled by Resize nearest, a 1x1 conv to match), 3x3 conv + Relu."""
    m = ModelMaker(seed, opset)
    half = channels // 2
    up = m.node("ConvTranspose", ["input", m.weight("up.weight", (channels, half, 2, 2), 1 / math.sqrt(channels)),
                                  m.weight("up.bias", (half,), 0.1)], "/up", kernel_shape=[2, 2], strides=[2, 2])
    skip = m.node("Resize", ["input", "", m.init("/skip/scales", np.array([1, 1, 2, 2], np.float32))], "/skip",
                  mode="nearest")
    skip = m.node("Conv", [skip, m.weight("skip.weight", (half, channels, 1, 1), 1 / math.sqrt(channels))], "/skip/conv",
                  kernel_shape=[1, 1])
    y = m.node("Concat", [up, skip], "/cat", axis=1)
    y = m.node("Conv", [y, m.weight("conv.weight", (half, channels, 3, 3), math.sqrt(2 / (9 * channels))),
                        m.weight("conv.bias", (half,), 0.1)], "/conv", kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    y = m.node("Relu", [y], "/relu")
    return m.model("unet_up", (batch, channels, size, size), y, (batch, half, 2 * size, 2 * size))


def se_block(batch: int = 1, channels: int = 24, expansion: int = 4, size: int = 40, seed: int = 0,
             opset: int = 13) -> onnx.ModelProto:
    """An EfficientNet MBConv block: 1x1 expand + Swish (x * Sigmoid(x), as exported), depthwise 5x5 +
    Swish, squeeze-excitation (GlobalAveragePool, 1x1 reduce + Relu, 1x1 expand + HardSigmoid, Mul),
    1x1 project, residual Add."""
    return _se_block("se_block", batch, channels, expansion, size, 5, seed, opset, hard=False)


def mobilenetv3_block(batch: int = 1, channels: int = 40, expansion: int = 3, size: int = 28, kernel: int = 5,
                      seed: int = 0, opset: int = 14) -> onnx.ModelProto:
    """A MobileNet-V3 block: :func:`se_block` with HardSwish (opset 14) for Swish, 40 -> 120 channels by default
    (blocks of 40 lanes: 16 + 16 + 8, decision 086)."""
    return _se_block("mobilenetv3_block", batch, channels, expansion, size, kernel, seed, opset, hard=True)


def _se_block(name, batch, channels, expansion, size, kernel, seed, opset, hard) -> onnx.ModelProto:
    m = ModelMaker(seed, opset)
    hidden = channels * expansion

    def conv(x, scope, c_in, c_out, k, group=1):
        param = scope.strip("/").replace("/", ".")
        w = m.weight(f"{param}.weight", (c_out, c_in // group, k, k), math.sqrt(2 / (c_in // group * k * k)))
        return m.node("Conv", [x, w, m.weight(f"{param}.bias", (c_out,), 0.1)], scope, kernel_shape=[k, k],
                      pads=[k // 2] * 4, group=group)

    def swish(x, scope):
        if hard:
            return m.node("HardSwish", [x], scope)
        return m.node("Mul", [x, m.node("Sigmoid", [x], scope + "/sigmoid")], scope + "/mul")

    y = swish(conv("input", "/expand", channels, hidden, 1), "/expand/swish")
    y = swish(conv(y, "/dw", hidden, hidden, kernel, hidden), "/dw/swish")
    s = m.node("GlobalAveragePool", [y], "/se/pool")
    s = m.node("Relu", [conv(s, "/se/reduce", hidden, max(8, hidden // 16), 1)], "/se/relu")
    s = m.node("HardSigmoid", [conv(s, "/se/expand", max(8, hidden // 16), hidden, 1)], "/se/gate",
               alpha=1 / 6, beta=0.5)
    y = conv(m.node("Mul", [y, s], "/se/scale"), "/project", hidden, channels, 1)
    y = m.node("Add", ["input", y], "/add")
    shape = (batch, channels, size, size)
    return m.model(name, shape, y, shape)


def style_block(batch: int = 1, channels: int = 32, size: int = 64, seed: int = 0, opset: int = 13,
                conv: int = 1) -> onnx.ModelProto:
    """A style-transfer network's first layer: a reflect Pad, a 7x7 conv 3 -> ``channels``, InstanceNormalization and
    PRelu; ``conv=0``: the InstanceNormalization and PRelu alone, over a ``channels``-channel input."""
    m = ModelMaker(seed, opset)
    x, c_in = "input", 3 if conv else channels
    if conv:
        x = m.node("Pad", [x, m.ints("/pad/pads", [0, 0, 3, 3, 0, 0, 3, 3])], "/pad", mode="reflect")
        x = m.node("Conv", [x, m.weight("conv.w", (channels, 3, 7, 7), 0.1), m.weight("conv.b", (channels,), 0.1)],
                   "/conv", kernel_shape=[7, 7])
    x = m.node("InstanceNormalization", [x, m.weight("norm.s", (channels,), 1.0), m.weight("norm.b", (channels,), 0.1)],
               "/norm", epsilon=1e-5)
    y = m.node("PRelu", [x, m.weight("prelu.slope", (channels, 1, 1), 0.2)], "/prelu")
    return m.model("style_block", (batch, c_in, size, size), y, (batch, channels, size, size))


def by_name(name: str) -> onnx.ModelProto:
    """The model a benchmark names: a builder of this module called with its defaults (or
    ``name:key=value,...``, integer arguments: ``densenet_block:growth=24,size=28``), or
    an ONNX file (a name ending in ``.onnx``), or ``gconv:C,K,H,G[,S[,R]]`` (``/`` also separates): :func:`grouped_conv` with C -> K channels at
    H x H in G groups (1: a plain conv), stride S, an R x R window."""
    if name.endswith(".onnx"):
        return onnx.load(name)
    if name.startswith("gconv:"):
        c, k, h, g, *rest = (int(v) for v in name[6:].replace("/", ",").split(","))
        return grouped_conv(channels=c, out_channels=k, size=h, groups=g, stride=rest[0] if rest else 1,
                            kernel=rest[1] if len(rest) > 1 else 3)
    name, _, args = name.partition(":")
    builder = globals().get(name)
    if name.startswith("_") or name == "by_name" or not inspect.isfunction(builder) or builder.__module__ != __name__:
        raise ValueError(f"no model {name!r} in tests/onnx_models.py")
    try:
        kwargs = {k: int(v) for k, v in (kv.split("=") for kv in args.replace("/", ",").split(",") if kv)}
    except ValueError:
        raise ValueError(f"model {name!r}: arguments {args!r} are not key=integer pairs") from None
    return builder(**kwargs)
