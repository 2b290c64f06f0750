"""Whole ONNX models compiled and run, against onnxruntime (ORT_DISABLE_ALL, one thread), within
1e-4 relative: the MLP, ResNet-18 (224x224), the MobileNet-V2 block and the BERT-base layer of
tests/onnx_models.py (the importer's model builders; this module runs once they are in the tree)."""
import numpy as np
import pytest

ort = pytest.importorskip("onnxruntime")
models = pytest.importorskip("tests.onnx_models")

from tuner.model_api import compile_model, load  # noqa: E402


def _ort(model):
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.intra_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("name", ["mlp", "resnet18", "mobilenet_block", "bert_layer"])
def test_model_matches_onnxruntime(name):
    model = getattr(models, name)()
    graph = load(model)
    compiled = compile_model(graph, threads=2)
    rng = np.random.default_rng(1)
    weights = {t.name for t in model.graph.initializer}
    feeds = {i.name: rng.standard_normal(graph.types[i.name].shape).astype(graph.types[i.name].dtype)
             for i in model.graph.input if i.name not in weights}
    want = _ort(model).run(None, feeds)
    got = compiled.run(feeds)
    assert list(got) == [o.name for o in model.graph.output]
    for o, w in zip(model.graph.output, want):
        scale = np.abs(w).max()
        assert np.abs(got[o.name] - w).max() <= 1e-4 * scale, o.name
    # intermediate buffers share memory (ResNet-18: less than half of allocating each)
    if name in ("resnet18", "bert_layer"):
        assert compiled.memory.arena_bytes < 0.5 * compiled.memory.naive_bytes
