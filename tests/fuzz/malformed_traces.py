"""Malformed traces: the current schedule's JSON trace, mutated, for ``Schedule.from_json``.

``draw_from_json(drawer, s, table)`` draws from ``drawer`` (a :class:`tests.fuzz.drawer.Drawer`):
a clean round trip, an instruction added, cut, retyped, renamed or swapped, or a document of
the wrong shape.
"""
from __future__ import annotations

import json

from tests.fuzz.calls import call


def draw_from_json(drawer, s, table) -> dict:
    """A ``from_json`` call with the trace of ``s``, as it is or broken in one of many ways."""
    try:
        obj = json.loads(json.dumps(s.to_json()))
    except Exception:  # noqa: BLE001 - e.g. numpy ints in the trace: try a trace of our own
        obj = {"version": 1, "instructions": [], "decisions": {}}
    insts = obj.get("instructions", [])
    stages = list(table) or ["Y"]
    loops = [lp for st in table for lp, _, _ in table[st]] or ["Y.i"]
    r = drawer.rnd.random()
    if r < 0.15 or drawer.avoid_known:
        pass                                                         # a clean round trip
    elif r < 0.25:
        obj["instructions"].append(drawer.pick([
            ["unroll", [], {}, []], ["compute_at", [drawer.pick(stages)], {}, []], ["split", [], {}, []],
            ["split", [drawer.pick(loops)], {"factor": 2}, ["a"]], ["fuse", [drawer.pick(loops)], {}, []],
            ["reorder", [], {}, []], ["pack", [drawer.pick(stages)], {}, []],
            ["pack", ["X"], {"splits": [4]}, []], ["rfactor", [drawer.pick(stages)], {}, []],
            ["cache_write", [drawer.pick(stages)], {}, ["a", "b"]], ["compute_inline", [], {}, []],
            ["vectorize", [drawer.pick(loops), drawer.pick(loops)], {}, []], ["parallel", [3], {}, []],
            ["split", [drawer.pick(loops)], {"factor": 2}, [1, 2]],
        ]))
    elif r < 0.35 and insts:
        inst = drawer.pick(insts)
        if drawer.chance(0.5):
            inst.pop(drawer.rnd.randrange(len(inst)))                 # wrong arity
        else:
            inst.append(drawer.pick([[], {}, "x", 1]))
    elif r < 0.55 and insts:
        inst = drawer.pick(insts)
        attrs = inst[2]
        if attrs and drawer.chance(0.7):
            k = drawer.pick(list(attrs))
            attrs[k] = drawer.pick(["4", 4.5, None, [4], {"a": 1}, -1, 0, True, 10 ** 9, {"$decision": "d0"},
                                    {"$decision": 3}])
            if drawer.chance(0.5):
                obj["decisions"] = {"d0": drawer.pick([2, 3, "x", None, [1]])}
        else:
            inst[2] = drawer.pick([[], "x", None, 3])
    elif r < 0.65 and insts:
        inst = drawer.pick(insts)
        inst[1] = drawer.pick([[], [3], [None], "Y.i", [drawer.pick(loops)], [drawer.pick(stages)],
                               [[drawer.pick(loops)]]])
    elif r < 0.72 and insts:
        inst = drawer.pick(insts)
        inst[3] = drawer.pick([[], ["a"], ["a", "a"], [1, 2], "x", [None, None]])
    elif r < 0.8 and insts:
        inst = drawer.pick(insts)
        inst[0] = drawer.pick(["splitt", "", 3, None, "Split", "tile", "lower", "__init__"])
    elif r < 0.86 and len(insts) >= 2:
        a, b = drawer.rnd.sample(range(len(insts)), 2)
        insts[a], insts[b] = insts[b], insts[a]
    else:
        obj = drawer.pick([{}, {"instructions": "x"}, {"version": 2, "instructions": []}, [],
                           {"instructions": insts, "decisions": [1]}, {"instructions": insts, "version": "1"},
                           {"instructions": [None]}, {"instructions": [[]]}, "not json",
                           json.dumps(obj)[:-3], json.dumps(obj), None, 3])
    return call("from_json", obj)
