"""Compatibility name: compilation moved to :mod:`tensorir.runtime` (``compile`` and ``kernel``)."""
from tensorir.runtime.compile import build, cache_info, clear_cache, compile_func, compile_module  # noqa: F401
from tensorir.runtime.kernel import Kernel, ToolchainError, load_library  # noqa: F401
