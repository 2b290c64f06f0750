"""Running a compiled model: kernels in plan order over a planned arena (numpy and ctypes only).

Imports nothing of the compiler (checked by an import-linter contract in pyproject.toml); the
compile glue in ``tuner.model_compile`` builds a :class:`CompiledModel` and hands it kernels.
``aot`` loads a model built ahead of time (shared library + plan + weights) without tensortune.
"""
from graph.runtime.model import Buffer, CompiledModel, ModelInputError, Step  # noqa: F401
from graph.runtime.plan import MemoryPlan, plan_memory  # noqa: F401
