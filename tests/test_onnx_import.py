"""load_onnx: the one-error scan, opsets, symbolic dimensions, names, unreadable files, and the four
test models (MLP, ResNet-18, MobileNet block, BERT layer) against onnxruntime within 1e-4."""
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from graph.interpret import run
from graph.onnx_import import OnnxImportError, load_onnx, supported_ops
from tests import onnx_models

LATEST = onnx.defs.onnx_opset_version()


def _model(nodes, inputs, outputs, inits=(), opset=13, name="m"):
    model = helper.make_model(helper.make_graph(nodes, name, inputs, outputs, list(inits)),
                              opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def _f(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def onnxruntime_run(model, feeds):
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.intra_op_num_threads = so.inter_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))


# ------------------------------------------------------------------ the four models

MODELS = {
    "mlp": lambda: onnx_models.mlp(batch=8, sizes=(256, 512, 512, 100)),
    "resnet18": lambda: onnx_models.resnet18(batch=1, size=224),
    "mobilenet_block": lambda: onnx_models.mobilenet_block(batch=2, size=28),
    "bert_layer": lambda: onnx_models.bert_layer(seq=128, hidden=768, heads=12),
    "bert_layer_opset18": lambda: onnx_models.bert_layer(seq=32, hidden=128, heads=4, opset=18),
}


@pytest.mark.parametrize("which", sorted(MODELS))
def test_models_match_onnxruntime(which):
    model = MODELS[which]()
    graph = load_onnx(model)
    x = np.random.default_rng(1).standard_normal(graph.type_of("input").shape).astype(np.float32)
    got = run(graph, {"input": x})["output"]
    want = onnxruntime_run(model, {"input": x})["output"]
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * float(np.abs(want).max()))
    assert graph.outputs == ("output",) and graph.inputs == ("input",)


def test_bert_shape_plumbing_disappears_and_names_are_kept():
    model = onnx_models.bert_layer(seq=16, hidden=64, heads=4)
    graph = load_onnx(model)
    ops = graph.op_counts()
    assert not {"Shape", "Gather", "Unsqueeze", "Concat", "Constant"} & set(ops)
    assert ops["Reshape"] == 4 and ops["MatMul"] == 8 and ops["ReduceMean"] == 4 and ops["Erf"] == 1
    reshapes = [n for n in graph.nodes if n.op == "Reshape"]
    assert {n.attr("shape") for n in reshapes} == {(1, 16, 4, 16), (1, 16, 64)}
    onnx_values = {o for n in model.graph.node for o in n.output}
    assert all(n.outputs[0] in onnx_values for n in graph.nodes)
    assert "/attention/self/Softmax" in {n.name for n in graph.nodes}
    assert set(graph.constants) <= {t.name for t in model.graph.initializer}


def test_resnet_imports_batchnorm_and_flatten_as_canonical_ops():
    graph = load_onnx(onnx_models.resnet18(size=32))
    assert graph.op_counts() == {"Conv": 20, "BatchNormalization": 20, "Relu": 17, "MaxPool": 1, "Add": 8,
                                 "GlobalAveragePool": 1, "Reshape": 1, "Gemm": 1}
    assert graph.type_of("output").shape == (1, 1000)


# ------------------------------------------------------------------ the one-error scan

def test_scan_lists_every_unsupported_op_attribute_and_dimension_at_once():
    x = _f("x", ["batch", 3, 8, 8])
    w3 = numpy_helper.from_array(np.zeros((2, 3, 1, 1, 1), np.float32), "w3")
    nodes = [helper.make_node("LSTM", ["x"], ["a"], name="lstm1"),
             helper.make_node("LSTM", ["x"], ["b"], name="lstm2"),
             helper.make_node("NonMaxSuppression", ["x"], ["c"], name="nms"),
             helper.make_node("Foo", ["x"], ["d"], name="custom", domain="com.example"),
             helper.make_node("Conv", ["x", "w3"], ["e"], name="conv3d"),
             helper.make_node("Relu", ["x"], ["f"], name="relu", alpha=0.1),
             helper.make_node("Cast", ["x"], ["g"], name="cast", to=TensorProto.STRING),
             helper.make_node("Gelu", ["x"], ["h"], name="gelu", approximate="fast"),
             helper.make_node("BatchNormalization", ["x", "s", "s", "s", "s"], ["i", "rm", "rv"], name="bn",
                              training_mode=1),
             helper.make_node("MaxPool", ["x"], ["j", "idx"], name="pool", kernel_shape=[2, 2]),
             helper.make_node("Constant", [], ["k"], name="text",
                              value=helper.make_tensor("t", TensorProto.STRING, [1], [b"a"]))]
    model = _model(nodes, [x], [_f("y", [1])], [w3], opset=20)
    with pytest.raises(OnnxImportError) as err:
        load_onnx(model)
    msg = str(err.value)
    assert "\n" not in msg
    for part in ["unsupported op types: LSTM (opset 20) at nodes lstm1, lstm2", "NonMaxSuppression (opset 20) at node nms",
                 "com.example.Foo", "node conv3d (Conv): only 1-d and 2-d Conv are supported (this one is 3-d)",
                 "node relu (Relu): attribute alpha is not supported", "node cast (Cast): to=8 is not supported",
                 "node gelu (Gelu): approximate='fast' is not supported", "node bn (BatchNormalization): training_mode=1",
                 "the training outputs rm, rv", "node pool (MaxPool): the Indices output",
                 "node text (Constant): value=<tensor> has the element type TensorProto.STRING",
                 "input x [batch,3,8,8] has the symbolic dimension 0 (batch)"]:
        assert part in msg, part


def test_unknown_attributes_are_refused_not_ignored():
    nodes = [helper.make_node("Conv", ["x", "w"], ["y"], name="c", kernel_shape=[1, 1], future_knob=3),
             helper.make_node("AveragePool", ["y"], ["z"], name="p", kernel_shape=[2, 2], dilations=[2, 2]),
             helper.make_node("MaxPool", ["y"], ["q"], name="q", kernel_shape=[3, 3], auto_pad="SAME_UPPER",
                              dilations=[2, 2]),
             helper.make_node("MaxPool", ["y"], ["r"], name="r", kernel_shape=[3, 3], auto_pad="SAME_UPPER",
                              ceil_mode=1)]
    w = numpy_helper.from_array(np.zeros((2, 3, 1, 1), np.float32), "w")
    with pytest.raises(OnnxImportError, match=r"node c \(Conv\): attribute future_knob is not supported; "
                                              r"node p \(AveragePool\): dilations=\(2, 2\) is not supported.*"
                                              r"node q \(MaxPool\): auto_pad=SAME_\* together with dilations.*"
                                              r"node r \(MaxPool\): ceil_mode=1 together with auto_pad"):
        load_onnx(_model(nodes, [_f("x", [1, 3, 8, 8])], [_f("z", None)], [w], opset=19))


def test_an_op_newer_than_the_model_opset_is_named_as_such():
    model = _model([helper.make_node("Gelu", ["x"], ["y"], name="g")], [_f("x", [2])], [_f("y", [2])], opset=17)
    with pytest.raises(OnnxImportError, match=r"unsupported op type: Gelu \(not in opset 17\) at node g$"):
        load_onnx(model)


def test_opsets_past_the_current_are_refused_in_one_line():
    model = _model([helper.make_node("Relu", ["x"], ["y"])], [_f("x", [2])], [_f("y", [2])], opset=LATEST + 1)
    with pytest.raises(OnnxImportError, match=rf"opset {LATEST + 1} is not supported \(supported: 13 to {LATEST};"):
        load_onnx(model)


def test_older_opsets_are_converted_or_refused_in_one_line():
    model = _model([helper.make_node("Relu", ["x"], ["y"])], [_f("x", [2])], [_f("y", [2])], opset=12)
    assert load_onnx(model).op_counts() == {"Relu": 1}
    model = _model([helper.make_node("FooBar", ["x"], ["y"])], [_f("x", [2])], [_f("y", [2])], opset=11)
    with pytest.raises(OnnxImportError, match=r"^[^\n]*opset 11 is not supported \(supported: 13 to \d+\) and "
                                              r"onnx.version_converter cannot convert it \(Op '%s' has no"):
        load_onnx(model)


def test_attribute_like_inputs_computed_at_run_time_are_refused_naming_each_node():
    nodes = [helper.make_node("Reshape", ["x", "s"], ["r"], name="dyn"),
             helper.make_node("Relu", ["r"], ["y"], name="after"),             # downstream: not reported
             helper.make_node("Unsqueeze", ["x", "s"], ["u"], name="dyn2"),
             helper.make_node("Relu", ["x"], ["z"], name="fine")]
    model = _model(nodes, [_f("x", [2, 3]), helper.make_tensor_value_info("s", TensorProto.INT64, [2])],
                   [_f("y", [3, 2]), _f("u", [2, 1, 3, 1]), _f("z", [2, 3])])
    with pytest.raises(OnnxImportError) as err:
        load_onnx(model)
    assert str(err.value) == ("m: cannot import: node dyn (Reshape): shape ('s') must be a constant or computable "
                              "from static shapes; node dyn2 (Unsqueeze): axes ('s') must be a constant or "
                              "computable from static shapes")


# ------------------------------------------------------------------ symbolic dimensions

def test_symbolic_dimensions_pinned_by_shapes():
    model = onnx_models.mlp(batch=4, sizes=(8, 16, 3))
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "batch"
    model.graph.output[0].type.tensor_type.shape.dim[0].dim_param = "batch"
    with pytest.raises(OnnxImportError, match=r"input input \[batch,8\] has the symbolic dimension 0 \(batch\): "
                                              r"pin it \(shapes=\{'input': \(...\)\}; on the command line --shape input=DIMS\)"):
        load_onnx(model)
    for pin in ((5, 8), "5x8"):
        graph = load_onnx(model, shapes={"input": pin})
        assert graph.type_of("input").shape == (5, 8) and graph.type_of("output").shape == (5, 3)
    x = np.random.default_rng(0).standard_normal((5, 8)).astype(np.float32)
    np.testing.assert_allclose(run(graph, {"input": x})["output"], onnxruntime_run(model, {"input": x})["output"],
                               rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("shapes, match", [
    ({"input": (5, 9)}, r"input input is \[batch,8\] in the model, pinned as \[5, 9\]"),
    ({"input": (5, 8, 1)}, r"pinned as \[5, 8, 1\]"),
    ({"nope": (1,)}, r"shapes names no input nope \(inputs: input\)"),
])
def test_bad_pins_are_refused(shapes, match):
    model = onnx_models.mlp(batch=4, sizes=(8, 3))
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "batch"
    with pytest.raises(OnnxImportError, match=match):
        load_onnx(model, shapes=shapes)


# ------------------------------------------------------------------ files, names, initializers

def test_unreadable_files_are_one_line(tmp_path):
    with pytest.raises(OnnxImportError, match="no such file"):
        load_onnx(tmp_path / "missing.onnx")
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x00\x01 this is not protobuf")
    with pytest.raises(OnnxImportError, match=r"bad.onnx: not a readable ONNX model") as err:
        load_onnx(bad)
    assert "\n" not in str(err.value)


def test_initializers_of_unsupported_types_and_missing_external_data_are_one_line(tmp_path):
    bf = helper.make_tensor("w", TensorProto.BFLOAT16, [2], [1.0, 2.0])
    model = _model([helper.make_node("Add", ["x", "w"], ["y"])], [_f("x", [2])], [_f("y", [2])], [bf])
    with pytest.raises(OnnxImportError, match=r"initializers of unsupported element types: w \(supported: float32"):
        load_onnx(model)
    model = onnx_models.mlp(batch=2, sizes=(4, 3))
    onnx.save(model, tmp_path / "ext.onnx", save_as_external_data=True, all_tensors_to_one_file=True,
              location="weights.bin", size_threshold=0)
    (tmp_path / "weights.bin").unlink()
    with pytest.raises(OnnxImportError) as err:
        load_onnx(tmp_path / "ext.onnx")
    assert "\n" not in str(err.value) and "ext.onnx" in str(err.value)


def test_load_from_a_file(tmp_path):
    path = tmp_path / "mlp.onnx"
    onnx.save(onnx_models.mlp(batch=2, sizes=(4, 3)), path)
    assert load_onnx(str(path)).type_of("output").shape == (2, 3)


def test_initializers_listed_as_inputs_are_constants_and_unused_ones_dropped():
    w = numpy_helper.from_array(np.ones((3, 2), np.float32), "w")
    unused = numpy_helper.from_array(np.ones(5, np.float32), "unused")
    model = _model([helper.make_node("MatMul", ["x", "w"], ["y"])], [_f("x", [4, 3]), _f("w", [3, 2]), _f("unused", [5])],
                   [_f("y", [4, 2])], [w, unused])
    model.ir_version = 3
    graph = load_onnx(model)
    assert graph.inputs == ("x",) and set(graph.constants) == {"w"}


def test_an_output_that_is_an_input_or_a_constant_keeps_its_onnx_name():
    c = numpy_helper.from_array(np.arange(3, dtype=np.int64), "c")
    nodes = [helper.make_node("Identity", ["x"], ["y"]), helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Identity", ["c"], ["k"])]
    model = _model(nodes, [_f("x", [2, 5])], [_f("y", [2, 5]), helper.make_tensor_value_info("s", TensorProto.INT64, [2]),
                                             helper.make_tensor_value_info("k", TensorProto.INT64, [3])], [c])
    graph = load_onnx(model)
    assert graph.outputs == ("y", "s", "k")
    out = run(graph, {"x": np.ones((2, 5), np.float32)})
    assert out["s"].tolist() == [2, 5] and out["k"].tolist() == [0, 1, 2] and out["y"].shape == (2, 5)


def test_supported_ops_cover_the_issue_list():
    wanted = {"Gemm", "MatMul", "Add", "Sub", "Mul", "Div", "Relu", "Sigmoid", "Tanh", "Softmax", "Flatten",
              "Identity", "Dropout", "Constant", "Conv", "BatchNormalization", "MaxPool", "AveragePool",
              "GlobalAveragePool", "Clip", "Concat", "LayerNormalization", "Gelu", "Erf", "Sqrt", "Pow",
              "ReduceMean", "ReduceSum", "Transpose", "Reshape", "Shape", "Gather", "Unsqueeze", "Squeeze", "Slice",
              "Cast", "Where", "Equal", "Expand", "ConstantOfShape"}
    assert wanted <= set(supported_ops())


def test_a_shape_error_in_the_model_names_the_onnx_node_once():
    model = _model([helper.make_node("Add", ["x", "z"], ["y"], name="add")], [_f("x", [2, 3]), _f("z", [4])],
                   [_f("y", [2, 3])])
    with pytest.raises(OnnxImportError, match=r"^m: cannot import: node add \(Add\): shapes \(2, 3\) and \(4,\) do not broadcast$"):
        load_onnx(model)


def test_printed_graph_shows_the_onnx_names():
    text = str(load_onnx(onnx_models.mobilenet_block(channels=4, expansion=2, size=6)))
    assert text.splitlines()[0] == "graph mobilenet_block(input: float32[1,4,6,6]) -> (output: float32[1,4,6,6])"
    assert ("/conv/1/Conv_output_0: float32[1,8,6,6] = Conv(/conv/0/relu6/Clip_output_0, conv.1.weight, "
            "conv.1.bias; dilations=[1,1], group=8, pads=[1,1,1,1], strides=[1,1])  # /conv/1/Conv") in text
    assert "output: float32[1,4,6,6] = Add(input, /conv/2/Conv_output_0)  # /add/Add" in text
