"""Small ONNX models of the kinds users bring (not in tests/onnx_models.py), compiled and run
against onnxruntime: runtime index inputs, 1-d convolutions and pools, Einsum, ConvTranspose
with auto_pad / output_shape."""
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

ort = pytest.importorskip("onnxruntime")

from graph.runtime.model import ModelInputError  # noqa: E402
from tuner.model_api import compile_model, load  # noqa: E402

RNG = np.random.default_rng(0)


def _model(nodes, inputs, outputs, weights=None, opset=13):
    inits = [numpy_helper.from_array(np.asarray(a), name) for name, a in (weights or {}).items()]
    graph = helper.make_graph(nodes, "m", [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    # the outputs' shapes as onnxruntime computes them (the checker wants one on every output)
    feeds = {i.name: np.zeros([d.dim_value for d in i.type.tensor_type.shape.dim],
                              helper.tensor_dtype_to_np_dtype(i.type.tensor_type.elem_type))
             for i in model.graph.input}
    shapes = [a.shape for a in _ort(model, feeds)]
    for o, shape in zip(model.graph.output, shapes):
        o.type.tensor_type.shape.dim.extend([onnx.TensorShapeProto.Dimension(dim_value=d) for d in shape])
    onnx.checker.check_model(model)
    return model


def _ort(model, feeds):
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.intra_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, feeds)


def _check(model, feeds, tol=1e-5):
    compiled = compile_model(load(model), threads=1)
    got = compiled.run(feeds)
    want = _ort(model, feeds)
    for o, w in zip(model.graph.output, want):
        assert got[o.name].shape == w.shape, o.name
        assert np.abs(got[o.name] - w).max() <= tol * max(1.0, np.abs(w).max()), o.name
    return compiled


def _w(*shape):
    return (RNG.standard_normal(shape) * 0.3).astype(np.float32)


def test_gather_runtime_indices_checked_and_clamped():
    # an embedding lookup of int64 token ids given at run time, negative ids counting from the end
    model = _model([helper.make_node("Gather", ["table", "ids"], ["e"], axis=0),
                    helper.make_node("Relu", ["e"], ["out"])],
                   [("ids", TensorProto.INT64, [2, 7])], ["out"], {"table": _w(30, 8)})
    ids = RNG.integers(-30, 30, (2, 7)).astype(np.int64)
    compiled = _check(model, {"ids": ids})
    ids[1, 3] = 30
    with pytest.raises(ModelInputError, match=r"input 'ids' holds index 30 outside -30\.\.29"):
        compiled.run({"ids": ids})
    # the C header of a compiled library says so (its callers get no check) ...
    from tuner.model_aot import header_source
    assert "(indexes Gather " in header_source(compiled, "m") and "values in -30..29; others are clamped" in \
        header_source(compiled, "m")
    # ... and past the check the kernel clamps: no stray read
    compiled.index_limits.clear()
    ids[0, 0], ids[1, 3] = 10 ** 6, -10 ** 6
    table = numpy_helper.to_array(model.graph.initializer[0])
    got = compiled.run({"ids": ids})["out"]
    np.testing.assert_allclose(got[0, 0], np.maximum(table[29], 0), rtol=1e-6)
    np.testing.assert_allclose(got[1, 3], np.maximum(table[0], 0), rtol=1e-6)


def test_1d_conv_and_pools():
    # Conv1d as PyTorch exports it (bias; groups, strides, dilations; auto_pad), pools with ceil_mode
    x = [("x", TensorProto.FLOAT, [2, 6, 50])]
    model = _model([
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], kernel_shape=[3], pads=[1, 1]),
        helper.make_node("Conv", ["x", "w2"], ["c2"], strides=[2], dilations=[2], group=3, pads=[3, 1]),
        helper.make_node("Conv", ["x", "w3"], ["c3"], auto_pad="SAME_UPPER", strides=[3]),
        helper.make_node("MaxPool", ["x"], ["m"], kernel_shape=[3], strides=[2], ceil_mode=1, pads=[1, 1],
                         dilations=[2]),
        helper.make_node("AveragePool", ["c1"], ["a1"], kernel_shape=[4], strides=[3], pads=[2, 1], ceil_mode=1),
        helper.make_node("AveragePool", ["x"], ["a2"], kernel_shape=[3], auto_pad="SAME_LOWER",
                         count_include_pad=1),
    ], x, ["c1", "c2", "c3", "m", "a1", "a2"], {"w1": _w(8, 6, 3), "b1": _w(8), "w2": _w(12, 2, 5), "w3": _w(6, 6, 4)})
    _check(model, {"x": RNG.standard_normal((2, 6, 50)).astype(np.float32)})


def test_conv_transpose_auto_pad_output_shape_and_1d():
    # odd total paddings: onnxruntime puts the odd one at the end with SAME_UPPER, else at the beginning
    model = _model([
        helper.make_node("ConvTranspose", ["x", "w"], ["u"], strides=[2, 3], auto_pad="SAME_UPPER"),
        helper.make_node("ConvTranspose", ["x", "w"], ["l"], strides=[2, 3], auto_pad="SAME_LOWER"),
        helper.make_node("ConvTranspose", ["x", "w", "b"], ["o1"], strides=[3, 2], output_shape=[30, 27]),
        helper.make_node("ConvTranspose", ["x", "w"], ["o2"], strides=[3, 2], output_shape=[31, 28]),
        helper.make_node("ConvTranspose", ["x", "w"], ["o3"], strides=[3, 2], output_shape=[29, 26],
                         auto_pad="SAME_UPPER"),
    ], [("x", TensorProto.FLOAT, [2, 8, 10, 13])], ["u", "l", "o1", "o2", "o3"], {"w": _w(8, 3, 3, 3), "b": _w(3)})
    _check(model, {"x": RNG.standard_normal((2, 8, 10, 13)).astype(np.float32)})
    model = _model([
        helper.make_node("ConvTranspose", ["x", "w", "b"], ["y"], strides=[2], pads=[2, 1], output_padding=[1]),
        helper.make_node("ConvTranspose", ["x", "w2"], ["z"], strides=[3], group=2, auto_pad="SAME_UPPER",
                         dilations=[2]),
    ], [("x", TensorProto.FLOAT, [2, 6, 20])], ["y", "z"], {"w": _w(6, 4, 5), "b": _w(4), "w2": _w(6, 2, 4)})
    _check(model, {"x": RNG.standard_normal((2, 6, 20)).astype(np.float32)})


def test_einsum_equations_match_onnxruntime():
    # attention scores and mixing, ellipsis batches, implicit output, a sum to a scalar, three operands
    cases = [("bhqd,bhkd->bhqk", "q", "k"), ("bhqk,bhkd->bhqd", "s", "k"), ("...qd,de->...qe", "q", "w"),
             ("bhqd,de", "q", "w"), ("bhqd->hd", "q"), ("bhqd,bhqd->", "q", "q"), ("bhqd,de,ef->bhqf", "q", "w", "v")]
    nodes = [helper.make_node("Einsum", list(ins), [f"y{i}"], equation=eq) for i, (eq, *ins) in enumerate(cases)]
    shapes = {"q": [2, 3, 5, 4], "k": [2, 3, 6, 4], "s": [2, 3, 5, 6]}
    model = _model(nodes, [(n, TensorProto.FLOAT, s) for n, s in shapes.items()], [f"y{i}" for i in range(len(cases))],
                   {"w": _w(4, 7), "v": _w(7, 3)})
    _check(model, {n: RNG.standard_normal(s).astype(np.float32) for n, s in shapes.items()})


def test_einsum_diagonal_is_refused_in_one_line():
    model = _model([helper.make_node("Einsum", ["x"], ["y"], equation="ii->i")], [("x", TensorProto.FLOAT, [3, 3])],
                   ["y"])
    with pytest.raises(ValueError, match=r"^[^\n]*a letter repeated in one operand \(a diagonal\) is not supported"):
        load(model)


def test_conv_transpose_with_known_weights_runs_as_a_conv_over_phases():
    # the decoder shapes of UNets and GANs: k2 s2, k4 s2 p1, k3 s2 p1 + output_padding, k3 s1; then
    # the same with the weights given at run time (the ConvTranspose kernel itself)
    x = [("x", TensorProto.FLOAT, [2, 8, 7, 9])]
    cases = [dict(strides=[2, 2]), dict(strides=[2, 2], pads=[1, 1, 1, 1]),
             dict(strides=[2, 2], pads=[1, 1, 1, 1], output_padding=[1, 1]), dict(pads=[1, 1, 1, 1])]
    kernels = [(2, 2), (4, 4), (3, 3), (3, 3)]
    nodes = [helper.make_node("ConvTranspose", ["x", f"w{i}", "b"], [f"y{i}"], **a) for i, a in enumerate(cases)]
    weights = {f"w{i}": _w(8, 4, *k) for i, k in enumerate(kernels)}
    # FCN's per-channel (group = channels) bilinear-style upsampling, and 2 groups of 4 channels
    nodes += [helper.make_node("ConvTranspose", ["x", "wd"], ["y4"], group=8, strides=[2, 2], pads=[1, 1, 1, 1]),
              helper.make_node("ConvTranspose", ["x", "wg", "bg"], ["y5"], group=2, strides=[2, 3], pads=[1, 0, 1, 1])]
    weights.update(wd=_w(8, 1, 4, 4), wg=_w(8, 3, 3, 3), bg=_w(6))
    model = _model(nodes, x, [f"y{i}" for i in range(6)], dict(weights, b=_w(4)))
    compiled = _check(model, {"x": RNG.standard_normal((2, 8, 7, 9)).astype(np.float32)})
    assert compiled.info["plan"].graph.op_counts().get("ConvTranspose", 0) == 0
    model = _model([helper.make_node("ConvTranspose", ["x", "w"], ["y"], strides=[2, 2], pads=[1, 1, 1, 1])],
                   x + [("w", TensorProto.FLOAT, [8, 4, 4, 4])], ["y"])
    compiled = _check(model, {"x": RNG.standard_normal((2, 8, 7, 9)).astype(np.float32), "w": _w(8, 4, 4, 4)})
    assert compiled.info["plan"].graph.op_counts()["ConvTranspose"] == 1


def test_cli_run_takes_a_dynamic_inputs_shape_from_its_array(tmp_path, capsys):
    from tuner.cli import main
    model = _model([helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
                    helper.make_node("Relu", ["c"], ["y"])], [("x", TensorProto.FLOAT, [2, 3, 8, 8])], ["y"],
                   {"w": _w(4, 3, 3, 3)})
    for d, name in zip(model.graph.input[0].type.tensor_type.shape.dim, ("N", None, "H", "W")):
        if name:
            d.dim_param = name
    path = tmp_path / "dyn.onnx"
    onnx.save(model, path)
    x = RNG.standard_normal((3, 3, 11, 7)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    assert main(["run", str(path), "--input", f"x={tmp_path / 'x.npy'}", "--output", str(tmp_path / "o.npz"),
                 "--threads", "1"]) == 0
    want = _ort(model, {"x": x})[0]
    np.testing.assert_allclose(np.load(tmp_path / "o.npz")["y"], want, rtol=1e-5, atol=1e-5)
    # an array of another rank: the pinned shape does not fit, in one line
    capsys.readouterr()
    np.save(tmp_path / "x.npy", x[0])
    assert main(["run", str(path), "--input", f"x={tmp_path / 'x.npy'}", "--output", str(tmp_path / "o.npz")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "input x is [N,3,H,W] in the model, pinned as [3, 11, 7]" in err[0]


@pytest.mark.parametrize("attrs", [{}, {"coordinate_transformation_mode": "align_corners"},
                                   {"coordinate_transformation_mode": "pytorch_half_pixel", "cubic_coeff_a": -0.5},
                                   {"exclude_outside": 1}])
def test_resize_cubic_matches_onnxruntime(attrs):
    # PyTorch's bicubic upsampling (and a downscale, where taps fall outside the input)
    x = [("x", TensorProto.FLOAT, [2, 3, 10, 13])]
    model = _model([helper.make_node("Resize", ["x", "", "up"], ["u"], mode="cubic", **attrs),
                    helper.make_node("Resize", ["x", "", "down"], ["d"], mode="cubic", **attrs)], x, ["u", "d"],
                   {"up": np.array([1, 1, 2, 1.5], np.float32), "down": np.array([1, 1, 0.6, 0.4], np.float32)})
    _check(model, {"x": RNG.standard_normal((2, 3, 10, 13)).astype(np.float32)})


def test_opset_11_model_is_converted_and_keeps_its_semantics():
    # ONNX model zoo style: opset 11, Softmax over a coerced 2-d view, Split/Unsqueeze/ReduceSum attributes
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Softmax", ["c"], ["sm"], axis=1),
             helper.make_node("ReduceSum", ["sm"], ["rs"], axes=[2], keepdims=1),
             helper.make_node("Unsqueeze", ["rs"], ["y"], axes=[0]),
             helper.make_node("Split", ["c"], ["s1", "s2"], axis=1, split=[3, 5]),
             helper.make_node("Clip", ["s2", "lo", "hi"], ["z"])]
    weights = {"w": _w(8, 3, 3, 3), "b": _w(8), "lo": np.float32(-0.1), "hi": np.float32(0.2)}
    model = _model(nodes, [("x", TensorProto.FLOAT, [2, 3, 6, 7])], ["y", "s1", "z"], weights, opset=11)
    _check(model, {"x": RNG.standard_normal((2, 3, 6, 7)).astype(np.float32)})


def test_grouped_conv_with_wide_groups_runs_as_dense_convs():
    # ResNeXt's grouped 3x3 (4 groups of 16 channels): one dense Conv per group, then a Concat; a
    # depthwise-like one (32 groups of 2) stays one grouped Conv
    nodes = [helper.make_node("Conv", ["x", "w4", "b"], ["c4"], group=4, pads=[1, 1, 1, 1], strides=[2, 2]),
             helper.make_node("Relu", ["c4"], ["y4"]),
             helper.make_node("Conv", ["x", "w32"], ["y32"], group=32, pads=[1, 1, 1, 1])]
    model = _model(nodes, [("x", TensorProto.FLOAT, [2, 64, 9, 11])], ["y4", "y32"],
                   {"w4": _w(64, 16, 3, 3), "b": _w(64), "w32": _w(64, 2, 3, 3)})
    compiled = _check(model, {"x": RNG.standard_normal((2, 64, 9, 11)).astype(np.float32)})
    groups = sorted(n.attr("group", 1) for n in compiled.info["plan"].graph.nodes if n.op == "Conv")
    assert groups == [1, 1, 1, 1, 32]


def test_scatter_and_gather_nd_with_known_indices():
    # x[:, 0] = y as exporters write it (ScatterND), ScatterElements on an axis, GatherND with batch_dims
    nodes = [helper.make_node("ScatterND", ["x", "i1", "u1"], ["a"]),
             helper.make_node("ScatterElements", ["x", "i2", "u2"], ["b"], axis=1),
             helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("GatherND", ["r", "i3"], ["c"]),
             helper.make_node("GatherND", ["x", "i4"], ["d"], batch_dims=1)]
    weights = {"i1": np.array([[0, 1], [1, -1], [0, 3]], np.int64), "u1": _w(3, 4),
               "i2": np.array([[[0, 2, 1, 4]], [[3, 3, -1, 0]]], np.int64), "u2": _w(2, 1, 4),
               "i3": np.array([[[0, 1], [1, 2]], [[1, 4], [0, 0]]], np.int64), "i4": np.array([[[2, 1]], [[0, 3]]], np.int64)}
    model = _model(nodes, [("x", TensorProto.FLOAT, [2, 5, 4])], ["a", "b", "c", "d"], weights, opset=16)
    _check(model, {"x": RNG.standard_normal((2, 5, 4)).astype(np.float32)})
    model = _model([helper.make_node("ScatterND", ["x", "i", "u"], ["y"])],
                   [("x", TensorProto.FLOAT, [2, 5, 4]), ("i", TensorProto.INT64, [3, 2])], ["y"], {"u": _w(3, 4)},
                   opset=16)
    with pytest.raises(ValueError, match=r"^[^\n]*ScatterND\): indices computed at run time are not supported"):
        load(model)


@pytest.mark.parametrize("name, kwargs", [("resnext_block", dict(channels=32, groups=4, size=9)),
                                          ("unet_up", dict(channels=16, size=7)),
                                          ("se_block", dict(channels=16, size=11)),
                                          ("densenet_block", dict(channels=16, growth=12, layers=2, size=10)),
                                          ("squeezenet", dict(size=33, classes=40)),
                                          ("vgg_small", dict(height=16, width=24, classes=10)),
                                          ("espcn", dict(size=19, channels=3, upscale=3)),
                                          ("dncnn", dict(size=21, channels=3, features=16, depth=4)),
                                          ("conv1d", dict(channels=12, out_channels=20, length=77, kernel=5, stride=2)),
                                          ("conv1d", dict(channels=16, out_channels=16, length=50, dilation=2, groups=16)),
                                          ("shufflenet_unit", dict(channels=24, size=9)),
                                          ("convnext_block", dict(channels=16, size=9)),
                                          ("mobilenetv3_block", dict(channels=40, size=9)),
                                          ("groupnorm_block", dict(channels=24, size=9, groups=4)),
                                          ("groupnorm_block", dict(batch=2, channels=32, size=8, groups=8)),
                                          ("yolo_neck", dict(channels=16, size=14)),
                                          ("yolo_neck", dict(channels=24, size=10)),
                                          ("dcgan_generator", dict(channels=32, size=5)),
                                          ("dcgan_generator", dict(batch=2, channels=24, size=4, out_channels=1)),
                                          ("lenet", dict(batch=3, classes=7)),
                                          ("aspp", dict(channels=32, out_channels=16, size=13, rates="2,5,9")),
                                          ("aspp", dict(batch=2, channels=24, out_channels=24, size=9, rates="3")),
                                          ("tf_mobilenet", dict(size=20, channels=16)),
                                          ("tf_mobilenet", dict(batch=2, size=12, channels=8)),
                                          ("style_block", dict(channels=8, size=20)),
                                          ("style_block", dict(batch=2, channels=16, size=9, conv=0))])
def test_new_builders_match_onnxruntime(name, kwargs):
    models = pytest.importorskip("tests.onnx_models")
    model = getattr(models, name)(**kwargs)
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    _check(model, {"input": RNG.standard_normal(shape).astype(np.float32)})


@pytest.mark.parametrize("rule", [True, False])
def test_a_one_channel_conv_writing_a_graph_output_is_the_convolution_rules(rule, monkeypatch):
    # a conv over one input channel lowered without a channel axis was no convolution to the space: the generic
    # nest guarded every FMA's load for the padding (5x5 1 -> 64 at 128x128: 1.87 ms against 0.56; decision 099)
    from graph.lower import linalg
    from schedules import Schedule
    from schedules.conv_space import find_convs
    from tuner.model_compile import plan_graph
    monkeypatch.setattr(linalg, "ONE_CHANNEL_AXIS", rule)
    w = RNG.standard_normal((12, 1, 5, 5)).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[2, 1, 2, 3], strides=[1, 2]),
             helper.make_node("Tanh", ["c"], ["y"])]
    model = _model(nodes, [("x", TensorProto.FLOAT, [2, 1, 17, 23])], ["y"],
                   {"w": w, "b": RNG.standard_normal(12).astype(np.float32)})
    plan = plan_graph(load(model))
    convs = [i for lw in plan.lowered for i in find_convs(Schedule(lw.tensors).stage_graph()).values()]
    assert [(i.C, i.K, i.R, i.S) for i in convs] == ([(1, 12, 5, 5)] if rule else [])
    _check(model, {"x": RNG.standard_normal((2, 1, 17, 23)).astype(np.float32)})


@pytest.mark.parametrize("rule", [True, False])
def test_a_tensorflow_export_s_explicit_pads_fold_into_its_convs(rule, monkeypatch):
    # tf2onnx writes SAME padding as Pad + VALID Conv, and an NHWC input transposed first (decision 102)
    from graph.passes import pad
    from tuner.model_compile import plan_graph
    monkeypatch.setattr(pad, "FOLD_PADS", rule)
    w1, w2 = RNG.standard_normal((16, 3, 3, 3)).astype(np.float32), RNG.standard_normal((16, 1, 3, 3)).astype(np.float32)
    nodes = [helper.make_node("Transpose", ["x"], ["t"], perm=[0, 3, 1, 2]),
             helper.make_node("Pad", ["t", "p1"], ["a"]),
             helper.make_node("Conv", ["a", "w1", "b1"], ["c1"], strides=[2, 2]),
             helper.make_node("Clip", ["c1", "lo", "hi"], ["r1"]),
             helper.make_node("Pad", ["r1", "p2"], ["d"]),
             helper.make_node("Conv", ["d", "w2"], ["y"], group=16)]
    weights = {"w1": w1, "b1": RNG.standard_normal(16).astype(np.float32), "w2": w2,
               "p1": np.array([0, 0, 0, 0, 0, 0, 1, 1], np.int64), "p2": np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64),
               "lo": np.array(0.0, np.float32), "hi": np.array(6.0, np.float32)}
    model = _model(nodes, [("x", TensorProto.FLOAT, [1, 20, 22, 3])], ["y"], weights)
    plan = plan_graph(load(model))
    assert any(n.op == "Pad" for g in plan.groups for n in g.nodes) is not rule
    _check(model, {"x": RNG.standard_normal((1, 20, 22, 3)).astype(np.float32)})
