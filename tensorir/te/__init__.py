"""The tensor-expression language: what to compute (placeholders, compute, reductions).

>>> from tensorir import te
>>> A = te.placeholder((64, 64), "float32", "A")
>>> k = te.reduce_axis(64, "k")
>>> C = te.compute((64, 64), lambda i, j: te.sum(A[i, k] * A[k, j], axis=k), "C")

Submodules: ``expr`` (scalar expressions), ``tensor`` (tensors and operations),
``evaluate`` (the numpy reference evaluator), ``serialize`` (the structural workload key).
"""
from tensorir.te.tensor import (  # noqa: F401
    AxisKind, Binary, ComputeOp, Const, Expr, IterVar, PlaceholderOp, Reduce, Reducer, Select, TEError,
    Tensor, TensorRead, Var, abs, all, cast, compute, const, equal, exp, free_vars, if_then_else, log,
    max, min, not_equal, placeholder, reads, reduce_axis, sigmoid, sqrt, sum, tanh, walk,
)
from tensorir.te.tensor import __all__  # noqa: F401
