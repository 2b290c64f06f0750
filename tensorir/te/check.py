"""Kernel outputs against the numpy evaluator's: the one tolerance check of the tuner, builds and tools.

Rounding grows with the length of a reordered sum, so the absolute part of the
tolerance scales with the square root of the workload's longest reduction.
"""
from __future__ import annotations

import math

import numpy as np

RTOL, ATOL = 1e-4, 1e-5
"""Default tolerances (the tuner's ``MeasureConfig.rtol`` / ``atol``)."""


def longest_reduction(tensors) -> int:
    """The largest number of terms any stage of the workload sums (1 without reductions)."""
    from tensorir.te.evaluate import topo_stages
    longest = 1
    for t in topo_stages(tensors):
        if not t.is_placeholder:
            longest = max(longest, math.prod(ax.extent for ax in t.op.reduce_axes))
    return longest


def check_outputs(names, outputs, references, rtol: float = RTOL, atol: float = ATOL,
                  reduction_length: int = 1) -> str | None:
    """None if every output matches its reference, else the one-line reason.

    Integer outputs must match exactly.  Float outputs: no NaN where the
    reference has none, the same infinities, and where the reference is finite
    ``|got - ref| <= atol * max|ref| * sqrt(reduction_length) + rtol * |ref|``
    (see ``MeasureConfig.rtol``).
    """
    for name, got, want in zip(names, outputs, references):
        if want.shape != got.shape:
            return f"output {name}: reference has shape {want.shape}, kernel output {got.shape}"
        if got.dtype.kind in "iu":
            bad = got != want
            if bad.any():
                where = tuple(int(i) for i in np.argwhere(bad)[0])
                return (f"output {name}: {int(bad.sum())} of {got.size} elements differ, first at "
                        f"{list(where)} (got {got[where]}, expected {want[where]})")
            continue
        want = want.astype(got.dtype, copy=False)
        got_nan, want_nan = np.isnan(got), np.isnan(want)
        unwritten = got_nan & ~want_nan
        if unwritten.any():
            where = tuple(int(i) for i in np.argwhere(unwritten)[0])
            return (f"output {name}: {int(unwritten.sum())} of {got.size} elements are NaN where the "
                    f"reference is not (unwritten or NaN produced), first at {list(where)}")
        finite = np.isfinite(want)
        infinite = np.isinf(want)
        if (got[infinite] != want[infinite]).any():
            return f"output {name}: infinities differ from the reference"
        with np.errstate(invalid="ignore", over="ignore"):
            err = np.where(finite, np.abs(got.astype(np.float64) - want), 0.0)
            scale = float(np.max(np.abs(want[finite]))) if finite.any() else 1.0
            allowed = (atol * (scale or 1.0) * math.sqrt(max(1, reduction_length))
                       + rtol * np.abs(np.where(finite, want, 0.0)))
            over = (err > allowed) | (finite & ~np.isfinite(got))
        if over.any():
            idx = int(np.argmax(np.where(over, err, -1.0)))
            where = np.unravel_index(idx, got.shape)
            return (f"output {name}: max abs error {err[where]:.3g} at {[int(i) for i in where]} "
                    f"(got {got[where]:.6g}, expected {want[where]:.6g}, allowed {allowed[where]:.3g}); "
                    f"{int(over.sum())} of {got.size} elements off")
    return None
