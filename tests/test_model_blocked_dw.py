"""Depthwise convolutions on the blocked layout (NCHW[b]c, decision 037): which values the plan
blocks around them, that each is the convolution rule's blocked depthwise form, and that models
with strides, asymmetric pads, channel counts whose block is not a vector, Clip epilogues, graph
inputs and outputs, and channel multipliers (computed row-major) compute what onnxruntime computes."""
import numpy as np
import pytest

ort = pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")

from graph.lower.core import block_of  # noqa: E402
from schedules import Schedule  # noqa: E402
from schedules.conv_space import find_convs  # noqa: E402
from schedules.conv_start import depthwise_tile  # noqa: E402
from tests.onnx_models import mobilenet_chain  # noqa: E402
from tests.test_model_blocked import Net, _check  # noqa: E402
from tuner.model_api import compile_model, load  # noqa: E402
from tuner.model_compile import plan_graph  # noqa: E402


def _relu6(n, x):
    lo, hi = n._name("lo"), n._name("hi")
    n.inits.append(onnx.numpy_helper.from_array(np.asarray(0.0, np.float32), lo))
    n.inits.append(onnx.numpy_helper.from_array(np.asarray(6.0, np.float32), hi))
    return n.op("Clip", [x, lo, hi])


def _dw_infos(plan):
    """``{group output: ConvInfo}`` of every depthwise conv group of ``plan``."""
    out = {}
    for g, lw in zip(plan.groups, plan.lowered):
        for info in find_convs(Schedule(lw.tensors).stage_graph()).values():
            if info.depthwise and info.weights is not None:
                out[g.outputs[0]] = info
    return out


def _dw_net():
    """A graph input read by a depthwise conv (24 channels, asymmetric pads), a
    stride-2 depthwise conv on 40 channels with ReLU6, a pointwise conv to 144 channels (blocks of
    16) and a stride-1 depthwise conv on them whose output is a graph output."""
    n = Net([1, 24, 15, 13])
    a = _relu6(n, n.conv("x", 24, 24, 3, pads=(0, 1, 2, 1), group=24))
    b = n.conv(a, 24, 40, 1)
    c = _relu6(n, n.conv(b, 40, 40, 3, stride=2, pads=(1, 1, 1, 1), group=40))
    d = n.conv(c, 40, 144, 1)
    e = n.conv(d, 144, 144, 3, pads=(1, 1, 1, 1), group=144, bias=False)
    return n, (a, b, c, d, e)


def test_depthwise_convolutions_keep_the_chain_blocked():
    n, (a, b, c, d, e) = _dw_net()
    plan = plan_graph(load(n.model([e])))
    # every value between convolutions is blocked, the depthwise outputs in their inputs' blocks;
    # the last depthwise conv reads blocked data, so it writes its graph output blocked and a
    # relayout group copies it to row-major
    # (d's row of 7 columns: blocks of 16 where a tile of them fits it, AVX-512; else 8, decision 055)
    from graph.lower.layout import out_block
    # (a's 24 channels: one block of 16 + 8 lanes with 16, 8 with 8, decision 086; b's 40 at 13 columns: 8, as
    # no tile of a 40-channel block fits 13 columns)
    assert out_block(40, 13) == 8
    assert {v: block_of(plan.layouts.get(v)) for v in (a, b, c, d)} == {a: out_block(24), b: 8, c: 8, d: out_block(144, 7)}
    assert block_of(plan.layouts.get(f"{e}.blocked")) == out_block(144, 7) and e not in plan.layouts
    infos = _dw_infos(plan)
    assert set(infos) == {a, c, f"{e}.blocked"}
    for v, info in infos.items():
        assert info.blocked and info.kb == info.cb == block_of(plan.layouts[v])
    # the graph input (row-major) is relaid and padded by one stage; the stride-2 conv reads padding
    assert infos[a].pad_stage is not None and infos[c].pad_stage is not None and (infos[c].P, infos[c].Q) == (8, 7)


def test_blocked_depthwise_models_match_onnxruntime():
    n, (_, _, _, _, e) = _dw_net()
    _check(n.model([e]))
    _check(n.model([e]), threads=2)


def test_depthwise_output_as_graph_output_from_row_major_input():
    # a depthwise conv whose input is the graph input and whose output a graph output: computed
    # row-major (a blocked output would need a copy), and still correct
    n = Net([2, 16, 9, 9])
    out = _relu6(n, n.conv("x", 16, 16, 3, stride=2, pads=(1, 0, 1, 2), group=16))
    model = n.model([out])
    assert plan_graph(load(model)).layouts == {}
    _check(model)


def test_channel_multiplier_and_dilation_fall_back_correctly():
    # a depthwise conv with a channel multiplier of 2 is computed row-major (its producer then stays
    # row-major); a dilated depthwise conv on blocked data is the blocked form
    n = Net([1, 16, 12, 12])
    a = n.conv("x", 16, 32, 1)
    m = n.conv(a, 32, 64, 3, pads=(1, 1, 1, 1), group=32)
    b = n.conv(m, 64, 32, 1)
    dil = _relu6(n, n.conv(b, 32, 32, 3, pads=(2, 2, 2, 2), dil=2, group=32))
    last = n.conv(dil, 32, 16, 1)
    model = n.model([last])
    plan = plan_graph(load(model))
    assert a not in plan.layouts and m not in plan.layouts
    assert b in plan.layouts and dil in plan.layouts and dil in _dw_infos(plan)
    _check(model)


def test_mobilenet_chain_matches_onnxruntime_both_ways():
    model = mobilenet_chain(size=20)
    plan = plan_graph(load(model))
    infos = _dw_infos(plan)
    assert len(infos) == 3 and all(info.blocked for info in infos.values())
    assert sorted((info.C, info.P) for info in infos.values()) == [(144, 10), (192, 5), (192, 10)]
    _check_model(model, blocked=True)
    _check_model(model, blocked=False)


def _check_model(model, blocked, shape=(1, 24, 20, 20)):
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    x = np.random.default_rng(2).standard_normal(shape).astype(np.float32)
    (want,) = sess.run(None, {"input": x})
    got = compile_model(load(model), blocked=blocked).run({"input": x})["output"]
    assert np.abs(got - want).max() <= 1e-5 * np.abs(want).max()


@pytest.mark.parametrize("q, kb, lanes, want", [(56, 32, 16, 4), (28, 16, 16, 7), (14, 32, 16, 2), (7, 16, 16, 7),
                                                (56, 16, 16, 7), (40, 16, 16, 5), (8, 8, 8, 4)])
def test_depthwise_register_tile(q, kb, lanes, want):
    # at most 8 accumulators, no guarded edge where a width divides the row, a 3x3 window unrolled whole
    # (at most 7 columns of one vector)
    from schedules.conv_match import ConvInfo
    info = ConvInfo("y", "x", None, "w", True, kb, kb, q, q, 3, 3, "", "r", "s", "", True, kb, kb)
    assert depthwise_tile(info, lanes) == want


@pytest.mark.parametrize("q, kb, window, want, before", [(28, 40, 5, 4, 2), (28, 40, 3, 4, 2), (56, 40, 5, 4, 2),
                                                          (28, 50, 3, 4, 2), (28, 24, 5, 4, 4), (28, 16, 5, 7, 7)])
def test_a_depthwise_tile_of_three_pieces_keeps_four_columns(q, kb, window, want, before, monkeypatch):
    # decision 093: a block of 40 channels is 3 vector pieces; 8 accumulators left it 2 columns, each tile copying
    # its padded window (5 x 6 columns for 2 outputs); blocks of one or two pieces keep their tiles
    from schedules import conv_start
    from schedules.conv_match import ConvInfo
    info = ConvInfo("y", "x", None, "w", True, kb, kb, q, q, window, window, "", "r", "s", "", True, kb, kb)
    assert depthwise_tile(info, 16) == want
    monkeypatch.setattr(conv_start, "DW_LEAST_COLUMNS", 0)
    assert depthwise_tile(info, 16) == before


def test_a_depthwise_block_of_three_pieces_matches_onnxruntime():
    # 120 channels in blocks of 40 (16 + 16 + 8): the 4-column tiles of decision 093 over a 5x5 window
    from tests.onnx_models import mobilenetv3_block
    model = mobilenetv3_block(channels=40, size=14)
    infos = _dw_infos(plan_graph(load(model)))
    assert [(i.blocked, i.kb) for i in infos.values()] == [(True, 40)]
    _check_model(model, blocked=True, shape=(1, 40, 14, 14))


@pytest.mark.parametrize("rule", [True, False])
def test_a_depthwise_conv_relaying_row_major_data_into_blocks_pads_it_once(rule, monkeypatch):
    # a ConvNeXt block's 7x7 depthwise reads the graph input (row-major) and writes blocks for its
    # LayerNorm: per task, its padded copy gathered 7 x 10 columns across the planes for 4 outputs
    from schedules import conv_space
    from schedules.space import GeneratedSpace
    from tests.onnx_models import convnext_block
    monkeypatch.setattr(conv_space, "RELAYOUT_PADS_AT_ROOT", rule)
    n = Net([1, 32, 12, 13])
    y = n.conv(n.op("Relu", [n.conv("x", 32, 32, 7, pads=(3, 3, 3, 3), group=32)]), 32, 32, 1)
    for model in (convnext_block(channels=32, size=12), n.model([y])):
        plan = plan_graph(load(model))
        starts = [GeneratedSpace(list(lw.tensors)).default_decisions() for lw in plan.lowered]
        # (each model's depthwise conv reads its graph input)
        assert [v for d in starts for k, v in d.items() if k.endswith(".pad_at")] == ["root" if rule else "task"]
    _check(n.model([y]))
    _check(n.model([y]), threads=2)
