"""Operator fusion: which nodes share a kernel (TVM's rules by op pattern), group outputs, order."""
import numpy as np

import tests.graph_lower_ops  # noqa: F401  (registers op kinds main does not have yet)
from graph.builder import GraphBuilder
from graph.fusion import MAX_GROUP_NODES, fuse, format_groups
from graph.ops.registry import Pattern

RNG = np.random.default_rng(3)


def c(b, *shape):
    return b.constant(None, RNG.standard_normal(shape).astype("float32"))


def ops_of(groups):
    return [g.ops for g in groups]


def test_conv_takes_bias_relu_and_residual_epilogue():
    b = GraphBuilder("res")
    x = b.input("x", (1, 4, 8, 8))
    y = b.op("Relu", [b.op("Conv", [x, c(b, 4, 4, 3, 3), c(b, 4)], pads=(1, 1, 1, 1))])
    y = b.op("Conv", [y, c(b, 4, 4, 3, 3), None], pads=(1, 1, 1, 1))
    y = b.op("Relu", [b.op("Add", [y, x])])
    groups = fuse(b.build([y]))
    assert ops_of(groups) == [("Conv", "Relu"), ("Conv", "Add", "Relu")]
    assert groups[1].inputs[0] == groups[0].outputs[0] and "x" in groups[1].inputs
    assert all(g.pattern is Pattern.OUT_FUSABLE for g in groups)


def test_value_with_two_consumers_is_materialized():
    b = GraphBuilder("fork")
    x = b.input("x", (4, 8))
    h = b.op("Tanh", [b.op("MatMul", [x, c(b, 8, 8)])])
    y1, y2 = b.op("Relu", [h]), b.op("Sigmoid", [h])
    g = b.build([b.op("Add", [y1, y2])])
    groups = fuse(g)
    assert ops_of(groups)[0] == ("MatMul", "Tanh")
    assert groups[0].outputs == (h,)
    # one consumer joins nothing of h's group; the Add joins one branch's chain
    assert sorted(ops_of(groups)[1:]) == sorted([("Relu", "Add"), ("Sigmoid",)]) or \
        sorted(ops_of(groups)[1:]) == sorted([("Relu",), ("Sigmoid", "Add")])


def test_graph_output_ends_its_group():
    b = GraphBuilder("out")
    x = b.input("x", (4, 8))
    h = b.op("Relu", [x])
    g = b.build([h, b.op("Exp", [h])])
    assert ops_of(fuse(g)) == [("Relu",), ("Exp",)]


def test_reduction_takes_injective_producers_and_elementwise_consumers():
    b = GraphBuilder("r")
    x = b.input("x", (2, 3, 4))
    t = b.op("Transpose", [b.op("Mul", [x, c(b, 4)])], perm=(0, 2, 1))
    m = b.op("ReduceMean", [t], axes=(2,), keepdims=1)
    y = b.op("Sqrt", [b.op("Add", [m, b.constant(None, np.float32(1.0))])])
    y2 = b.op("ReduceSum", [y], axes=(1,), keepdims=1)
    groups = fuse(b.build([y2]))
    assert ops_of(groups) == [("Mul", "Transpose", "ReduceMean", "Add", "Sqrt"), ("ReduceSum",)]
    assert groups[0].pattern is Pattern.REDUCE


def test_softmax_and_layer_norm_are_one_kernel_each_and_matmul_does_not_take_reductions():
    b = GraphBuilder("attn")
    x = b.input("x", (2, 8, 16))
    s = b.op("Softmax", [b.op("MatMul", [x, c(b, 16, 16)])], axis=2)
    y = b.op("LayerNormalization", [s, c(b, 16), c(b, 16)], axis=2)
    assert ops_of(fuse(b.build([y]))) == [("MatMul",), ("Softmax",), ("LayerNormalization",)]


def test_epilogue_must_keep_the_anchor_shape():
    b = GraphBuilder("bc")
    x = b.input("x", (4, 1))
    y = b.op("Add", [b.op("MatMul", [x, c(b, 1, 5)]), c(b, 3, 4, 5)])      # broadcasts to a bigger shape
    assert ops_of(fuse(b.build([y]))) == [("MatMul",), ("Add",)]


def test_group_size_is_bounded():
    b = GraphBuilder("chain")
    y = b.input("x", (16,))
    for _ in range(2 * MAX_GROUP_NODES + 3):
        y = b.op("Tanh", [y])
    groups = fuse(b.build([y]))
    assert [len(g.nodes) for g in groups] == [MAX_GROUP_NODES, MAX_GROUP_NODES, 3]


def test_groups_are_in_topological_order_and_cover_every_node_once():
    b = GraphBuilder("dag")
    x = b.input("x", (3, 5))
    a = b.op("Relu", [x])
    d = b.op("MatMul", [b.op("Exp", [x]), c(b, 5, 5)])
    y = b.op("Add", [d, a])
    g = b.build([y])
    groups = fuse(g)
    seen = set(g.inputs) | set(g.constants)
    names = []
    for grp in groups:
        assert all(v in seen for v in grp.inputs)
        seen.update(v for n in grp.nodes for v in n.outputs)
        names += [n.name for n in grp.nodes]
    assert sorted(names) == sorted(n.name for n in g.nodes)


def test_printer_lists_groups_with_nodes():
    b = GraphBuilder("p")
    x = b.input("x", (2, 3))
    g = b.build([b.op("Relu", [b.op("MatMul", [x, c(b, 3, 3)], name="mm")], name="act")])
    text = format_groups(g, fuse(g), {"act": "workload k"})
    assert text.splitlines()[0] == "1 fused groups (2 nodes):"
    assert "group 0 out_fusable [MatMul+Relu]: (x, const_0) -> (act: float32[2,3])" in text
    assert "    mm: float32[2,3] = MatMul(x, const_0)" in text and "    workload k" in text
