"""Runs hand the caller's input arrays and fresh output arrays straight to the kernels (no copies),
and leave nothing of the caller's bound afterwards."""
import numpy as np

from graph.builder import GraphBuilder
from graph.interpret import run
from tests.test_model_runtime import resnet_block
from tuner.model_api import compile_model

RNG = np.random.default_rng(21)


def _two_outputs():
    """Relu(x @ w) is an output and also feeds the second output."""
    b = GraphBuilder("twoout")
    x = b.input("x", (8, 16))
    h = b.op("Relu", [b.op("MatMul", [x, b.constant(None, RNG.standard_normal((16, 16)).astype("float32"))])])
    y = b.op("Add", [h, b.constant(None, np.float32(1.0))])
    return b.build([h, y])


def _close(got, want):
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-4, atol=1e-4)


def test_inputs_and_outputs_go_straight_to_the_kernels():
    graph = resnet_block()
    model = compile_model(graph, threads=1)
    x = RNG.standard_normal((1, 8, 10, 10)).astype("float32")
    _close(model.run({"x": x}), run(graph, {"x": x}))
    assert set(model._slots) == set(model.input_ids) | set(model.output_ids)


def test_outputs_are_fresh_arrays_and_later_runs_or_profiles_do_not_touch_them():
    graph = _two_outputs()
    model = compile_model(graph, threads=1)
    x1, x2 = (RNG.standard_normal((8, 16)).astype("float32") for _ in range(2))
    keep1 = x1.copy()
    first = model.run({"x": x1})
    saved = {k: v.copy() for k, v in first.items()}
    second = model.run({"x": x2})
    saved2 = {k: v.copy() for k, v in second.items()}
    model.profile({"x": x1})
    for name in first:
        np.testing.assert_array_equal(second[name], saved2[name])
        np.testing.assert_array_equal(first[name], saved[name])
        assert not np.shares_memory(first[name], second[name])
    np.testing.assert_array_equal(x1, keep1)            # an input is read, never written
    _close(first, run(graph, {"x": x1}))
    _close(second, run(graph, {"x": x2}))


def test_strided_or_unaligned_inputs_are_copied_in():
    graph = resnet_block()
    model = compile_model(graph, threads=1)
    big = RNG.standard_normal((1, 8, 10, 20)).astype("float32")
    strided = big[:, :, :, ::2]                          # not contiguous
    raw = np.zeros(4 * 800 + 1, np.uint8)[1:].view(np.float32).reshape(1, 8, 10, 10)   # misaligned
    raw[...] = strided
    assert not strided.flags.c_contiguous and not raw.flags.aligned
    want = run(graph, {"x": np.ascontiguousarray(strided)})
    _close(model.run({"x": strided}), want)
    _close(model.run({"x": raw}), want)


def test_without_direct_io_no_slot_is_kept(monkeypatch):
    monkeypatch.setattr("graph.runtime.model.DIRECT_IO", False)
    graph = resnet_block()
    model = compile_model(graph, threads=1)
    x = RNG.standard_normal((1, 8, 10, 10)).astype("float32")
    _close(model.run({"x": x}), run(graph, {"x": x}))
    assert model._slots == {}


def test_a_copied_input_after_a_direct_one_is_the_one_read():
    graph = resnet_block()
    model = compile_model(graph, threads=1)
    x1 = RNG.standard_normal((1, 8, 10, 10)).astype("float32")
    x2 = RNG.standard_normal((1, 8, 10, 20)).astype("float32")[:, :, :, ::2]
    model.run({"x": x1})                                 # read in place
    _close(model.run({"x": x2}), run(graph, {"x": np.ascontiguousarray(x2)}))   # copied in: read from the buffer
