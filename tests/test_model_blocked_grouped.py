"""Grouped convolutions with many small groups on the blocked layout (decision 037): output blocks
that read whole input blocks of their group (groups of a multiple of the block), or blocks of whole
groups, each lane reading its group's channels (decision 076; block-diagonal weights before); groups
that fit neither are computed row-major. Every model is
compared with onnxruntime."""
import pytest

pytest.importorskip("onnxruntime")

from graph.lower.core import block_of  # noqa: E402
from graph.lower.linalg import grouped_block  # noqa: E402
from schedules import Schedule  # noqa: E402
from schedules.conv_space import find_convs  # noqa: E402
from tests.test_model_blocked import Net, _check  # noqa: E402
from tuner.model_api import load  # noqa: E402
from tuner.model_compile import plan_graph  # noqa: E402


def _grouped_infos(plan):
    out = {}
    for g, lw in zip(plan.groups, plan.lowered):
        for info in find_convs(Schedule(lw.tensors).stage_graph()).values():
            if info.grouped:
                out[g.outputs[0]] = info
    return out


def test_grouped_block_choice():
    assert grouped_block(128, 128, 32, (16, 8)) == 16        # 4 channels a group: 4 groups a block
    assert grouped_block(512, 512, 32, (16, 8)) == 16        # 16 a group: one block a group
    assert grouped_block(256, 512, 16, (16, 8)) == 16        # 16 in, 32 out: two output blocks a group
    assert grouped_block(48, 48, 16, (16, 8)) is None        # 3 a group: no block of whole groups
    assert grouped_block(64, 128, 32, (16, 8)) is None       # 2 in, 4 out: a block's groups span blocks unevenly
    assert grouped_block(32, 32, 32, (16, 8)) is None        # depthwise: its own form


def test_grouped_convolutions_compute_blocked():
    n = Net([1, 64, 11, 9])
    a = n.op("Relu", [n.conv("x", 64, 128, 1)])
    g4 = n.op("Relu", [n.conv(a, 128, 128, 3, pads=(1, 0, 2, 1), group=32)])          # 4 a group, block-diagonal
    b = n.conv(g4, 128, 256, 1)
    g16 = n.conv(b, 256, 512, 3, stride=2, pads=(1, 1, 1, 1), group=16)                # 16 in, 32 out a group
    g2 = n.conv(n.conv(g16, 512, 64, 1), 64, 64, 3, pads=(1, 1, 1, 1), group=32, bias=False)   # 2 a group
    model = n.model([n.conv(g2, 64, 16, 1)])
    plan = plan_graph(load(model))
    infos = _grouped_infos(plan)
    assert set(infos) == {g4, g16, g2}
    for v, info in infos.items():
        assert info.blocked and info.kb == block_of(plan.layouts[v])
    # blocks of whole groups reduce over their group's channels only (decision 076's lane form)
    assert (infos[g4].cb, infos[g16].cb, infos[g2].cb) == (4, infos[g16].kb, 2)
    _check(model)
    _check(model, threads=2)


def test_block_diagonal_form_still_computes(monkeypatch):
    import graph.lower.linalg as linalg
    monkeypatch.setattr(linalg, "LANE_GROUPS", False)
    n = Net([1, 32, 9, 10])
    g4 = n.op("Relu", [n.conv(n.conv("x", 32, 64, 1), 64, 64, 3, pads=(1, 1, 1, 1), group=16)])
    model = n.model([n.conv(g4, 64, 16, 1)])
    infos = _grouped_infos(plan_graph(load(model)))
    assert infos[g4].cb == infos[g4].kb            # the reduction over the whole block (zeros between groups)
    _check(model)


def test_lane_groups_read_their_channels_without_gathers():
    from tensorir.runtime import build
    from schedules.space import GeneratedSpace
    from schedules.decisions import FixedDecisions
    n = Net([1, 64, 12, 12])
    g4 = n.conv(n.conv("x", 64, 64, 1), 64, 64, 3, pads=(1, 1, 1, 1), group=16)
    plan = plan_graph(load(n.model([g4])))
    lw = next(lw for lw in plan.lowered
              if any(i.grouped for i in find_convs(Schedule(lw.tensors).stage_graph()).values()))
    space = GeneratedSpace(list(lw.tensors))
    text = str(build(space.apply(FixedDecisions(space.default_decisions())).lower()).llvm_ir)
    assert "masked.gather" not in text and "shufflevector" in text


def test_groups_of_no_whole_block_compute_row_major():
    n = Net([1, 16, 7, 7])
    a = n.conv("x", 16, 48, 1)
    odd = n.conv(a, 48, 48, 3, pads=(1, 1, 1, 1), group=16)        # 3 a group: row-major, as its producer
    model = n.model([n.conv(odd, 48, 16, 1)])
    plan = plan_graph(load(model))
    assert a not in plan.layouts and odd not in plan.layouts and not _grouped_infos(plan)
    _check(model)


@pytest.mark.parametrize("channels,groups", [(256, 16), (128, 16)])     # 16 a group; 8 a group (lanes)
def test_a_lone_grouped_conv_computes_blocked_from_and_to_row_major(channels, groups):
    # the graph's input and output are row-major: the grouped conv still computes blocked (reading the
    # input through its padding stage, an Identity copying its output back), not in its row-major form
    n = Net([1, channels, 6, 5])
    g = n.op("Relu", [n.conv("x", channels, channels, 3, pads=(1, 1, 1, 1), group=groups)])
    model = n.model([g])
    plan = plan_graph(load(model))
    assert [i.grouped for i in _grouped_infos(plan).values()] == [True]
    _check(model)
    _check(model, threads=2)
