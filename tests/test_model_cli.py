"""``tensortune run | graph | compile`` on ONNX files, and their one-line errors.

They use ``graph.onnx_import.load_onnx``; while that importer is not in this tree, a small
stand-in (Gemm, MatMul, Add, Relu; symbolic dims pinned by ``shapes``) takes its place.
"""
import re
import sys
import types

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from tuner.cli import main  # noqa: E402

RNG = np.random.default_rng(5)


def _standin_load(source, shapes=None):
    from graph.builder import GraphBuilder
    from graph.ir import GraphError
    try:
        model = source if isinstance(source, onnx.ModelProto) else onnx.load(source)
    except Exception as err:  # noqa: BLE001 - any parse failure is the user's file
        raise GraphError(f"cannot read ONNX model {source}: {str(err).splitlines()[0][:120]}") from None
    bad = sorted({n.op_type for n in model.graph.node if n.op_type not in ("Gemm", "MatMul", "Add", "Relu")})
    if bad:
        raise GraphError(f"unsupported ONNX ops: {', '.join(bad)}")
    b = GraphBuilder(model.graph.name)
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    for k, a in inits.items():
        b.constant(k, a)
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        dims = []
        for n, d in enumerate(vi.type.tensor_type.shape.dim):
            if d.HasField("dim_value"):
                dims.append(d.dim_value)
            elif shapes and vi.name in shapes:
                dims.append(shapes[vi.name][n])
            else:
                raise GraphError(f"input {vi.name!r} has the symbolic dimension {d.dim_param!r}: pin it with "
                                 f"--shape {vi.name}=...")
        b.input(vi.name, dims, "float32")
    for n in model.graph.node:
        attrs = {a.name: helper.get_attribute_value(a) for a in n.attribute}
        b.op(n.op_type, list(n.input), name=n.name or n.output[0], outputs=list(n.output), **attrs)
    return b.build([o.name for o in model.graph.output])


@pytest.fixture(autouse=True)
def importer(monkeypatch):
    try:
        import graph.onnx_import  # noqa: F401
    except ImportError:
        mod = types.ModuleType("graph.onnx_import")
        mod.load_onnx = _standin_load
        monkeypatch.setitem(sys.modules, "graph.onnx_import", mod)


def mlp_model(batch="N"):
    w1, b1 = RNG.standard_normal((16, 32)).astype("float32"), RNG.standard_normal(32).astype("float32")
    w2 = RNG.standard_normal((32, 10)).astype("float32")
    nodes = [helper.make_node("Gemm", ["x", "w1", "b1"], ["h"], name="fc1"),
             helper.make_node("Relu", ["h"], ["a"], name="act"),
             helper.make_node("MatMul", ["a", "w2"], ["logits"], name="fc2")]
    g = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 16])],
                          [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [batch, 10])],
                          [numpy_helper.from_array(a, k) for k, a in (("w1", w1), ("b1", b1), ("w2", w2))])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    want = lambda x: np.maximum(x @ w1 + b1, 0) @ w2  # noqa: E731
    return model, want


@pytest.fixture
def files(tmp_path):
    model, want = mlp_model()
    path = tmp_path / "mlp.onnx"
    onnx.save(model, str(path))
    x = RNG.standard_normal((3, 16)).astype("float32")
    np.save(tmp_path / "x.npy", x)
    return tmp_path, str(path), x, want


def test_run_writes_outputs_keyed_by_onnx_names(files, capsys):
    tmp, path, x, want = files
    out = tmp / "out.npz"
    assert main(["run", path, "--input", f"x={tmp / 'x.npy'}", "--shape", "x=3x16", "--output", str(out),
                 "--threads", "1", "--profile"]) == 0
    got = np.load(out)
    assert list(got.keys()) == ["logits"]
    np.testing.assert_allclose(got["logits"], want(x), rtol=1e-4, atol=1e-4)
    text = capsys.readouterr().out
    assert "wrote" in text and "profile: 2 steps" in text and "Gemm+Relu (act)" in text
    assert re.search(r"GB/s +[\d.]+ GFLOP/s", text)


def test_graph_prints_import_and_fused_groups(files, capsys):
    _, path, _, _ = files
    assert main(["graph", path, "--shape", "x=3x16", "--passes"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("# after import\ngraph mlp(x: float32[3,16])")
    assert "# fused groups (2 distinct workloads)" in text and "[Gemm+Relu]" in text and "workload " in text


def test_compile_writes_library_header_weights(files, capsys):
    tmp, path, _, _ = files
    assert main(["compile", path, "--shape", "x=3x16", "-o", str(tmp / "mlp")]) == 0
    for ext in (".so", ".h", ".weights", ".json"):
        assert (tmp / f"mlp{ext}").exists()
    assert "model_run" in (tmp / "mlp.h").read_text()


@pytest.mark.parametrize("argv, match", [
    (["run", "{tmp}/none.onnx", "--input", "x={tmp}/x.npy", "--output", "{tmp}/o.npz"], "does not exist"),
    (["run", "{tmp}/bad.onnx", "--input", "x={tmp}/x.npy", "--output", "{tmp}/o.npz"], ""),
    (["run", "{path}", "--output", "{tmp}/o.npz"], "symbolic"),     # (an --input would give its shape)
    (["run", "{path}", "--shape", "x=4x16", "--input", "x={tmp}/x.npy", "--output", "{tmp}/o.npz"],
     r"input 'x' has shape \(3, 16\), expected \(4, 16\)"),
    (["run", "{path}", "--shape", "x=3x16", "--input", "x={tmp}/nope.npy", "--output", "{tmp}/o.npz"], "not found"),
    (["run", "{path}", "--shape", "x=3x16", "--input", "y={tmp}/x.npy", "--output", "{tmp}/o.npz"],
     "no input named 'y'"),
    (["run", "{path}", "--shape", "x=3by16", "--input", "x={tmp}/x.npy", "--output", "{tmp}/o.npz"], "--shape"),
    (["graph", "{tmp}/unsupported.onnx"], "Hardmax"),
    (["graph", "{tmp}"], "is a directory"),
    (["run", "{path}", "--input", "x={tmp}/x.npy", "--input", "x={tmp}/x.npy", "--output", "{tmp}/o.npz"],
     "--input x is given twice"),
    (["run", "{path}", "--shape", "x=3x16", "--input", "x={tmp}/empty.npy", "--output", "{tmp}/o.npz"],
     "is not a .npy array"),
    (["run", "{path}", "--shape", "x=3x16", "--input", "x={tmp}/bad.onnx", "--output", "{tmp}/o.npz"],
     "is not a .npy array"),
    (["run", "{path}", "--shape", "x=3x16", "--input", "x={tmp}/x64.npy", "--output", "{tmp}/o.npz"],
     "has dtype float64, expected float32"),
    (["run", "{path}", "--shape", "x=3x16", "--input", "x={tmp}/x.npy", "--output", "{tmp}/nodir/o.npz"],
     "does not exist"),
    # a mistyped --log would otherwise build untuned without a word
    (["run", "{path}", "--shape", "x=3x16", "--input", "x={tmp}/x.npy", "--output", "{tmp}/o.npz", "--log",
      "{tmp}/typo.jsonl"], "tuning log .*typo.jsonl not found"),
    (["bench-model", "{path}", "--shape", "x=3x16", "--log", "{tmp}/typo.jsonl"], "tuning log .*typo.jsonl not found"),
    (["compile", "{path}", "--shape", "x=3x16", "-o", "{tmp}/lib", "--log", "{tmp}"], "is a directory"),
])
def test_bad_input_is_one_line_and_exit_2(files, capsys, argv, match):
    tmp, path, _, _ = files
    (tmp / "bad.onnx").write_bytes(b"\x08garbage that is not a protobuf\xff\xff")
    (tmp / "empty.npy").write_bytes(b"")
    np.save(tmp / "x64.npy", np.zeros((3, 16)))
    g = helper.make_graph([helper.make_node("Hardmax", ["x"], ["y"])], "u",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(tmp / "unsupported.onnx"))
    argv = [a.format(tmp=tmp, path=path) for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("tensortune: error: "), err
    if match:
        import re
        assert re.search(match, err[0]), err[0]
