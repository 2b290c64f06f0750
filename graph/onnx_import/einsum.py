"""Einsum imported as existing kinds: letters only one operand has and the output lacks are summed
first (ReduceSum); each pair of operands then becomes one batched MatMul between Transposes and
Reshapes (batch letters, then the first operand's own letters by the contracted ones, times the
contracted ones by the second operand's own letters); a final Transpose orders the output.
Operands fold left to right. Refused in one line: a letter repeated inside one operand (diagonals,
traces) and a letter whose sizes differ between operands.
"""
from __future__ import annotations

import math

from graph.onnx_import.registry import converter


def parse(node, equation: str, ranks: list) -> tuple:
    """``(operand letter strings, output letters)`` with any ``...`` spelled out as letters of its own."""
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ranks):
        raise node.error(f"equation {equation!r} has {len(terms)} operands, the node {len(ranks)} inputs")
    free = [chr(c) for c in range(0x100, 0x200)]        # stand-ins for the dimensions of an ellipsis
    widest = 0
    for term, rank in zip(terms, ranks):
        if "..." in term:
            widest = max(widest, rank - (len(term) - 3))
    ellipsis = "".join(free[:widest])
    spelled = []
    for term, rank in zip(terms, ranks):
        if "..." in term:
            n = rank - (len(term) - 3)
            term = term.replace("...", ellipsis[widest - n:] if n else "")
        if len(term) != rank or not all(c.isalpha() for c in term):
            raise node.error(f"equation term {term!r} does not name the {rank} axes of its input")
        if len(set(term)) != len(term):
            raise node.error(f"equation {equation!r}: a letter repeated in one operand (a diagonal) is not supported")
        spelled.append(term)
    if arrow:
        out = rhs.replace("...", ellipsis)
        if len(set(out)) != len(out) or any(c not in "".join(spelled) for c in out):
            raise node.error(f"equation {equation!r}: bad output {rhs!r}")
    else:
        counts = {}
        for term in spelled:
            for c in term:
                counts[c] = counts.get(c, 0) + 1
        out = ellipsis + "".join(sorted(c for c, k in counts.items() if k == 1 and c not in ellipsis))
    return spelled, out


def _transpose(ctx, node, value: str, have: str, want: str) -> str:
    if have == want:
        return value
    return ctx.emit(node, "Transpose", [value], perm=tuple(have.index(c) for c in want))


def _reshape(ctx, node, value: str, shape: tuple) -> str:
    if tuple(ctx.type(value).shape) == tuple(shape):
        return value
    return ctx.emit(node, "Reshape", [value], shape=tuple(shape))


def _sum_out(ctx, node, value: str, term: str, keep: set) -> tuple:
    """``value`` with the letters outside ``keep`` summed away."""
    axes = tuple(i for i, c in enumerate(term) if c not in keep)
    if not axes:
        return value, term
    value = ctx.emit(node, "ReduceSum", [value], axes=axes, keepdims=0)
    return value, "".join(c for c in term if c in keep)


def _pair(ctx, node, a: str, ta: str, b: str, tb: str, keep: set, sizes: dict) -> tuple:
    """``a`` (letters ``ta``) times ``b`` (``tb``), summing the shared letters outside ``keep``."""
    batch = [c for c in ta if c in tb and c in keep]
    contract = [c for c in ta if c in tb and c not in keep]
    own_a = [c for c in ta if c not in tb]
    own_b = [c for c in tb if c not in ta]
    size = lambda letters: math.prod(sizes[c] for c in letters)    # noqa: E731
    lead = tuple(sizes[c] for c in batch)
    a = _transpose(ctx, node, a, ta, "".join(batch + own_a + contract))
    a = _reshape(ctx, node, a, lead + (size(own_a), size(contract)))
    b = _transpose(ctx, node, b, tb, "".join(batch + contract + own_b))
    b = _reshape(ctx, node, b, lead + (size(contract), size(own_b)))
    y = ctx.emit(node, "MatMul", [a, b])
    letters = batch + own_a + own_b
    return _reshape(ctx, node, y, tuple(sizes[c] for c in letters)), "".join(letters)


@converter("Einsum", attrs={"equation": None})
def _einsum(ctx, node):
    types = [ctx.type(v) for v in node.inputs]
    terms, out = parse(node, str(node.attr("equation", "")), [t.rank for t in types])
    sizes: dict = {}
    for term, t in zip(terms, types):
        for c, n in zip(term, t.shape):
            if sizes.setdefault(c, n) != n:
                raise node.error(f"letter {c!r} has sizes {sizes[c]} and {n} (broadcasting is not supported)")
    values = list(node.inputs)
    # letters of one operand only that the output lacks are summed before anything else
    for i, term in enumerate(terms):
        elsewhere = set(out).union(*(set(t) for j, t in enumerate(terms) if j != i))
        values[i], terms[i] = _sum_out(ctx, node, values[i], term, elsewhere)
    value, term = values[0], terms[0]
    for i in range(1, len(values)):
        keep = set(out).union(*(set(t) for t in terms[i + 1:]))
        value, term = _pair(ctx, node, value, term, values[i], terms[i], keep, sizes)
    value, term = _sum_out(ctx, node, value, term, set(out))
    value = _transpose(ctx, node, value, term, out)
    ctx.alias(node.outputs[0], value)
