"""Groups that are pointwise in space (a 1x1 stride-1 conv and its elementwise epilogue) computed on
their plane as one row (``graph/lower/flat.py``): which groups are flattened, and that models with
them compute what onnxruntime computes, through the runtime and the ahead-of-time library."""
import numpy as np
import pytest

ort = pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")
from onnx import numpy_helper  # noqa: E402

from graph.lower import flat  # noqa: E402
from tests.test_model_blocked import Net, _check  # noqa: E402
from tuner.model_api import load  # noqa: E402
from tuner.model_compile import plan_graph  # noqa: E402


def _planes(model) -> dict:
    """Conv group label -> the (H, W) of its output tensor as its kernel computes it."""
    plan = plan_graph(load(model))
    return {"+".join(nd.op for nd in g.nodes): tuple(lw.tensors[-1].shape[2:4])
            for g, lw in zip(plan.groups, plan.lowered) if any(nd.op == "Conv" for nd in g.nodes)}


def _inverted_residual(h, w):
    """MobileNet-V2's block on an h x w plane: 1x1 expand + Clip, depthwise 3x3, 1x1 project + residual;
    then a 1x1 whose epilogue scales by a per-channel constant and gates by a Sigmoid."""
    n = Net([1, 16, h, w])
    a = n.conv("x", 16, 16, 3, pads=(1, 1, 1, 1))
    e = n.op("Clip", [n.conv(a, 16, 48, 1), "lo", "hi"])
    d = n.op("Relu", [n.conv(e, 48, 48, 3, pads=(1, 1, 1, 1), group=48)])
    p = n.op("Add", [n.conv(d, 48, 16, 1), a])
    n.inits.append(numpy_helper.from_array(np.linspace(0.5, 2, 24, dtype=np.float32).reshape(1, 24, 1, 1), "scale"))
    s = n.op("Sigmoid", [n.op("Mul", [n.conv(p, 16, 24, 1), "scale"])])
    n.inits += [numpy_helper.from_array(np.float32(0), "lo"), numpy_helper.from_array(np.float32(6), "hi")]
    return n.model([s])


def test_pointwise_conv_groups_on_a_narrow_plane_run_it_as_one_row():
    planes = _planes(_inverted_residual(7, 5))
    assert planes["Conv"] == (7, 5)                       # 3x3: its windows need the rows
    assert planes["Conv+Clip"] == (1, 35)
    assert planes["Conv+Relu"] == (7, 5)                  # depthwise 3x3
    assert planes["Conv+Add"] == (1, 35)                  # the residual read on the same plane
    assert planes["Conv+Mul+Sigmoid"] == (1, 35)          # a per-channel constant broadcasts along it


@pytest.mark.parametrize("h, w", [(7, 5), (3, 3), (14, 14)])
def test_flattened_models_match_onnxruntime(h, w):
    model = _inverted_residual(h, w)
    _check(model)
    _check(model, threads=2)


def test_operands_that_vary_along_rows_or_wide_rows_keep_the_plane(monkeypatch):
    n = Net([1, 16, 6, 7])
    n.inits.append(numpy_helper.from_array(np.linspace(-1, 1, 6, dtype=np.float32).reshape(1, 1, 6, 1), "rows"))
    out = n.op("Add", [n.conv("x", 16, 32, 1), "rows"])       # a constant per row: not pointwise along the plane
    model = n.model([n.op("Relu", [n.conv(out, 32, 16, 1)])])
    planes = _planes(model)
    assert planes["Conv+Add"] == (6, 7) and planes["Conv+Relu"] == (1, 42)
    _check(model)
    monkeypatch.setattr(flat, "FLAT_MAX_WIDTH", 6)           # rows of 7 are then wide enough to keep
    assert _planes(model)["Conv+Relu"] == (6, 7)
    _check(model)


@pytest.mark.parametrize("make", [lambda: _inverted_residual(7, 7), lambda: _one_pointwise(17, 33, 19, 19)],
                         ids=["blocked", "row-major"])
def test_a_flattened_model_as_a_library_matches_onnxruntime(tmp_path, make):
    import subprocess
    import sys

    from tests.test_model_aot import CALLER
    from tuner.model_aot import export_model
    model = make()
    prefix = str(tmp_path / "block")
    export_model(load(model), prefix)
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    np.save(prefix + ".x.npy", x)
    proc = subprocess.run([sys.executable, "-I", "-c", CALLER, prefix, str(tmp_path / "out.npz")],
                          capture_output=True, text=True, cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stderr[-2000:]
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = np.load(tmp_path / "out.npz")[model.graph.output[0].name]
    assert np.abs(got - want).max() <= 1e-4 * np.abs(want).max()


def _one_pointwise(c, k, h, w, batch=1):
    """One 1x1 conv (biased) and its Relu, from the graph's input to its output: row-major on both sides."""
    n = Net([batch, c, h, w])
    return n.model([n.op("Relu", [n.conv("x", c, k, 1)])])


def _starts(model) -> dict:
    """Conv group label -> its kernel's heuristic start (the decisions of the generated space)."""
    from schedules.space import GeneratedSpace
    plan = plan_graph(load(model))
    return {"+".join(nd.op for nd in g.nodes): GeneratedSpace(list(lw.tensors)).default_decisions()
            for g, lw in zip(plan.groups, plan.lowered) if any(nd.op == "Conv" for nd in g.nodes)}


def test_a_row_major_pointwise_conv_runs_its_plane_as_one_row_at_any_width():
    # from the graph's input to its output the conv is row-major (NCHW): as one row its positions are the
    # contiguous axis of a matrix product, whatever the row's width (blocked convs keep wide rows)
    assert _planes(_one_pointwise(17, 33, 19, 19)) == {"Conv+Relu": (1, 361)}
    assert _planes(_one_pointwise(64, 128, 40, 40)) == {"Conv+Relu": (1, 1600)}
    assert _planes(_one_pointwise(16, 16, 40, 40, batch=2)) == {"Conv+Relu": (1, 1600)}


def test_a_row_major_pointwise_conv_starts_over_its_positions_where_they_fill_the_vectors():
    start = _starts(_one_pointwise(17, 33, 19, 19))["Conv+Relu"]
    # 361 positions fill their vectors better than 33 channels: a product over the positions (the vector
    # axis, last) with a register tile of several output channels (rows), not one
    blocked = [v for d, v in start.items() if d.endswith(".blocked")]
    assert blocked == [False]
    rows = [v for d, v in start.items() if d.endswith(".i1.t3")]
    assert rows and rows[0] > 1, start
    # 49 positions (7x7) fill their vectors worse than 960 channels: blocked, vectors of output channels
    start = _starts(_one_pointwise(160, 960, 7, 7))["Conv+Relu"]
    assert [v for d, v in start.items() if d.endswith(".blocked")] == [True]


@pytest.mark.parametrize("c, k, h, w", [(17, 33, 19, 19), (3, 16, 9, 13), (40, 24, 13, 13), (32, 64, 12, 12)])
@pytest.mark.parametrize("threads", [1, 2])
def test_row_major_pointwise_models_match_onnxruntime(c, k, h, w, threads):
    _check(_one_pointwise(c, k, h, w), threads=threads)


@pytest.mark.parametrize("blocked", [False, True])
def test_both_forms_of_a_row_major_pointwise_conv_compute_it(blocked):
    # the tuner may take either form: each must compute the conv (against numpy)
    from schedules.decisions import FixedDecisions
    from schedules.space import GeneratedSpace
    from tensorir.runtime import build
    plan = plan_graph(load(_one_pointwise(20, 36, 11, 9)))
    (lw,) = plan.lowered
    space = GeneratedSpace(list(lw.tensors))
    name = next(d for d in space.default_decisions() if d.endswith(".blocked"))
    decisions = space.default_decisions({name: blocked})
    assert decisions[name] is blocked
    kernel = build(space.apply(FixedDecisions(decisions)).lower())
    rng = np.random.default_rng(3)
    x, wt, b = (rng.standard_normal(t.shape).astype(np.float32) for t in lw.tensors[:3])
    out = np.empty(lw.tensors[3].shape, np.float32)
    kernel(x, wt, b, out)
    want = np.maximum(np.einsum("kc,ncp->nkp", wt.reshape(36, 20), x.reshape(1, 20, -1)) + b[:, None], 0)
    assert np.abs(out.reshape(want.shape) - want).max() <= 1e-4 * np.abs(want).max()


def _one_depthwise(c, h, w, k=3, stride=1, dil=1):
    n = Net([1, c, h, w])
    p = dil * (k // 2)
    return n.model([n.op("Relu", [n.conv("x", c, c, k, stride=stride, pads=(p, p, p, p), dil=dil, group=c)])])


def test_a_row_major_depthwise_conv_starts_on_its_rows_where_a_row_fills_a_vector():
    # decision 083: a weighted pool on the NCHW rows, no relayout of data and output; narrow rows stay blocked
    wide = _starts(_one_depthwise(72, 30, 30))["Conv+Relu"]
    narrow = _starts(_one_depthwise(576, 7, 7))["Conv+Relu"]
    assert [v for d, v in wide.items() if d.endswith(".pool_rows")] == [True]
    assert [v for d, v in narrow.items() if d.endswith(".pool_rows")] == [False]


@pytest.mark.parametrize("c, h, w, k, stride, dil", [(72, 30, 20, 3, 1, 1), (24, 33, 40, 5, 2, 1), (16, 64, 64, 3, 1, 1),
                                                     (20, 18, 36, 3, 1, 2), (40, 7, 7, 3, 1, 1)])
@pytest.mark.parametrize("threads", [1, 2])
def test_row_major_depthwise_models_match_onnxruntime(c, h, w, k, stride, dil, threads):
    _check(_one_depthwise(c, h, w, k, stride, dil), threads=threads)
