"""The generated space's rfactor option: offered for reductions that stream an operand along the
reduce axis (matrix-vector products, row norms), never for GEMM-like workloads, and every choice
computes what numpy computes."""
from __future__ import annotations

import numpy as np
import pytest

from schedules.space import FixedDecisions, GeneratedSpace, RandomDecisions, SpaceOptions
from tensorir import te
from tensorir.ir import ForKind
from tests.conftest import check_against_evaluator, run_schedule
from tuner.spec import WorkloadSpec

AVX2 = SpaceOptions(vector_bits=256, cores=2)


def matvec(M=37, K=203, dtype="float32"):
    A = te.placeholder((M, K), dtype, "A")
    x = te.placeholder((K,), dtype, "x")
    k = te.reduce_axis(K, "k")
    return [A, x, te.compute((M,), lambda i: te.sum(A[i, k] * x[k], axis=k), "y")]


def batched_row_max(B=3, M=5, K=45):
    X = te.placeholder((B, M, K), "float32", "X")
    k = te.reduce_axis(K, "k")
    return [X, te.compute((B, M), lambda b, i: te.max(X[b, i, k] * 0.5, axis=k), "m")]


def row_sq_sum_then_scale(M=19, K=77):
    """A streamed reduction feeding an elementwise output (a two-stage workload)."""
    A = te.placeholder((M, K), "float32", "A")
    k = te.reduce_axis(K, "k")
    s = te.compute((M,), lambda i: te.sum(A[i, k] * A[i, k], axis=k), "s")
    return [A, te.compute((M, K), lambda i, j: A[i, j] / (s[i] + 1.0), "out")]


def _offered(tensors, seeds=(0,)) -> dict:
    space = GeneratedSpace(tensors, AVX2)
    out = {}
    for seed in seeds:
        src = RandomDecisions(seed)
        space.apply(src)
        out.update({k: v for k, v in src.choices.items() if k.endswith(".rfactor")})
    return out


def test_rfactor_is_offered_for_streamed_reductions_and_is_the_heuristic_start():
    assert _offered(matvec()) == {"y.rfactor": [0, 8, 16, 32]}
    assert _offered(matvec(K=12)) == {"y.rfactor": [0, 8]}        # no wider split than the axis
    assert _offered(batched_row_max()) == {"m.rfactor": [0, 8, 16, 32]}
    space = GeneratedSpace(matvec(), AVX2)
    start = space.default_decisions()
    assert start["y.rfactor"] == 8
    s = space.apply(FixedDecisions(start))
    rf = s.state.stage("y_rf")
    vec = [lp for lp, kind in rf.ann.items() if kind is ForKind.VECTORIZED]
    assert vec and vec[0].startswith("k_v")                       # the partial sums are one vector
    assert rf.leaf[-1] == vec[0]


@pytest.mark.parametrize("workload, params", [
    ("matmul", []), ("dense", []), ("batch_matmul", []), ("conv2d", []), ("depthwise_conv2d", []),
    ("max_pool2d", [])])
def test_rfactor_is_not_offered_where_outputs_share_operands(workload, params):
    # GEMM-like reductions reuse each operand across outputs: tiling the spatial axes wins there;
    # windows (pools, depthwise) read along w + s, which the output's vector axis already follows
    assert _offered(WorkloadSpec.parse(workload, params).tensors(), seeds=range(8)) == {}


def test_row_reductions_of_normalizations_keep_their_heuristic_start():
    # softmax / layer_norm rows are reduced inside the output's loop (hosted); rfactor is only
    # offered where a branch of the space leaves such a reduction a root stage of its own
    for name in ("softmax", "layer_norm"):
        start = GeneratedSpace(WorkloadSpec.parse(name, []).tensors(), AVX2).default_decisions()
        assert not [k for k in start if k.endswith(".rfactor")]


def test_rfactor_is_not_offered_when_the_axis_is_shorter_than_a_vector():
    assert _offered(matvec(K=7)) == {}


@pytest.mark.parametrize("make", [matvec, batched_row_max, row_sq_sum_then_scale,
                                  lambda: matvec(M=1, K=9), lambda: matvec(M=23, K=64)])
def test_every_rfactor_choice_computes_what_numpy_computes(make):
    space = GeneratedSpace(make(), AVX2)
    choices = next(iter(_offered(make()).values()), [0])
    start = space.default_decisions()
    name = next((k for k in start if k.endswith(".rfactor")), None)
    for f in choices:
        # the other decisions take their first choice (they depend on the factor)
        check_against_evaluator(space.apply(FixedDecisions({name: f} if name else {})))
    for seed in range(10):
        check_against_evaluator(space.apply(RandomDecisions(seed)))


def test_rfactor_of_an_int32_matvec_is_exact():
    tensors = matvec(M=29, K=301, dtype="int32")
    space = GeneratedSpace(tensors, AVX2)
    for src in [FixedDecisions(space.default_decisions())] + [RandomDecisions(seed) for seed in range(6)]:
        (a, x), (y,) = run_schedule(space.apply(src))
        np.testing.assert_array_equal(y, a.astype(np.int64) @ x.astype(np.int64))
