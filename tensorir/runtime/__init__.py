"""Compiled kernels: LLVM set-up (``llvm``), the JIT and runtime libraries (``jit``), ahead-of-time libraries (``aot``),
compilation with a cache (``compile``) and the kernel object (``kernel``)."""
from tensorir.runtime.compile import build, cache_info, clear_cache, compile_func, compile_module  # noqa: F401
from tensorir.runtime.kernel import Kernel, ToolchainError, load_library  # noqa: F401
from tensorir.runtime.safety import AllocationError, MemoryLimits, OutOfBoundsError  # noqa: F401
from tensorir.runtime.libinfo import LibraryTargetError  # noqa: F401
