"""The values of an integer expression over given values of its variables (numpy arrays broadcast
together): a guard's share of a loop nest's iterations, the per-lane offsets of a vector access."""
from __future__ import annotations

import numpy as np

from tensorir.te.expr import Binary, BinOp, Const, Expr, Var

_NP = {BinOp.ADD: np.add, BinOp.SUB: np.subtract, BinOp.MUL: np.multiply, BinOp.FLOORDIV: np.floor_divide,
       BinOp.MOD: np.mod, BinOp.MIN: np.minimum, BinOp.MAX: np.maximum, BinOp.GE: np.greater_equal,
       BinOp.GT: np.greater, BinOp.LE: np.less_equal, BinOp.LT: np.less, BinOp.AND: np.logical_and}


def int_values(e: Expr, env: dict):
    """``e`` evaluated with each variable's values from ``env`` (name -> int or array), or None when
    ``e`` holds anything else than constants, those variables and integer arithmetic (or divides by 0)."""
    if isinstance(e, Const):
        if isinstance(e.value, bool):
            return np.bool_(e.value)
        return np.int64(e.value) if float(e.value).is_integer() else None
    if isinstance(e, Var):
        return env.get(e.name)
    if isinstance(e, Binary) and e.op in _NP:
        a, b = int_values(e.a, env), int_values(e.b, env)
        if a is None or b is None or (e.op in (BinOp.FLOORDIV, BinOp.MOD) and np.any(b == 0)):
            return None
        return _NP[e.op](a, b)
    return None
