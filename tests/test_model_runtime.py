"""Compiled models: numerics of whole small models against the interpreter, the memory plan,
input errors, and the runtime's independence from the compiler."""
import subprocess
import sys

import numpy as np
import pytest

import tests.graph_lower_ops  # noqa: F401  (registers op kinds main does not have yet)
from graph.builder import GraphBuilder
from graph.interpret import run
from graph.runtime import ModelInputError, plan_memory
from tuner.model_api import compile_model

RNG = np.random.default_rng(11)


def c(b, *shape, scale=0.3):
    return b.constant(None, (RNG.standard_normal(shape) * scale).astype("float32"))


def resnet_block():
    b = GraphBuilder("resblock")
    x = b.input("x", (1, 8, 10, 10))
    y = b.op("Conv", [x, c(b, 8, 8, 3, 3), c(b, 8)], pads=(1, 1, 1, 1))
    y = b.op("BatchNormalization", [y, c(b, 8), c(b, 8), c(b, 8), b.constant(None, np.ones(8, "float32"))])
    y = b.op("Relu", [y])
    y = b.op("Conv", [y, c(b, 8, 8, 3, 3), None], pads=(1, 1, 1, 1))
    y = b.op("Relu", [b.op("Add", [y, x])])
    y = b.op("MaxPool", [y], kernel_shape=(3, 3), strides=(2, 2), pads=(1, 1, 1, 1))
    y = b.op("GlobalAveragePool", [y])
    y = b.op("Gemm", [b.op("Reshape", [y], shape=(1, 8)), c(b, 5, 8), c(b, 5)], transB=1)
    return b.build([y])


def mobilenet_block():
    b = GraphBuilder("mbblock")
    x = b.input("x", (1, 6, 9, 9))
    y = b.op("Clip", [b.op("Conv", [x, c(b, 12, 6, 1, 1), c(b, 12)])], min=0.0, max=6.0)
    y = b.op("Clip", [b.op("Conv", [y, c(b, 12, 1, 3, 3), c(b, 12)], group=12, strides=(2, 2),
                           pads=(0, 0, 1, 1))], min=0.0, max=6.0)
    y = b.op("Conv", [y, c(b, 6, 12, 1, 1), None])
    y = b.op("AveragePool", [y], kernel_shape=(2, 2), strides=(2, 2))
    return b.build([y])


def attention_block(seq=6, hidden=16, heads=2):
    b = GraphBuilder("attn")
    x = b.input("x", (1, seq, hidden))
    d = hidden // heads

    def proj(name):
        y = b.op("Add", [b.op("MatMul", [x, c(b, hidden, hidden)]), c(b, hidden)])
        return b.op("Transpose", [b.op("Reshape", [y], shape=(1, seq, heads, d))], perm=(0, 2, 1, 3), name=name)
    q, k, v = proj("q"), proj("k"), proj("v")
    s = b.op("MatMul", [q, b.op("Transpose", [k], perm=(0, 1, 3, 2))])
    s = b.op("Softmax", [b.op("Div", [s, b.constant(None, np.float32(d ** 0.5))])], axis=3)
    o = b.op("Reshape", [b.op("Transpose", [b.op("MatMul", [s, v])], perm=(0, 2, 1, 3))], shape=(1, seq, hidden))
    h = b.op("LayerNormalization", [b.op("Add", [o, x]), c(b, hidden), c(b, hidden)], axis=2)
    f = b.op("Gelu", [b.op("Add", [b.op("MatMul", [h, c(b, hidden, 2 * hidden)]), c(b, 2 * hidden)])])
    f = b.op("Add", [b.op("MatMul", [f, c(b, 2 * hidden, hidden)]), h])
    return b.build([f])


@pytest.mark.parametrize("make", [resnet_block, mobilenet_block, attention_block])
def test_compiled_models_match_the_interpreter(make):
    g = make()
    x = RNG.standard_normal(g.types["x"].shape).astype("float32")
    model = compile_model(g, threads=2)
    got = model.run({"x": x})
    want = run(g, {"x": x})
    assert list(got) == list(g.outputs)
    for v in g.outputs:
        np.testing.assert_allclose(got[v], want[v], rtol=1e-4, atol=1e-4)
    assert model(x)[g.outputs[0]].shape == want[g.outputs[0]].shape       # positional call, second run
    np.testing.assert_allclose(model(x)[g.outputs[0]], want[g.outputs[0]], rtol=1e-4, atol=1e-4)


def test_same_layer_twice_builds_one_kernel_and_the_memory_plan_reuses_buffers():
    b = GraphBuilder("deep")
    y = b.input("x", (8, 32))
    w = RNG.standard_normal((32, 32)).astype("float32") * 0.2
    for n in range(6):
        y = b.op("Relu", [b.op("MatMul", [y, b.constant(f"w{n}", w)])])
    g = b.build([y])
    model = compile_model(g, threads=1)
    assert len(model.steps) == 6 and model.info["distinct_kernels"] == 1
    plan = model.memory
    assert len(plan.sizes) == 5 and plan.arena_bytes == 2 * 8 * 32 * 4 and plan.naive_bytes == 5 * 8 * 32 * 4
    assert "planned peak 2.0 KiB against 5.0 KiB" in model.summary()
    x = RNG.standard_normal((8, 32)).astype("float32")
    np.testing.assert_allclose(model.run({"x": x})[y], run(g, {"x": x})[y], rtol=1e-4, atol=1e-5)


def test_memory_plan_never_overlaps_live_buffers():
    rng = np.random.default_rng(0)
    for _ in range(50):
        n = int(rng.integers(1, 12))
        sizes = {i: int(rng.integers(1, 500)) for i in range(n)}
        live = {}
        for i in range(n):
            a = int(rng.integers(0, 10))
            live[i] = (a, a + int(rng.integers(0, 4)))
        plan = plan_memory(sizes, live)
        for i in range(n):
            assert plan.offsets[i] % 64 == 0 and plan.offsets[i] + sizes[i] <= plan.arena_bytes
            for j in range(i + 1, n):
                if live[i][0] <= live[j][1] and live[j][0] <= live[i][1]:
                    lo_i, lo_j = plan.offsets[i], plan.offsets[j]
                    assert lo_i + sizes[i] <= lo_j or lo_j + sizes[j] <= lo_i
        assert plan.arena_bytes <= plan.naive_bytes


def test_int64_and_bool_values_and_an_output_that_is_an_input():
    b = GraphBuilder("emb")
    ids = b.input("ids", (2, 3), "int64")
    x = b.input("x", (2, 3, 4))
    e = b.op("Gather", [c(b, 10, 4), ids], axis=0)
    mask = b.op("Greater", [e, x])
    g = b.build([b.op("Where", [mask, e, x]), mask, "ids"])
    feeds = {"ids": np.array([[1, 9, -1], [0, 3, 3]], np.int64), "x": RNG.standard_normal((2, 3, 4)).astype("float32")}
    got, want = compile_model(g).run(feeds), run(g, feeds)
    for v in g.outputs:
        assert got[v].dtype == want[v].dtype
        np.testing.assert_array_equal(got[v], want[v])


@pytest.mark.parametrize("feeds, match", [
    ({"y": np.zeros((2, 3), "float32")}, r"model m: no input named 'y'; inputs: x"),
    ({}, r"model m: input 'x' is missing \(expected float32\[2, 3\]\)"),
    ({"x": np.zeros((3, 2), "float32")}, r"model m: input 'x' has shape \(3, 2\), expected \(2, 3\)"),
    ({"x": np.zeros((2, 3), "float64")}, r"model m: input 'x' has dtype float64, expected float32"),
    ({"x": np.zeros((2, 3), "float32"), "y": 1}, r"model m: no input named 'y'; inputs: x"),
])
def test_wrong_inputs_are_one_line_errors(feeds, match):
    b = GraphBuilder("m")
    g = b.build([b.op("Relu", [b.input("x", (2, 3))])])
    model = compile_model(g)
    with pytest.raises(ModelInputError, match=match):
        model.run(feeds)
    with pytest.raises(ModelInputError, match="takes 1 input"):
        model(np.zeros((2, 3), "float32"), np.zeros(1))


@pytest.mark.parametrize("make", [
    lambda a: np.frombuffer(a.tobytes(), "float32").reshape(a.shape),   # read-only
    lambda a: np.repeat(a, 2, axis=1)[:, ::2],              # strided
    lambda a: a.astype(">f4"),                              # float32, other byte order
    lambda a: np.asfortranarray(a),                         # not C-contiguous
    lambda a: a.view(np.matrix),                            # an ndarray subclass
], ids=["read-only", "strided", "big-endian", "fortran", "subclass"])
def test_inputs_other_than_plain_arrays_give_the_same_outputs(make):
    b = GraphBuilder("m")
    g = b.build([b.op("Tanh", [b.input("x", (2, 3))])])
    model, x = compile_model(g), RNG.standard_normal((2, 3)).astype("float32")
    want = model.run({"x": x})[g.outputs[0]]
    np.testing.assert_allclose(want, np.tanh(x), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(model.run({"x": make(x)})[g.outputs[0]], want)


@pytest.mark.parametrize("make", [
    lambda: np.empty((3, 4), np.float32),
    lambda: np.arange(40, dtype=np.float64).reshape(5, 8)[1:, 2:],    # a view into another array's data
    lambda: np.zeros((2, 3), np.int32).view(np.matrix),
    lambda: np.full((), 2.0, np.float32),                             # 0-d
    lambda: np.empty(0, np.float32),
], ids=["fresh", "view", "subclass", "0-d", "empty"])
def test_the_runtime_reads_an_arrays_data_address(make):
    # a run hands the kernels its arrays' addresses (read past ndarray.ctypes, which costs 1 us a call)
    from graph.runtime.model import _address
    a = make()
    assert _address(a) == a.ctypes.data


def test_runtime_imports_nothing_of_the_compiler():
    code = ("import sys, graph.runtime; bad = [m for m in sys.modules if m.split('.')[0] in "
            "('tensorir', 'schedules', 'cost_model', 'logs', 'tuner', 'llvmlite') or m in ('graph.ir', "
            "'graph.ops', 'graph.fusion', 'graph.lower')]; print(bad); sys.exit(1 if bad else 0)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_a_logged_schedule_is_used_for_its_group(tmp_path):
    from logs import TuningLog
    from logs.record import TuningRecord
    from schedules import Schedule
    from graph.fusion import fuse
    from graph.lower import lower_group
    from tensorir.target import Target
    b = GraphBuilder("logged")
    x = b.input("x", (8, 16))
    g = b.build([b.op("Relu", [b.op("MatMul", [x, c(b, 16, 12)])])])
    lowered = lower_group(g, fuse(g)[0])
    s = Schedule(lowered.tensors).split("relu0.i1", factor=4)
    TuningLog(tmp_path / "t.jsonl").append(TuningRecord(
        workload_key=lowered.key, workload_name="group", workload_params={}, target=Target.host(1).record(),
        trace=s.to_json(), costs=[1e-5], flops=2 * 8 * 16 * 12))
    model = compile_model(g, log=str(tmp_path / "t.jsonl"), threads=1)
    assert model.info["schedules"] == {"exact": 1}
    xs = RNG.standard_normal((8, 16)).astype("float32")
    np.testing.assert_allclose(model(xs)[g.outputs[0]], run(g, {"x": xs})[g.outputs[0]], rtol=1e-5, atol=1e-5)
    assert compile_model(g, threads=1).info["schedules"] == {"heuristic": 1}


def test_models_sharing_kernels_keep_their_own_thread_counts():
    b = GraphBuilder("shared")
    x = b.input("x", (16, 64))
    g = b.build([b.op("Relu", [b.op("MatMul", [x, c(b, 64, 64)])])])
    one, two = compile_model(g, threads=1), compile_model(g, threads=2)
    assert one.steps[0].kernel is two.steps[0].kernel      # the compiler's kernel cache
    xs = RNG.standard_normal((16, 64)).astype("float32")
    two.run({"x": xs})
    one.run({"x": xs})
    assert (one.threads, two.threads) == (1, 2)
    with pytest.raises(ValueError, match="threads must be a positive int"):
        one.threads = 0


def test_profile_lists_every_step_in_plan_order():
    g = resnet_block()
    model = compile_model(g, threads=1)
    x = RNG.standard_normal(g.types["x"].shape).astype("float32")
    prof = model.profile({"x": x}, min_seconds=0.001)
    assert [p["step"] for p in prof] == list(range(len(model.steps)))
    assert [p["label"] for p in prof] == [s.label for s in model.steps]
    assert all(p["seconds"] > 0 for p in prof)
    np.testing.assert_allclose(model.run({"x": x})[g.outputs[0]], run(g, {"x": x})[g.outputs[0]], rtol=1e-4, atol=1e-4)


def test_compiling_inside_an_apply_best_scope_reports_to_the_scope(tmp_path):
    from logs import TuningFallbackWarning, apply_best
    b = GraphBuilder("scoped")
    x = b.input("x", (4, 8))
    y = b.op("Relu", [b.op("MatMul", [x, c(b, 8, 8)])])
    g = b.build([b.op("Relu", [b.op("MatMul", [y, c(b, 8, 8)])])])
    with pytest.warns(TuningFallbackWarning):
        with apply_best(str(tmp_path / "empty.jsonl")) as scope:
            model = compile_model(g, threads=1)
    assert model.info["distinct_kernels"] == 1 and scope.builds == 1 and len(scope.fallbacks) == 1
