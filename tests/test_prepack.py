"""Constant inputs packed at build time: the rewritten kernel computes what the original computes."""
import numpy as np
import pytest

from logs.apply import heuristic_schedule
from schedules import Schedule
from tensorir import ops
from tuner.prepack import packed_bytes, prepack


def _run(kernel, tensors, inputs):
    outs = [np.empty(t.shape, t.dtype) for t in tensors if not t.is_placeholder]
    kernel(*inputs, *outs)
    return outs


@pytest.mark.parametrize("make, const", [
    (lambda: ops.dense(24, 100, 70), {1}),           # the weights of a dense layer (transposed pack)
    (lambda: ops.matmul(37, 45, 29), {1}),           # edges the block does not divide: zero-padded packs
    (lambda: ops.batch_matmul(2, 20, 33, 17), {1}),
])
def test_prepacked_kernel_matches_the_original(make, const):
    tensors = make()
    sch = heuristic_schedule(tensors)
    pre = prepack(tensors, sch, const)
    assert pre is not None and pre.packs and packed_bytes(pre) > 0
    assert not any(ins.kind == "pack" and ins.inputs[0] == pre.packs[0].source.name for ins in pre.schedule.trace)
    rng = np.random.default_rng(0)
    inputs = [rng.uniform(-1, 1, t.shape).astype(t.dtype) for t in tensors if t.is_placeholder]
    want = _run(sch.build(), tensors, inputs)
    got = _run(pre.schedule.build(), pre.tensors, pre.arrays(inputs))
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)
    assert "_pack = alloc" not in str(pre.schedule.lower())      # no copy left in the kernel


def test_only_constant_inputs_are_moved_out():
    tensors = ops.dense(24, 100, 70)
    sch = heuristic_schedule(tensors)
    assert prepack(tensors, sch, {0}) is None          # X is not packed: nothing to move
    assert prepack(tensors, Schedule(tensors), {1}) is None   # no pack at all


def test_a_pack_written_by_hand_moves_out():
    tensors = ops.matmul(16, 32, 8)
    s = Schedule(tensors).pack("B", {1: 8}, order=["1.o", "0", "1.i"])
    pre = prepack(tensors, s, {1})
    assert pre.packs[0].shape == (4, 8, 8)
    rng = np.random.default_rng(1)
    inputs = [rng.uniform(-1, 1, t.shape).astype(t.dtype) for t in tensors if t.is_placeholder]
    np.testing.assert_allclose(_run(pre.schedule.build(), pre.tensors, pre.arrays(inputs))[0],
                               inputs[0] @ inputs[1], rtol=1e-5, atol=1e-5)


def test_a_subsampling_pack_stays_in_the_kernel():
    # a strided 1x1 conv packs only the rows and columns it reads; a constant input so packed is not
    # copied at build time (the build-time copy knows no strides), and the kernel stays right
    tensors = ops.conv2d(1, 8, 9, 9, 4, 1, 1, stride=2, pad=0)
    s = Schedule(tensors).pack("X", {1: 4}, order=["0", "1.o", "2", "3", "1.i"], strides={2: 2, 3: 2})
    assert prepack(tensors, s, {0}) is None
    rng = np.random.default_rng(2)
    x, w = (rng.uniform(-1, 1, t.shape).astype(t.dtype) for t in tensors if t.is_placeholder)
    want = np.einsum("nchw,kc->nkhw", x[:, :, ::2, ::2], w[:, :, 0, 0])
    np.testing.assert_allclose(_run(s.build(), tensors, [x, w])[0], want, rtol=1e-5, atol=1e-5)
