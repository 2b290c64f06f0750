"""Graph passes, tested as patterns: what matches before a pass, what matches after, same numbers."""
import math
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from graph.builder import GraphBuilder
from graph.interpret import run
from graph.pattern import Constant, Op, Wildcard, explain, match_all
from graph.passes import (CONV_BN, CSE, DCE, GELU_ERF, GELU_TANH, GEMM_BN, LAYERNORM, MATMUL_BN, PIPELINE, SWISH,
                          eliminate_common_subexpressions, eliminate_dead_code, fold_batchnorm, fold_constants,
                          get_pass, recognize, run_passes, simplify)

F32 = "float32"
RNG = np.random.default_rng(0)


def _rand(*shape, lo=None, hi=None):
    if lo is not None:
        return RNG.uniform(lo, hi, shape).astype(F32)
    return RNG.standard_normal(shape).astype(F32)


def _same_numbers(before, after, rtol=1e-5, atol=1e-6):
    feeds = {v: _rand(*before.types[v].shape) for v in before.inputs}
    want, got = run(before, feeds), run(after, feeds)
    assert list(got) == list(want)
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=rtol, atol=atol)


def _bn_params(b, c):
    return [b.constant(None, _rand(c, lo=0.5, hi=1.5)), b.constant(None, _rand(c)),
            b.constant(None, _rand(c)), b.constant(None, _rand(c, lo=0.5, hi=1.5))]


# ------------------------------------------------------------------ BatchNorm folding

@pytest.mark.parametrize("bias, group", [(True, 1), (False, 1), (True, 2)])
def test_conv_batchnorm_folds_into_one_conv_with_bias(bias, group):
    b = GraphBuilder("cbn")
    x = b.input("x", (2, 4, 7, 7))
    w = b.constant("w", _rand(6, 4 // group, 3, 3))
    conv = b.op("Conv", [x, w, b.constant("cb", _rand(6)) if bias else None], name="conv", strides=(2, 2),
                pads=(1, 0, 1, 0), group=group)
    y = b.op("Relu", [b.op("BatchNormalization", [conv] + _bn_params(b, 6), name="bn", epsilon=1e-3)])
    g = b.build([y])
    assert len(match_all(g, CONV_BN)) == 1
    out = fold_batchnorm(g)
    assert match_all(out, CONV_BN) == [] and "BatchNormalization" not in out.op_counts()
    fused = match_all(out, Op("Conv", args=[Wildcard(), Constant(), Constant()],
                              attrs={"strides": (2, 2), "group": group}))
    assert len(fused) == 1 and out.op_counts() == {"Conv": 1, "Relu": 1}
    assert set(out.constants) == set(fused[0].root_node.inputs[1:])          # the old weights are gone
    assert fused[0].root == "bn" and fused[0].root_node.name == "conv"      # names survive the rewrite
    _same_numbers(g, out)
    assert fold_batchnorm(out) is out


@pytest.mark.parametrize("trans_b, with_c, beta", [(0, True, 1.0), (1, True, 0.5), (1, False, 1.0)])
def test_gemm_batchnorm_folds(trans_b, with_c, beta):
    b = GraphBuilder("gbn")
    x = b.input("x", (3, 5))
    w = b.constant("w", _rand(4, 5) if trans_b else _rand(5, 4))
    c = b.constant("c", _rand(4)) if with_c else None
    gemm = b.op("Gemm", [x, w, c], name="fc", transB=trans_b, beta=beta, alpha=0.7)
    g = b.build([b.op("BatchNormalization", [gemm] + _bn_params(b, 4), name="bn")])
    assert len(match_all(g, GEMM_BN)) == 1
    out = fold_batchnorm(g)
    assert match_all(out, GEMM_BN) == [] and out.op_counts() == {"Gemm": 1}
    assert out.outputs == ("bn",) and out.nodes[0].attr("alpha") == 0.7
    _same_numbers(g, out)


@pytest.mark.parametrize("with_bias", [False, True])
def test_matmul_batchnorm_becomes_a_gemm(with_bias):
    b = GraphBuilder("mbn")
    x = b.input("x", (3, 5))
    y = b.op("MatMul", [x, b.constant("w", _rand(5, 4))], name="mm")
    if with_bias:
        y = b.op("Add", [b.constant("bias", _rand(4)), y], name="add")
    g = b.build([b.op("BatchNormalization", [y] + _bn_params(b, 4), name="bn")])
    assert len(match_all(g, MATMUL_BN)) == 1
    out = fold_batchnorm(g)
    assert match_all(out, MATMUL_BN) == []
    assert len(match_all(out, Op("Gemm", args=[Wildcard(), Constant(), Constant()]))) == 1
    assert out.op_counts() == {"Gemm": 1}
    _same_numbers(g, out)


def test_batchnorm_is_not_folded_into_a_producer_with_another_reader():
    b = GraphBuilder()
    x = b.input("x", (1, 3, 5, 5))
    conv = b.op("Conv", [x, b.constant("w", _rand(4, 3, 3, 3)), None], name="conv")
    y = b.op("BatchNormalization", [conv] + _bn_params(b, 4), name="bn")
    g = b.build([b.op("Add", [y, b.op("Relu", [conv], name="side")])])
    assert fold_batchnorm(g) is g
    assert "found conv also used by node side" in explain(g, CONV_BN, at="bn")
    lines = []
    run_passes(g, passes=["fold_batchnorm"], verbose=True, log=lines.append)
    assert ("    near miss at bn: Op('BatchNormalization').args[0]: expected Conv at node conv used only inside "
            "the match, found conv also used by node side") in "\n".join(lines).splitlines()
    mm = GraphBuilder()
    x = mm.input("x", (2, 3, 4))                 # 3-d: the BN channel is not the weight's column
    y = mm.op("MatMul", [x, mm.constant("w", _rand(4, 4))])
    g = mm.build([mm.op("BatchNormalization", [y] + _bn_params(mm, 3), name="bn")])
    assert fold_batchnorm(g) is g


# ------------------------------------------------------------------ Pad folding

def _pad_conv(pads, mode="constant", value=0.0, side_reader=False, bias=True):
    b = GraphBuilder("padconv")
    x = b.input("x", (2, 3, 9, 8))
    p = b.op("Pad", [x], name="pad", pads=pads, mode=mode, value=value)
    y = b.op("Conv", [p, b.constant("w", _rand(5, 3, 3, 3)), b.constant("cb", _rand(5)) if bias else None],
             name="conv", strides=(2, 1), pads=(0, 1, 1, 0))
    return b.build([y, b.op("Relu", [p], name="side")] if side_reader else [y])


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("side_reader", [False, True])
def test_a_zero_spatial_pad_folds_into_the_conv_that_reads_it(bias, side_reader):
    # TensorFlow's SAME padding as an explicit Pad before a VALID Conv (decision 102): the copy was a kernel of
    # its own, its row-major output between blocked convs
    from graph.passes.pad import PAD_CONV, fold_pads
    g = _pad_conv((0, 0, 1, 2, 0, 0, 3, 0), side_reader=side_reader, bias=bias)
    assert len(match_all(g, PAD_CONV)) == 1
    out = eliminate_dead_code(fold_pads(g))
    (conv,) = [n for n in out.nodes if n.op == "Conv"]
    assert conv.attr("pads") == (1, 3, 4, 0) and conv.attr("strides") == (2, 1)
    assert [n.op for n in out.nodes].count("Pad") == (1 if side_reader else 0)
    _same_numbers(g, out)


@pytest.mark.parametrize("pads, mode, value", [((1, 0, 1, 1, 0, 0, 1, 1), "constant", 0.0),    # pads the batch
                                               ((0, 0, 1, -1, 0, 0, 1, 1), "constant", 0.0),   # crops a column
                                               ((0, 0, 1, 1, 0, 0, 1, 1), "constant", 0.5),
                                               ((0, 0, 1, 1, 0, 0, 1, 1), "reflect", 0.0)])
def test_other_pads_stay_before_the_conv(pads, mode, value):
    from graph.passes.pad import fold_pads
    g = _pad_conv(pads, mode, value)
    assert fold_pads(g) is g


# ------------------------------------------------------------------ Gelu recognition

def _gelu_graph(form, half=0.5, sqrt2=math.sqrt(2), extra_user=False, shape=(2, 8)):
    b = GraphBuilder("gelu")
    x = b.op("MatMul", [b.input("inp", shape), b.constant("w", _rand(shape[-1], shape[-1]))], name="x")
    c = lambda v: b.constant(None, np.array(v, F32))  # noqa: E731
    if form == "div":
        scaled = b.op("Div", [x, c(sqrt2)], name="scaled")
    else:
        scaled = b.op("Mul", [c(1 / sqrt2), x], name="scaled")
    erf = b.op("Erf", [scaled], name="erf")
    one_plus = b.op("Add", [c(1.0), erf], name="one_plus")
    if form in ("div", "mul"):          # (x * 0.5) * (1 + erf): the BERT exporters' order
        y = b.op("Mul", [b.op("Mul", [x, c(half)]), one_plus])
    elif form == "late-half":           # (x * (1 + erf)) * 0.5
        y = b.op("Mul", [c(half), b.op("Mul", [one_plus, x])])
    else:                               # x * ((1 + erf) * 0.5)
        y = b.op("Mul", [x, b.op("Mul", [one_plus, c(half)])])
    outs = [y, b.op("Relu", [erf])] if extra_user else [y]
    return b.build(outs)


@pytest.mark.parametrize("form", ["div", "mul", "late-half", "inner-half"])
def test_decomposed_gelu_is_recognized_in_its_orderings(form):
    g = _gelu_graph(form)
    assert len(match_all(g, GELU_ERF)) == 1
    out = recognize(g)
    assert out.op_counts() == {"MatMul": 1, "Gelu": 1} and match_all(out, GELU_ERF) == []
    assert len(match_all(out, Op("Gelu", args=[Op("MatMul")], attrs={"approximate": "none"}))) == 1
    _same_numbers(g, out)


@pytest.mark.parametrize("change", [dict(half=0.6), dict(sqrt2=math.sqrt(3)), dict(extra_user=True),
                                    dict(half=np.full(8, 0.5, F32))])
def test_gelu_is_not_recognized_with_a_wrong_constant_or_a_shared_intermediate(change):
    g = _gelu_graph("div", **change)
    assert recognize(g) is g


def test_gelu_explain_points_at_the_wrong_constant():
    g = _gelu_graph("div", sqrt2=math.sqrt(3))
    msg = explain(g, GELU_ERF, at=g.outputs[0])
    assert "expected Constant(1.41421, scalar=True), found constant" in msg and "= 1.73205" in msg


def _gelu_tanh_graph(cube="pow", power=3.0):
    b = GraphBuilder("gelu_tanh")
    x = b.op("Tanh", [b.input("inp", (4, 6))], name="x")
    c = lambda v: b.constant(None, np.array(v, F32))  # noqa: E731
    x3 = b.op("Pow", [x, c(power)]) if cube == "pow" else b.op("Mul", [b.op("Mul", [x, x]), x])
    inner = b.op("Add", [x, b.op("Mul", [c(0.044715), x3])])
    t = b.op("Tanh", [b.op("Mul", [inner, c(math.sqrt(2 / math.pi))])])
    y = b.op("Mul", [b.op("Mul", [c(0.5), x]), b.op("Add", [t, c(1.0)])])
    return b.build([y])


@pytest.mark.parametrize("cube", ["pow", "mul"])
def test_tanh_gelu_is_recognized(cube):
    g = _gelu_tanh_graph(cube)
    assert len(match_all(g, GELU_TANH)) == 1 and match_all(g, GELU_ERF) == []
    out = recognize(g)
    assert out.op_counts() == {"Tanh": 1, "Gelu": 1}
    assert len(match_all(out, Op("Gelu", attrs={"approximate": "tanh"}))) == 1
    _same_numbers(g, out)
    assert recognize(_gelu_tanh_graph("pow", power=2.0)).op_counts().get("Gelu") is None


# ------------------------------------------------------------------ Swish recognition

def _swish_graph(form, alpha=1.702, hard=(1 / 6, 0.5), shared=False):
    b = GraphBuilder("swish")
    x = b.op("Conv", [b.input("inp", (1, 3, 6, 6)), b.constant("w", _rand(4, 3, 3, 3)), None], name="x",
             pads=(1, 1, 1, 1))
    if form == "silu":
        s = b.op("Sigmoid", [x], name="s")
    elif form == "scaled":
        s = b.op("Sigmoid", [b.op("Mul", [b.constant(None, np.array(alpha, F32)), x])], name="s")
    else:
        s = b.op("HardSigmoid", [x], name="s", alpha=hard[0], beta=hard[1])
    y = b.op("Mul", [s, x], name="y")
    return b.build([y, b.op("Neg", [s])] if shared else [y])


@pytest.mark.parametrize("form, op", [("silu", "Swish"), ("scaled", "Swish"), ("hard", "HardSwish")])
def test_swish_is_recognized_so_a_conv_takes_it_as_its_epilogue(form, op):
    g = _swish_graph(form)
    assert len(match_all(g, SWISH)) == 1
    out = recognize(g)
    assert out.op_counts() == {"Conv": 1, op: 1} and match_all(out, SWISH) == []
    if form == "scaled":
        assert math.isclose(out.nodes[-1].attr("alpha"), 1.702, rel_tol=1e-6)
    _same_numbers(g, out)


@pytest.mark.parametrize("change", [dict(form="hard", hard=(0.2, 0.5)), dict(form="silu", shared=True),
                                    dict(form="scaled", alpha=np.full((4, 1, 1), 1.7, F32))])
def test_swish_is_not_recognized_with_other_constants_or_a_shared_sigmoid(change):
    g = _swish_graph(**change)
    assert "Swish" not in recognize(g).op_counts() and "HardSwish" not in recognize(g).op_counts()


# ------------------------------------------------------------------ LayerNorm recognition

def _ln_graph(square="pow", divide="div", bias=True, scale_shape=(16,), power=2.0, axes=(2,), shared=False,
              eps=1e-5):
    b = GraphBuilder("ln")
    x = b.op("Relu", [b.input("inp", (2, 3, 16))], name="x")
    c = lambda v: b.constant(None, np.array(v, F32))  # noqa: E731
    mean = b.op("ReduceMean", [x], name="mean", axes=axes, keepdims=1)
    d = b.op("Sub", [x, mean], name="d")
    sq = b.op("Pow", [d, c(power)]) if square == "pow" else b.op("Mul", [d, d])
    var = b.op("ReduceMean", [sq], name="var", axes=axes, keepdims=1)
    std = b.op("Sqrt", [b.op("Add", [c(eps), var])])
    normed = b.op("Div", [d, std]) if divide == "div" else b.op("Mul", [b.op("Reciprocal", [std]), d])
    y = b.op("Mul", [b.constant("gamma", _rand(*scale_shape)), normed], name="scaled")
    if bias:
        y = b.op("Add", [y, b.constant("beta", _rand(16))], name="ln_out")
    outs = [y, b.op("Neg", [mean])] if shared else [y]
    return b.build(outs)


@pytest.mark.parametrize("square, divide, bias, scale_shape", [
    ("pow", "div", True, (16,)), ("mul", "div", True, (1, 1, 16)), ("pow", "reciprocal", False, (16,)),
    ("mul", "reciprocal", True, (16,))])
def test_decomposed_layernorm_is_recognized(square, divide, bias, scale_shape):
    g = _ln_graph(square, divide, bias, scale_shape)
    assert len(match_all(g, LAYERNORM)) >= 1
    out = recognize(g)
    assert out.op_counts() == {"Relu": 1, "LayerNormalization": 1}
    ln = out.nodes[-1]
    assert ln.attr("axis") == 2 and math.isclose(ln.attr("epsilon"), 1e-5, rel_tol=1e-6)
    assert (ln.inputs[2] != "") == bias and out.type_of(ln.inputs[1]).shape == (16,)
    assert out.outputs == g.outputs
    _same_numbers(g, out, rtol=1e-4, atol=1e-5)


def test_layernorm_over_several_trailing_axes():
    g = _ln_graph(axes=(1, 2), scale_shape=(16,))
    out = recognize(g)
    assert out.nodes[-1].op == "LayerNormalization" and out.nodes[-1].attr("axis") == 1
    assert out.type_of(out.nodes[-1].inputs[1]).shape == (3, 16)
    _same_numbers(g, out, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("change", [dict(power=3.0), dict(shared=True), dict(axes=(1,))])
def test_layernorm_is_not_recognized_with_a_wrong_power_a_shared_mean_or_leading_axes(change):
    out = recognize(_ln_graph(**change))
    assert "LayerNormalization" not in out.op_counts()


# ------------------------------------------------------------------ folding, DCE, CSE, simplification

def test_constant_folding_evaluates_constant_subgraphs_and_keeps_big_expands():
    b = GraphBuilder("fold")
    x = b.input("x", (5, 256, 1024))
    w = b.op("Transpose", [b.op("Relu", [b.constant("w", _rand(8, 4))])], perm=(1, 0))
    small = b.op("Expand", [b.constant("s", _rand(1, 1))], name="small", shape=(2, 3))
    big = b.op("Expand", [b.constant("z", np.zeros((1, 1, 1), F32))], name="big", shape=(5, 256, 1024))
    y = b.op("Add", [x, big])
    g = b.build([y, b.op("Mul", [w, w], name="ww"), small])
    out = fold_constants(g)
    assert out.op_counts() == {"Expand": 1, "Add": 1}
    assert out.is_constant("ww") and out.is_constant("small") and out.producer("big").name == "big"
    np.testing.assert_allclose(out.constants["ww"], np.maximum(g.constants["w"], 0).T ** 2)
    assert fold_constants(out) is out
    _same_numbers(g, out)


def test_dead_code_and_unused_constants_are_removed():
    b = GraphBuilder()
    x = b.input("x", (3,))
    b.op("Neg", [b.op("Mul", [x, b.constant("unused", np.ones(3, F32))])])
    y = b.op("Relu", [x])
    g = b.build([y])
    out = eliminate_dead_code(g)
    assert out.op_counts() == {"Relu": 1} and dict(out.constants) == {}
    assert eliminate_dead_code(out) is out


def test_cse_merges_equal_nodes_and_constants_but_keeps_outputs():
    b = GraphBuilder()
    x = b.input("x", (3,))
    c1, c2 = b.constant("c1", np.full(3, 2, F32)), b.constant("c2", np.full(3, 2, F32))
    a1, a2 = b.op("Mul", [x, c1], name="a1"), b.op("Mul", [x, c2], name="a2")
    t1, t2 = b.op("Tanh", [a1]), b.op("Tanh", [a2])
    s = b.op("Add", [t1, t2], name="s")
    g = b.build([s, b.op("Tanh", [a1], name="out2")])
    out = eliminate_common_subexpressions(g)
    assert out.op_counts() == {"Mul": 1, "Tanh": 2, "Add": 1} and list(out.constants) == ["c1"]
    assert out.node("s").inputs[0] == out.node("s").inputs[1] and "out2" in out.outputs
    assert eliminate_common_subexpressions(out) is out
    _same_numbers(g, out)


def _simplify_case(kind):
    b = GraphBuilder(kind)
    x = b.op("Relu", [b.input("inp", (2, 3, 4))], name="x")
    if kind == "mul-one":
        y = b.op("Mul", [b.constant(None, np.ones((1, 4), F32)), x])
    elif kind == "add-zero":
        y = b.op("Add", [x, b.constant(None, np.zeros((), F32))])
    elif kind == "div-one":
        y = b.op("Div", [x, b.constant(None, np.ones((), F32))])
    elif kind == "sub-zero":
        y = b.op("Sub", [x, b.constant(None, np.zeros((), F32))])
    elif kind == "identity":
        y = b.op("Identity", [b.op("Identity", [x])])
    elif kind == "reshape-reshape":
        y = b.op("Reshape", [b.op("Reshape", [x], shape=(6, 4))], shape=(3, 8))
    elif kind == "reshape-same":
        y = b.op("Reshape", [x], shape=(2, 3, 4))
    elif kind == "transpose-pair":
        y = b.op("Transpose", [b.op("Transpose", [x], perm=(1, 2, 0))], perm=(2, 0, 1))
    elif kind == "transpose-compose":
        y = b.op("Transpose", [b.op("Transpose", [x], perm=(1, 0, 2))], perm=(0, 2, 1))
    elif kind == "cast-same":
        y = b.op("Cast", [x], to="float32")
    return b.build([b.op("Neg", [y], name="out")])


@pytest.mark.parametrize("kind, left", [
    ("mul-one", {}), ("add-zero", {}), ("div-one", {}), ("sub-zero", {}), ("identity", {}),
    ("reshape-reshape", {"Reshape": 1}), ("reshape-same", {}), ("transpose-pair", {}),
    ("transpose-compose", {"Transpose": 1}), ("cast-same", {})])
def test_algebraic_simplification(kind, left):
    g = _simplify_case(kind)
    out = simplify(g)
    assert out.op_counts() == {"Relu": 1, "Neg": 1, **left}
    _same_numbers(g, out)
    if kind == "transpose-compose":
        assert out.nodes[1].attr("perm") == (1, 2, 0)
    if kind == "reshape-reshape":
        assert out.nodes[1].inputs == ("x",) and out.nodes[1].attr("shape") == (3, 8)


def test_simplification_keeps_ops_that_broadcast_or_change_dtype():
    b = GraphBuilder()
    x = b.input("x", (3,))
    y = b.op("Mul", [x, b.constant(None, np.ones((2, 3), F32))])
    z = b.op("Cast", [x], to="float64")
    eps = b.op("Add", [x, b.constant(None, np.full((), 1e-12, F32))])
    g = b.build([y, z, eps])
    assert simplify(g) is g


def test_a_simplified_graph_output_keeps_its_name():
    b = GraphBuilder()
    x = b.input("x", (3,))
    g = b.build([b.op("Mul", [b.op("Relu", [x]), b.constant(None, np.ones((), F32))], name="y")])
    out = simplify(g)
    assert out.outputs == ("y",) and out.op_counts() == {"Relu": 1} and out.producer("y").op == "Relu"


# ------------------------------------------------------------------ the pipeline

def _block():
    b = GraphBuilder("block")
    x = b.input("x", (1, 3, 6, 6))
    two = b.op("Add", [b.constant("one", np.ones((), F32)), b.constant("one_b", np.ones((), F32))])
    conv = b.op("Conv", [x, b.constant("w", _rand(4, 3, 3, 3)), None], name="conv", pads=(1, 1, 1, 1))
    y = b.op("BatchNormalization", [b.op("Identity", [conv])] + _bn_params(b, 4), name="bn")
    y = b.op("Mul", [y, b.op("Div", [two, two])])
    return b.build([b.op("Relu", [y], name="out")])


def test_pipeline_folds_simplifies_and_folds_batchnorm_printing_after_each_pass():
    g = _block()
    lines = []
    out = run_passes(g, print_after=True, verbose=True, log=lines.append)
    assert out.op_counts() == {"Conv": 1, "Relu": 1} and out.outputs == ("out",)
    _same_numbers(g, out)
    text = "\n".join(lines)
    assert "// after fold_constants\n" in text and "// after recognize (unchanged)" in text
    assert "pass fold_batchnorm: 3 -> 2 nodes, 5 -> 2 constants" in text and "pass recognize: unchanged" in text
    assert re.search(r"conv-batchnorm +attempts +\d+ +matches +1 +rewrites +1", text)
    assert re.search(r"identity +attempts +\d+ +matches +1 +rewrites +1", text)
    seen = []
    run_passes(g, passes=["dce", CSE], print_after=lambda name, graph: seen.append((name, len(graph.nodes))))
    assert [s[0] for s in seen] == ["dce", "cse"]
    traced = []
    run_passes(g, trace=lambda name, graph: traced.append(name))
    assert traced == [p.name for p in PIPELINE]
    only = []
    run_passes(g, print_after=("simplify",), log=only.append)
    assert len(only) == 1 and only[0].startswith("// after simplify")
    assert run_passes(out) is out
    with pytest.raises(ValueError, match="no graph pass named 'nope'; passes: fold_constants, dce"):
        get_pass("nope")
    assert DCE in PIPELINE


def test_pipeline_recognizes_a_bert_style_block():
    b = GraphBuilder("bert")
    x = b.input("x", (2, 5, 16))
    h = b.op("MatMul", [x, b.constant("w1", _rand(16, 16))])
    c = lambda v: b.constant(None, np.array(v, F32))  # noqa: E731
    gelu = b.op("Mul", [b.op("Mul", [h, b.op("Add", [b.op("Erf", [b.op("Div", [h, c(1.4142135)])]), c(1.0)])]),
                        c(0.5)])
    r = b.op("Add", [x, gelu])
    mean = b.op("ReduceMean", [r], axes=(2,), keepdims=1)
    d = b.op("Sub", [r, mean])
    var = b.op("ReduceMean", [b.op("Pow", [d, c(2.0)])], axes=(2,), keepdims=1)
    n = b.op("Div", [d, b.op("Sqrt", [b.op("Add", [var, c(1e-12)])])])
    g = b.build([b.op("Add", [b.op("Mul", [n, b.constant("g", _rand(16))]), b.constant("bb", _rand(16))])])
    out = run_passes(g)
    assert out.op_counts() == {"MatMul": 1, "Gelu": 1, "Add": 1, "LayerNormalization": 1}
    assert math.isclose(out.nodes[-1].attr("epsilon"), 1e-12, rel_tol=1e-5)
    _same_numbers(g, out, rtol=1e-4, atol=1e-5)


# ------------------------------------------------------------------ property: the pipeline keeps the numbers

UNARY_KINDS = ("Relu", "Tanh", "Sigmoid", "Neg", "Abs", "Identity", "Erf", "Gelu")
STEPS = ("unary", "binary-const", "binary", "matmul", "reshape", "transpose", "batchnorm", "const-expr",
         "duplicate", "linear-batchnorm", "gelu", "layernorm", "clip", "softmax", "reduce", "concat", "slice",
         "cast", "where")


@st.composite
def random_graphs(draw):
    """Small random DAGs of registered ops, with constants that are often exactly 0 or 1."""
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 16)))
    b = GraphBuilder("random")
    shape = (draw(st.sampled_from([2, 3])), draw(st.sampled_from([2, 4])))
    values = [b.input("x", shape)]
    if draw(st.booleans()):
        values.append(b.input("y", shape))

    def const(v_shape, kind=None):
        kind = kind or draw(st.sampled_from(["zero", "one", "two", "half", "random"]))
        if kind == "random":
            return b.constant(None, (rng.uniform(0.5, 1.5, v_shape) * rng.choice([-1, 1], v_shape)).astype(F32))
        fill = {"zero": 0.0, "one": 1.0, "two": 2.0, "half": -0.5}[kind]
        return b.constant(None, np.full(v_shape, fill, F32))

    for _ in range(draw(st.integers(1, 8))):
        step = draw(st.sampled_from(STEPS))
        v = draw(st.sampled_from(values))
        t = b.types[v].shape
        if step == "unary":
            out = b.op(draw(st.sampled_from(UNARY_KINDS)), [v])
        elif step == "binary-const":
            kind = draw(st.sampled_from(["Add", "Sub", "Mul", "Div"]))
            c = const(draw(st.sampled_from([(), t[-1:], t])), "one" if kind == "Div" and draw(st.booleans())
                      else ("random" if kind == "Div" else None))
            out = b.op(kind, [v, c] if kind in ("Sub", "Div") or draw(st.booleans()) else [c, v])
        elif step == "binary":
            same = [w for w in values if b.types[w].shape == t]
            out = b.op(draw(st.sampled_from(["Add", "Sub", "Mul"])), [v, draw(st.sampled_from(same))])
        elif step == "matmul" and len(t) == 2:
            n = draw(st.sampled_from([2, 3, 4]))
            out = b.op("MatMul", [v, b.constant(None, (rng.standard_normal((t[1], n)) / t[1]).astype(F32))])
        elif step == "reshape":
            out = b.op("Reshape", [v], shape=(t[::-1] if draw(st.booleans()) else (int(np.prod(t)),)))
        elif step == "transpose":
            out = b.op("Transpose", [v], perm=tuple(reversed(range(len(t)))))
        elif step == "batchnorm" and len(t) >= 2:
            c = t[1]
            params = [rng.uniform(0.5, 1.5, c), rng.standard_normal(c), rng.standard_normal(c),
                      rng.uniform(0.5, 1.5, c)]
            out = b.op("BatchNormalization", [v] + [b.constant(None, p.astype(F32)) for p in params])
        elif step == "linear-batchnorm" and len(t) == 2:
            w = b.constant(None, (rng.standard_normal((t[1], 3)) / t[1]).astype(F32))
            y = b.op("MatMul", [v, w]) if draw(st.booleans()) else b.op("Gemm", [v, w, const((3,))])
            params = [rng.uniform(0.5, 1.5, 3), rng.standard_normal(3), rng.standard_normal(3),
                      rng.uniform(0.5, 1.5, 3)]
            out = b.op("BatchNormalization", [y] + [b.constant(None, p.astype(F32)) for p in params])
        elif step == "gelu":
            scaled = b.op("Div", [v, b.constant(None, np.array(math.sqrt(2), F32))])
            one_plus = b.op("Add", [b.op("Erf", [scaled]), const((), "one")])
            out = b.op("Mul", [b.op("Mul", [v, b.constant(None, np.array(0.5, F32))]), one_plus])
        elif step == "layernorm":
            axes = (len(t) - 1,)
            d = b.op("Sub", [v, b.op("ReduceMean", [v], axes=axes, keepdims=1)])
            var = b.op("ReduceMean", [b.op("Mul", [d, d])], axes=axes, keepdims=1)
            normed = b.op("Div", [d, b.op("Sqrt", [b.op("Add", [var, const((), "one")])])])
            out = b.op("Add", [b.op("Mul", [normed, const(t[-1:], "random")]), const(t[-1:])])
        elif step == "clip":
            out = b.op("Clip", [v], min=-0.5, max=draw(st.sampled_from([0.5, float("inf")])))
        elif step == "softmax":
            out = b.op("Softmax", [v], axis=len(t) - 1)
        elif step == "reduce" and len(t) >= 2:
            out = b.op(draw(st.sampled_from(["ReduceSum", "ReduceMean", "ReduceMax"])), [v], axes=(len(t) - 1,),
                       keepdims=draw(st.sampled_from([0, 1])))
        elif step == "concat":
            same = [w for w in values if b.types[w].shape == t]
            out = b.op("Concat", [v, draw(st.sampled_from(same)), const(t, "random")], axis=0)
        elif step == "slice" and t[0] > 1:
            out = b.op("Slice", [v], starts=(1,), ends=(t[0],), axes=(0,), steps=(1,))
        elif step == "cast":
            out = b.op("Cast", [v], to="float32")
        elif step == "where":
            cond = b.op("Greater", [v, const((), "zero")])
            out = b.op("Where", [cond, v, const(t[-1:])])
        elif step == "const-expr":
            c = b.op("Mul", [const(t[-1:], "random"), const((), "two")])
            out = b.op("Add", [v, b.op("Relu", [c])])
        elif step == "duplicate" and b.nodes:
            node = draw(st.sampled_from([n for n in b.nodes if b.types[n.outputs[0]].dtype == F32]))
            out = b.op(node.op, list(node.inputs), **node.attr_dict)
        else:
            continue
        values.append(out)
    outputs = [values[-1]]
    extra = draw(st.sampled_from(values))
    if extra not in outputs and draw(st.booleans()):
        outputs.append(extra)
    return b.build(outputs)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_graphs())
def test_the_pipeline_never_changes_a_random_graphs_numbers(g):
    out = run_passes(g)
    assert out.inputs == g.inputs and out.outputs == g.outputs
    _same_numbers(g, out, rtol=1e-4, atol=1e-5)


# ------------------------------------------------------------------ imported models

def test_imported_resnet_has_every_batchnorm_folded_and_keeps_its_numbers():
    from graph.onnx_import import load_onnx
    from tests.onnx_models import resnet18
    g = load_onnx(resnet18(size=32, classes=10))
    assert len(match_all(g, CONV_BN)) == g.op_counts()["BatchNormalization"] == 20
    out = run_passes(g)
    assert match_all(out, CONV_BN) == [] and "BatchNormalization" not in out.op_counts()
    assert len(match_all(out, Op("Conv", args=[Wildcard(), Constant(), Constant()]))) == 20
    assert out.inputs == g.inputs and out.outputs == g.outputs
    _same_numbers(g, out, rtol=1e-4, atol=1e-5)


def test_imported_bert_layer_has_its_layernorms_and_gelu_recognized():
    from graph.onnx_import import load_onnx
    from tests.onnx_models import bert_layer
    g = load_onnx(bert_layer(seq=8, hidden=32, heads=4))
    assert len(match_all(g, GELU_ERF)) == 1 and len(match_all(g, LAYERNORM)) >= 2
    out = run_passes(g)
    counts = out.op_counts()
    assert counts["LayerNormalization"] == 2 and counts["Gelu"] == 1
    assert not {"Erf", "Pow", "Sqrt", "ReduceMean", "Sub"} & set(counts)
    _same_numbers(g, out, rtol=1e-4, atol=1e-5)
