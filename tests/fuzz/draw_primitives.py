"""Drawing one primitive's call: its stage, loops and arguments, and now and then wrong ones.

``PRIMITIVE_DRAWERS[op](drawer, s, table, outputs, shapes, bad)`` returns a call of ``Schedule.<op>``:
``drawer`` is the :class:`tests.fuzz.drawer.Drawer` (its random source and argument drawing), ``s`` the
schedule as it is, ``table`` its loops (``Drawer.state``), ``outputs`` the workload's output names,
``shapes`` every tensor's shape; with ``bad`` the call gets a wrong argument on purpose.
"""
from __future__ import annotations

import numpy as np

from schedules import ScheduleError
from tests.fuzz.calls import call


def draw_split(drawer, s, table, outputs, shapes, bad):
    stage = drawer.pick(list(table))
    loop, ext = drawer.loop_of(table, stage)
    kw = {}
    if drawer.chance(0.2):
        kw["nparts"] = drawer.factor(ext)
    else:
        kw["factor"] = drawer.factor(ext)
    if drawer.chance(0.25):
        kw["names"] = drawer.names_pair(table, stage)
        if drawer.chance(0.15):
            kw["names"] = list(kw["names"])
    if bad:
        r = drawer.rnd.random()
        if r < 0.3:
            kw = {drawer.pick(["factor", "nparts"]): drawer.bad_value()}
        elif r < 0.4:
            kw = {"factor": drawer.factor(ext), "nparts": drawer.factor(ext)}
        elif r < 0.5:
            kw = {}
        elif r < 0.75:
            kw["names"] = drawer.pick([(drawer.fresh(), drawer.fresh(), drawer.fresh()), "ab", (3, 4),
                                       drawer.fresh()]
                                      + ([] if drawer.avoid_known else [(drawer.fresh(),), (None, None)]))
        else:
            loop = drawer.bad_loop(table)
    return call("split", loop, **kw)


def draw_tile(drawer, s, table, outputs, shapes, bad):
    stages = [st for st in table if len(table[st]) >= 2] or list(table)
    stage = drawer.pick(stages)
    loops = table[stage]
    n = min(len(loops), drawer.pick([1, 2, 2, 2, 3]))
    chosen = drawer.rnd.sample(loops, n)
    if drawer.chance(0.7):
        chosen.sort(key=loops.index)
    handles = [lp for lp, _, _ in chosen]
    factors = [drawer.factor(ext, wrap=False) if drawer.chance(0.9) else drawer.factor(ext) for _, ext, _ in chosen]
    if bad:
        if drawer.chance(0.5):
            factors = factors + [4]
        else:
            handles[0] = drawer.bad_loop(table)
    return call("tile", handles, factors)


def draw_fuse(drawer, s, table, outputs, shapes, bad):
    stages = [st for st in table if len(table[st]) >= 2] or list(table)
    stage = drawer.pick(stages)
    loops = [lp for lp, _, _ in table[stage]]
    if len(loops) >= 2 and drawer.chance(0.85):
        p = drawer.rnd.randrange(len(loops) - 1)
        a, b = loops[p], loops[p + 1]
    else:
        a, b = drawer.pick(loops), drawer.pick(loops)
    if bad:
        b = drawer.bad_loop(table) if drawer.chance(0.5) else drawer.loop_of(table)[0]
    return call("fuse", a, b, **drawer.out_name(s, table))


def draw_reorder(drawer, s, table, outputs, shapes, bad):
    stages = [st for st in table if len(table[st]) >= 2] or list(table)
    stage = drawer.pick(stages)
    loops = [lp for lp, _, _ in table[stage]]
    n = drawer.rnd.randint(min(2, len(loops)), len(loops))
    chosen = drawer.rnd.sample(loops, n)
    if bad:
        r = drawer.rnd.random()
        if r < 0.3:
            chosen.append(chosen[0])
        elif r < 0.6:
            chosen.append(drawer.loop_of(table)[0])
        elif r < 0.8:
            chosen = []
        else:
            chosen[-1] = drawer.bad_loop(table)
    if drawer.chance(0.15):
        return call("reorder", chosen)      # the list form
    return call("reorder", *chosen)


def _annot(drawer, kind, table, bad, prefer):
    stage = drawer.pick(list(table))
    loops = table[stage]
    if prefer == "inner" and drawer.chance(0.75):
        spatial = [x for x in loops if x[2] is not True]
        loop = (spatial[-1] if spatial and drawer.chance(0.3) else loops[-1])[0]
    elif prefer == "outer" and drawer.chance(0.7):
        spatial = [x for x in loops if x[2] is not True] or loops
        loop = spatial[0][0]
    elif prefer == "small" and drawer.chance(0.8):
        small = [x for x in loops if x[1] <= 16] or loops
        loop = drawer.pick(small)[0]
    else:
        loop = drawer.pick(loops)[0]
    if bad:
        loop = drawer.bad_loop(table)
    return call(kind, loop)


def draw_unroll(drawer, s, table, outputs, shapes, bad):
    return _annot(drawer, "unroll", table, bad, "small")


def draw_vectorize(drawer, s, table, outputs, shapes, bad):
    return _annot(drawer, "vectorize", table, bad, "inner")


def draw_parallel(drawer, s, table, outputs, shapes, bad):
    return _annot(drawer, "parallel", table, bad, "outer")


def draw_compute_at(drawer, s, table, outputs, shapes, bad):
    inter = [st for st in table if st not in outputs] or list(table)
    stage = drawer.pick(inter)
    others = [st for st in table if st != stage] or list(table)
    hosts = [st for st in others if st in outputs] if drawer.chance(0.5) else others
    host = drawer.pick(hosts or others)
    loop = drawer.loop_of(table, host)[0]
    if bad:
        r = drawer.rnd.random()
        if r < 0.3:
            stage = drawer.pick(list(table))
            loop = drawer.loop_of(table, stage)[0]          # its own loop
        elif r < 0.5:
            stage = drawer.pick([t.name for t in s.tensors if t.is_placeholder] + ["nosuch", None, 0])
        elif r < 0.7:
            stage = loop                                 # a loop handle as the stage
        else:
            loop = drawer.bad_loop(table)
    return call("compute_at", drawer.stage_arg(s, stage), loop)


def draw_compute_root(drawer, s, table, outputs, shapes, bad):
    stage = drawer.pick(list(table))
    if bad:
        stage = drawer.pick([t.name for t in s.tensors if t.is_placeholder] + ["nosuch", None, 3, f"{stage}.i"])
    return call("compute_root", drawer.stage_arg(s, stage))


def draw_compute_inline(drawer, s, table, outputs, shapes, bad):
    inter = [st for st in table if st not in outputs]
    stage = drawer.pick(inter) if inter and drawer.chance(0.75) else drawer.pick(list(table))
    if bad:
        stage = drawer.pick([t.name for t in s.tensors if t.is_placeholder] + ["nosuch", None, ""])
    return call("compute_inline", drawer.stage_arg(s, stage))


def draw_cache_write(drawer, s, table, outputs, shapes, bad):
    stage = drawer.pick(list(table))
    kw = drawer.out_name(s, table)
    if bad:
        stage = drawer.pick([t.name for t in s.tensors if t.is_placeholder] + ["nosuch", None, f"{stage}.i"])
    return call("cache_write", drawer.stage_arg(s, stage), **kw)


def draw_pack(drawer, s, table, outputs, shapes, bad):
    inputs = [t.name for t in s.tensors if t.is_placeholder]
    inter = [st for st in table if st not in outputs]
    tname = drawer.pick(inter) if inter and drawer.chance(0.3) else drawer.pick(inputs or list(table))
    shape = shapes.get(tname) or tuple(drawer.rnd.randint(1, 8) for _ in range(drawer.rnd.randint(1, 3)))
    ndim = len(shape)
    dims = drawer.rnd.sample(range(ndim), drawer.rnd.randint(1, ndim))
    splits = {}
    for d in dims:
        f = drawer.factor(shape[d], huge_ok=drawer.allow_huge, wrap=drawer.chance(0.3))
        splits[d] = f
    kw = {}
    if drawer.chance(0.5):
        keys = []
        for d in range(ndim):
            keys += [f"{d}.o", f"{d}.i"] if d in splits else [d if drawer.chance(0.3) else str(d)]
        drawer.rnd.shuffle(keys)
        kw["order"] = keys
    if drawer.chance(0.15):
        kw["consumers"] = [drawer.pick(list(table))]
    kw.update(drawer.out_name(s, table))
    if bad:
        r = drawer.rnd.random()
        if r < 0.3 and drawer.avoid_known:
            splits = {0: drawer.bad_value()}
        elif r < 0.15:
            splits = [4]
        elif r < 0.3:
            splits = {"a": 4}
        elif r < 0.45:
            splits = {drawer.pick([ndim, -1, 5, "0", 0.0]): 2}
        elif r < 0.6:
            splits = {0: drawer.bad_value()}
        elif r < 0.7:
            splits = None
        elif r < 0.85:
            kw["order"] = drawer.pick([["0"], [], ["0", "0", "1"], ["x"], "01", [None]])
        else:
            kw["consumers"] = drawer.pick([["nosuch"], "Y", [None], [inputs[0] if inputs else "X"]])
    if drawer.allow_huge and not bad and drawer.chance(0.05):
        splits = {drawer.rnd.randrange(ndim): 10 ** 9}
    return call("pack", tname, splits, **kw)


def draw_rfactor(drawer, s, table, outputs, shapes, bad):
    reductions = []
    for st in table:
        try:
            if s.reduce_axes(st):
                reductions.append(st)
        except Exception:  # noqa: BLE001
            pass
    stage = drawer.pick(reductions) if reductions and drawer.chance(0.9) else drawer.pick(list(table))
    try:
        axes = s.reduce_axes(stage)
    except Exception:  # noqa: BLE001
        axes = []
    kw = {}
    ext = 8
    if axes:
        ax = drawer.pick(axes)
        try:
            ext = s.extent(ax)
        except ScheduleError:
            ext = 8
        r = drawer.rnd.random()
        if r < 0.3:
            kw["axis"] = ax.split(".", 1)[1]
        elif r < 0.5:
            kw["axis"] = ax
    f = drawer.rnd.randint(2, max(2, ext)) if drawer.chance(0.8) else drawer.pick([1, ext, ext + 1, 2])
    if drawer.chance(0.1) and not drawer.avoid_known:
        f = np.int64(f)
    kw.update(drawer.out_name(s, table))
    if bad:
        r = drawer.rnd.random()
        if r < 0.4:
            f = drawer.bad_value()
        elif r < 0.7:
            kw["axis"] = drawer.pick(["nosuch", f"{drawer.pick(list(table))}.i", 3, ""])
        else:
            stage = drawer.pick(["nosuch", None] + [t.name for t in s.tensors if t.is_placeholder])
    return call("rfactor", drawer.stage_arg(s, stage), f, **kw)


PRIMITIVE_DRAWERS = {"split": draw_split, "tile": draw_tile, "fuse": draw_fuse, "reorder": draw_reorder,
                     "unroll": draw_unroll, "vectorize": draw_vectorize, "parallel": draw_parallel,
                     "compute_at": draw_compute_at, "compute_root": draw_compute_root,
                     "compute_inline": draw_compute_inline, "cache_write": draw_cache_write,
                     "pack": draw_pack, "rfactor": draw_rfactor}
