"""LLVM code generation: loop-nest IR -> an llvmlite module (see :mod:`tensorir.codegen.module`)."""
from tensorir.codegen.module import codegen  # noqa: F401
from tensorir.codegen.types import CodegenError  # noqa: F401
