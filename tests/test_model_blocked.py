"""Activations kept in the blocked layout (NCHW[b]c) between convolutions: which values the plan
blocks, that every blocked conv is the convolution rule's blocked form, and that models with
strides, asymmetric pads, dilation, odd channel counts, residuals and bias compute what onnxruntime
computes."""
import numpy as np
import pytest

ort = pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from graph.lower.core import block_of, from_storage, to_storage  # noqa: E402
from graph.lower import layout  # noqa: E402
from graph.lower.layout import out_block, out_blocks  # noqa: E402
from schedules import Schedule  # noqa: E402
from schedules.conv_space import find_convs  # noqa: E402
from tuner.model_api import compile_model, load  # noqa: E402
from tuner.model_compile import plan_graph  # noqa: E402


class Net:
    """A tiny ONNX model builder: ``conv`` / ``op`` append nodes, ``model`` closes the graph."""

    def __init__(self, shape, seed=0):
        self.rng, self.nodes, self.inits, self.n = np.random.default_rng(seed), [], [], 0
        self.shape = shape

    def _name(self, base):
        self.n += 1
        return f"{base}{self.n}"

    def conv(self, x, c_in, c_out, k, stride=1, pads=(0, 0, 0, 0), dil=1, group=1, bias=True):
        kh, kw = (k, k) if isinstance(k, int) else k
        w = self._name("w")
        self.inits.append(numpy_helper.from_array(
            (self.rng.standard_normal((c_out, c_in // group, kh, kw)) / np.sqrt(c_in * kh * kw)).astype(np.float32), w))
        ins = [x, w]
        if bias:
            b = self._name("b")
            self.inits.append(numpy_helper.from_array(self.rng.standard_normal(c_out).astype(np.float32), b))
            ins.append(b)
        return self.op("Conv", ins, kernel_shape=[kh, kw], strides=[stride, stride], pads=list(pads),
                       dilations=[dil, dil], group=group)

    def op(self, kind, ins, **attrs):
        out = self._name(kind.lower())
        self.nodes.append(helper.make_node(kind, list(ins), [out], name=out, **attrs))
        return out

    def model(self, outputs):
        graph = helper.make_graph(self.nodes, "net", [helper.make_tensor_value_info("x", TensorProto.FLOAT, self.shape)],
                                  [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
                                  self.inits)
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
        m.ir_version = min(m.ir_version, 8)
        return onnx.shape_inference.infer_shapes(m)


def _check(model, threads=1):
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    x = np.random.default_rng(1).standard_normal([d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim])
    feeds = {model.graph.input[0].name: x.astype(np.float32)}
    got = compile_model(load(model), threads=threads).run(feeds)
    for o, want in zip(model.graph.output, sess.run(None, feeds)):
        assert np.abs(got[o.name] - want).max() <= 1e-4 * np.abs(want).max(), o.name


def _residual_net():
    """Stride 2 with asymmetric pads on 3 channels, 24 channels (blocks of 8), a dilated 5x1 window,
    a 1x1 projection as the residual, ReLU, global pooling."""
    n = Net([2, 3, 19, 23])
    a = n.op("Relu", [n.conv("x", 3, 16, 3, stride=2, pads=(1, 0, 1, 2))])
    b = n.conv(a, 16, 24, 1, bias=False)
    c = n.conv(b, 24, 32, (5, 1), pads=(4, 0, 4, 0), dil=2)
    r = n.conv(b, 24, 32, 1)
    d = n.op("Relu", [n.op("Add", [c, r])])
    e = n.conv(d, 32, 48, 3, stride=3, pads=(1, 1, 1, 1))
    return n, n.op("Flatten", [n.op("GlobalAveragePool", [e])])


def test_consecutive_convolutions_exchange_blocked_activations():
    n, out = _residual_net()
    plan = plan_graph(load(n.model([out])))
    blocked = {v: block_of(lay) for v, lay in plan.layouts.items()}
    # every conv output (the projection and its residual sum included) is blocked: two vectors, one
    # or 8 channels per block as the channel count allows; the stem's too (3 input channels: it reads
    # row-major data but writes blocks, decision 087), not the graph output
    conv_outputs = [g.outputs[0] for g in plan.groups if any(nd.op == "Conv" for nd in g.nodes)]
    assert len(conv_outputs) == 5 and all(v in blocked for v in conv_outputs)
    stem = next(g for g in plan.groups if g.outputs[0] == conv_outputs[0])
    assert stem.inputs[0] not in blocked
    # (24 channels: blocks of 8 with 8 lanes, one of 16 + 8 lanes with 16: decision 086)
    assert set(blocked.values()) == {next(b for b in out_blocks() if k % b == 0) for k in (32, 48)} | {out_block(24)}
    assert not set(plan.graph.outputs) & set(blocked)
    # each blocked conv is the convolution rule's blocked form: data and weights read in their blocks
    for g, lw in zip(plan.groups, plan.lowered):
        if g.outputs[0] in blocked and any(nd.op == "Conv" for nd in g.nodes):
            (info,) = find_convs(Schedule(lw.tensors).stage_graph()).values()
            assert info.blocked and info.kb == blocked[g.outputs[0]]


def test_blocked_models_match_onnxruntime():
    n, out = _residual_net()
    _check(n.model([out]))
    _check(n.model([out]), threads=2)


def test_pools_between_convolutions_keep_the_blocked_layout():
    n = Net([1, 16, 15, 15])
    a = n.conv("x", 16, 32, 3, pads=(1, 1, 1, 1))
    p = n.op("MaxPool", [a], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    b = n.conv(p, 32, 16, 3, pads=(1, 1, 1, 1))
    q = n.op("AveragePool", [b], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], count_include_pad=0)
    c = n.op("MaxPool", [n.conv(q, 16, 16, 1)], kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1)
    model = n.model([n.op("GlobalAveragePool", [n.conv(c, 16, 8, 1)])])
    plan = plan_graph(load(model))
    assert {p, q, c} <= set(plan.layouts)
    for g, lw in zip(plan.groups, plan.lowered):
        if g.nodes[0].op in ("MaxPool", "AveragePool"):   # the convolution rule's blocked window
            info = next(iter(find_convs(Schedule(lw.tensors).stage_graph()).values()))
            assert info.blocked and info.weights is None
    _check(model)


def test_values_read_by_row_major_convs_or_returned_stay_row_major():
    n = Net([1, 8, 12, 12])
    a = n.conv("x", 8, 16, 3, pads=(1, 1, 1, 1))
    dw = n.conv(a, 16, 32, 3, pads=(1, 1, 1, 1), group=16)      # channel multiplier 2: computed row-major
    b = n.conv(dw, 32, 16, 1)                                    # reads a row-major value
    p = n.op("MaxPool", [b], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    c = n.conv(p, 16, 32, 3, pads=(1, 1, 1, 1))
    d = n.conv(c, 32, 16, 1)
    model = n.model([d, b])
    plan = plan_graph(load(model))
    # a is read by the row-major depthwise conv: row-major. b is a graph output computed from row-major data:
    # written row-major. d, a graph output computed from blocked data, is written blocked and copied
    # to row-major by a relayout group
    assert a not in plan.layouts and b not in plan.layouts and p not in plan.layouts
    assert c in plan.layouts and d not in plan.layouts and f"{d}.blocked" in plan.layouts
    _check(model)


def test_odd_channel_counts_and_other_readers_keep_the_chain_blocked():
    # 13 input channels (one block of 13), 40 and 24 (blocks of 8), 10 (one block of 10: a partial
    # vector), a sigmoid epilogue and a ReduceMean reading the last blocked value through its layout
    n = Net([1, 13, 11, 9])
    a = n.op("Relu", [n.conv("x", 13, 16, 3, pads=(1, 1, 1, 1))])
    b = n.conv(a, 16, 40, (1, 3), stride=2, pads=(0, 1, 0, 1))
    c = n.conv(b, 40, 24, 3, pads=(2, 2, 2, 2), dil=2)
    e = n.op("Sigmoid", [n.op("Add", [c, n.conv(b, 40, 24, 1, bias=False)])])
    last = n.conv(e, 24, 10, 3)
    model = n.model([n.op("ReduceMean", [last], axes=[2, 3])])
    plan = plan_graph(load(model))
    # (40 channels: blocks of 8 with 8 lanes; one block of 40 = 16 + 16 + 8 with 16, decision 086)
    from graph.lower.layout import out_block
    assert plan.layouts.get(a) == "nchw16c" and plan.layouts.get(last) == "nchw10c"
    assert plan.layouts.get(b) == f"nchw{out_block(40, 6)}c" and out_block(40, 6, 8) == 8 and out_block(40, 6, 16) == 40
    _check(model)
    _check(model, threads=2)


def test_channel_counts_no_block_of_8_divides_take_blocks_of_the_fullest_vectors():
    # 20 channels: one block of 8 + 8 + 4 lanes on AVX2 (not two of 8 + 2); 44: 22 or 44; each read by
    # the next conv and a depthwise conv in that block
    from graph.lower.layout import out_block
    n = Net([1, 16, 9, 9])
    a = n.op("Relu", [n.conv("x", 16, 20, 3, pads=(1, 1, 1, 1))])
    b = n.conv(a, 20, 44, 1)
    c = n.conv(b, 44, 44, 3, pads=(1, 1, 1, 1), group=44)
    model = n.model([n.conv(c, 44, 8, 1)])
    plan = plan_graph(load(model))
    assert plan.layouts.get(a) == f"nchw{out_block(20, 9)}c" and out_block(20, 9) == 20
    assert plan.layouts.get(b) == f"nchw{out_block(44, 9)}c" and out_block(44, 9) in (22, 44)
    _check(model)
    _check(model, threads=2)


def test_blocked_storage_round_trips():
    a = np.random.default_rng(0).standard_normal((2, 24, 3, 5)).astype(np.float32)
    s = to_storage(a, "nchw8c")
    assert s.shape == (2, 3, 3, 5, 8) and s[1, 2, 0, 4, 3] == a[1, 2 * 8 + 3, 0, 4]
    assert np.array_equal(from_storage(s, "float32", a.shape, "nchw8c"), a)


def test_a_row_too_narrow_for_a_two_vector_tile_takes_one_vector_blocks():
    from graph.lower.layout import out_block, row_fits
    # AVX2 (16 registers of 8 lanes): 2 vectors x 7 columns + 2 weight vectors + a broadcast = 17
    assert not row_fits(16, 7, 8) and row_fits(8, 7, 8) and row_fits(16, 14, 8) and row_fits(16, 1, 8)
    assert (out_block(512, 7, 8), out_block(512, 14, 8), out_block(512, 7, 16)) == (8, 16, 32)
    assert out_block(48, 7, 8) == 8 and out_block(20, 7, 8) == 20      # (no block of 8 divides 20: 8 + 8 + 4 lanes)
    assert (out_block(44, 7, 8), out_block(36, 7, 8), out_block(30, 7, 8)) == (22, 12, 15)   # fullest vectors
    assert out_block(48, 17, 8) == 16      # (a prime row no tile of either block fits: the first block)


def test_with_16_lanes_blocks_carry_the_most_channels_per_vector_piece():
    # a vector that is not a power of two is cut into pieces, each an FMA (25 = 16 + 8 + 1: three): 100
    # channels take one block of 50 (16 x 3 + 2), and 1000, which 8 divides but 16 does not, blocks of 40
    # (16 + 16 + 8) rather than of 8 (SqueezeNet's classifier conv: 8.3 -> 5.5 ms, decision 086)
    from graph.lower.layout import lanes_per_piece, odd_block
    assert lanes_per_piece(25, 16) == 25 / 3 and lanes_per_piece(50, 16) == 12.5 and lanes_per_piece(32, 16) == 16
    assert (odd_block(100, 16), out_block(1000, 7, 16), out_block(24, 7, 16), out_block(72, 7, 16)) == (50, 40, 24, 24)
    assert (out_block(64, 7, 16), out_block(48, 7, 16), out_block(12, 7, 16)) == (32, 16, 12)   # as before
    assert (odd_block(100, 8), out_block(1000, 7, 8), out_block(24, 7, 8)) == (20, 8, 8)        # 8 lanes: as before


def test_a_model_computes_in_the_blocks_its_rows_fit(monkeypatch):
    # the plan asks each conv output for the block whose tile fits its row, and a model whose consecutive
    # convs then exchange blocks of different sizes (16 at 14 columns, 8 at 7) computes what onnxruntime does
    import graph.lower.layout as layout
    monkeypatch.setattr(layout, "row_fits", lambda block, width, lanes: width > 7 or block <= 8)
    n = Net([1, 16, 14, 14])
    a = n.op("Relu", [n.conv("x", 16, 32, 3, pads=(1, 1, 1, 1))])
    b = n.op("Relu", [n.conv(a, 32, 32, 3, stride=2, pads=(1, 1, 1, 1))])
    c = n.conv(b, 32, 16, 1)
    model = n.model([n.op("Flatten", [n.op("GlobalAveragePool", [c])])])
    plan = plan_graph(load(model))
    blocks = {g.outputs[0]: block_of(plan.layouts[g.outputs[0]]) for g in plan.groups
              if any(nd.op == "Conv" for nd in g.nodes) and g.outputs[0] in plan.layouts}
    assert sorted(blocks.values()) == sorted([next(b for b in out_blocks() if 32 % b == 0), 8, 8]), blocks
    _check(model)


def _input_residual_net(channels):
    """A bottleneck whose residual is the graph input itself: 1x1 expand + ReLU, 3x3 back to the input's
    channels, + x, ReLU, and a second block adding x again."""
    n = Net([1, channels, 9, 11])
    a = n.op("Relu", [n.conv("x", channels, 48, 1)])
    b = n.op("Relu", [n.op("Add", [n.conv(a, 48, channels, 3, pads=(1, 1, 1, 1)), "x"])])
    c = n.op("Add", [n.conv(b, channels, channels, 1), "x"])
    return n, c


@pytest.mark.parametrize("channels", [32, 20])
def test_a_row_major_residual_is_copied_into_the_block_once(channels, monkeypatch):
    # decision 069: the adds read the graph input through its layout, a strided gather per vector
    # (ResNeXt-like block at 56x56: its 1x1 + Add step 2.05 -> 1.55 ms at 1 thread on znver3)
    n, out = _input_residual_net(channels)
    _check(n.model([out]))         # (20 channels: the 3x3 and its 1x1 are computed row-major, decision 089)
    monkeypatch.setattr(layout, "FEW_CHANNEL_WINDOWS_ROW_MAJOR", False)
    plan = plan_graph(load(n.model([out])))
    (copy,) = [g for g in plan.groups if g.nodes[0].op == "Identity" and g.inputs == ("x",)]
    block = block_of(plan.layouts[copy.outputs[0]])
    assert plan.groups.index(copy) == 0 and block
    readers = [g for g in plan.groups if copy.outputs[0] in g.inputs]
    # the first conv and both adds read the blocked copy; nothing else reads x
    assert len(readers) == 3 and all(any(nd.op == "Conv" for nd in g.nodes) for g in readers)
    assert all("x" not in g.inputs for g in plan.groups if g is not copy)
    _check(n.model([out]))
    _check(n.model([out]), threads=2)


def _few_channel_net(wide_window: bool):
    """A DenseNet layer twice (1x1 to 48 + Relu, 3x3 to 12, concat with its input), or with ``wide_window``
    an ESPCN-like tail (3x3 to 32 + Relu, 3x3 to 12)."""
    n = Net([1, 16, 14, 16])
    if wide_window:
        a = n.op("Relu", [n.conv("x", 16, 32, 3, pads=(1, 1, 1, 1))])
        return n, n.conv(a, 32, 12, 3, pads=(1, 1, 1, 1))
    x, c = "x", 16
    for _ in range(2):
        a = n.op("Relu", [n.conv(x, c, 48, 1)])
        x, c = n.op("Concat", [x, n.conv(a, 48, 12, 3, pads=(1, 1, 1, 1))], axis=1), c + 12
    return n, x


@pytest.mark.parametrize("rule", [True, False])
def test_few_channel_window_convs_stay_row_major_where_their_producers_run_as_fast_so(rule, monkeypatch):
    # decision 089: a 3x3 to 12 channels (12 of 16 lanes; 16 columns fill theirs) runs on vectors of columns,
    # row-major, and so do the 1x1s that feed it; after a 3x3 of 32 channels it stays blocked
    monkeypatch.setattr(layout, "FEW_CHANNEL_WINDOWS_ROW_MAJOR", rule)
    for wide in (False, True):
        n, out = _few_channel_net(wide)
        plan = plan_graph(load(n.model([out])))
        convs = [g for g in plan.groups if any(nd.op == "Conv" for nd in g.nodes)]
        blocked_outs = [bool(block_of(plan.layouts.get(g.outputs[0]))) for g in convs]
        few = rule and layout.Target.host().lanes32 >= 16    # (8 lanes: only channels within one vector)
        if wide:
            assert blocked_outs == [True, True]
        else:
            assert blocked_outs == [not few] * 4
        _check(n.model([out]))


def test_a_window_conv_is_computed_on_columns_where_its_row_carries_more_per_vector_piece():
    # decision 089 (16 lanes): 12 channels are 8 + 4 lanes (6 per piece); 36 columns 16 + 16 + 4 (12)
    assert layout.columns_conv(12, 36, 9, 16) and layout.columns_conv(4, 128, 9, 16)
    assert not layout.columns_conv(12, 14, 9, 16)       # 16 + 8 + 4 + 2: fewer columns per piece
    assert not layout.columns_conv(24, 28, 9, 16)       # 16 + 8 channels: 12 per piece, 28 columns 9.3
    assert not layout.columns_conv(12, 20, 9, 16)       # the start keeps vectors of channels there (088)
    assert not layout.columns_conv(32, 64, 9, 16) and not layout.columns_conv(12, 36, 1, 16)
    # 8 lanes: only channels within one vector
    assert layout.columns_conv(4, 64, 9, 8) and not layout.columns_conv(12, 64, 9, 8)


@pytest.mark.parametrize("builder, kwargs", [("yolo_neck", dict(channels=16, size=14)),
                                             ("unet_up", dict(channels=32, size=7)),
                                             ("yolo_neck", dict(channels=24, size=10))])
def test_a_concat_that_a_blocked_conv_reads_is_written_in_blocks(builder, kwargs, monkeypatch):
    # decision 095: the Concat of an upsampled value and a skip value feeds a 3x3 conv; written row-major, the conv
    # packed it itself and could not take Winograd (a U-Net step 1.8x as long)
    import tests.onnx_models as models
    model = getattr(models, builder)(**kwargs)

    def concat_layouts():
        plan = plan_graph(load(model))
        return [plan.layouts.get(g.outputs[0]) for g in plan.groups if g.nodes[-1].op == "Concat"]
    got = concat_layouts()
    assert len(got) == 1 and block_of(got[0])
    _check(model)
    _check(model, threads=2)
    monkeypatch.setattr(layout, "BLOCKED_CONCATS", False)
    assert concat_layouts() == [None]


def test_a_concat_no_conv_reads_stays_row_major():
    # DenseNet's concats feed BatchNorm + Relu (which read through the layout), an Inception block's is the output
    from tests.onnx_models import densenet_block
    plan = plan_graph(load(densenet_block(channels=16, growth=12, layers=2, size=10)))
    assert all(plan.layouts.get(g.outputs[0]) is None for g in plan.groups if g.nodes[-1].op == "Concat")


@pytest.mark.parametrize("channels, size", [(32, 5), (16, 7)])
def test_a_deconv_that_a_concat_takes_computes_its_phases_outermost(channels, size, monkeypatch):
    # decision 097: a U-Net step's ConvTranspose runs as a conv whose channels are (row phase, column phase,
    # channel), so the interleave, written in blocks with the concat (decision 095), copies whole vectors
    from graph.onnx_import import extra_ops
    from tests.onnx_models import unet_up
    model = unet_up(channels=channels, size=size)

    def perms():
        plan = plan_graph(load(model))
        return [next(n.attr("perm") for n in g.nodes if n.op == "Transpose")
                for g in plan.groups if any(n.op == "Transpose" for n in g.nodes)]
    assert perms() == [(0, 3, 4, 1, 5, 2)]
    _check(model)
    _check(model, threads=2)
    monkeypatch.setattr(extra_ops, "PHASES_OUTER", False)
    assert perms() == [(0, 1, 4, 2, 5, 3)]


def test_a_deconv_no_concat_takes_keeps_channel_major_phases():
    # a DCGAN tail's interleaves are written row-major, where the channels of a column pair are best side by side
    from tests.onnx_models import dcgan_generator
    plan = plan_graph(load(dcgan_generator(channels=32, size=5)))
    perms = [next(n.attr("perm") for n in g.nodes if n.op == "Transpose")
             for g in plan.groups if any(n.op == "Transpose" for n in g.nodes)]
    assert perms == [(0, 1, 4, 2, 5, 3)] * 2


@pytest.mark.parametrize("rule", [True, False])
def test_a_blocked_concat_of_whole_blocks_picks_its_part_by_the_block(rule, monkeypatch):
    # decision 101: a test on the channel (block * B + lane) varied with the lane as far as code generation could
    # tell, so every part's loads were masked in every vector (ASPP's concat 0.476 ms against 0.072)
    import re
    from graph.lower import shape
    from schedules.space import FixedDecisions, GeneratedSpace
    from tests.onnx_models import aspp
    monkeypatch.setattr(shape, "BLOCK_TESTS", rule)
    model = aspp(channels=32, out_channels=16, size=9, rates="2,4")
    plan = plan_graph(load(model))
    (lw,) = [lw for g, lw in zip(plan.groups, plan.lowered) if g.nodes[-1].op == "Concat"]
    space = GeneratedSpace(list(lw.tensors))
    nest = str(space.apply(FixedDecisions(space.default_decisions())).lower())
    lane = re.search(r"for (\S+) in range\(\d+\):  # vectorized", nest).group(1)
    tests = re.findall(r"select\(([^,]*?) (?:<|>=) ", nest)
    assert len(tests) == 3 and any(lane in t for t in tests) is not rule     # 4 parts, 3 tests
    _check(model)
