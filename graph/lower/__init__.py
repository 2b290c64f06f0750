"""Fused groups -> tensor expressions: each canonical op kind has a lowering, a group is one workload.

Modules: ``core`` (values, kernel dtypes, the lowering context), ``elementwise`` (unary, binary
with broadcasting, Where, Cast, Clip, Gelu, Erf, BatchNormalization), ``linalg`` (MatMul, Gemm,
Conv with groups and asymmetric pads), ``nn`` (pools, Softmax, LayerNormalization, Reduce*),
``shape`` (Transpose, Reshape, Concat, Slice, Gather, Expand), ``extra`` (activations, exact
rounding, Sign, Max/Min/PRelu, comparisons, logic, LogSoftmax, CumSum, Pad, Tile,
ReduceMin/Prod/L1/L2/SumSquare, ArgMax/ArgMin, LRN), ``deconv`` (ConvTranspose),
``group`` (a fused group -> one workload with a structural key), ``layout`` (which values are
stored in a blocked layout between convolutions, or channels-innermost).
"""
from graph.lower.core import LoweringError, storage_dtype, to_storage, from_storage  # noqa: F401
from graph.lower.elementwise import LOWERINGS  # noqa: F401
from graph.lower import deconv, extra, linalg, nn, shape  # noqa: F401  (registration)
from graph.lower.group import LoweredGroup, evaluate_group, lower_group, lower_node  # noqa: F401
from graph.lower.layout import NHWC, choose_blocked, choose_layouts, plan_blocked, plan_layouts  # noqa: F401


def supported_ops() -> tuple:
    """The op kinds that have a lowering."""
    return tuple(sorted(LOWERINGS))
