"""Lowering: every canonical op kind's tensor expression against the op's numpy semantics
(graph.interpret.run), through the tensorir reference evaluator; fused groups compiled for real."""
import math
import re

import numpy as np
import pytest

import tests.graph_lower_ops  # noqa: F401  (registers op kinds main does not have yet)
from graph.builder import GraphBuilder
from graph.fusion import fuse
from graph.interpret import run
from graph.lower import LoweringError, choose_layouts, evaluate_group, lower_group
from graph.lower.elementwise import erf
from tensorir import te
from tensorir.te.evaluate import evaluate

RNG = np.random.default_rng(7)


def rand(*shape, dtype="float32", positive=False):
    a = RNG.standard_normal(shape)
    return (np.abs(a) + 0.1 if positive else a).astype(dtype)


def graph_of(build, inputs):
    """A graph from ``build(b, *input_names)`` -> output name(s); ``inputs``: name -> array."""
    b = GraphBuilder("t")
    names = [b.input(k, v.shape, v.dtype.name) for k, v in inputs.items()]
    out = build(b, *names)
    return b.build([out] if isinstance(out, str) else list(out))


def check_lowered(g, feeds, rtol=1e-5, atol=1e-5):
    """Each fused group evaluated from its workload equals the interpreter, output by output."""
    want = run(g, feeds)
    groups = fuse(g)
    for layouts in ({}, choose_layouts(g, groups)):
        env = dict(feeds)
        for group in groups:
            env.update(evaluate_group(lower_group(g, group, layouts), g, env))
        for v in g.outputs:
            assert env[v].dtype == want[v].dtype and env[v].shape == want[v].shape, v
            np.testing.assert_allclose(env[v].astype(np.float64), want[v].astype(np.float64), rtol=rtol, atol=atol)


def _const(b, a):
    return b.constant(None, np.asarray(a))


UNARY = ["Relu", "Sigmoid", "Tanh", "Exp", "Neg", "Abs", "Identity", "Erf"]


@pytest.mark.parametrize("op", UNARY + ["Log", "Sqrt", "Reciprocal"])
def test_unary(op):
    x = rand(3, 7, positive=op in ("Log", "Sqrt", "Reciprocal"))
    check_lowered(graph_of(lambda b, x: b.op(op, [x]), {"x": x}), {"x": x})


def test_erf_approximation_is_accurate_to_1e6():
    xs = np.linspace(-6, 6, 4001).astype(np.float64)
    X = te.placeholder((xs.size,), "float64", "X")
    Y = te.compute((xs.size,), lambda i: erf(X[i]), "Y")
    (got,) = evaluate([X, Y], [xs])
    want = np.array([math.erf(v) for v in xs])
    assert np.abs(got - want).max() < 1e-6


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu(approximate):
    x = rand(4, 9) * 3
    check_lowered(graph_of(lambda b, x: b.op("Gelu", [x], approximate=approximate), {"x": x}), {"x": x})


@pytest.mark.parametrize("alpha", [1.0, 1.702])
def test_swish(alpha):
    x = rand(4, 9) * 4
    g = graph_of(lambda b, x: b.op("Swish", [x], alpha=alpha), {"x": x})
    np.testing.assert_allclose(run(g, {"x": x})[g.outputs[0]], x / (1 + np.exp(-alpha * x)), rtol=1e-6, atol=1e-7)
    check_lowered(g, {"x": x})


def test_clip_and_casts():
    x = rand(5, 6) * 4
    g = graph_of(lambda b, x: [b.op("Clip", [x], min=-1.0, max=2.5), b.op("Clip", [x], max=0.5),
                               b.op("Cast", [x], to="int32"), b.op("Cast", [x], to="bool"),
                               b.op("Cast", [b.op("Cast", [x], to="int64")], to="float32")], {"x": x})
    check_lowered(g, {"x": x})


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div", "Equal", "Less", "Greater"])
@pytest.mark.parametrize("shapes", [((3, 1, 5), (4, 1)), ((7,), (2, 3, 7)), ((), (3, 2))])
def test_binary_broadcasting(op, shapes):
    a, c = rand(*shapes[0]), rand(*shapes[1], positive=op == "Div")
    if op == "Equal":
        c = np.broadcast_to(a, np.broadcast_shapes(a.shape, c.shape)).copy() if a.size < c.size else c
    check_lowered(graph_of(lambda b, x, y: b.op(op, [x, y]), {"x": a, "y": c}), {"x": a, "y": c})


def test_integer_division_truncates_toward_zero():
    a = np.array([[7, -7, 6, -6, 0]], np.int64)
    d = np.array([[2], [-3]], np.int64)
    check_lowered(graph_of(lambda b, x, y: b.op("Div", [x, y]), {"x": a, "y": d}), {"x": a, "y": d})


@pytest.mark.parametrize("exponent", [2.0, 3.0, 0.5, -1.0, 1.7])
def test_pow_with_constant_exponent(exponent):
    x = rand(3, 4, positive=True)
    g = graph_of(lambda b, x: b.op("Pow", [x, _const(b, np.float32(exponent))]), {"x": x})
    check_lowered(g, {"x": x})


def test_where_with_three_way_broadcasting():
    x, y, z = rand(2, 1, 4), rand(3, 1), rand(4)
    g = graph_of(lambda b, x, y, z: b.op("Where", [b.op("Less", [x, y]), z, y]), {"x": x, "y": y, "z": z})
    check_lowered(g, {"x": x, "y": y, "z": z})


@pytest.mark.parametrize("sa, sb", [((5, 7), (7, 3)), ((2, 5, 7), (7, 3)), ((2, 1, 5, 7), (3, 7, 4)),
                                    ((7,), (7, 3)), ((4, 7), (7,))])
def test_matmul_shapes(sa, sb):
    a, c = rand(*sa), rand(*sb)
    check_lowered(graph_of(lambda b, x, y: b.op("MatMul", [x, y]), {"x": a, "y": c}), {"x": a, "y": c})


@pytest.mark.parametrize("ta, tb, alpha, beta, cshape", [(0, 0, 1.0, 1.0, (6,)), (1, 1, 0.5, 2.0, (5, 6)),
                                                          (0, 1, 1.0, 1.0, None), (1, 0, 2.0, 1.0, (5, 1))])
def test_gemm(ta, tb, alpha, beta, cshape):
    a = rand(*((7, 5) if ta else (5, 7)))
    w = rand(*((6, 7) if tb else (7, 6)))

    def build(b, x):
        c = _const(b, rand(*cshape)) if cshape else None
        return b.op("Gemm", [x, _const(b, w), c], transA=ta, transB=tb, alpha=alpha, beta=beta)
    check_lowered(graph_of(build, {"x": a}), {"x": a})


@pytest.mark.parametrize("cin, cout, group, k, strides, pads, dil, bias", [
    (3, 4, 1, 3, (1, 1), (1, 1, 1, 1), (1, 1), True),
    (3, 5, 1, 3, (2, 2), (0, 1, 2, 0), (1, 1), False),     # asymmetric pads, stride 2
    (4, 6, 2, 3, (1, 2), (1, 0, 1, 1), (2, 1), True),      # groups, dilation
    (6, 6, 6, 3, (2, 2), (1, 1, 0, 0), (1, 1), True),      # depthwise, asymmetric
    (3, 6, 3, 2, (1, 1), (0, 0, 1, 1), (1, 1), False),     # depthwise with channel multiplier 2
    (5, 3, 1, 1, (1, 1), (0, 0, 0, 0), (1, 1), True),      # 1x1
])
def test_conv(cin, cout, group, k, strides, pads, dil, bias):
    x = rand(2, cin, 9, 8)
    w = rand(cout, cin // group, k, k)

    def build(b, x):
        bb = _const(b, rand(cout)) if bias else None
        y = b.op("Relu", [b.op("Conv", [x, _const(b, w), bb], strides=strides, pads=pads, dilations=dil, group=group)])
        # consumers of the conv group's output read it through its layout (NHWC when layouts are chosen)
        z = b.op("Conv", [y, _const(b, rand(3, cout, 3, 3)), None], pads=(1, 0, 0, 1))
        pooled = b.op("MaxPool", [y], kernel_shape=(2, 2))
        return [b.op("Transpose", [y], perm=(0, 2, 3, 1)), b.op("Transpose", [pooled], perm=(0, 1, 3, 2)),
                b.op("ReduceSum", [z], axes=(1,), keepdims=1)]
    g = graph_of(build, {"x": x})
    assert len(choose_layouts(g, fuse(g))) == 3     # both convs and the pool
    check_lowered(g, {"x": x}, rtol=1e-4, atol=1e-4)


def test_batchnorm():
    x = rand(2, 3, 4, 5)
    g = graph_of(lambda b, x: b.op("BatchNormalization", [x, _const(b, rand(3)), _const(b, rand(3)),
                                                          _const(b, rand(3)), _const(b, rand(3, positive=True))],
                                   epsilon=1e-3), {"x": x})
    check_lowered(g, {"x": x})


@pytest.mark.parametrize("op, attrs", [
    ("MaxPool", dict(kernel_shape=(3, 3), strides=(2, 2), pads=(1, 0, 1, 1))),
    ("MaxPool", dict(kernel_shape=(2, 3), strides=(2, 2), ceil_mode=1)),
    ("MaxPool", dict(kernel_shape=(2, 2), dilations=(2, 1))),
    ("AveragePool", dict(kernel_shape=(3, 3), strides=(2, 2), pads=(1, 1, 1, 1), count_include_pad=0)),
    ("AveragePool", dict(kernel_shape=(3, 3), strides=(2, 2), pads=(1, 1, 1, 1), count_include_pad=1)),
    ("AveragePool", dict(kernel_shape=(3, 2), strides=(2, 2), ceil_mode=1)),
    ("AveragePool", dict(kernel_shape=(2, 2), strides=(2, 2))),
    ("GlobalAveragePool", {}),
])
def test_pools(op, attrs):
    x = rand(2, 3, 9, 8)
    check_lowered(graph_of(lambda b, x: b.op(op, [x], **attrs), {"x": x}), {"x": x})


@pytest.mark.parametrize("shape, axis", [((3, 10), 1), ((2, 5, 7), 1), ((2, 3, 7), 2), ((9,), 0)])
def test_softmax(shape, axis):
    x = rand(*shape) * 3
    check_lowered(graph_of(lambda b, x: b.op("Softmax", [x], axis=axis), {"x": x}), {"x": x})


@pytest.mark.parametrize("shape, axis, bias", [((4, 16), 1, True), ((2, 3, 8), 2, False), ((2, 3, 4), 1, True)])
def test_layer_norm(shape, axis, bias):
    x = rand(*shape)
    scale = rand(*shape[axis:])

    def build(b, x):
        return b.op("LayerNormalization", [x, _const(b, scale), _const(b, rand(*shape[axis:])) if bias else None],
                    axis=axis, epsilon=1e-5)
    check_lowered(graph_of(build, {"x": x}), {"x": x}, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("op", ["ReduceMean", "ReduceSum", "ReduceMax"])
@pytest.mark.parametrize("axes, keep", [((1,), 1), ((0, 2), 0), ((0, 1, 2), 0), ((2,), 1)])
def test_reductions(op, axes, keep):
    x = rand(3, 4, 5)
    check_lowered(graph_of(lambda b, x: b.op(op, [x], axes=axes, keepdims=keep), {"x": x}), {"x": x})


def test_shape_ops():
    x = rand(2, 3, 20)

    def build(b, x):
        r = b.op("Reshape", [x], shape=(2, 3, 4, 5))
        t = b.op("Transpose", [r], perm=(0, 2, 1, 3))
        flat = b.op("Reshape", [t], shape=(8, 15))
        e = b.op("Expand", [_const(b, rand(3, 1))], shape=(2, 3, 5))
        c = b.op("Concat", [x, b.op("Neg", [x]), _const(b, rand(2, 3, 3))], axis=2)
        s1 = b.op("Slice", [c], starts=(1, 2), ends=(3, 40), axes=(1, 2), steps=(1, 3))
        s2 = b.op("Slice", [x], starts=(19,), ends=(-1,), axes=(2,), steps=(-2,))
        return [flat, e, s1, s2]
    check_lowered(graph_of(build, {"x": x}), {"x": x})


def test_gather_constant_and_runtime_indices():
    x = rand(5, 4, 3)
    ids = np.array([[0, 4], [-1, 2]], np.int64)

    def build(b, x, i):
        return [b.op("Gather", [x, _const(b, np.int64(-2))], axis=1),
                b.op("Gather", [x, _const(b, ids)], axis=2 - 2),
                b.op("Gather", [x, i], axis=0)]
    feeds = {"x": x, "i": np.array([3, -5, 0], np.int64)}
    check_lowered(graph_of(build, feeds), feeds)


def test_unsupported_op_is_one_line():
    x = rand(3)
    b = GraphBuilder("t")
    xi = b.input("x", (3,))
    from graph.ir import Graph, Node
    g = Graph("t", ("x",), ("y",), (Node("y", "NoSuchOp", (xi,), ("y",)),), {"x": b.types["x"], "y": b.types["x"]})
    with pytest.raises(LoweringError, match=r"node y \(NoSuchOp\): no lowering"):
        lower_group(g, fuse(g)[0])
    assert x.shape == (3,)


def test_identical_layers_share_one_workload_key():
    def layer(b, x, n):
        w = _const(b, rand(8, 8))
        return b.op("Relu", [b.op("Add", [b.op("MatMul", [x, w]), _const(b, rand(8))])], name=f"layer{n}")
    b = GraphBuilder("two")
    x = b.input("x", (4, 8))
    g = b.build([layer(b, layer(b, x, 0), 1)])
    keys = [lower_group(g, grp).key for grp in fuse(g)]
    assert len(keys) == 2 and keys[0] == keys[1]


@pytest.mark.parametrize("with_bias", [True, False])
def test_conv_epilogue_is_tiled_with_the_anchor(with_bias):
    """Bias, residual add and ReLU read the conv at its own indices, so the generated space computes
    the conv per tile of the epilogue (as for dense) instead of materializing it."""
    from logs.apply import heuristic_schedule
    x = rand(1, 8, 10, 10)

    def build(b, x):
        y = b.op("Conv", [x, _const(b, rand(8, 8, 3, 3)), _const(b, rand(8)) if with_bias else None],
                 pads=(1, 1, 1, 1))
        return b.op("MaxPool", [b.op("Relu", [b.op("Add", [y, x])])], kernel_shape=(2, 2))
    g = graph_of(build, {"x": x})
    groups = fuse(g)
    for layouts in ({}, choose_layouts(g, groups)):
        lowered = lower_group(g, groups[0], layouts)
        assert lowered.tensors[-1].shape == ((1, 100, 8) if layouts else (1, 8, 10, 10))
        text = str(heuristic_schedule(lowered.tensors))
        assert re.search(r"compute_at\('conv0', 'relu0\.i\d(\.\d)+'\)", text), text   # per epilogue tile


def test_unsupported_dtype_names_the_node():
    x = rand(3)
    g = graph_of(lambda b, x: b.op("Cast", [x], to="float16", name="half"), {"x": x})
    with pytest.raises(LoweringError, match=r"node half \(Cast\): dtype float16 has no kernel dtype"):
        lower_group(g, fuse(g)[0])


def test_a_graph_output_computed_in_nhwc_is_written_back_row_major():
    from graph.lower import plan_layouts
    x = rand(1, 4, 6, 6)
    g = graph_of(lambda b, x: b.op("Relu", [b.op("Conv", [x, _const(b, rand(5, 4, 3, 3)), None], pads=(1, 1, 1, 1))]),
                 {"x": x})
    g2, groups, layouts = plan_layouts(g, fuse(g))
    assert [grp.ops for grp in groups] == [("Conv", "Relu"), ("Identity",)]
    assert layouts == {f"{g.outputs[0]}.nhwc": "nhwc"} and g2.outputs == g.outputs
    env = {"x": x}
    for grp in groups:
        env.update(evaluate_group(lower_group(g2, grp, layouts), g2, env))
    np.testing.assert_allclose(env[g.outputs[0]], run(g, {"x": x})[g.outputs[0]], rtol=1e-4, atol=1e-4)


def test_an_attribute_the_kernel_dtype_cannot_hold_is_a_lowering_error():
    x = np.arange(6, dtype=np.int64).reshape(2, 3)
    g = graph_of(lambda b, x: b.op("Clip", [x], max=2.5, name="clip"), {"x": x})
    with pytest.raises(LoweringError, match=r"node clip \(Clip\)"):
        lower_group(g, fuse(g)[0])


@pytest.mark.parametrize("out_shape, in_shape", [((116, 28, 28), (2, 58, 28, 28)), ((1, 58, 2, 3, 3), (1, 116, 3, 3)),
                                                  ((2, 3, 4), (4, 3, 2)), ((6, 1, 4), (1, 24, 1)), ((12, 10), (2, 6, 5, 2)),
                                                  ((2, 2, 3, 5), (4, 15)), ((5,), (5, 1, 1)), ((1, 5, 1), (5,))])
def test_a_reshape_reads_what_numpy_reshapes_and_keeps_the_axes_it_does_not_touch(out_shape, in_shape):
    import itertools
    from graph.lower.shape import reshape_index
    a = np.arange(math.prod(in_shape)).reshape(in_shape)
    b = a.reshape(out_shape)
    for idx in itertools.product(*[range(d) for d in out_shape]):
        got = tuple(int(getattr(g, "value", g)) for g in reshape_index(list(idx), out_shape, in_shape))
        assert a[got] == b[idx]
    # a channel shuffle's rows and columns map to themselves: no division by the plane per lane
    c, h, w = te.Var("c"), te.Var("h"), te.Var("w")
    assert reshape_index([c, h, w], (116, 28, 28), (2, 58, 28, 28))[2:] == [h, w]
