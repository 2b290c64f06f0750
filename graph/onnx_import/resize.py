"""Resize (opsets 13 to the current one) as existing op kinds, with the index maps computed at import time.

``nearest``: one Gather per resized axis with constant indices. ``linear``: per resized axis two
Gathers (the neighbours below and above) weighted by constant per-position weights (a separable
form of ONNX's n-linear interpolation); ``cubic`` likewise with four neighbours and Keys' weights.
The coordinate transformation and the nearest rounding follow onnxruntime (float32 arithmetic;
``x_original`` clamped into the input for ``linear``). ``tf_crop_and_resize``, ``half_pixel_symmetric``, ``antialias`` and aspect-ratio policies other
than ``stretch`` are refused.
"""
from __future__ import annotations

import numpy as np

from graph.onnx_import.nn_ops import axis_of
from graph.onnx_import.registry import converter, one_of

F32 = np.float32


def original_coordinates(mode: str, n_in: int, n_out: int, scale) -> np.ndarray:
    """The input coordinate (float32) of each output position along one axis."""
    x = np.arange(n_out, dtype=F32)
    scale = F32(scale)
    if mode == "asymmetric":
        return x / scale
    if mode == "align_corners":
        return np.zeros(n_out, F32) if n_out == 1 else x * F32(n_in - 1) / F32(n_out - 1)
    if mode == "pytorch_half_pixel" and n_out == 1:
        return np.zeros(1, F32)
    return (x + F32(0.5)) / scale - F32(0.5)          # half_pixel, pytorch_half_pixel


def nearest_indices(x: np.ndarray, nearest_mode: str, n_in: int) -> np.ndarray:
    """The input index each original coordinate reads in ``nearest`` mode (clamped into the input)."""
    if nearest_mode == "floor":
        idx = np.floor(x)
    elif nearest_mode == "ceil":
        idx = np.ceil(x)
    else:
        away = np.where(x >= 0, np.floor(x + F32(0.5)), np.ceil(x - F32(0.5)))   # C's round: halves away from 0
        tie = x == np.trunc(x) + F32(0.5)
        idx = np.where(tie, np.floor(x), away) if nearest_mode == "round_prefer_floor" else away
    return np.clip(idx, 0, n_in - 1).astype(np.int64)


def linear_taps(x: np.ndarray, n_in: int):
    """(lower index, upper index, lower weight, upper weight) of each original coordinate, onnxruntime's way."""
    x = np.clip(x, F32(0), F32(n_in - 1))
    lo = np.minimum(x.astype(np.int64), n_in - 1)
    hi = np.minimum(lo + 1, n_in - 1)
    w_hi = np.abs(x - lo.astype(F32))
    w_lo = np.abs(x - hi.astype(F32))
    same = lo == hi
    return lo, hi, np.where(same, F32(0.5), w_lo), np.where(same, F32(0.5), w_hi)


def cubic_taps(x: np.ndarray, n_in: int, a: float, exclude_outside: bool):
    """(4 indices, 4 weights) per original coordinate: taps at floor(x) - 1 .. floor(x) + 2 with Keys'
    cubic weights (coefficient ``a``); a tap outside the input reads the nearest edge, or with
    ``exclude_outside`` weighs 0 and the others are scaled to sum to 1 (onnxruntime's way)."""
    x = x.astype(np.float64)
    base = np.floor(x)
    t = x - base
    weights = []
    for d in (t + 1, t, 1 - t, 2 - t):                 # distances to the four taps
        near = ((a + 2) * d - (a + 3)) * d * d + 1
        far = ((a * d - 5 * a) * d + 8 * a) * d - 4 * a
        weights.append(np.where(d <= 1, near, far))
    idx = [base.astype(np.int64) + k for k in (-1, 0, 1, 2)]
    if exclude_outside:
        weights = [np.where((i < 0) | (i >= n_in), 0.0, w) for i, w in zip(idx, weights)]
        total = sum(weights)
        weights = [w / total for w in weights]
    return [np.clip(i, 0, n_in - 1) for i in idx], weights


def _check(node, _shapes) -> list:
    if node.attr("coordinate_transformation_mode", "half_pixel") == "tf_crop_and_resize":
        return ["coordinate_transformation_mode='tf_crop_and_resize' is not supported"]
    return []


def _present(ctx, node, index: int, what: str):
    """The constant input ``index`` as a flat array, or None when absent or empty."""
    if not node.input(index):
        return None
    a = np.asarray(ctx.const(node, node.input(index), what)).reshape(-1)
    return a if a.size else None


def _targets(ctx, node, shape: tuple) -> dict:
    """axis -> (output size, scale) for every axis the node names."""
    rank = len(shape)
    axes = [axis_of(node, a, rank) for a in node.attr("axes", range(rank))]
    scales, sizes = _present(ctx, node, 2, "scales"), _present(ctx, node, 3, "sizes")
    if (scales is None) == (sizes is None):
        raise node.error("needs exactly one of scales and sizes")
    given = scales if scales is not None else sizes
    if len(given) != len(axes):
        raise node.error(f"{'scales' if scales is not None else 'sizes'} has {len(given)} entries for {len(axes)} axes")
    out = {}
    for a, v in zip(axes, given):
        if sizes is not None:
            n_out = int(v)
            scale = F32(n_out) / F32(shape[a])
        else:
            scale = F32(v)
            n_out = int(np.floor(F32(shape[a]) * scale))
        if n_out < 1 or scale <= 0:
            raise node.error(f"axis {a} of size {shape[a]} would be resized to {n_out} (scale {float(scale):g})")
        out[a] = (n_out, scale)
    return out


@converter("Resize", check=_check, attrs={
    "mode": one_of("nearest", "linear", "cubic"),
    "coordinate_transformation_mode": one_of("half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric",
                                             "tf_crop_and_resize"),
    "nearest_mode": one_of("round_prefer_floor", "round_prefer_ceil", "floor", "ceil"),
    "antialias": one_of(0), "keep_aspect_ratio_policy": one_of("stretch"), "axes": None,
    # extrapolation_value only changes tf_crop_and_resize, which is refused
    "cubic_coeff_a": None, "exclude_outside": None, "extrapolation_value": None})
def _resize(ctx, node):
    x = ctx.type(node.input(0))
    mode = node.attr("mode", "nearest")
    transform = node.attr("coordinate_transformation_mode", "half_pixel")
    value = node.input(0)
    todo = [(a, t) for a, t in sorted(_targets(ctx, node, x.shape).items()) if t != (x.shape[a], 1.0)]
    for n, (a, (n_out, scale)) in enumerate(todo):
        out = node.outputs[0] if n == len(todo) - 1 else None
        coords = original_coordinates(transform, x.shape[a], n_out, scale)
        if mode == "nearest":
            value = ctx.emit(node, "Gather", [value, _known(ctx, node, nearest_indices(
                coords, node.attr("nearest_mode", "round_prefer_floor"), x.shape[a]))], out, axis=a)
            continue
        if mode == "cubic":
            taps = zip(*cubic_taps(coords, x.shape[a], float(node.attr("cubic_coeff_a", -0.75)),
                                   bool(node.attr("exclude_outside", 0))))
        else:
            lo, hi, w_lo, w_hi = linear_taps(coords, x.shape[a])
            taps = ((lo, w_lo), (hi, w_hi))
        trailing = (1,) * (x.rank - a - 1)
        parts = []
        for idx, w in taps:
            gathered = ctx.emit(node, "Gather", [value, _known(ctx, node, idx)], axis=a)
            weight = _known(ctx, node, w.astype(x.dtype).reshape((n_out,) + trailing))
            parts.append(ctx.emit(node, "Mul", [gathered, weight]))
        while len(parts) > 2:
            parts = [ctx.emit(node, "Add", parts[:2])] + parts[2:]
        value = ctx.emit(node, "Add", parts, out)
    if not todo:
        ctx.alias(node.outputs[0], node.input(0))


def _known(ctx, node, array) -> str:
    name = ctx.fresh(f"{node.name}/map")
    ctx.set_known(name, array)
    return name
