"""Readable text for expressions and loop nests (Halide's print_loop_nest style)."""
from __future__ import annotations

from .expr import Binary, BinOp, Cast, Const, Select, Unary, UnOp, Var

_PREC = {BinOp.OR: 1, BinOp.AND: 2, BinOp.LT: 3, BinOp.LE: 3, BinOp.GT: 3, BinOp.GE: 3,
         BinOp.EQ: 3, BinOp.NE: 3, BinOp.ADD: 4, BinOp.SUB: 4, BinOp.MUL: 5, BinOp.DIV: 5,
         BinOp.FLOORDIV: 5, BinOp.MOD: 5}


def expr_str(e, prec: int = 0) -> str:
    from .ir import Load
    from .te import Reduce, TensorRead
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
    if isinstance(e, Load):
        return f"{e.buffer.name}[{', '.join(expr_str(i) for i in e.indices)}]"
    if isinstance(e, TensorRead):
        return f"{e.tensor.name}[{', '.join(expr_str(i) for i in e.indices)}]"
    if isinstance(e, Reduce):
        return f"{e.reducer.value}({expr_str(e.source)}, axis=[{', '.join(a.name for a in e.axes)}])"
    return repr(e)


def stmt_lines(s, indent: int = 0) -> list:
    from .ir import Allocate, For, ForKind, IfThenElse, Seq, Store
    pad = "  " * indent
    if isinstance(s, Seq):
        out = []
        for c in s.stmts:
            out.extend(stmt_lines(c, indent))
        return out
    if isinstance(s, For):
        tag = "" if s.kind is ForKind.SERIAL else f"  # {s.kind.value}"
        return [f"{pad}for {s.var.name} in range({s.extent}):{tag}"] + stmt_lines(s.body, indent + 1)
    if isinstance(s, IfThenElse):
        out = [f"{pad}if {expr_str(s.cond)}:"] + stmt_lines(s.then, indent + 1)
        if s.otherwise is not None:
            out += [f"{pad}else:"] + stmt_lines(s.otherwise, indent + 1)
        return out
    if isinstance(s, Allocate):
        b = s.buffer
        return [f"{pad}{b.name} = alloc_{b.scope.value}({list(b.shape)}, {b.dtype})"] + stmt_lines(s.body, indent)
    if isinstance(s, Store):
        return [f"{pad}{s.buffer.name}[{', '.join(expr_str(i) for i in s.indices)}] = {expr_str(s.value)}"]
    return [f"{pad}{s!r}"]


def stmt_str(s) -> str:
    return "\n".join(stmt_lines(s))


def func_str(f) -> str:
    params = ", ".join(f"{b.name}: {b.dtype}{list(b.shape)}" for b in f.params)
    return "\n".join([f"def {f.name}({params}):"] + stmt_lines(f.body, 1))
