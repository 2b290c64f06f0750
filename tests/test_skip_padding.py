"""``skip_padding`` (schedules/skip.py): a reduce loop skips the iterations that read only a zero padding.
Results against numpy on windows whose taps fall off the plane (dilated, strided, wider than the plane),
by hand and through the convolution rule's start; the errors of a misuse; the trace's replay."""
from __future__ import annotations

import random

import numpy as np
import pytest

from schedules import Schedule
from schedules.conv_space import find_convs
from schedules.errors import LoweringError, SkipPaddingError
from schedules.skip import padding_share
from schedules.space import FixedDecisions, GeneratedSpace, RandomDecisions, SpaceOptions
from tensorir import te
from tensorir.ops import library as ops


def _reference(x, w, stride, pad, dil):
    n, c, h, wd = x.shape
    k, _, r, s = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    p = (h + 2 * pad - dil * (r - 1) - 1) // stride + 1
    q = (wd + 2 * pad - dil * (s - 1) - 1) // stride + 1
    y = np.zeros((n, k, p, q), np.float64)
    for i in range(r):
        for j in range(s):
            patch = xp[:, :, i * dil:i * dil + stride * (p - 1) + 1:stride, j * dil:j * dil + stride * (q - 1) + 1:stride]
            y += np.einsum("nchw,kc->nkhw", patch, w[:, :, i, j])
    return y


def _check(s, shape):
    n, c, h, wd, k, r, sz, stride, pad, dil = shape
    rng = np.random.default_rng(3)
    x = rng.standard_normal((n, c, h, wd)).astype(np.float32)
    w = rng.standard_normal((k, c, r, sz)).astype(np.float32)
    y = np.full(s.tensors[-1].shape, np.nan, np.float32)
    s.build()(x, w, y)
    np.testing.assert_allclose(y, _reference(x, w, stride, pad, dil), rtol=1e-4, atol=1e-4)


def _skip_lines(s) -> int:
    return str(s.lower()).count("# skip")


def test_a_dilated_window_skips_the_taps_on_padding_by_hand():
    shape = (1, 3, 9, 9, 4, 3, 3, 1, 6, 6)     # rate 6 over 9x9: the outer taps read padding on most rows
    s = Schedule(ops.conv2d(1, 3, 9, 9, 4, 3, 3, pad=6, dilation=6))
    s = s.reorder("Y.n", "Y.k", "Y.p", "Y.r", "Y.q", "Y.s", "Y.c")
    s = s.skip_padding("Xpad", "Y.r").skip_padding("Xpad", "Y.s")
    text = str(s.lower())
    assert text.count("# skip") == 2 and "skip_padding('Xpad', 'Y.r')" in s.to_python()
    _check(s, shape)
    again = Schedule.from_json(s.tensors, s.to_json())
    assert str(again.lower()) == text


def test_an_iteration_that_reads_padding_only_is_not_run():
    # p = 0 at rate 5 over 4 rows: tap r = 0 reads row -5, tap r = 2 row 5; only r = 1 runs there
    s = Schedule(ops.conv2d(1, 2, 4, 4, 2, 3, 1, pad=5, dilation=5))
    s = s.reorder("Y.n", "Y.k", "Y.p", "Y.r", "Y.q", "Y.s", "Y.c").skip_padding("Xpad", "Y.r")
    from tensorir.tir.ir import IfThenElse, walk_stmts
    (guard,) = [st for st in walk_stmts(s.lower().body) if isinstance(st, IfThenElse) and st.skip]
    from tensorir.tir.analysis.values import int_values
    runs = int_values(guard.cond, {"Y.p": np.arange(14)[:, None], "Y.r": np.arange(3)[None, :]})
    rows = np.arange(14)[:, None] + 5 * np.arange(3)[None, :] - 5     # the input row each tap reads
    np.testing.assert_array_equal(np.broadcast_to(runs, rows.shape), (rows >= 0) & (rows < 4))


def test_the_conv_rule_with_skipped_taps_matches_numpy():
    """Random shapes (dilation up to 8, padding up to 7, stride up to 3) under random decisions of the space,
    with the taps skipped wherever the rule offers it."""
    rnd, skipped = random.Random(5), 0
    for seed in range(30):
        c, hw, r, stride, pad, dil = (rnd.randint(1, 6), rnd.randint(1, 9), rnd.randint(1, 3), rnd.randint(1, 3),
                                      rnd.randint(0, 7), rnd.randint(1, 8))
        if hw + 2 * pad < dil * (r - 1) + 1:
            continue
        wl = ops.conv2d(1, c, hw, hw + 1, 5, r, r, stride=stride, pad=pad, dilation=dil)
        space = GeneratedSpace(wl, SpaceOptions(vector_bits=256, cores=2))
        chosen = RandomDecisions(seed)
        s = space.apply(chosen)
        key = next((k for k in chosen.decisions if k.endswith(".skip_taps")), None)
        if key is not None:
            s = space.apply(FixedDecisions({**chosen.decisions, key: True}))
            skipped += _skip_lines(s) > 0
        _check(s, (1, c, hw, hw + 1, 5, r, r, stride, pad, dil))
    assert skipped >= 5


def test_the_start_skips_where_enough_terms_read_padding():
    aspp = ops.conv2d(1, 32, 17, 17, 32, 3, 3, pad=9, dilation=9)
    space = GeneratedSpace(aspp, SpaceOptions(vector_bits=512, cores=2))
    assert space.default_decisions()["Y.skip_taps"] is True
    s = space.apply(FixedDecisions(space.default_decisions()))
    assert _skip_lines(s) >= 1
    _check(s, (1, 32, 17, 17, 32, 3, 3, 1, 9, 9))
    off = space.apply(FixedDecisions({**space.default_decisions(), "Y.skip_taps": False}))
    assert _skip_lines(off) == 0
    # a 3x3 at 56x56 reads padding in 2.4% of its terms: computed, no branch
    big = GeneratedSpace(ops.conv2d(1, 64, 56, 56, 64, 3, 3, pad=1), SpaceOptions(vector_bits=512, cores=2))
    assert big.default_decisions()["Y.skip_taps"] is False


def test_the_share_of_terms_on_padding():
    g = Schedule(ops.conv2d(1, 4, 33, 33, 4, 3, 3, pad=18, dilation=18)).stage_graph()
    (info,) = find_convs(g).values()
    rows = (15 + 33 + 15) / 99        # rate 18 over 33: the outer taps are inside on 15 rows of 33
    assert padding_share(g, g.stage("Y"), "Xpad") == pytest.approx(1 - rows * rows)
    g = Schedule(ops.conv2d(1, 4, 8, 8, 4, 3, 3, pad=0)).stage_graph()
    assert padding_share(g, g.stage("Y"), "X") == 0.0


def test_misuse_is_one_clear_error():
    s = Schedule(ops.conv2d(1, 3, 9, 9, 4, 3, 3, pad=2, dilation=2))
    with pytest.raises(SkipPaddingError, match="not a reduce loop"):
        s.skip_padding("Xpad", "Y.p")
    with pytest.raises(SkipPaddingError, match="not a stage computed as select"):
        s.skip_padding("Wt", "Y.r")
    with pytest.raises(SkipPaddingError, match="expected the name of a padded tensor"):
        s.skip_padding(3, "Y.r")
    k = s.skip_padding("Xpad", "Y.r")
    with pytest.raises(SkipPaddingError, match="already skips"):
        k.skip_padding("Xpad", "Y.r")
    with pytest.raises(Exception, match="apply split before skip_padding"):
        k.split("Y.r", factor=2)
    # a padding inlined after: the loop no longer reads it as a stage
    with pytest.raises(LoweringError, match="no longer a zero padding"):
        k.compute_inline("Xpad").lower()
    # a sum that is not of products: a zero term is not nothing to it
    X = te.placeholder((8,), "float32", "X")
    P = te.compute((12,), lambda i: te.if_then_else(te.all(i >= 2, i < 10), X[i - 2], 0.0), "P")
    j = te.reduce_axis(5, "j")
    Y = te.compute((8,), lambda i: te.sum(P[i + j] + 1.0, axis=[j]), "Y")
    with pytest.raises(SkipPaddingError, match="as a factor of a sum of products"):
        Schedule([X, Y]).skip_padding("P", "Y.j")


def test_accumulators_stay_in_registers_across_skipped_taps():
    wl = ops.conv2d(1, 32, 17, 17, 32, 3, 3, pad=9, dilation=9)
    space = GeneratedSpace(wl, SpaceOptions(vector_bits=512, cores=2))
    s = space.apply(FixedDecisions(space.default_decisions()))
    text = str(s.lower())
    first_skip = text.index("# skip")
    # the register copy of the accumulators is made above the first tap loop's skip and written back after
    assert ".reg" in text[:first_skip]
