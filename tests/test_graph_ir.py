"""The graph IR: building, checking, printing, interpreting (against numpy)."""
import numpy as np
import pytest

from graph.builder import GraphBuilder, retype
from graph.interpret import run
from graph.ir import Graph, GraphError, Node, TensorType, topological_order
from graph.ops.registry import OpError


def _mlp():
    rng = np.random.default_rng(0)
    b = GraphBuilder("mlp")
    x = b.input("x", (4, 8))
    w = b.constant("w", rng.standard_normal((8, 5)).astype("float32"))
    bias = b.constant("bias", rng.standard_normal(5).astype("float32"))
    y = b.op("Relu", [b.op("Gemm", [x, w, bias])])
    return b.build([y]), y


def test_builder_infers_types_and_interpreter_matches_numpy():
    g, y = _mlp()
    assert g.type_of(y) == TensorType((4, 5), "float32")
    x = np.random.default_rng(1).standard_normal((4, 8)).astype("float32")
    want = np.maximum(x @ g.constants["w"] + g.constants["bias"], 0)
    np.testing.assert_allclose(run(g, {"x": x})[y], want, rtol=1e-6)


def test_printer_is_one_line_per_node_with_attributes_and_shapes():
    b = GraphBuilder("c")
    x = b.input("x", (1, 3, 9, 9))
    w = b.constant("w", np.zeros((4, 3, 3, 3), "float32"))
    y = b.op("Conv", [x, w, None], name="conv1", strides=(2, 2), pads=(1, 1, 1, 1))
    text = str(b.build([y]))
    assert "conv1: float32[1,4,5,5] = Conv(x, w, _; pads=[1,1,1,1], strides=[2,2])" in text
    assert text.splitlines()[0] == "graph c(x: float32[1,3,9,9]) -> (conv1: float32[1,4,5,5])"


def test_nodes_are_frozen_and_hash_structurally():
    a = Node("n", "Relu", ["x"], ["y"], {"k": [1, 2]})
    b = Node("n", "Relu", ("x",), ("y",), (("k", (1, 2)),))
    assert a == b and hash(a) == hash(b)
    with pytest.raises(Exception):
        a.op = "Tanh"


def test_constants_are_read_only():
    g, _ = _mlp()
    with pytest.raises(ValueError):
        g.constants["w"][0, 0] = 1.0


@pytest.mark.parametrize("make, match", [
    (lambda: Graph("g", ["x"], ["y"], [Node("n", "Relu", ["z"], ["y"])], {"x": TensorType((2,)), "y": TensorType((2,))}),
     "reads 'z'"),
    (lambda: Graph("g", ["x"], ["y"], [Node("n", "Relu", ["x"], ["x"])], {"x": TensorType((2,))}),
     "defined twice"),
    (lambda: Graph("g", ["x"], ["q"], [], {"x": TensorType((2,))}), "output 'q'"),
])
def test_malformed_graphs_are_refused_naming_the_culprit(make, match):
    with pytest.raises(GraphError, match=match):
        make()


def test_shape_errors_name_the_node():
    b = GraphBuilder()
    x = b.input("x", (4, 8))
    w = b.constant("w", np.zeros((7, 5), "float32"))
    with pytest.raises(OpError, match=r"node mm \(MatMul\): inner dimensions differ"):
        b.op("MatMul", [x, w], name="mm")
    with pytest.raises(OpError, match="unsupported attribute"):
        b.op("Relu", [x], alpha=1.0)
    with pytest.raises(OpError, match="do not broadcast"):
        b.op("Add", [x, b.input("z", (3,))])


def test_topological_order_and_cycles():
    n1, n2 = Node("a", "Relu", ["x"], ["a"]), Node("b", "Relu", ["a"], ["b"])
    assert topological_order([n2, n1], ["x"]) == (n1, n2)
    with pytest.raises(GraphError, match="cycle"):
        topological_order([Node("a", "Add", ["x", "b"], ["a"]), Node("b", "Relu", ["a"], ["b"])], ["x"])


def test_retype_and_queries():
    g, y = _mlp()
    g2 = retype(g)
    assert g2.types == g.types
    gemm = g.producer(g.node(y).inputs[0])
    assert gemm.op == "Gemm" and g.consumers("x") == (gemm,) and g.use_count(y) == 1
