"""Tests of the cost model: feature extraction, ranking metrics and the xgboost model."""
from __future__ import annotations

import itertools
import time

import numpy as np
import pytest

from cost_model import (FEATURE_NAMES, N_FEATURES, CostModel, CostModelConfig, extract_features,
                        extract_features_batch, normalize_per_group, pairwise_accuracy, store_features,
                        topk_recall)
from tensorir.te.expr import UnOp, Var, const, emax, unary
from tensorir.tir.ir import (Allocate, Buffer, For, ForKind, IfThenElse, Load, PrimFunc, Scope, Store, seq)


# ------------------------------------------------------------------ hand-built kernels

def matmul(M=64, N=48, K=32, order="ijk", vec=False, par=False):
    """Untiled matmul with the update loops in ``order``; optional vector / parallel loops."""
    A, B, C = Buffer("A", (M, K), "float32"), Buffer("B", (K, N), "float32"), Buffer("C", (M, N), "float32")
    v = {c: Var(c) for c in "ijk"}
    ext = {"i": M, "j": N, "k": K}
    i, j, k = v["i"], v["j"], v["k"]
    body = Store(C, (i, j), Load(C, (i, j)) + Load(A, (i, k)) * Load(B, (k, j)))
    for pos, c in enumerate(reversed(order)):
        kind = ForKind.VECTORIZED if pos == 0 and vec else ForKind.PARALLEL if pos == 2 and par else ForKind.SERIAL
        body = For(v[c], ext[c], kind, body)
    i0, j0 = Var("i0"), Var("j0")
    init = For(i0, M, ForKind.SERIAL, For(j0, N, ForKind.SERIAL, Store(C, (i0, j0), const(0.0))))
    return PrimFunc("matmul", (A, B, C), seq(init, body))


def tiled_matmul(M, N, K, ti, tj, tk, order, vec=False, par=False, unroll=False, local=False):
    """Tiled matmul: tile loops io, jo, ko; the three intra-tile loops in ``order`` (a permutation of ijk)."""
    A, B, C = Buffer("A", (M, K), "float32"), Buffer("B", (K, N), "float32"), Buffer("C", (M, N), "float32")
    io, jo, ko = Var("io"), Var("jo"), Var("ko")
    inner = {"i": Var("ii"), "j": Var("ji"), "k": Var("ki")}
    tile = {"i": ti, "j": tj, "k": tk}
    I, J, Kx = io * ti + inner["i"], jo * tj + inner["j"], ko * tk + inner["k"]
    acc = Buffer("CL", (ti, tj), "float32", Scope.LOCAL) if local else C
    at = (inner["i"], inner["j"]) if local else (I, J)
    body = Store(acc, at, Load(acc, at) + Load(A, (I, Kx)) * Load(B, (Kx, J)))
    for pos, c in enumerate(reversed(order)):
        kind = (ForKind.VECTORIZED if pos == 0 and vec else ForKind.UNROLLED if pos == 1 and unroll
                else ForKind.SERIAL)
        body = For(inner[c], tile[c], kind, body)
    body = For(ko, K // tk, ForKind.SERIAL, body)
    a, b = Var("a"), Var("b")
    lanes = ForKind.VECTORIZED if vec else ForKind.SERIAL
    init = For(a, ti, ForKind.SERIAL, For(b, tj, lanes, Store(acc, (a, b) if local else (io * ti + a, jo * tj + b),
                                                             const(0.0))))
    if local:
        a2, b2 = Var("a2"), Var("b2")
        back = For(a2, ti, ForKind.SERIAL, For(b2, tj, lanes, Store(C, (io * ti + a2, jo * tj + b2),
                                                                   Load(acc, (a2, b2)))))
        work = Allocate(acc, seq(init, body, back))
    else:
        work = seq(init, body)
    nest = For(io, M // ti, ForKind.PARALLEL if par else ForKind.SERIAL, For(jo, N // tj, ForKind.SERIAL, work))
    return PrimFunc("matmul", (A, B, C), nest)


def softmax_like(M=32, N=100):
    """Row sums of exp into a GLOBAL buffer, a vectorised divide, then a fused, guarded relu."""
    X, Y = Buffer("X", (M, N), "float32"), Buffer("Y", (M, N), "float32")
    T = Buffer("T", (M,), "float32", Scope.GLOBAL)
    i, j, j2, f, l = Var("i"), Var("j"), Var("j2"), Var("f"), Var("l")
    rows = For(i, M, ForKind.PARALLEL, seq(
        Store(T, (i,), const(0.0)),
        For(j, N, ForKind.SERIAL, Store(T, (i,), Load(T, (i,)) + unary(UnOp.EXP, Load(X, (i, j))))),
        For(j2, N, ForKind.VECTORIZED, Store(Y, (i, j2), unary(UnOp.EXP, Load(X, (i, j2))) / Load(T, (i,))))))
    flat = f * 64 + l
    at = (flat // N, flat % N)
    relu = For(f, (M * N + 63) // 64, ForKind.SERIAL, For(l, 64, ForKind.SERIAL, IfThenElse(
        flat < M * N, Store(Y, at, emax(Load(Y, at), 0.0)))))
    return PrimFunc("softmax", (X, Y), Allocate(T, seq(rows, relu)))


def conv2d(C=8, H=14, W=14, K=16, R=3, tile_k=8):
    X, Wt = Buffer("X", (1, C, H + R - 1, W + R - 1), "float32"), Buffer("W", (K, C, R, R), "float32")
    Y = Buffer("Y", (1, K, H, W), "float32")
    n, ko, ki, h, w, c, r, s = (Var(x) for x in ("n", "ko", "ki", "h", "w", "c", "r", "s"))
    kk = ko * tile_k + ki
    upd = Store(Y, (n, kk, h, w), Load(Y, (n, kk, h, w)) + Load(X, (n, c, h + r, w + s)) * Load(Wt, (kk, c, r, s)))
    red = For(c, C, ForKind.SERIAL, For(r, R, ForKind.SERIAL, For(s, R, ForKind.UNROLLED,
                                                                  For(ki, tile_k, ForKind.VECTORIZED, upd))))
    init = For(ki, tile_k, ForKind.VECTORIZED, Store(Y, (n, kk, h, w), const(0.0)))
    nest = For(n, 1, ForKind.SERIAL, For(ko, K // tile_k, ForKind.PARALLEL, For(h, H, ForKind.SERIAL, For(
        w, W, ForKind.SERIAL, seq(init, red)))))
    return PrimFunc("conv2d", (X, Wt, Y), nest)


def scalar_store():
    S = Buffer("S", (), "float32")
    return PrimFunc("scalar", (S,), Store(S, (), const(1.0)))


ALL_KERNELS = [
    matmul(), matmul(order="ikj", vec=True, par=True), tiled_matmul(64, 64, 64, 16, 16, 8, "ikj", vec=True),
    tiled_matmul(64, 64, 64, 16, 16, 8, "ikj", vec=True, par=True, unroll=True, local=True),
    softmax_like(), conv2d(), scalar_store(),
]


def update_store(func):
    """Raw features of the store that runs most often (the matmul update)."""
    return max(store_features(func), key=lambda r: r["exec_count"])


def feature(vec, name):
    return float(vec[FEATURE_NAMES.index(name)])


# ------------------------------------------------------------------ features

def test_feature_names_match_length():
    assert len(FEATURE_NAMES) == N_FEATURES == len(set(FEATURE_NAMES))


@pytest.mark.parametrize("func", ALL_KERNELS, ids=lambda f: f.name)
def test_features_fixed_length_finite_deterministic(func):
    v = extract_features(func)
    assert v.dtype == np.float32 and v.shape == (N_FEATURES,)
    assert np.isfinite(v).all()
    np.testing.assert_array_equal(v, extract_features(func))


def test_features_pure_function_of_structure():
    a = tiled_matmul(64, 64, 64, 16, 16, 8, "ikj", vec=True, local=True)
    b = tiled_matmul(64, 64, 64, 16, 16, 8, "ikj", vec=True, local=True)
    assert a == b and a is not b
    np.testing.assert_array_equal(extract_features(a), extract_features(b))


def test_empty_body_gives_zero_store_features():
    A = Buffer("A", (4,), "float32")
    v = extract_features(PrimFunc("empty", (A,), For(Var("i"), 4, ForKind.SERIAL, seq())))
    assert v.shape == (N_FEATURES,) and np.isfinite(v).all()
    assert feature(v, "func.n_stores") == 0


def test_batch_extraction_stacks_rows():
    batch = extract_features_batch(ALL_KERNELS[:3])
    assert batch.shape == (3, N_FEATURES)
    np.testing.assert_array_equal(batch[1], extract_features(ALL_KERNELS[1]))
    assert extract_features_batch([]).shape == (0, N_FEATURES)


def test_vectorized_innermost_loop_changes_features():
    serial, vector = matmul(order="ikj"), matmul(order="ikj", vec=True)
    vs, vv = extract_features(serial), extract_features(vector)
    assert not np.array_equal(vs, vv)
    assert update_store(serial)["innermost_vectorized"] == 0 and update_store(serial)["vec_lanes"] == 0
    assert update_store(vector)["innermost_vectorized"] == 1 and update_store(vector)["vec_lanes"] == 48
    assert feature(vv, "max.vec_lanes") > feature(vs, "max.vec_lanes")


def test_parallel_outer_loop_changes_features():
    serial, parallel = matmul(order="ikj"), matmul(order="ikj", par=True)
    assert not np.array_equal(extract_features(serial), extract_features(parallel))
    s, p = update_store(serial), update_store(parallel)
    assert s["parallel_prod"] == 0 and s["parallel_num"] == 0
    assert p["parallel_prod"] == 64 and p["parallel_share"] == 1.0 and p["parallel_forks"] == 1
    assert p["work_per_parallel_iter"] == 48 * 32


def test_bigger_tile_changes_footprint():
    small = tiled_matmul(128, 128, 128, 8, 8, 8, "ikj")
    big = tiled_matmul(128, 128, 128, 64, 64, 32, "ikj")
    assert not np.array_equal(extract_features(small), extract_features(big))
    s, b = update_store(small), update_store(big)
    # a 64x64x32 tile touches more inside the inner loops and no longer fits the L1-sized budget
    assert b["footprint_inner"] > s["footprint_inner"]
    assert b["traffic_l1"] != s["traffic_l1"]
    assert b["write.reuse_dis_bytes"] > s["write.reuse_dis_bytes"]


def test_loop_order_changes_strides():
    by_order = {}
    for order in ("ijk", "ikj", "jki"):
        row = update_store(matmul(order=order))
        by_order[order] = {row[f"{slot}.buffer"]: row[f"{slot}.stride"] for slot in ("write", "read0", "read1")}
    # C[i, j] += A[i, k] * B[k, j] with M, N, K = 64, 48, 32: row strides are 48 for B/C and 32 for A
    assert by_order["ijk"] == {"C": 0, "A": 1, "B": 48}
    assert by_order["ikj"] == {"C": 1, "A": 0, "B": 1}
    assert by_order["jki"] == {"C": 48, "A": 32, "B": 0}
    vecs = [extract_features(matmul(order=o)) for o in ("ijk", "ikj", "jki")]
    for a, b in itertools.combinations(vecs, 2):
        assert not np.array_equal(a, b)


def test_unique_bytes_and_reuse_of_matmul_update():
    row = update_store(matmul(order="ikj"))       # for i, k, j: C[i, j] += A[i, k] * B[k, j]
    assert row["exec_count"] == 64 * 32 * 48
    assert row["float_addsub"] == 1 and row["float_mul"] == 1 and row["is_update"] == 1
    assert row["write.unique_bytes"] == 64 * 48 * 4
    assert row["write.bytes"] == 2 * 64 * 32 * 48 * 4          # read and written every iteration
    # C is reused across k (innermost loop not indexing it): distance = one j sweep
    assert row["write.has_loop_reuse"] == 1 and row["write.reuse_ct"] == 32
    assert row["write.reuse_dis_iter"] == 48
    a = "read0" if row["read0.buffer"] == "A" else "read1"
    assert row[f"{a}.unique_bytes"] == 64 * 32 * 4 and row[f"{a}.reuse_ct"] == 48


def test_nonlinear_index_guard_alloc_and_special_ops():
    rows = store_features(softmax_like(M=32, N=100))
    relu = rows[-1]
    assert relu["int_divmod"] == 4 and relu["num_guards"] == 1 and relu["guard_in_innermost"] == 1
    assert relu["write.unique_bytes"] <= 32 * 100 * 4          # capped by the buffer
    assert relu["write.stride"] == 1                           # finite difference through // and %
    assert rows[1]["float_special"] == 1 and rows[1]["write.scope_global"] == 1
    assert rows[1]["alloc_bytes"] == 32 * 4
    v = extract_features(softmax_like())
    assert feature(v, "func.n_global_allocs") == 1 and feature(v, "func.n_stores") == 4


def test_guard_reach_of_split_tail():
    """A 16-wide split of 83 columns: full tiles 5/6 of the time, a guarded tail tile 1/6 (3 of 16 lanes)."""
    A, C = Buffer("A", (83,), "float32"), Buffer("C", (83,), "float32")
    jo, ji, jt = Var("jo"), Var("ji"), Var("jt")
    full = For(ji, 16, ForKind.VECTORIZED, Store(C, (jo * 16 + ji,), Load(A, (jo * 16 + ji,)) * 2.0))
    tail = For(jt, 16, ForKind.SERIAL, IfThenElse(jo * 16 + jt < 83,
                                                  Store(C, (jo * 16 + jt,), Load(A, (jo * 16 + jt,)) * 2.0)))
    func = PrimFunc("scale", (A, C), For(jo, 6, ForKind.SERIAL, IfThenElse(jo * 16 < 68, full, tail)))
    main, rest = store_features(func)
    assert main["guard_reach"] == pytest.approx(5 / 6) and main["exec_count"] == pytest.approx(80)
    assert rest["guard_reach"] == pytest.approx(1 / 6 * 3 / 16) and rest["exec_count"] == pytest.approx(3)
    assert rest["num_guards"] == 2 and rest["guard_in_innermost"] == 1
    # the pooled mean weights the rare tail by its 3 executions against the main tile's 80
    v = extract_features(func)
    assert feature(v, "mean.innermost_vectorized") == pytest.approx(80 / 83)


def test_lowered_schedules():
    """Kernels from the real lowering (non-dividing tiles, guards, packing) extract cleanly and differ."""
    from schedules.lowering import SCHEDULED       # features read the nest before codegen's passes
    from schedules.schedule import Schedule
    from tensorir import ops
    base = Schedule(ops.matmul(67, 83, 29))
    scheds = [base, base.parallel("C.i"), base.tile(["C.i", "C.j"], [4, 16]),
              base.split("C.j", factor=16).reorder("C.i", "C.j.0", "C.k", "C.j.1").vectorize("C.j.1")]
    vecs = [extract_features(s.lower(until=SCHEDULED)) for s in scheds]
    for v in vecs:
        assert v.shape == (N_FEATURES,) and np.isfinite(v).all()
    for a, b in itertools.combinations(vecs, 2):
        assert not np.array_equal(a, b)
    rows = store_features(scheds[-1].lower(until=SCHEDULED))
    update = max(rows, key=lambda r: r["exec_count"])
    assert update["innermost_vectorized"] == 1 and update["vec_lanes"] == 16
    assert 0 < min(r["guard_reach"] for r in rows) < 1          # the 83 % 16 tail is guarded


def test_local_allocation_features():
    v = extract_features(tiled_matmul(64, 64, 64, 16, 16, 8, "ikj", local=True))
    assert feature(v, "func.n_local_allocs") == 1
    assert feature(v, "func.local_alloc_bytes") == pytest.approx(np.log2(1 + 16 * 16 * 4))
    assert feature(v, "max.write.scope_local") == 1


def test_extraction_is_fast():
    func = tiled_matmul(256, 256, 256, 32, 32, 8, "ikj", vec=True, par=True, unroll=True, local=True)
    extract_features(func)
    start = time.perf_counter()
    for _ in range(20):
        extract_features(func)
    assert (time.perf_counter() - start) / 20 < 0.05


# ------------------------------------------------------------------ metrics

def test_pairwise_accuracy_known_values():
    assert pairwise_accuracy([1, 2, 3], [10, 20, 30]) == 1.0
    assert pairwise_accuracy([3, 2, 1], [10, 20, 30]) == 0.0
    # pairs: (0,1) ok, (0,2) ok, (1,2) wrong -> 2/3
    assert pairwise_accuracy([1, 3, 2], [1, 2, 3]) == pytest.approx(2 / 3)
    # equal true values are not pairs; a predicted tie counts one half
    assert pairwise_accuracy([1, 1, 5], [1, 2, 2]) == pytest.approx(0.75)
    assert np.isnan(pairwise_accuracy([1, 2], [5, 5]))
    # with groups only within-group pairs count: both groups perfectly ordered
    assert pairwise_accuracy([1, 2, 100, 200], [1, 2, 0.1, 0.2], groups=[0, 0, 1, 1]) == 1.0
    assert pairwise_accuracy([1, 2, 100, 200], [1, 2, 0.1, 0.2]) < 1.0


def test_topk_recall_known_values():
    true = [4, 1, 3, 2]
    assert topk_recall([0.9, 0.1, 0.5, 0.3], true, k=2) == 1.0
    assert topk_recall([0.1, 0.9, 0.5, 0.3], true, k=2) == 0.5
    assert topk_recall([0.1, 0.9, 0.2, 0.8], true, k=2) == 0.0
    assert topk_recall([0.1, 0.9, 0.2, 0.8], true, k=10) == 1.0      # k clipped to n
    assert topk_recall([3, 2, 1], [1, 1, 0], k=1) == 1.0               # ties at the boundary count
    with pytest.raises(ValueError):
        topk_recall([1, 2], [1, 2], k=0)


def test_normalize_per_group():
    out = normalize_per_group([2.0, 4.0, 0.0, 10.0, np.inf, -1.0], ["a", "a", "a", "b", "b", "c"])
    np.testing.assert_allclose(out, [0.5, 1.0, 0.0, 1.0, 0.0, 0.0])


# ------------------------------------------------------------------ model

ORDERS = ["".join(p) for p in itertools.permutations("ijk")]


def synthetic_throughput(M, N, K, ti, tj, tk, order, vec, par, unroll, local):
    """A made-up speed: contiguous innermost access, SIMD, threads and cache-sized tiles help."""
    eff = {"j": 1.0, "k": 0.6, "i": 0.3}[order[-1]]
    eff *= 4 * min(tj, 8) / 8 if vec else 1.0
    eff *= 1.8 if par else 1.0
    eff *= 0.6 if (ti * tk + tk * tj + ti * tj) * 4 > 32 * 1024 else 1.0
    inner = {"i": ti, "j": tj, "k": tk}[order[-1]]
    eff *= inner / (inner + 4)
    eff *= 1.1 if unroll else 1.0
    eff *= 1.15 if local else 1.0
    return eff


def variants(shape, n, rng):
    out = set()
    while len(out) < n:
        order = ORDERS[rng.integers(6)]
        out.add(shape + (int(rng.choice([4, 8, 16, 32, 64])), int(rng.choice([4, 8, 16, 32, 64])),
                         int(rng.choice([4, 8, 16, 32])), order, bool(order[-1] == "j" and rng.random() < 0.6),
                         bool(rng.random() < 0.5), bool(rng.random() < 0.3), bool(rng.random() < 0.3)))
    return sorted(out)


@pytest.fixture(scope="module")
def ranking_data():
    rng = np.random.default_rng(0)
    X, y, g = [], [], []
    for shape in [(256, 256, 256), (128, 512, 64)]:
        for v in variants(shape, 130, rng):
            X.append(extract_features(tiled_matmul(*v)))
            y.append(synthetic_throughput(*v) * np.exp(rng.normal(0, 0.05)))
            g.append("mm_%dx%dx%d" % shape)
    return np.array(X), np.array(y), np.array(g)


def split(g, frac, seed=0):
    rng = np.random.default_rng(seed)
    train = np.zeros(len(g), dtype=bool)
    for group in np.unique(g):
        idx = np.flatnonzero(g == group)
        train[rng.choice(idx, int(frac * len(idx)), replace=False)] = True
    return train


@pytest.mark.parametrize("objective", ["rank:ndcg", "rank:pairwise", "reg:squarederror"])
def test_model_learns_synthetic_ranking(ranking_data, objective):
    X, y, g = ranking_data
    train = split(g, 0.7)
    model = CostModel(CostModelConfig(objective=objective))
    assert model.update(X[train], y[train], g[train]) is True and model.is_trained
    pred = model.predict(X[~train])
    assert pred.shape == ((~train).sum(),)
    assert pairwise_accuracy(pred, y[~train], g[~train]) > 0.8
    assert topk_recall(pred[g[~train] == g[0]], y[~train][g[~train] == g[0]], 10) >= 0.3


def test_untrained_model_predicts(ranking_data):
    X, _, _ = ranking_data
    model = CostModel()
    assert not model.is_trained
    scores = model.predict(X[:7])
    assert scores.shape == (7,) and np.isfinite(scores).all()
    assert model.predict(X[0]).shape == (1,)


def test_empty_batches(ranking_data):
    X, y, g = ranking_data
    model = CostModel()
    assert model.update([], [], []) is False and model.n_samples == 0
    assert model.predict(np.zeros((0, N_FEATURES))).shape == (0,)
    model.update(X[:50], y[:50], g[:50])
    assert model.is_trained and model.update(np.zeros((0, N_FEATURES)), [], []) is False
    assert model.predict(np.zeros((0, N_FEATURES))).shape == (0,)


def test_retrain_policy():
    rng = np.random.default_rng(1)
    X = rng.random((200, 5)).astype(np.float32)
    y = X[:, 0] + 0.1 * X[:, 1]
    cfg = CostModelConfig(min_train_samples=10, retrain_min_new_samples=50, retrain_growth=0.5,
                          num_boost_round=5)
    model = CostModel(cfg)
    assert model.update(X[:5], y[:5], ["w"] * 5) is False and not model.is_trained
    assert model.update(X[5:20], y[5:20], ["w"] * 15) is True          # reached min_train_samples
    assert model.update(X[20:25], y[20:25], ["w"] * 5) is False        # 5 new < 50 and < 50% of 20
    assert model.update(X[25:30], y[25:30], ["w"] * 5) is True         # 10 new >= 50% of 20
    assert model.update(X[30:50], y[30:50], ["w"] * 20) is True        # 20 new >= 50% of 30
    assert model.update(X[50:60], y[50:60], ["w"] * 10) is False
    assert model.update(X[60:110], y[60:110], ["w"] * 50) is True      # 60 new >= 50
    assert model.n_samples == 110


def test_pretrained_model_retrains_on_its_own_first_samples():
    rng = np.random.default_rng(2)
    X = rng.random((260, 5)).astype(np.float32)
    y = X[:, 0]
    cfg = CostModelConfig(min_train_samples=8, retrain_min_new_samples=64, retrain_growth=0.2, num_boost_round=5)
    model = CostModel(cfg)
    model.pretrain(X[:240], y[:240], ["other"] * 240)
    assert model.is_trained
    # growth counts the run's own samples, not the 240 pretraining ones
    assert model.update(X[240:248], y[240:248], ["own"] * 8) is True
    assert model.update(X[248:249], y[248:249], ["own"]) is False      # 1 new < 20% of 8
    assert model.update(X[249:251], y[249:251], ["own"] * 2) is True   # 3 new >= 20% of 8
    # a saved model trained on earlier workloads: their samples become transfer data for a new one
    model.treat_as_pretraining("new")
    assert model.update(X[251:259], y[251:259], ["new"] * 8) is True


def test_relabel_changes_what_the_next_training_learns(ranking_data):
    X, y, g = ranking_data
    mask = g == g[0]
    X, y = X[mask][:120], y[mask][:120]
    model = CostModel(CostModelConfig(num_boost_round=30))
    model.update(X, y, ["w"] * len(y))
    before = model.predict(X)
    top = int(np.argmax(y))
    assert before[top] >= np.sort(before)[-10], "the fastest sample ranks near the top before relabeling"
    model.relabel(top, 0.0)        # its re-measurements said it was slow after all
    model.relabel(3, float("nan"))  # (non-finite: treated as a failure, like update does)
    assert model._y[top] == 0.0 and model._y[3] == 0.0
    assert (model.predict(X) == before).all(), "relabeling takes effect at the next training"
    model.fit()
    after = model.predict(X)
    rank = lambda scores: int((scores > scores[top]).sum())   # noqa: E731 - 0 is the top
    assert rank(after) > rank(before) + 5, "retrained, it ranks the relabeled sample lower"
    with pytest.raises(IndexError, match="no sample 120"):
        model.relabel(120, 1.0)


def test_pretrain_transfers_and_caps(ranking_data):
    X, y, g = ranking_data
    first, second = g == g[0], g != g[0]
    model = CostModel(CostModelConfig(max_train_samples=150))
    model.pretrain(X[first], y[first], g[first])
    assert model.is_trained
    # shapes differ but the schedules' relative speeds transfer
    assert pairwise_accuracy(model.predict(X[second]), y[second]) > 0.75
    model.update(X[second][:100], y[second][:100], g[second][:100])
    idx = model._training_indices()
    assert idx.size == 150 and (~model._pretrain[idx]).sum() == 100


def test_save_load_round_trip(tmp_path, ranking_data):
    X, y, g = ranking_data
    model = CostModel(CostModelConfig(num_boost_round=30, seed=3))
    model.update(X[:200], y[:200], g[:200])
    model.save(tmp_path / "cm")
    assert (tmp_path / "cm" / "model.json").exists() and (tmp_path / "cm" / "state.json").exists()
    loaded = CostModel.load(tmp_path / "cm")
    assert loaded.config == model.config and loaded.is_trained and loaded.n_samples == 200
    np.testing.assert_array_equal(loaded.predict(X), model.predict(X))
    np.testing.assert_array_equal(loaded._X, model._X)
    np.testing.assert_array_equal(loaded._groups, model._groups)
    # continuing to train from the loaded state works
    loaded.update(X[200:], y[200:], g[200:])
    assert loaded.n_samples == len(y)


def test_save_load_untrained(tmp_path):
    model = CostModel()
    model.save(tmp_path / "fresh")
    loaded = CostModel.load(tmp_path / "fresh")
    assert not loaded.is_trained and loaded.n_samples == 0
    assert loaded.predict(np.zeros((3, N_FEATURES))).shape == (3,)


def test_bad_inputs_raise(ranking_data):
    X, y, g = ranking_data
    model = CostModel()
    with pytest.raises(ValueError, match="same length"):
        model.update(X[:5], y[:4], g[:5])
    with pytest.raises(ValueError, match="2-D"):
        model.update(X[0], y[:1], g[:1])
    model.update(X[:20], y[:20], g[:20])
    with pytest.raises(ValueError, match="columns"):
        model.update(X[:5, :10], y[:5], g[:5])
    with pytest.raises(ValueError, match="columns"):
        model.predict(X[:5, :10])
    with pytest.raises(ValueError, match="objective"):
        CostModelConfig(objective="rank:map")


def test_importing_cost_model_does_not_import_xgboost():
    import subprocess
    import sys
    code = "import sys, cost_model; print('xgboost' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=str(__import__("pathlib").Path(__file__).resolve().parents[1]))
    assert out.stdout.strip() == "False"
