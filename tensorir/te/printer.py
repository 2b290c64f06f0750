"""Readable text for expressions (the te and loop-IR printers build on it)."""
from __future__ import annotations

from tensorir.te.expr import Binary, BinOp, Cast, Const, Select, Unary, UnOp, Var

_PREC = {BinOp.OR: 1, BinOp.AND: 2, BinOp.LT: 3, BinOp.LE: 3, BinOp.GT: 3, BinOp.GE: 3,
         BinOp.EQ: 3, BinOp.NE: 3, BinOp.ADD: 4, BinOp.SUB: 4, BinOp.MUL: 5, BinOp.DIV: 5,
         BinOp.FLOORDIV: 5, BinOp.MOD: 5}


def expr_str(e, prec: int = 0) -> str:
    from tensorir.te.tensor import Reduce, TensorRead
    if isinstance(e, Const):
        if e.dtype in ("float32", "float64") and e.value in (float("inf"), float("-inf")):
            return "-inf" if e.value < 0 else "inf"
        if e.dtype == "float32":
            return f"{e.value!r}f"
        return repr(e.value)
    if isinstance(e, Var):
        return e.name
    if isinstance(e, Binary):
        if e.op in (BinOp.MIN, BinOp.MAX):
            return f"{e.op.value}({expr_str(e.a)}, {expr_str(e.b)})"
        p = _PREC[e.op]
        s = f"{expr_str(e.a, p)} {e.op.value} {expr_str(e.b, p + 1)}"
        return f"({s})" if p < prec else s
    if isinstance(e, Unary):
        if e.op is UnOp.NOT:
            return f"not {expr_str(e.a, 6)}"
        return f"{e.op.value}({expr_str(e.a)})"
    if isinstance(e, Select):
        return f"select({expr_str(e.cond)}, {expr_str(e.t)}, {expr_str(e.f)})"
    if isinstance(e, Cast):
        return f"{e.to}({expr_str(e.a)})"
    if isinstance(e, TensorRead):
        return f"{e.tensor.name}[{', '.join(expr_str(i) for i in e.indices)}]"
    if isinstance(e, Reduce):
        return f"{e.reducer.value}({expr_str(e.source)}, axis=[{', '.join(a.name for a in e.axes)}])"
    if hasattr(e, "text"):          # nodes of higher IR levels (loop-IR loads) print themselves
        return e.text()
    return repr(e)
