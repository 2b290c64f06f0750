"""tensorir: the tensor-expression language and the compiler below schedules.

Subpackages, lowest first: ``te`` (tensor expressions, numpy evaluator, workload key),
``ops`` (operator library and workload catalogue), ``tir`` (loop-nest IR, its analyses
and passes), ``codegen`` (LLVM IR), ``runtime`` (JIT, kernels, shared libraries), and
``target`` (the CPU compiled for).

>>> from tensorir import te
"""
from tensorir import te  # noqa: F401
from tensorir.target import Target  # noqa: F401

__all__ = ["te", "Target"]
