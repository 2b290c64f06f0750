"""The ``prefetch`` primitive (TVM's ``s[stage].prefetch(tensor, var, offset)``) and the search
space's prefetch-distance decision built on it.

``Schedule.prefetch(tensor, loop, offset=n)`` makes every iteration of ``loop`` prefetch the cache
lines of ``tensor`` that the iteration ``n`` later reads; ``offset_bytes=b`` the lines ``b`` bytes
past the ones it reads now (a distance in a contiguous stream, such as a packed weight panel read
row by row); ``first=[loops around it]`` only in the iterations where those loops are at their first
(a block that several passes reuse is streamed in by the first pass alone).  Lowering
(:mod:`schedules.lowering.prefetch`) turns it into one ``Prefetch`` statement per distinct cache
line an iteration reads, at the top of the loop's body.  A prefetch
is a hint: it never faults, so it is neither guarded nor bounds-checked and may run past the end
of the buffer.
"""
from __future__ import annotations

from schedules.errors import PrefetchError, UnknownHandleError
from schedules.primitives import get_loop
from schedules.state import INLINE, PrefetchSpec, StageGraph
from tensorir.tir.ir import ForKind

# Prefetch distances the space offers for a packed operand streamed by the innermost reduction loop
# (a dense product's weight panel), in bytes (0: no prefetch), and the heuristic start's pick, for
# weights of any size: why, docs/decisions/028-prefetch-packed-weights.md
PREFETCH_BYTES = [0, 1024, 2048, 4096, 8192]
PANEL_DISTANCE = 4096


def prefetch_tensor(g: StageGraph, name):
    """The tensor named ``name`` (a workload tensor or a stage), for ``prefetch``."""
    for t in g.params:
        if g.name_of(t) == name:
            return t
    st = g.stage(name)
    if st is None:
        raise UnknownHandleError("prefetch", f"no tensor named {name!r}; tensors: "
                                 f"{[g.name_of(t) for t in g.params] + [s.name for s in g.stages]}")
    if st.attach is INLINE:
        raise PrefetchError("prefetch", f"stage {name} was inlined; it has no buffer to prefetch", stage=name)
    return st.tensor


def apply_prefetch(g: StageGraph, inputs, attrs, outputs):
    """Record a prefetch of ``attrs["tensor"]`` in leaf loop ``inputs[0]`` (see the module docstring)."""
    (handle,) = inputs
    st, loop = get_loop(g, handle, "prefetch")
    name = attrs["tensor"]
    tensor = prefetch_tensor(g, name)
    if all(t is not tensor for t in st.read_tensors()):
        raise PrefetchError("prefetch", f"stage {st.name} does not read {name}; expected a tensor it reads: "
                            f"{[g.name_of(t) for t in st.read_tensors()]}", stage=st.name, loop=loop)
    if st.annotation(loop) is ForKind.VECTORIZED:
        raise PrefetchError("prefetch", f"loop {handle} is vectorized; prefetch at a loop around it",
                            stage=st.name, loop=loop)
    if any(p.loop == loop and p.tensor == name for p in st.prefetches):
        raise PrefetchError("prefetch", f"loop {handle} already prefetches {name}", stage=st.name, loop=loop)
    first = []
    for h in attrs.get("first") or ():
        fst, floop = get_loop(g, h, "prefetch")
        if fst is not st or st.leaf.index(floop) >= st.leaf.index(loop):
            raise PrefetchError("prefetch", f"first= names {h}, not a loop of {st.name} around {handle}",
                                stage=st.name, loop=loop)
        first.append(floop)
    st.prefetches.append(PrefetchSpec(name, loop, attrs.get("offset"), attrs.get("offset_bytes"), tuple(first)))
    return []


def prefetch_decision(src, decision: str, s, tensor: str, loop: str, hint: int = PANEL_DISTANCE, first=None):
    """The search space's prefetch distance: ``src`` chooses decision ``decision`` among
    :data:`PREFETCH_BYTES` (heuristic start: ``hint``); a distance other than 0 prefetches
    ``tensor`` that many bytes ahead in every iteration of ``loop`` (a ``Schedule`` handle).
    Returns the new schedule.  For any rule whose innermost reduction loop streams a packed operand
    (a dense product's weight panel; a convolution's blocked weights); ``first``: as ``Schedule.prefetch``'s."""
    src.hint(decision, hint)
    distance = src.choose(decision, PREFETCH_BYTES)
    return s.prefetch(tensor, loop, offset_bytes=distance, first=first) if distance else s
