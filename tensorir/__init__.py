"""tensorir: tensor expressions, loop-nest IR, lowering and llvmlite codegen."""
from . import te  # noqa: F401
