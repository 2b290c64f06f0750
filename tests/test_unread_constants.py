"""Weights that every kernel reads through a packed copy are not kept twice (model and AOT weights)."""
from __future__ import annotations

import numpy as np

from tests import onnx_models
from tuner.model_aot import _weights
from tuner.model_api import compile_model


def test_packed_weights_replace_their_originals():
    m = onnx_models.mlp(batch=8, sizes=(96, 160, 40))
    model = compile_model(m, threads=1)
    assert model.unread, "the products' weights are packed at build time"
    for b in model.unread:
        assert not model.constants[b].any()
    kept = sum(a.nbytes for b, a in model.constants.items() if b not in model.unread)
    blob, offsets = _weights(model)
    assert set(offsets) == set(model.constants) - model.unread
    assert kept <= len(blob) < kept + 64 * len(offsets)
    # the outputs are numpy's Gemm + Relu layers on the original weights
    weights = {i.name: onnx_models.numpy_helper.to_array(i) for i in m.graph.initializer}
    x = np.random.default_rng(1).standard_normal((8, 96)).astype(np.float32)
    h = x
    for i in range(2):
        h = h @ weights[f"fc{i}.weight"].T + weights[f"fc{i}.bias"]
        h = np.maximum(h, 0) if i == 0 else h
    got = list(model.run({m.graph.input[0].name: x}).values())[0]
    np.testing.assert_allclose(got, h, rtol=1e-4, atol=1e-4)
