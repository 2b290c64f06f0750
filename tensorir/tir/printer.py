"""Readable text for loop nests (Halide's print_loop_nest style)."""
from __future__ import annotations

from tensorir.te.printer import expr_str


def stmt_lines(s, indent: int = 0) -> list:
    from tensorir.tir.ir import Allocate, For, ForKind, IfThenElse, Seq, Store
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
