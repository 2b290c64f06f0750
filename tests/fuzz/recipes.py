"""Recipes: a few calls that go together the way a user (or the tuner) writes them.

Loop names are predicted from what the primitives will give; a mispredicted name is just a
refused call.  ``recipe(drawer, s, table, outputs)`` draws from ``drawer`` (a
:class:`tests.fuzz.drawer.Drawer`) against schedule ``s`` and its loops ``table``.
"""
from __future__ import annotations

from tests.fuzz.calls import call


def recipe(drawer, s, table, outputs) -> list:
    """The calls of one recipe drawn for ``s``: vectorize an inner loop, a register tile, rfactor and
    vectorize, inline every intermediate, attach a producer, or fuse and parallelize (``[]``: none)."""
    kind = drawer.pick(["vec_inner", "vec_inner", "register_tile", "rfactor_vec", "inline_all", "attach",
                        "parallel_outer"])
    stage = drawer.pick(list(table))
    loops = [lp for lp, _, _ in table[stage]]
    spatial = [lp for lp, _, red in table[stage] if red is not True]
    inter = [st for st in table if st not in outputs]
    if kind == "vec_inner" and spatial:
        lp = spatial[-1]
        plan = []
        if lp != loops[-1]:
            plan.append(call("reorder", *[x for x in loops if x != lp], lp))
        f = drawer.pick([2, 3, 4, 5, 8, 16])
        return plan + [call("split", lp, factor=f), call("vectorize", f"{lp}.1")]
    if kind == "register_tile":
        try:
            axes, raxes = s.axes(stage), s.reduce_axes(stage)
        except Exception:  # noqa: BLE001
            return []
        if len(axes) < 1:
            return []
        local = f"{stage}_local"
        tiled = axes[-2:]
        fs = [drawer.pick([1, 2, 3, 4, 6, 8]) if len(tiled) == 2 and n == 0 else drawer.pick([4, 8, 16])
              for n in range(len(tiled))]
        plan = [call("cache_write", stage), call("tile", tiled, fs)]
        plan.append(call("compute_at", local, f"{tiled[-1]}.0"))
        lnames = [f"{local}.{a.split('.', 1)[1]}" for a in axes]
        rnames = [f"{local}.{a.split('.', 1)[1]}" for a in raxes]
        if rnames:
            plan.append(call("reorder", *(lnames[:-len(tiled)] + rnames + lnames[-len(tiled):])))
        plan.append(call("vectorize", lnames[-1]))
        if len(tiled) == 2:
            plan.append(call("unroll", lnames[-2]))
        if len(axes) > len(tiled) and drawer.chance(0.5):
            plan.append(call("parallel", axes[0]))
        return plan
    if kind == "rfactor_vec":
        reds = []
        for st in table:
            try:
                if s.reduce_axes(st):
                    reds.append(st)
            except Exception:  # noqa: BLE001
                pass
        if not reds:
            return []
        st = drawer.pick(reds)
        ax = s.reduce_axes(st)[-1].split(".", 1)[1]
        rf = f"{st}_rf"
        f = drawer.pick([2, 3, 4, 8, 16])
        plan = [call("rfactor", st, f), call("reorder", f"{rf}.{ax}_o", f"{rf}.{ax}_v"),
                call("vectorize", f"{rf}.{ax}_v")]
        if drawer.chance(0.5):
            plan.append(call("compute_at", rf, f"{st}.{s.loops(st)[0].split('.', 1)[1]}"))
        return plan
    if kind == "inline_all" and inter:
        return [call("compute_inline", st) for st in reversed(inter)]
    if kind == "attach" and inter:
        p = drawer.pick(inter)
        host = drawer.pick([st for st in table if st != p] or [stage])
        hl = [lp for lp, _, _ in table[host]]
        return [call("compute_at", p, drawer.pick(hl[:2]))]
    if kind == "parallel_outer" and len(loops) >= 2:
        return [call("fuse", loops[0], loops[1]),
                call("parallel", f"{loops[0]}.{loops[1].split('.', 1)[1]}.fused")]
    return []
