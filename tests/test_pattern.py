"""The pattern matcher: each pattern feature, explain() messages, the rewrite driver and its counts."""
import doctest
import importlib

import numpy as np
import pytest

from graph.builder import GraphBuilder
from graph.interpret import run
from graph.pattern import (Constant, Emitter, Op, Optional, Replacement, RewriteError, Rewriter, Rule, Wildcard,
                           bind, explain, match, match_all, rewrite)

F32 = "float32"


def _conv_bn(bias=True, extra_user=False):
    rng = np.random.default_rng(0)
    b = GraphBuilder("cbn")
    x = b.input("x", (1, 3, 6, 6))
    w = b.constant("w", rng.standard_normal((4, 3, 3, 3)).astype(F32))
    cb = b.constant("cb", rng.standard_normal(4).astype(F32)) if bias else None
    conv = b.op("Conv", [x, w, cb], name="conv1", pads=(1, 1, 1, 1))
    params = [b.constant(n, rng.uniform(0.5, 1.5, 4).astype(F32)) for n in ("s", "bb", "mean", "var")]
    y = b.op("BatchNormalization", [conv] + params, name="bn1")
    outs = [y, b.op("Relu", [conv], name="other")] if extra_user else [y]
    return b.build(outs)


CONV = Op("Conv", args=[Wildcard().bind("x"), Constant().bind("w"), Optional(Constant().bind("b"))],
          single_use=True).bind("conv")
BN = Op("BatchNormalization", args=[CONV, Constant(), Constant(), Constant(), Constant()])


def test_op_pattern_binds_nodes_and_values():
    g = _conv_bn()
    m = match(g, BN, at="bn1")
    assert m is not None and m.root == "bn1"
    assert m["x"] == "x" and m["w"] == "w" and m["b"] == "cb"
    assert m.bindings["conv"] is g.node("conv1") and m.bindings["x"] == "x"
    assert [n.name for n in m.nodes] == ["conv1", "bn1"]
    np.testing.assert_array_equal(m.array("w"), g.constants["w"])


def test_optional_input_matches_an_absent_bias_and_a_present_one():
    m = match(_conv_bn(bias=False), BN, at="bn1")
    assert m is not None and "b" not in m
    required = Op("Conv", args=[Wildcard(), Constant(), Constant()])
    assert match(_conv_bn(bias=False), required, at="conv1") is None
    assert match(_conv_bn(bias=True), required, at="conv1") is not None


def test_extra_inputs_must_be_absent_and_args_none_matches_any():
    g = _conv_bn()
    assert match(g, Op("Conv", args=[Wildcard(), Wildcard()]), at="conv1") is None
    assert match(g, Op("Conv"), at="conv1") is not None
    assert match(g, Op(("Relu", "Conv")), at="conv1") is not None


def test_attribute_constraints_values_defaults_and_predicates():
    g = _conv_bn()
    assert match(g, Op("Conv", attrs={"pads": (1, 1, 1, 1)}), at="conv1")
    assert match(g, Op("Conv", attrs={"pads": [1, 1, 1, 1], "group": 1}), at="conv1")      # default
    assert match(g, Op("Conv", attrs={"strides": lambda s: s == (1, 1)}), at="conv1")
    assert match(g, Op("Conv", attrs={"group": 2}), at="conv1") is None
    assert match(g, Op("BatchNormalization", attrs={"epsilon": 1e-5}), at="bn1")             # float default
    assert explain(g, Op("Conv", attrs={"group": 2}), at="conv1") == \
        "no match at conv1: Op('Conv').attrs['group']: expected 2, found 1 at node conv1"


def test_where_predicates_on_nodes_values_and_arrays():
    g = _conv_bn()
    big = Op("Conv", where=lambda node, graph: graph.type_of(node.outputs[0]).shape[1] == 4)
    assert match(g, big, at="conv1")
    assert not match(g, Op("Conv", where=lambda node, graph: False), at="conv1")
    rank4 = Op("Conv", args=[Wildcard(where=lambda v, gr: gr.type_of(v).rank == 4), Constant(), Wildcard()])
    assert match(g, rank4, at="conv1")
    assert not match(g, Op("Conv", args=[Wildcard(), Constant(where=lambda a: a.ndim == 2), Wildcard()]),
                     at="conv1")


def _mul_graph(order="xc", value=0.5, shape=()):
    b = GraphBuilder("m")
    x = b.input("x", (2, 3))
    c = b.constant("c", np.full(shape, value, F32))
    y = b.op("Mul", [x, c] if order == "xc" else [c, x], name="mul")
    return b.build([y])


@pytest.mark.parametrize("order", ["xc", "cx"])
def test_commutative_operands_match_in_both_orders(order):
    pat = Op("Mul", args=[Wildcard().bind("x"), Constant(0.5)])
    m = match(_mul_graph(order), pat, at="mul")
    assert m is not None and m["x"] == "x"
    strict = Op("Mul", args=[Wildcard().bind("x"), Constant(0.5)], commutative=False)
    assert (match(_mul_graph(order), strict, at="mul") is not None) == (order == "xc")


def test_constant_value_tolerance_scalar_and_non_constants():
    assert match(_mul_graph(value=0.50001), Op("Mul", args=[Wildcard(), Constant(0.5)]), at="mul")
    assert not match(_mul_graph(value=0.51), Op("Mul", args=[Wildcard(), Constant(0.5)]), at="mul")
    g = _mul_graph(shape=(3,))
    assert match(g, Op("Mul", args=[Wildcard(), Constant(0.5)]), at="mul")
    assert not match(g, Op("Mul", args=[Wildcard(), Constant(0.5, scalar=True)]), at="mul")
    assert not match(g, Op("Mul", args=[Constant(), Constant()]), at="mul")


def test_alternatives_are_tried_in_order():
    g = _mul_graph()
    either = Op("Add") | Op("Mul").bind("m")
    m = match(g, either, at="mul")
    assert m is not None and m.bindings["m"].name == "mul"
    assert match(g, Op("Add") | Op("Sub"), at="mul") is None


def _square_graph(same=True):
    b = GraphBuilder("sq")
    x = b.input("x", (4,))
    z = b.input("z", (4,))
    y = b.op("Mul", [b.op("Relu", [x], name="r1"), b.op("Relu", [x if same else z], name="r2")], name="mul")
    return b.build([y])


def test_a_name_bound_twice_must_bind_the_same_value():
    twice = Op("Mul", args=[Op("Relu", args=[bind("x")]), Op("Relu", args=[bind("x")])])
    assert match(_square_graph(same=True), twice, at="mul")["x"] == "x"
    assert match(_square_graph(same=False), twice, at="mul") is None
    assert "expected the value bound to 'x' (x), found z (input z)" in \
        explain(_square_graph(same=False), twice, at="mul")
    node_twice = Op("Mul", args=[Op("Relu").bind("r"), Op("Relu").bind("r")])
    assert match(_square_graph(same=True), node_twice, at="mul") is None   # r1 and r2 differ


def test_single_use_rejects_an_intermediate_read_outside_the_match():
    assert match(_conv_bn(extra_user=False), BN, at="bn1") is not None
    g = _conv_bn(extra_user=True)
    assert match(g, BN, at="bn1") is None
    loose = Op("BatchNormalization", args=[Op("Conv"), Constant(), Constant(), Constant(), Constant()])
    assert match(g, loose, at="bn1") is not None
    assert explain(g, BN, at="bn1") == ("no match at bn1: Op('BatchNormalization').args[0]: expected Conv at "
                                        "node conv1 used only inside the match, found conv1 also used by node other")


def test_single_use_rejects_a_graph_output_and_counts_reads_inside_the_match():
    b = GraphBuilder()
    x = b.input("x", (3,))
    r = b.op("Relu", [x], name="r")
    y = b.op("Mul", [r, r], name="sq")
    pat = Op("Mul", args=[Op("Relu", single_use=True), Op("Relu", single_use=True)])
    assert match(b.build([y]), pat, at="sq") is not None         # read twice, both inside
    assert match(b.build([y, r]), pat, at="sq") is None
    assert "r is a graph output" in explain(b.build([y, r]), pat, at="sq")


def _mm_bn():
    rng = np.random.default_rng(1)
    b = GraphBuilder("mmbn")
    x = b.input("x", (2, 3))
    w = b.constant("w", rng.standard_normal((3, 4)).astype(F32))
    mm = b.op("MatMul", [x, w], name="mm1")
    params = [b.constant(None, rng.uniform(0.5, 1.5, 4).astype(F32)) for _ in range(4)]
    return b.build([b.op("BatchNormalization", [mm] + params, name="bn1")])


def test_explain_names_the_failing_sub_pattern_and_what_it_found():
    g = _mm_bn()
    assert explain(g, BN, at="bn1") == \
        "no match at bn1: Op('BatchNormalization').args[0]: expected Op('Conv'), found MatMul at node mm1"
    assert explain(g, Op("Relu"), at=g.node("bn1")) == \
        "no match at bn1: Op('Relu'): expected Op('Relu'), found BatchNormalization at node bn1"
    deep = Op("BatchNormalization", args=[Op("MatMul", args=[Wildcard(), Constant(0.0)]), Constant(),
                                          Constant(), Constant(), Constant()])
    assert explain(g, deep, at="bn1").startswith(
        "no match at bn1: Op('BatchNormalization').args[0].args[1]: expected Constant(0), found constant w = "
        "an array of shape (3, 4)")
    assert explain(g, Op("MatMul", args=[Constant(), Wildcard()], commutative=False), at="mm1") == \
        "no match at mm1: Op('MatMul').args[0]: expected Constant(), found input x"
    assert explain(g, Op("Relu") | Op("Tanh"), at="bn1").startswith("no match at bn1: (Op('Relu') | Op('Tanh')).alt[0]")
    assert explain(g, Op("MatMul").bind("mm"), at="mm1") == "matched at mm1: nodes mm1; binds mm=mm1"


def test_match_all_finds_every_root_in_graph_order():
    b = GraphBuilder()
    x = b.input("x", (3,))
    ys = [b.op("Relu", [x]) for _ in range(3)]
    g = b.build([b.op("Add", [b.op("Add", [ys[0], ys[1]]), ys[2]])])
    found = match_all(g, Op("Add", args=[Op("Relu").bind("a"), Wildcard()]))
    assert [m.root for m in found] == [g.nodes[3].outputs[0], g.nodes[4].outputs[0]]
    assert match_all(g, Op("Tanh")) == []


# ------------------------------------------------------------------ rewriting

def _chain():
    b = GraphBuilder("chain")
    x = b.input("x", (2, 3))
    one = b.constant("one", np.ones((), F32))
    m1 = b.op("Mul", [x, one], name="m1")
    m2 = b.op("Mul", [one, b.op("Relu", [m1], name="r")], name="m2")
    return b.build([m2])


MUL_ONE = Rule("mul-one", Op("Mul", args=[Wildcard().bind("x"), Constant(1.0)]), lambda g, m: m["x"])


def test_rewriter_keeps_output_names_counts_and_returns_the_same_graph_when_idle():
    g = _chain()
    rw = Rewriter([MUL_ONE])
    out = rw.run(g)
    assert [n.op for n in out.nodes] == ["Relu"] and out.outputs == ("m2",)
    assert out.nodes[0].outputs == ("m2",) and out.nodes[0].inputs == ("x",)
    assert "one" not in out.constants
    assert rw.stats["mul-one"].matches == 2 and rw.stats["mul-one"].rewrites == 2
    assert rw.stats["mul-one"].attempts >= 3
    assert rw.run(out) is out
    x = np.random.default_rng(0).standard_normal((2, 3)).astype(F32)
    np.testing.assert_allclose(run(out, {"x": x})["m2"], run(g, {"x": x})["m2"])
    assert "mul-one" in rw.format_stats() and "rewrites    2" in rw.format_stats()


def _replace_op(kind):
    def callback(gr, m):
        r = Emitter(gr)
        return r.replace_with(r.op(kind, m.root_node.inputs))
    return callback


def test_once_does_one_sweep_and_fixpoint_reaches_the_end():
    b = GraphBuilder()
    x = b.input("x", (3,))
    g = b.build([b.op("Neg", [b.op("Neg", [b.op("Neg", [b.op("Neg", [b.op("Tanh", [x])])])])])])
    neg_neg = Rule("neg-neg", Op("Neg", args=[Op("Neg", args=[Wildcard().bind("x")])]), lambda gr, m: m["x"])
    out = rewrite(g, [neg_neg])
    assert [n.op for n in out.nodes] == ["Tanh"] and out.outputs == g.outputs   # the output keeps its name
    rules = [Rule("tanh-relu", Op("Tanh"), _replace_op("Relu")), Rule("relu-abs", Op("Relu"), _replace_op("Abs"))]
    assert rewrite(g, rules, once=True).op_counts()["Relu"] == 1      # new nodes wait for the next sweep
    assert rewrite(g, rules).op_counts()["Abs"] == 1
    b = GraphBuilder()
    x = b.input("x", (3,))
    g = b.build([b.op("Neg", [b.op("Neg", [x])])])
    out = rewrite(g, [neg_neg])
    assert [(n.op, n.inputs, n.outputs) for n in out.nodes] == [("Identity", ("x",), g.outputs)]


def test_priorities_decide_which_rule_fires_and_callbacks_may_decline():
    g = _mul_graph(value=1.0)
    to_x = Rule("to-x", Op("Mul", args=[Wildcard().bind("x"), Constant()]), lambda gr, m: m["x"])

    def to_relu(gr, m):
        r = Emitter(gr)
        return r.replace_with(r.op("Relu", [m["x"]]))
    to_relu_rule = Rule("to-relu", Op("Mul", args=[Wildcard().bind("x"), Constant()]), to_relu, priority=5)
    assert rewrite(g, [to_x, to_relu_rule]).op_counts() == {"Relu": 1}
    declines = ("declines", Op("Mul"), lambda gr, m: None, 9)          # a plain tuple works as a rule
    rw = Rewriter([to_x, declines])
    assert rw.run(g).op_counts() == {"Identity": 1}
    assert rw.stats["declines"].matches == 1 and rw.stats["declines"].rewrites == 0
    rw = Rewriter([declines, Rule("mul-of-relu", Op("Mul", args=[Op("Relu"), Constant()]), to_relu)],
                  near_misses=True)
    assert rw.run(g) is g
    assert list(rw.misses["declines"]) == ["at mul: matched, the rule declined"]
    assert list(rw.misses["mul-of-relu"]) == []        # failed at the first node: not a near miss
    assert "    near miss at mul: matched, the rule declined" in rw.format_stats().splitlines()


def test_a_replacement_of_another_type_is_refused_naming_the_rule():
    g = _mul_graph(shape=(3,))
    b = Rule("bad", Op("Mul", args=[Wildcard().bind("x"), Constant()]),
             lambda gr, m: Replacement("c"))
    with pytest.raises(RewriteError, match=r"rule bad: the replacement c is float32\[3\], the matched mul is "
                                           r"float32\[2,3\]"):
        rewrite(g, [b])
    with pytest.raises(ValueError, match="repeated: r"):
        Rewriter([Rule("r", Op("Mul"), None), Rule("r", Op("Add"), None)])


def test_a_rule_that_never_settles_is_stopped():
    flip = Rule("flip", Op(("Relu", "Tanh")),
                lambda gr, m: (lambda r: r.replace_with(r.op("Tanh" if m.root_node.op == "Relu" else "Relu",
                                                             m.root_node.inputs)))(Emitter(gr)))
    b = GraphBuilder()
    g = b.build([b.op("Relu", [b.input("x", (2,))])])
    with pytest.raises(RewriteError, match="fixpoint after 50 sweeps"):
        rewrite(g, [flip])


@pytest.mark.parametrize("module", ["patterns", "match", "rewrite"])
def test_docstring_examples(module):
    result = doctest.testmod(importlib.import_module(f"graph.pattern.{module}"))
    assert result.attempted > 0 and result.failed == 0


def test_ops_with_several_outputs_match_by_output_index():
    from graph.ir import Graph, Node, TensorType
    t = TensorType((4,))
    g = Graph("multi", ["x"], ["s"], [Node("split", "Split2", ["x"], ["a", "b"]),
                                      Node("sum", "Add", ["b", "a"], ["s"])],
              {"x": t, "a": t, "b": t, "s": t})
    first, second = Op("Split2", output=0).bind("first"), Op("Split2", output=1).bind("second")
    m = match(g, Op("Add", args=[first, second]), at="s")
    assert m is not None and (m["first"], m["second"]) == ("a", "b")          # via the swapped order
    assert m.bindings["first"] is m.bindings["second"] is g.node("split") and len(m.nodes) == 2
    assert match(g, Op("Split2", output=None), at="b") is not None
    assert explain(g, Op("Split2"), at="b") == \
        "no match at b: Op('Split2'): expected Op('Split2') output 0, found output 1 of node split"


def test_a_name_bound_on_alternatives_of_ops_binds_the_node_and_explain_can_list_every_attempt():
    g = _mul_graph()
    m = match(g, (Op("Add") | Op("Mul")).bind("op"), at="mul")
    assert m.bindings["op"] is g.node("mul")
    m = match(g, (Op("Add") | Wildcard()).bind("v"), at="mul")
    assert m.bindings["v"] == "mul"
    text = explain(g, Op("Mul", args=[Wildcard(), Constant(2.0)]), at="mul", detail=True)
    lines = text.splitlines()
    assert lines[0] == "no match at mul: Op('Mul').args[1]: expected Constant(2), found constant c = 0.5"
    assert lines[1:] == ["  Op('Mul').args[1]: expected Constant(2), found constant c = 0.5",
                         "  Op('Mul').args[1] (operands swapped): expected Constant(2), found input x"]
