"""The memory plan: intermediate buffers placed in one arena, reusing memory by liveness.

A buffer is live from the step that writes it to the last step that reads it. Two buffers whose
live ranges overlap get disjoint bytes; others may share. Placement is greedy by size, largest
first, each at the lowest aligned offset clear of the live-overlapping buffers already placed
(the classic interval-coloring heuristic of TVM's storage rewrite and ONNX Runtime's planner).
Buffers written and read by one step never overlap, so a kernel's outputs never alias its inputs.

>>> plan = plan_memory({0: 64, 1: 64, 2: 64}, {0: (0, 1), 1: (1, 2), 2: (2, 3)})
>>> plan.arena_bytes, plan.naive_bytes
(128, 192)
"""
from __future__ import annotations

from dataclasses import dataclass

ALIGN = 64
"""Byte alignment of every buffer in the arena (a cache line; AVX-512 vector loads)."""


@dataclass(frozen=True)
class MemoryPlan:
    """Offsets of the intermediate buffers in one arena.

    Attributes
    ----------
    offsets : dict
        Buffer id -> byte offset in the arena.
    sizes : dict
        Buffer id -> bytes.
    arena_bytes : int
        The arena's size: the planned peak of intermediate memory.
    naive_bytes : int
        What allocating every intermediate apart would take (aligned the same way).
    """
    offsets: dict
    sizes: dict
    arena_bytes: int
    naive_bytes: int

    def summary(self) -> str:
        saved = 1 - self.arena_bytes / self.naive_bytes if self.naive_bytes else 0.0
        return (f"{len(self.sizes)} intermediate buffers: planned peak {_mib(self.arena_bytes)} against "
                f"{_mib(self.naive_bytes)} allocating each ({saved:.0%} less)")


def _mib(n: int) -> str:
    return f"{n / 2 ** 20:.2f} MiB" if n >= 2 ** 20 else f"{n / 1024:.1f} KiB"


def _aligned(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def plan_memory(sizes: dict, live: dict) -> MemoryPlan:
    """Place buffers (id -> bytes) whose live ranges are ``live`` (id -> (first step, last step)).

    Buffers with overlapping ranges (inclusive) never share bytes.
    """
    order = sorted(sizes, key=lambda b: (-sizes[b], live[b][0], b))
    placed: list = []            # (offset, end, first, last)
    offsets = {}
    for b in order:
        first, last = live[b]
        size = _aligned(max(1, sizes[b]))
        busy = sorted((o, e) for o, e, f, l in placed if f <= last and first <= l)
        offset = 0
        for o, e in busy:
            if offset + size <= o:
                break
            offset = max(offset, e)
        offsets[b] = offset
        placed.append((offset, offset + size, first, last))
    arena = max((e for _, e, _, _ in placed), default=0)
    naive = sum(_aligned(max(1, s)) for s in sizes.values())
    return MemoryPlan(offsets, dict(sizes), arena, naive)
