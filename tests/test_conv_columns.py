"""The columns form of a row-major convolution (schedules/conv_columns.py): vectors of output columns,
rows of output channels; its start, its register budget, and its results against numpy and onnxruntime."""
from __future__ import annotations

import numpy as np
import pytest

from schedules import conv_columns
from schedules.conv_columns import columns_tile
from schedules.conv_match import ConvInfo
from schedules.conv_start import vector_registers
from schedules.space import FixedDecisions, GeneratedSpace, RandomDecisions, SpaceOptions
from tensorir.ops.registry import get_workload
from tests.conftest import check_workload

AVX2 = SpaceOptions(vector_bits=256, cores=2)
AVX512 = SpaceOptions(vector_bits=512, cores=2)


def _check(s, workload, params):
    check_workload(s, workload, params, seed=3)


def _conv(**kw):
    return dict(dict(N=1, stride=1, pad=1, dilation=1, R=3, S=3), **kw)


@pytest.mark.parametrize("params, columns", [
    (_conv(C=32, H=20, W=20, K=3), True),         # an image-output conv: 3 channels fill 3 of 16 lanes
    (_conv(C=3, H=18, W=32, K=16), True),         # a stem writing rows: both fill, no transposed tile
    (_conv(C=16, H=25, W=25, K=12, stride=2), True),   # strided: 13 columns fill their vector better than 12 channels
    (_conv(C=64, H=7, W=7, K=64), False),         # 7 columns fill under half a vector
    (_conv(C=24, H=10, W=10, K=48), False),
])
def test_a_row_major_conv_starts_with_vectors_of_whichever_axis_fills_them_better(params, columns):
    space = GeneratedSpace(get_workload("conv2d").make(**params), AVX512)
    d = space.default_decisions()
    assert d["Y.columns"] is columns
    s = space.apply(FixedDecisions(d))
    if columns:
        # the output channels are the register tile's rows: no vector of channels, no channels' pack width
        assert d["Y.kb"] in conv_columns.row_choices(params["K"])
        shape = s.stage_graph().stage("Xpad_pack").shape
        assert shape[3:] == (params["H"] + 2, params["W"] + 2)
    _check(s, "conv2d", params)


@pytest.mark.parametrize("one_vector_only", [True, False])
def test_with_16_registers_only_channels_that_fit_one_vector_start_with_vectors_of_columns(one_vector_only, monkeypatch):
    monkeypatch.setattr(conv_columns, "AVX2_ONE_VECTOR_ONLY", one_vector_only)
    starts = {K: GeneratedSpace(get_workload("conv2d").make(**_conv(C=16, H=16, W=16, K=K)), AVX2)
              .default_decisions()["Y.columns"] for K in (3, 8, 16, 64)}
    assert starts == {3: True, 8: True, 16: not one_vector_only, 64: not one_vector_only}


def test_the_start_without_the_rule_keeps_vectors_of_channels(monkeypatch):
    monkeypatch.setattr(conv_columns, "COLUMNS_FILL_MARGIN", -1.0)
    space = GeneratedSpace(get_workload("conv2d").make(**_conv(C=32, H=20, W=20, K=3)), AVX512)
    assert space.default_decisions()["Y.columns"] is False


@pytest.mark.parametrize("C, K, H, W, lanes, registers", [(32, 3, 64, 64, 16, 32), (3, 16, 128, 128, 16, 32),
                                                         (64, 12, 32, 32, 16, 32), (20, 20, 50, 50, 8, 16),
                                                         (8, 5, 9, 37, 8, 16), (16, 1, 96, 96, 16, 32)])
def test_the_columns_tile_fits_its_accumulators_inputs_and_a_broadcast(C, K, H, W, lanes, registers):
    info = ConvInfo("Y", "X", None, "Wt", False, C, K, H, W, 3, 3)
    kb, qt, pt = columns_tile(info, lanes, registers)
    m = vector_registers(min(qt, W), lanes)
    assert kb * pt * m + pt * m + 1 <= registers
    assert kb * pt * m >= min(8, K * H * m)          # enough accumulators to hide the FMA latency
    assert pt <= H and (qt % lanes == 0 or qt == W)


class _Columns(RandomDecisions):
    """Random decisions, the convolution rule's columns form on."""

    def _pick(self, name, choices):
        if name.endswith(".blocked") or name.endswith(".columns"):
            return True
        return super()._pick(name, choices)


COLUMN_SHAPES = [   # edges everywhere: tiles that divide neither channels, rows nor columns
    _conv(C=5, H=9, W=37, K=5),
    _conv(N=2, C=6, H=10, W=19, K=7, stride=2),
    _conv(C=4, H=9, W=23, K=3, pad=2, dilation=2),
    _conv(C=3, H=20, W=19, K=16, R=7, S=7, stride=2, pad=3),
    _conv(C=9, H=8, W=40, K=17, R=1, S=1, stride=2, pad=0),
    _conv(C=20, H=7, W=7, K=2, R=5, S=5, pad=2),
]


@pytest.mark.parametrize("seed", range(12))
def test_random_decisions_of_the_columns_form_compute_what_numpy_computes(seed):
    params = COLUMN_SHAPES[seed % len(COLUMN_SHAPES)]
    space = GeneratedSpace(get_workload("conv2d").make(**params), AVX2 if seed % 2 else AVX512)
    src = _Columns(seed)
    s = space.apply(src)
    assert src.decisions["Y.columns"] is True
    _check(s, "conv2d", params)


@pytest.mark.parametrize("kwargs", [dict(channels=32, out_channels=3, size=23),
                                    dict(channels=3, out_channels=16, size=32, stride=2),
                                    dict(channels=12, out_channels=5, size=17, kernel=5, batch=2)])
def test_one_conv_models_writing_few_channels_match_onnxruntime(kwargs):
    ort = pytest.importorskip("onnxruntime")
    from tests.onnx_models import grouped_conv
    from tuner.model_api import compile_model, load
    model = grouped_conv(groups=1, **kwargs)
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    x = np.random.default_rng(5).standard_normal(shape).astype(np.float32)
    compiled = compile_model(load(model), threads=1)
    assert any(k.endswith(".columns") and v for lw in compiled.info["plan"].lowered
               for k, v in GeneratedSpace(list(lw.tensors)).default_decisions().items())
    got = compiled.run({"input": x})[model.graph.output[0].name]
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"input": x})[0]
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * max(1.0, float(np.abs(want).max())))


@pytest.mark.parametrize("rule", [True, False])
@pytest.mark.parametrize("params", [_conv(C=3, H=20, W=19, K=16, R=7, S=7, stride=2, pad=3),
                                    _conv(N=2, C=6, H=10, W=33, K=7, R=5, S=5, pad=2, stride=2)])
def test_a_strided_window_in_the_columns_form_reads_its_data_split_into_column_phases(params, rule, monkeypatch):
    # each tap's vector of output columns then loads contiguous input columns, not every other one: ResNet-18's
    # 7x7 s2 stem writing rows ran 1.10x / 1.08x as fast at 1 / 2 threads (decision 100)
    from schedules import conv_space
    monkeypatch.setattr(conv_space, "PHASE_COLUMNS", rule)
    space = GeneratedSpace(get_workload("conv2d").make(**params), AVX512)
    d = space.default_decisions({"Y.columns": True})
    assert d.get("Y.data_phases") is (True if rule else None)
    narrow = GeneratedSpace(get_workload("conv2d").make(**dict(params, R=3, S=3, pad=1)), AVX512)
    assert "Y.data_phases" not in narrow.default_decisions({"Y.columns": True})    # a 3x3 reads its columns twice
    s = space.apply(FixedDecisions(d))
    shape = s.stage_graph().stage("Xpad_pack").shape     # (N, C/cb, rows, [phase,] columns)
    assert (len(shape) == 6 and shape[4] == 2) is rule
    _check(s, "conv2d", params)
