"""Property: random small graphs (convs, pools, matmuls, reductions, layout changes, broadcasting,
values used several times) compiled with real kernels give the interpreter's numbers."""
import numpy as np
import pytest

import tests.graph_lower_ops  # noqa: F401  (registers op kinds main does not have yet)
from graph.builder import GraphBuilder
from graph.interpret import run
from tuner.model_api import compile_model


def random_graph(seed: int):
    rng = np.random.default_rng(seed)
    b = GraphBuilder(f"random{seed}")
    shape = (int(rng.integers(1, 3)), int(rng.integers(2, 6)), int(rng.integers(3, 8)), int(rng.integers(3, 8)))
    values = [b.input("x", shape)]

    def const(shape):
        return b.constant(None, (rng.standard_normal(shape) * 0.5).astype("float32"))

    def pick():
        return values[int(rng.integers(len(values)))] if rng.random() < 0.4 else values[-1]

    for _ in range(int(rng.integers(4, 9))):
        v = pick()
        t = b.types[v]
        kind = rng.choice(["unary", "binary", "conv", "pool", "reduce", "transpose", "softmax", "matmul", "gelu"])
        if kind == "unary":
            y = b.op(str(rng.choice(["Relu", "Tanh", "Sigmoid", "Neg", "Abs"])), [v])
        elif kind == "gelu":
            y = b.op("Gelu", [v], approximate=str(rng.choice(["none", "tanh"])))
        elif kind == "binary":
            same = [u for u in values if b.types[u].shape == t.shape and u != v]
            if same and rng.random() < 0.5:
                other = same[int(rng.integers(len(same)))]
            else:     # a constant broadcasting along random dimensions
                other = const(tuple(d if rng.random() < 0.5 else 1 for d in t.shape)[int(rng.integers(0, t.rank)):])
            y = b.op(str(rng.choice(["Add", "Mul", "Sub"])), [v, other] if rng.random() < 0.7 else [other, v])
        elif kind == "conv" and t.rank == 4 and min(t.shape[2:]) >= 3:
            c = t.shape[1]
            group = c if rng.random() < 0.3 else 1
            k = int(rng.integers(1, 4))
            out_c = int(rng.integers(1, 6)) if group == 1 else c
            pads = tuple(int(p) for p in rng.integers(0, 2, 4))
            bias = const((out_c,)) if rng.random() < 0.5 else None
            y = b.op("Conv", [v, const((out_c, c // group, k, k)), bias], pads=pads, group=group)
            if rng.random() < 0.5:       # an epilogue: a per-channel add, then maybe a residual
                y = b.op("Relu", [b.op("Add", [y, const((out_c, 1, 1))])])
        elif kind == "pool" and t.rank == 4 and min(t.shape[2:]) >= 2:
            y = b.op(str(rng.choice(["MaxPool", "AveragePool"])), [v], kernel_shape=(2, 2), strides=(1, 1),
                     pads=(0, 0, 1, 1))
        elif kind == "reduce":
            axis = int(rng.integers(0, t.rank))
            y = b.op(str(rng.choice(["ReduceMean", "ReduceSum", "ReduceMax"])), [v], axes=(axis,), keepdims=1)
        elif kind == "transpose":
            y = b.op("Transpose", [v], perm=tuple(int(p) for p in rng.permutation(t.rank)))
        elif kind == "softmax":
            y = b.op("Softmax", [v], axis=int(rng.integers(0, t.rank)))
        elif kind == "matmul":
            y = b.op("MatMul", [v, const((t.shape[-1], int(rng.integers(2, 7))))])
        else:
            y = b.op("Relu", [v])
        values.append(y)
    outs = [values[-1]] + ([values[len(values) // 2]] if values[len(values) // 2] not in (values[-1], "x") else [])
    return b.build(outs)


@pytest.mark.parametrize("seed", range(24))
def test_random_graph_compiles_to_the_interpreters_numbers(seed):
    g = random_graph(seed)
    x = np.random.default_rng(100 + seed).standard_normal(g.types["x"].shape).astype("float32")
    want = run(g, {"x": x})
    got = compile_model(g, threads=2).run({"x": x})
    for v in g.outputs:
        scale = max(1.0, float(np.abs(want[v]).max()))
        np.testing.assert_allclose(got[v], want[v], rtol=1e-4, atol=1e-4 * scale, err_msg=f"{v}\n{g}")
