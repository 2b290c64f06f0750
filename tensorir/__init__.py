"""tensorir: tensor expressions, loop-nest IR, lowering and llvmlite codegen.

>>> from tensorir import te, build, lower
>>> kernel = build(schedule)         # a Schedule, a PrimFunc or a workload (default schedule)
"""
from . import te  # noqa: F401
# The functions shadow their modules' names on the package (import the modules as
# ``tensorir.build`` / ``tensorir.lower`` through ``from tensorir.build import ...``).
from .build import build  # noqa: E402,F401
from .lower import lower  # noqa: E402,F401

__all__ = ["te", "build", "lower"]
