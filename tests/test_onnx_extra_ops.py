"""The ops added after the first importer (activations, rounding, Sign, Sum/Mean/Max/Min, PRelu, Pad,
Split, Tile, ReduceMin/Prod/L1/L2/SumSquare, ArgMax/ArgMin, LRN), end to end: each imported model
against onnx.reference.ReferenceEvaluator, each fused group's tensor expression against the
interpreter, and compiled models against the interpreter and onnxruntime."""
import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from graph.builder import GraphBuilder
from graph.fusion import fuse
from graph.interpret import run
from graph.lower import LoweringError, lower_group
from graph.lower.extra import floor, round_half_even, sine
from graph.onnx_import import OnnxImportError, load_onnx
from tensorir import te
from tensorir.te.evaluate import evaluate
from tests.test_model_lower import check_lowered
from tests.test_onnx_ops import check, make_model, node
from tuner.model_api import compile_model

LATEST = onnx.defs.onnx_opset_version()
RNG = np.random.default_rng(5)


def rand(*shape, low=-3.0, high=3.0, dtype="float32"):
    return RNG.uniform(low, high, shape).astype(dtype)


def onnxruntime_run(model, feeds):
    ort = pytest.importorskip("onnxruntime")
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def ort_model(nodes, inputs: dict, consts: dict, opset: int) -> onnx.ModelProto:
    """A one-output float model for the ops the reference evaluator gets wrong or refuses (Mean's
    broadcasting, LRN's channel window, Pad's negative pads, GatherElements with indices smaller than the
    data); its output type comes from onnxruntime."""
    def model(out_shape):
        return helper.make_model(helper.make_graph(
            nodes, "case", [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
                            for k, a in inputs.items()],
            [helper.make_tensor_value_info("y", 1, out_shape)],
            [numpy_helper.from_array(np.asarray(a), k) for k, a in consts.items()]),
            opset_imports=[helper.make_opsetid("", opset)], ir_version=8)
    (y,) = onnxruntime_run(model(None), inputs)
    return model(y.shape)


def imported(model, feeds, reference="onnx", **tol):
    """Import ``model``, check it against the reference evaluator (or onnxruntime) and its lowering against
    the interpreter."""
    graph = check(model, feeds, compare_with=onnxruntime_run if reference == "onnxruntime" else None, **tol)
    check_lowered(graph, feeds)
    return graph


# ------------------------------------------------------------------ activations, rounding, Sign

ACTIVATIONS = [("LeakyRelu", {}), ("LeakyRelu", {"alpha": 0.2}), ("ThresholdedRelu", {"alpha": 0.5}),
               ("Elu", {}), ("Elu", {"alpha": 0.3}), ("Selu", {}), ("Selu", {"alpha": 1.5, "gamma": 2.0}),
               ("HardSigmoid", {}), ("HardSigmoid", {"alpha": 0.3, "beta": 0.4}), ("HardSwish", {}),
               ("Softplus", {}), ("Softsign", {}), ("Mish", {}), ("Celu", {}), ("Celu", {"alpha": 0.5}),
               ("Shrink", {}), ("Shrink", {"bias": 0.5, "lambd": 1.0}), ("Sin", {}), ("Cos", {}),
               ("Floor", {}), ("Ceil", {}), ("Round", {}), ("Sign", {})]


@pytest.mark.parametrize("op, attrs", ACTIVATIONS, ids=str)
def test_activation(op, attrs):
    x = rand(3, 1, 7) * 4
    x[0, 0, :4] = [0.5, -1.5, 2.5, 0.0]       # halves round to even, Sign of 0
    graph = imported(make_model([node(op, ["x"], **attrs)], {"x": x}, {}, ["y"], 18 if op == "Mish" else 14), {"x": x})
    assert graph.op_counts() == {op: 1} and graph.nodes[0].attr_dict == {k: float(np.float32(v)) for k, v in attrs.items()}


def test_sign_of_integers():
    x = RNG.integers(-3, 4, (4, 5)).astype(np.int64)
    imported(make_model([node("Sign", ["x"])], {"x": x}, {}, ["y"], 13), {"x": x})


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_exact_rounding(dtype):
    big = 2.0 ** 23 if dtype == "float32" else 2.0 ** 52
    xs = np.concatenate([np.arange(-6, 6.5, 0.5), [1e9 + 0.5, -2.0 ** 31 - 0.5, 3e9 + 0.75, big - 0.5, big + 2,
                                                   -big * 3, 0.49999997, -0.49999997, np.inf, -np.inf]]).astype(dtype)
    x = te.placeholder((xs.size,), dtype, "x")
    outs = [te.compute((xs.size,), lambda i, f=f: f(x[i], dtype), name)
            for f, name in ((floor, "floor"), (lambda e, d: 0.0 - floor(0.0 - e, d), "ceil"), (round_half_even, "round"))]
    got = evaluate([x] + outs, [xs])
    for g, want in zip(got, (np.floor(xs), np.ceil(xs), np.round(xs))):
        np.testing.assert_array_equal(g, want)


# ------------------------------------------------------------------ variadic Sum, Mean, Max, Min, PRelu

@pytest.mark.parametrize("op", ["Sum", "Mean", "Max", "Min"])
@pytest.mark.parametrize("shapes", [[(2, 3, 4)], [(2, 3, 4), (4,)], [(3, 1), (1, 5), (2, 1, 1)]], ids=str)
def test_variadic(op, shapes):
    feeds = {f"x{n}": rand(*s) for n, s in enumerate(shapes)}
    if op == "Mean":
        graph = imported(ort_model([node(op, list(feeds))], feeds, {}, 13), feeds, "onnxruntime")
    else:
        graph = imported(make_model([node(op, list(feeds))], feeds, {}, ["y"], 13), feeds)
    kinds = {"Sum": "Add", "Mean": "Add", "Max": "Max", "Min": "Min"}
    if len(shapes) > 1:
        assert graph.op_counts()[kinds[op]] == len(shapes) - 1


def test_max_min_of_integers_with_a_constant():
    x = RNG.integers(-9, 9, (3, 4)).astype(np.int64)
    consts = {"c": np.array([1, -2, 3, 0], np.int64)}
    model = make_model([node("Max", ["x", "c"], ["m"]), node("Min", ["m", "x", "c"], ["y"])], {"x": x}, consts,
                       ["y"], 13)
    imported(model, {"x": x})


@pytest.mark.parametrize("slope_shape", [(1,), (4, 1, 1), (5,), (2, 4, 3, 5)], ids=str)
def test_prelu(slope_shape):
    x = rand(2, 4, 3, 5)
    imported(make_model([node("PRelu", ["x", "s"])], {"x": x}, {"s": rand(*slope_shape, low=0.0, high=0.5)},
                        ["y"], 13), {"x": x})


# ------------------------------------------------------------------ Pad, Split, Tile

PADS = [("constant", [0, 1, 2, 0, 2, 1], 1.5), ("constant", [1, -1, 0, 0, 2, -2], None),
        ("reflect", [0, 2, 1, 0, 1, 3], None), ("edge", [1, 0, 3, 1, 2, 0], None)]


@pytest.mark.parametrize("opset", [13, LATEST])
@pytest.mark.parametrize("mode, pads, value", PADS, ids=str)
def test_pad(mode, pads, value, opset):
    x = rand(2, 4, 5)
    consts = {"pads": np.array(pads, np.int64)}
    ins = ["x", "pads"]
    if value is not None:
        consts["v"] = np.float32(value)
        ins.append("v")
    if min(pads) < 0:
        graph = imported(ort_model([node("Pad", ins, mode=mode)], {"x": x}, consts, opset), {"x": x}, "onnxruntime")
    else:
        graph = imported(make_model([node("Pad", ins, mode=mode)], {"x": x}, consts, ["y"], opset), {"x": x})
    assert graph.nodes[0].attr("pads") == tuple(pads)


def test_pad_axes_input_of_opset_18():
    x = rand(3, 4, 2)
    consts = {"pads": np.array([1, 2, 0, 3], np.int64), "v": np.float32(-1.0), "axes": np.array([-1, 1], np.int64)}
    graph = imported(make_model([node("Pad", ["x", "pads", "v", "axes"])], {"x": x}, consts, ["y"], 18), {"x": x})
    assert graph.nodes[0].attr("pads") == (0, 2, 1, 0, 3, 0)


def test_pad_wrap_is_refused_by_the_scan():
    x = rand(3, 4)
    model = make_model([node("Pad", ["x", "pads"], mode="constant")], {"x": x},
                       {"pads": np.array([1, 1, 1, 1], np.int64)}, ["y"], LATEST)
    model.graph.node[0].attribute[0].s = b"wrap"
    with pytest.raises(OnnxImportError, match=r"mode='wrap' is not supported \(supported: 'constant', 'reflect', "
                                              r"'edge'\)"):
        load_onnx(model)


@pytest.mark.parametrize("opset, attrs, split, outputs", [
    (13, {"axis": 1}, None, 3), (13, {"axis": -2}, [1, 3, 2], 3), (18, {"axis": 1, "num_outputs": 2}, None, 2),
    (18, {"axis": 2, "num_outputs": 4}, None, 4), (LATEST, {"axis": 0}, [2, 0, 1], 3)], ids=str)
def test_split(opset, attrs, split, outputs):
    x = rand(3, 6, 7)
    consts = {"split": np.array(split, np.int64)} if split is not None else {}
    outs = [f"y{n}" for n in range(outputs)]
    model = make_model([node("Split", ["x", *consts], outs, **attrs)], {"x": x}, consts, outs, opset)
    if 0 in (split or ()):
        graph = check(model, {"x": x})     # an empty output has no kernel
    else:
        graph = imported(model, {"x": x})
    assert graph.op_counts().get("Slice") == outputs


def test_split_that_does_not_divide_is_one_line():
    model = helper.make_model(helper.make_graph(
        [node("Split", ["x"], ["a", "b"], axis=1)], "g", [helper.make_tensor_value_info("x", 1, [3, 5])],
        [helper.make_tensor_value_info(o, 1, [3, 2]) for o in "ab"]), opset_imports=[helper.make_opsetid("", 13)])
    with pytest.raises(OnnxImportError, match="axis 1 of size 5 does not split evenly into 2 outputs"):
        load_onnx(model)


@pytest.mark.parametrize("repeats", [(1, 1, 1), (2, 1, 3), (1, 3, 1)], ids=str)
def test_tile(repeats):
    x = rand(2, 1, 3)
    imported(make_model([node("Tile", ["x", "r"])], {"x": x}, {"r": np.array(repeats, np.int64)}, ["y"], 13),
             {"x": x})


# ------------------------------------------------------------------ reductions, ArgMax/ArgMin, LRN

@pytest.mark.parametrize("opset", [13, LATEST])
@pytest.mark.parametrize("op", ["ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2", "ReduceSumSquare"])
@pytest.mark.parametrize("axes, keepdims", [([1], 1), ([-1, 0], 0), (None, 1)], ids=str)
def test_reduce(op, axes, keepdims, opset):
    x = rand(3, 4, 2, low=0.5, high=1.5) * np.where(RNG.random((3, 4, 2)) < 0.5, -1, 1).astype("float32")
    ins, consts, attrs = ["x"], {}, {"keepdims": keepdims}
    if axes is not None:
        if opset >= 18:
            consts["axes"] = np.array(axes, np.int64)
            ins.append("axes")
        else:
            attrs["axes"] = axes
    imported(make_model([node(op, ins, **attrs)], {"x": x}, consts, ["y"], opset), {"x": x}, rtol=1e-5)


def test_reduce_prod_over_many_elements_is_refused_by_the_lowering():
    b = GraphBuilder("prod")
    x = b.input("x", (2, 100))
    g = b.build([b.op("ReduceProd", [x], axes=(1,), keepdims=0)])
    with pytest.raises(LoweringError, match=r"reduces 100 elements per output; .* at most 64"):
        lower_group(g, fuse(g)[0])


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("attrs", [{}, {"axis": -1, "keepdims": 0}, {"axis": 1, "select_last_index": 1}], ids=str)
def test_arg(op, attrs):
    x = np.round(rand(3, 5, 4))            # ties, so the first or last index matters
    graph = imported(make_model([node(op, ["x"], **attrs)], {"x": x}, {}, ["y"], 13), {"x": x})
    assert graph.types[graph.outputs[0]].dtype == "int64"


@pytest.mark.parametrize("attrs", [{"size": 3}, {"size": 5, "alpha": 0.01, "beta": 0.6, "bias": 2.0},
                                   {"size": 1}], ids=str)
def test_lrn(attrs):
    x = rand(2, 6, 3, 4)
    imported(ort_model([node("LRN", ["x"], **attrs)], {"x": x}, {}, 13), {"x": x}, "onnxruntime", rtol=1e-4,
             atol=1e-5)


# ------------------------------------------------------------------ compiled

def _mixed_model(opset):
    """A small CNN tail using the added ops, for compiled numerics."""
    nodes = [
        node("Pad", ["x", "pads"], ["p"], mode="reflect"),
        helper.make_node("Conv", ["p", "w"], ["c"], name="conv"),
        helper.make_node("PRelu", ["c", "slope"], ["a"], name="prelu"),
        helper.make_node("LRN", ["a"], ["n"], name="lrn", size=3),
        helper.make_node("Split", ["n", "split"], ["s0", "s1"], name="split", axis=1),
        helper.make_node("HardSwish", ["s0"], ["h"], name="hswish"),
        helper.make_node("Elu", ["s1"], ["e"], name="elu", alpha=0.5),
        helper.make_node("Sum", ["h", "e", "bias"], ["sum"], name="sum"),
        helper.make_node("Max", ["sum", "h"], ["m"], name="max"),
        helper.make_node("Floor", ["m"], ["f"], name="floor"),
        helper.make_node("Tile", ["f", "reps"], ["t"], name="tile"),
        helper.make_node("ReduceL2", ["t"], ["l2"], name="l2", keepdims=0, **({"axes": [2, 3]} if opset < 18 else {})),
        helper.make_node("ArgMax", ["sum"], ["am"], name="argmax", axis=1),
    ]
    if opset >= 18:
        nodes[11].input.append("l2axes")
    consts = {"pads": np.array([0, 0, 1, 2, 0, 0, 1, 0], np.int64), "w": rand(6, 3, 3, 3) * 0.3,
              "slope": rand(6, 1, 1, low=0.0, high=0.3), "split": np.array([3, 3], np.int64),
              "bias": rand(3, 1, 1), "reps": np.array([1, 1, 2, 1], np.int64), "l2axes": np.array([2, 3], np.int64)}
    if opset < 18:
        del consts["l2axes"]
    x = rand(2, 3, 8, 7)
    return make_model(nodes, {"x": x}, consts, ["l2", "am"], opset), {"x": x}


@pytest.mark.parametrize("opset", [14, LATEST])
def test_compiled_model_matches_the_interpreter_and_onnxruntime(opset):
    ort = pytest.importorskip("onnxruntime")
    model, feeds = _mixed_model(opset)
    graph = load_onnx(model)
    got = compile_model(graph, threads=1).run(feeds)
    want = run(graph, feeds)
    np.testing.assert_allclose(got["l2"], want["l2"], rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(got["am"], want["am"])
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    ort_l2, ort_am = session.run(["l2", "am"], feeds)
    np.testing.assert_allclose(got["l2"], ort_l2, rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(got["am"], ort_am)


def test_compiled_elementwise_ops():
    b = GraphBuilder("acts")
    x = b.input("x", (3, 17))
    s = b.input("s", (17,))
    outs = [b.op(op, [x], **attrs) for op, attrs in ACTIVATIONS]
    outs += [b.op("PRelu", [x, s]), b.op("Min", [x, s]), b.op("Pad", [x], pads=(1, 0, 0, 2), value=-2.0),
             b.op("Pad", [x], pads=(2, 1, 1, 3), mode="edge"), b.op("ReduceMin", [x], axes=(1,), keepdims=1),
             b.op("ReduceProd", [x], axes=(0,), keepdims=0), b.op("ArgMin", [x], axis=0, keepdims=0),
             b.op("LogSoftmax", [x], axis=1),
             b.op("Not", [b.op("Xor", [b.op("LessOrEqual", [x, s]), b.op("GreaterOrEqual", [s, x])])])]
    g = b.build(outs)
    feeds = {"x": rand(3, 17) * 3, "s": rand(17)}
    feeds["x"][0, :6] = [0.5, 1.5, -2.5, -0.5, 0.0, 3.0]
    got, want = compile_model(g, threads=1).run(feeds), run(g, feeds)
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-6, err_msg=name)


# ------------------------------------------------------------------ ConvTranspose

DECONV_CASES = [
    ((1, 3, 5, 4), (3, 2, 3, 3), {}),
    ((2, 4, 5, 6), (4, 3, 3, 2), {"strides": [2, 2], "pads": [1, 0, 1, 1], "output_padding": [1, 0]}),
    ((1, 4, 4, 5), (4, 1, 2, 3), {"group": 2, "strides": [3, 1], "dilations": [1, 2], "pads": [0, 1, 1, 0]}),
    ((1, 2, 3, 3), (2, 3, 4, 4), {"strides": [2, 2], "pads": [1, 1, 1, 1], "auto_pad": "NOTSET"}),
    ((1, 2, 3, 4), (2, 2, 3, 3), {"auto_pad": "VALID", "strides": [2, 1]}),
]


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("x_shape, w_shape, attrs", DECONV_CASES, ids=str)
def test_conv_transpose(x_shape, w_shape, attrs, bias):
    x = rand(*x_shape)
    consts = {"w": rand(*w_shape)}
    if bias:
        consts["b"] = rand(w_shape[1] * attrs.get("group", 1))
    model = ort_model([node("ConvTranspose", ["x", *consts], **attrs)], {"x": x}, consts, 13)
    graph = imported(model, {"x": x}, "onnxruntime", rtol=1e-4, atol=1e-5)
    if "dilations" not in attrs:
        # known weights: one Conv over the output phases, then the phases interleaved and cropped
        assert graph.op_counts() == {"Conv": 1, "Reshape": 2, "Transpose": 1, "Slice": 1}
    else:
        assert graph.op_counts() == {"ConvTranspose": 1}


def test_conv_transpose_3d_is_refused_in_one_error():
    nodes = [node("ConvTranspose", ["x", "w"], ["a"], output_shape=[6, 6]),
             helper.make_node("ConvTranspose", ["a", "w3"], ["y"], name="deconv3d")]
    model = helper.make_model(helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", 1, [1, 2, 3, 3])], [helper.make_tensor_value_info("y", 1, None)],
        [numpy_helper.from_array(rand(2, 2, 3, 3), "w"), numpy_helper.from_array(rand(2, 2, 1, 1, 1), "w3")]),
        opset_imports=[helper.make_opsetid("", 13)])
    with pytest.raises(OnnxImportError, match=r"deconv3d \(ConvTranspose\): only 1-d and 2-d ConvTranspose are "
                                              r"supported \(this one is 3-d\)$"):
        load_onnx(model)


# ------------------------------------------------------------------ Resize

RESIZE_CASES = [
    ("nearest", {}, {"scales": [1, 1, 2, 2]}),
    ("nearest", {"coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"}, {"scales": [1, 1, 3, 1.5]}),
    ("nearest", {"coordinate_transformation_mode": "align_corners", "nearest_mode": "round_prefer_ceil"},
     {"sizes": [2, 3, 7, 4]}),
    ("nearest", {"coordinate_transformation_mode": "pytorch_half_pixel", "nearest_mode": "ceil"},
     {"sizes": [2, 3, 3, 1]}),
    ("nearest", {"nearest_mode": "round_prefer_floor"}, {"scales": [1, 1, 0.5, 0.6]}),
    ("linear", {}, {"scales": [1, 1, 2, 2]}),
    ("linear", {"coordinate_transformation_mode": "align_corners"}, {"sizes": [2, 3, 9, 3]}),
    ("linear", {"coordinate_transformation_mode": "asymmetric"}, {"scales": [1, 1, 0.5, 1.75]}),
    ("linear", {"coordinate_transformation_mode": "pytorch_half_pixel"}, {"sizes": [2, 3, 1, 7]}),
]


@pytest.mark.parametrize("opset", [13, LATEST])
@pytest.mark.parametrize("mode, attrs, target", RESIZE_CASES, ids=str)
def test_resize(mode, attrs, target, opset):
    x = rand(2, 3, 4, 5)
    consts = {"roi": np.zeros(0, np.float32)}
    if "scales" in target:
        consts["scales"] = np.array(target["scales"], np.float32)
        ins = ["x", "roi", "scales"]
    else:
        consts["scales"] = np.zeros(0, np.float32)
        consts["sizes"] = np.array(target["sizes"], np.int64)
        ins = ["x", "roi", "scales", "sizes"]
    model = ort_model([node("Resize", ins, mode=mode, **attrs)], {"x": x}, consts, opset)
    graph = imported(model, {"x": x}, "onnxruntime", rtol=1e-5, atol=1e-6)
    assert set(graph.op_counts()) <= {"Gather", "Mul", "Add"}


def test_affine_gather_indices_are_recognized():
    from graph.lower.shape import affine_indices
    assert affine_indices(np.arange(52) // 2) == (1, 0, 2)           # nearest x2
    assert affine_indices(np.arange(9) * 2 // 3) == (2, 0, 3)        # nearest x1.5
    assert affine_indices(np.arange(6) * 2 + 1) == (2, 1, 1)         # every other from 1
    assert affine_indices(np.array([0, 0, 1, 2, 2, 3])) == (2, 0, 3)
    assert affine_indices(np.array([3, 1, 2])) is None and affine_indices(np.array([0, 2, 3, 3])) is None


@pytest.mark.parametrize("scales", [[1, 1, 2, 2], [1, 1, 3, 1.5], [1, 1, 0.5, 2]])
def test_a_nearest_resize_computes_its_indices_rather_than_reading_a_table(scales, monkeypatch):
    # decision 096: a table of indices made each vector a gather; as (a * i + b) // c it follows its lanes
    from graph.lower import shape
    from tuner.model_compile import plan_graph
    x = rand(1, 3, 6, 8)
    consts = {"roi": np.zeros(0, np.float32), "scales": np.array(scales, np.float32)}
    model = ort_model([node("Resize", ["x", "roi", "scales"], mode="nearest")], {"x": x}, consts, 13)

    def tables():
        plan = plan_graph(load_onnx(model))
        return sum(kind == "const" for lw in plan.lowered for kind, _ in lw.params)
    assert tables() == 0
    imported(model, {"x": x}, "onnxruntime", rtol=1e-6, atol=0)
    got = compile_model(load_onnx(model)).run({"x": x})
    (want,) = onnxruntime_run(model, {"x": x})
    np.testing.assert_array_equal(next(iter(got.values())), want)
    monkeypatch.setattr(shape, "GATHER_PATTERNS", False)
    assert tables() == 2


def test_resize_axes_of_opset_18():
    x = rand(1, 2, 3, 4)
    consts = {"sizes": np.array([6, 2], np.int64)}
    model = ort_model([node("Resize", ["x", "", "", "sizes"], axes=[3, -2], mode="linear")], {"x": x}, consts, 18)
    imported(model, {"x": x}, "onnxruntime", rtol=1e-5, atol=1e-6)


def test_resize_refusals_in_one_error():
    nodes = [node("Resize", ["x", "", "s"], ["a"], mode="linear", antialias=1),
             helper.make_node("Resize", ["a", "", "s"], ["y"], name="crop",
                              coordinate_transformation_mode="tf_crop_and_resize")]
    model = helper.make_model(helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", 1, [1, 1, 2, 2])], [helper.make_tensor_value_info("y", 1, None)],
        [numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "s")]), opset_imports=[helper.make_opsetid("", 18)])
    with pytest.raises(OnnxImportError, match=r"resize0 \(Resize\): antialias=1 is not supported .*crop \(Resize\): "
                                              r"coordinate_transformation_mode='tf_crop_and_resize' is not supported"):
        load_onnx(model)


def test_compiled_decoder_matches_onnxruntime():
    """ConvTranspose, Resize (nearest and linear), Pad, Mean, Softplus, ReduceMin compiled together."""
    consts = {"w": rand(4, 3, 3, 3) * 0.3, "b": rand(3), "scales": np.array([1, 1, 2, 2], np.float32),
              "sizes": np.array([1, 3, 11, 10], np.int64), "pads": np.array([0, 0, 1, 0, 0, 0, 0, 2], np.int64),
              "roi": np.zeros(0, np.float32), "none": np.zeros(0, np.float32), "axes": np.array([1], np.int64)}
    nodes = [
        helper.make_node("ConvTranspose", ["x", "w", "b"], ["d"], name="deconv", strides=[2, 2], pads=[1, 1, 0, 1],
                         output_padding=[1, 0]),
        helper.make_node("Softplus", ["d"], ["s"], name="softplus"),
        helper.make_node("Resize", ["s", "roi", "none", "sizes"], ["up"], name="up", mode="linear"),
        helper.make_node("Resize", ["x", "roi", "scales"], ["near"], name="near", mode="nearest"),
        helper.make_node("Pad", ["near", "pads"], ["padded"], name="pad", mode="edge"),
        helper.make_node("ReduceMin", ["padded", "axes"], ["m"], name="rmin", keepdims=1),
        helper.make_node("Mean", ["up", "m"], ["y"], name="mean"),
    ]
    x = rand(1, 4, 5, 4)
    model = ort_model(nodes, {"x": x}, consts, 18)
    graph = load_onnx(model)
    got = compile_model(graph, threads=1).run({"x": x})["y"]
    np.testing.assert_allclose(got, run(graph, {"x": x})["y"], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got, onnxruntime_run(model, {"x": x})[0], rtol=1e-4, atol=1e-5)


# ------------------------------------------------------------------ comparisons, logic, LogSoftmax, composites

@pytest.mark.parametrize("op", ["LessOrEqual", "GreaterOrEqual"])
def test_compare_or_equal(op):
    a, b = np.round(rand(3, 1, 4)), np.round(rand(2, 1))
    imported(make_model([node(op, ["a", "b"])], {"a": a, "b": b}, {}, ["y"], 16), {"a": a, "b": b})


def test_logic():
    a, b = rand(3, 4) > 0, rand(4) > 0
    nodes = [node("And", ["a", "b"], ["and"]), helper.make_node("Or", ["a", "b"], ["or"], name="or"),
             helper.make_node("Xor", ["a", "b"], ["xor"], name="xor"), helper.make_node("Not", ["xor"], ["y"], name="not")]
    imported(make_model(nodes, {"a": a, "b": b}, {}, ["and", "or", "y"], 13), {"a": a, "b": b})


@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_log_softmax(axis):
    x = rand(3, 5, 4) * 3
    imported(make_model([node("LogSoftmax", ["x"], axis=axis)], {"x": x}, {}, ["y"], 13), {"x": x}, rtol=1e-5,
             atol=1e-5)


def test_global_max_pool():
    x = rand(2, 3, 4, 5)
    graph = imported(make_model([node("GlobalMaxPool", ["x"])], {"x": x}, {}, ["y"], 13), {"x": x})
    assert graph.op_counts() == {"ReduceMax": 1}


@pytest.mark.parametrize("op, attrs, shape", [("DepthToSpace", {"blocksize": 2}, (2, 8, 3, 2)),
                                              ("DepthToSpace", {"blocksize": 2, "mode": "CRD"}, (1, 12, 2, 3)),
                                              ("SpaceToDepth", {"blocksize": 3}, (2, 2, 6, 3))], ids=str)
def test_depth_space(op, attrs, shape):
    x = rand(*shape)
    graph = imported(make_model([node(op, ["x"], **attrs)], {"x": x}, {}, ["y"], 13), {"x": x})
    assert graph.op_counts() == {"Reshape": 2, "Transpose": 1}


def test_instance_normalization():
    x = rand(2, 3, 4, 5) * 2 + 1
    consts = {"s": rand(3), "b": rand(3)}
    imported(make_model([node("InstanceNormalization", ["x", "s", "b"], epsilon=1e-3)], {"x": x}, consts, ["y"], 13),
             {"x": x}, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("opset", [13, LATEST])
@pytest.mark.parametrize("axes, keepdims", [([1], 1), ([0, -1], 0), (None, 0)], ids=str)
def test_reduce_log_sum_exp(axes, keepdims, opset):
    x = rand(3, 4, 5) * 4
    ins, consts, attrs = ["x"], {}, {"keepdims": keepdims}
    if axes is not None:
        if opset >= 18:
            consts["axes"] = np.array(axes, np.int64)
            ins.append("axes")
        else:
            attrs["axes"] = axes
    imported(make_model([node("ReduceLogSumExp", ins, **attrs)], {"x": x}, consts, ["y"], opset), {"x": x},
             rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("attrs", [{"strides": (2, 2), "pads": (1, 0, 1, 1), "output_padding": (1, 0)},
                                   {"strides": (3, 1), "group": 2}], ids=str)
def test_conv_transpose_with_runtime_weights(attrs):
    """Weights that are an input, not a constant: the kernel splits them by output phase itself."""
    b = GraphBuilder("deconv")
    x, w = b.input("x", (1, 4, 5, 4)), b.input("w", (4, 3, 4, 3))
    g = b.build([b.op("ConvTranspose", [x, w, None], **attrs)])
    feeds = {"x": rand(1, 4, 5, 4), "w": rand(4, 3, 4, 3)}
    check_lowered(g, feeds)
    got = compile_model(g, threads=1).run(feeds)
    np.testing.assert_allclose(got[g.outputs[0]], run(g, feeds)[g.outputs[0]], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("groups", [1, 2, 6])
def test_group_normalization(groups):
    x = rand(2, 6, 3, 4) * 2 + 1
    consts = {"s": rand(6), "b": rand(6)}
    imported(make_model([node("GroupNormalization", ["x", "s", "b"], num_groups=groups, epsilon=1e-3)], {"x": x},
                        consts, ["y"], 21), {"x": x}, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("attrs", [{}, {"exclusive": 1}, {"reverse": 1}, {"exclusive": 1, "reverse": 1}], ids=str)
@pytest.mark.parametrize("axis, dtype", [(1, "float32"), (-1, "int64")], ids=str)
def test_cumsum(attrs, axis, dtype):
    x = (rand(3, 5, 4) * 3).astype(dtype)
    imported(make_model([node("CumSum", ["x", "axis"], **attrs)], {"x": x}, {"axis": np.array(axis, np.int64)},
                        ["y"], 14), {"x": x}, rtol=1e-5, atol=1e-5)


def test_sine_and_cosine_are_accurate_far_from_zero():
    xs = np.concatenate([np.linspace(-1e4, 1e4, 20001), np.linspace(-7, 7, 1001)]).astype("float32")
    x = te.placeholder((xs.size,), "float32", "x")
    outs = [te.compute((xs.size,), lambda i: sine(x[i], "float32"), "sin"),
            te.compute((xs.size,), lambda i: sine(x[i], "float32", np.pi / 2), "cos")]
    got_sin, got_cos = evaluate([x] + outs, [xs])
    xd = xs.astype(np.float64)
    assert np.abs(got_sin - np.sin(xd)).max() < 2e-7 and np.abs(got_cos - np.cos(xd)).max() < 2e-7


@pytest.mark.parametrize("fmod", [0, 1])
def test_integer_mod(fmod):
    a = RNG.integers(-20, 20, (4, 5)).astype(np.int64)
    b = np.array([3, -4, 7, -1, 5], np.int64)
    imported(make_model([node("Mod", ["a", "b"], fmod=fmod)], {"a": a}, {"b": b}, ["y"], 13), {"a": a})


def test_float_fmod_imports_and_folds_but_does_not_compile():
    a = rand(3, 4)
    graph = check(make_model([node("Mod", ["a", "b"], fmod=1)], {"a": a}, {"b": rand(4, low=0.5)}, ["y"], 13),
                  {"a": a})
    with pytest.raises(LoweringError, match=r"mod0 \(Mod\): a float remainder \(fmod\) has no exact kernel"):
        lower_group(graph, fuse(graph)[0])


@pytest.mark.parametrize("upper", [0, 1])
@pytest.mark.parametrize("k", [None, 1, -2])
def test_trilu(upper, k):
    x = rand(2, 4, 5)
    ins, consts = ["x"], {}
    if k is not None:
        ins.append("k")
        consts["k"] = np.array(k, np.int64)
    imported(make_model([node("Trilu", ins, upper=upper)], {"x": x}, consts, ["y"], 14), {"x": x})


@pytest.mark.parametrize("axis", [0, -1])
@pytest.mark.parametrize("runtime", [False, True])
def test_gather_elements(axis, runtime):
    x = rand(4, 5)
    idx = RNG.integers(-4, 4, (3, 5) if axis == 0 else (4, 2)).astype(np.int64)
    feeds, consts = ({"x": x, "i": idx}, {}) if runtime else ({"x": x}, {"i": idx})
    model = ort_model([node("GatherElements", ["x", "i"], axis=axis)], feeds, consts, 13)
    imported(model, feeds, "onnxruntime")


@pytest.mark.parametrize("attrs", [{}, {"axis": 0, "largest": 0}, {"axis": 1, "sorted": 1}], ids=str)
def test_topk(attrs):
    x = np.round(rand(4, 6, 3))              # ties: the lower index comes first
    model = make_model([node("TopK", ["x", "k"], ["values", "indices"], **attrs)], {"x": x},
                       {"k": np.array([3], np.int64)}, ["values", "indices"], 13)
    check(model, {"x": x}, compare_with=onnxruntime_run)
    graph = imported(model, {"x": x})
    assert graph.op_counts() == {"TopK": 2}
    got = compile_model(graph, threads=1).run({"x": x})
    want = onnxruntime_run(model, {"x": x})
    np.testing.assert_array_equal(got["values"], want[0])
    np.testing.assert_array_equal(got["indices"], want[1])
