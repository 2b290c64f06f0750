"""A compiled model timed against onnxruntime (and against itself untuned), side by side in one process.

onnxruntime is a reference only: it is imported here when installed, never required.
"""
from __future__ import annotations

import contextlib

import numpy as np

from .compare import limit_threads, paired_speedup, side_by_side

ROUNDS = 15
"""Alternating rounds of a model timing, one repeat of at least 200 ms per side and round: many short
rounds rather than a few long ones, so the per-round ratios (:func:`tuner.compare.paired_speedup`)
see the host's slow spells on both sides."""


class Timings(dict):
    """Name -> median seconds per call, and ``speedup``: name -> how many times faster than
    onnxruntime it ran, the median of per-round ratios (empty without onnxruntime)."""

    def __init__(self, medians: dict, speedup: dict):
        super().__init__(medians)
        self.speedup = speedup


def random_feeds(graph, seed: int = 0) -> dict:
    """Reproducible inputs for every graph input: floats uniform in [-1, 1], integers in [0, 8)."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for name in graph.inputs:
        t = graph.types[name]
        if np.dtype(t.dtype).kind == "f":
            feeds[name] = rng.uniform(-1.0, 1.0, t.shape).astype(t.dtype)
        elif np.dtype(t.dtype).kind == "b":
            feeds[name] = rng.integers(0, 2, t.shape).astype(bool)
        else:
            feeds[name] = rng.integers(0, 8, t.shape).astype(t.dtype)
    return feeds


def ort_session(model, threads: int | None):
    """An onnxruntime session (``ORT_ENABLE_ALL``, ``threads`` intra-op threads, no spinning), or None
    when onnxruntime is not installed or cannot load the model (the reason is returned too)."""
    if model is None:
        return None, "onnx cannot read the model"
    try:
        import onnxruntime as ort
    except ImportError:
        return None, "onnxruntime is not installed"
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.intra_op_num_threads = threads or 0
    opts.inter_op_num_threads = 1
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    try:
        data = model if isinstance(model, (str, bytes)) else model.SerializeToString()
        return ort.InferenceSession(data, opts, providers=["CPUExecutionProvider"]), None
    except Exception as err:  # noqa: BLE001 - any failure of the reference only loses the comparison
        return None, f"onnxruntime cannot run the model: {str(err).splitlines()[0][:200]}"


def time_models(models: dict, feeds: dict, threads: int | None = None, ort=None, rounds: int = ROUNDS,
                min_repeat_ms: float = 200.0) -> Timings:
    """Median seconds per call of each compiled model in ``models`` (name -> CompiledModel), and of
    the onnxruntime session ``ort`` as ``"onnxruntime"``, alternating rounds with a pause at every
    switch; with onnxruntime also each model's paired speed-up over it (:class:`Timings`)."""
    fns = {name: (lambda m=m: m.run(feeds)) for name, m in models.items()}
    if ort is not None:
        ort_feeds = {k: v for k, v in feeds.items()}
        fns["onnxruntime"] = lambda: ort.run(None, ort_feeds)
    with limit_threads(threads) if threads else contextlib.nullcontext():
        res = side_by_side(fns, rounds=rounds, min_repeat_ms=min_repeat_ms, repeats_per_round=1)
    speedup = {name: paired_speedup(res, name, "onnxruntime") for name in models} if ort is not None else {}
    return Timings({name: r["median"] for name, r in res.items()}, speedup)



def relative_error(outputs: dict, ort, feeds: dict) -> float | None:
    """The largest ``|ours - onnxruntime's|`` over the outputs, each relative to that output's largest
    magnitude (None if onnxruntime fails to run or names outputs differently)."""
    try:
        names = [o.name for o in ort.get_outputs()]
        theirs = dict(zip(names, ort.run(None, feeds)))
    except Exception:  # noqa: BLE001 - the reference only
        return None
    worst = 0.0
    for name, ours in outputs.items():
        if name not in theirs:
            return None
        ref = np.asarray(theirs[name], dtype=np.float64)
        scale = float(np.max(np.abs(ref))) if ref.size else 0.0
        worst = max(worst, float(np.max(np.abs(np.asarray(ours, np.float64) - ref))) / (scale or 1.0) if ref.size else 0.0)
    return worst


def model_proto(path: str):
    """The ONNX model at ``path`` for onnxruntime, or None if onnx cannot read it."""
    try:
        import onnx
        return onnx.load(path)
    except Exception:  # noqa: BLE001 - the graph loaded already; only the comparison is lost
        return None
