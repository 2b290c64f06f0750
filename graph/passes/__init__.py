"""Graph passes: pure functions ``Graph -> Graph`` (the same object when nothing changed), in a
named pipeline that can print the graph after each pass.

- ``fold``: constant folding; ``cleanup``: dead-code and common-subexpression elimination;
- ``simplify``: algebraic simplification (rule table);
- ``pad``: a zero spatial Pad folded into the Conv that reads it (rule table);
- ``batchnorm``: BatchNormalization folded into Conv/Gemm/MatMul (rule table);
- ``recognize``: decomposed Gelu and LayerNorm as single ops (rule table);
- ``pipeline``: ``PIPELINE`` and ``run_passes``.
"""
from graph.passes.base import GraphPass, RulePass  # noqa: F401
from graph.passes.batchnorm import BATCHNORM_RULES, CONV_BN, GEMM_BN, MATMUL_BN, fold_batchnorm  # noqa: F401
from graph.passes.cleanup import eliminate_common_subexpressions, eliminate_dead_code  # noqa: F401
from graph.passes.fold import fold_constants  # noqa: F401
from graph.passes.pad import PAD_CONV, fold_pads  # noqa: F401
from graph.passes.pipeline import CSE, DCE, FOLD_CONSTANTS, PIPELINE, get_pass, run_passes  # noqa: F401
from graph.passes.recognize import GELU_ERF, GELU_TANH, LAYERNORM, RECOGNIZE_RULES, SWISH, recognize  # noqa: F401
from graph.passes.simplify import SIMPLIFY_RULES, simplify  # noqa: F401
