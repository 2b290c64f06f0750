"""The assembly of a kernel's innermost hot loop, for reports.

LLVM's assembly printer (as llvmlite drives it) does not annotate loops, so loops are found
from the control flow in the text: a jump to a label defined *earlier* in the text is a loop's
back edge, and the lines from that label to the jump are the loop.  A loop is *innermost*
when no other loop lies inside it.  Of the innermost loops, the one shown is the one with the
most vector arithmetic instructions (``v...fmadd/mul/add/sub/div/max/min`` on ``xmm``/``ymm``/
``zmm`` registers), then the longest, then the first: in a tiled kernel that is the
micro-kernel (packing and initialisation loops are innermost too, but do no arithmetic).
This is a heuristic on block layout; LLVM places a loop's blocks contiguously in practice.
"""
from __future__ import annotations

import re

_LABEL = re.compile(r"^([.\w$@]+):")
_FUNC = re.compile(r"^([A-Za-z_][\w.$]*):")
_JUMP = re.compile(r"^\s+j[a-z]*\s+([.\w$@]+)\s*$")
_VEC_MATH = re.compile(r"^\s+v\w*(fmadd|fmsub|fnmadd|fnmsub|mul|add|sub|div|max|min)\w*\s.*%[xyz]mm")
MAX_LINES = 200


def innermost_loop(asm: str) -> dict | None:
    """The innermost hot loop of assembly text ``asm`` (see the module docstring for the choice).

    Returns
    -------
    dict or None
        ``{"function", "label", "lines": [str], "vector_ops": int, "loops": int}``
        (``loops``: how many innermost loops there were), or None if ``asm`` has no loop.
    """
    lines = asm.splitlines()
    where = {}
    for i, line in enumerate(lines):
        m = _LABEL.match(line)
        if m:
            where[m.group(1)] = i
    loops = set()
    for j, line in enumerate(lines):
        m = _JUMP.match(line)
        if m and m.group(1) in where and where[m.group(1)] <= j:
            loops.add((where[m.group(1)], j))
    inner = [(i, j) for i, j in loops
             if not any((a, b) != (i, j) and i <= a and b <= j for a, b in loops)]
    if not inner:
        return None

    def score(span):
        i, j = span
        ops = sum(1 for line in lines[i:j + 1] if _VEC_MATH.match(line))
        return (-ops, -(j - i), i)
    i, j = min(inner, key=score)
    func = next((m.group(1) for line in reversed(lines[:i + 1]) if (m := _FUNC.match(line))), "?")
    body = [line for line in lines[i:j + 1] if not line.lstrip().startswith((".p2align", "#"))]
    if len(body) > MAX_LINES:
        body = body[:MAX_LINES] + [f"        ... ({len(body) - MAX_LINES} more lines)"]
    return {"function": func, "label": lines[i].rstrip(":"), "lines": body,
            "vector_ops": -score((i, j))[0], "loops": len(inner)}


def kernel_asm(func) -> str:
    """Host assembly of lowered function ``func``, compiled as a build compiles it."""
    from tensorir.runtime import compile_module
    from tensorir.runtime.llvm import emit_assembly
    mod, _obj, _omp = compile_module(func)
    return emit_assembly(mod)
