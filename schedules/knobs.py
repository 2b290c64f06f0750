"""Hand-written search spaces, AutoTVM style: a few lines of Python with knobs.

>>> def matmul_space(cfg, s):
...     cfg.define_split("tile_i", s.extent("C.i"), num_outputs=2)
...     cfg.define_split("tile_j", s.extent("C.j"), num_outputs=2, policy="power2", max_factor=64)
...     cfg.define_knob("vectorize", [True, False])
...     s, (io, ii) = cfg["tile_i"].apply(s, "C.i")
...     s, (jo, ji) = cfg["tile_j"].apply(s, "C.j")
...     s = s.reorder(io, jo, "C.k", ii, ji)
...     return s.vectorize(ji) if cfg["vectorize"] else s
>>> space = KnobSpace(tensors, matmul_space)       # the tuner accepts it like a generated space

Knob values are drawn through the same decision sources as generated spaces
(Optuna, a fixed decision dict, random), so logs, replay and resume work alike.
"""
from __future__ import annotations

import itertools
import math
import numbers
from dataclasses import dataclass

from schedules.errors import DecisionError

from .schedule import Schedule
from .decisions import DecisionSource, FixedDecisions


@dataclass(frozen=True)
class SplitEntity:
    """The chosen factors of a split knob, outermost first (AutoTVM's SplitEntity)."""
    size: tuple

    def apply(self, s: Schedule, loop: str):
        """Split ``loop`` into ``len(size)`` loops with these inner extents; returns (schedule, loops)."""
        loops = [loop]
        for f in reversed(self.size[1:]):
            s = s.split(loops[0], factor=int(f))
            o, i = s.trace[-1].outputs
            loops = [o, i] + loops[1:]
        return s, tuple(loops)


def _int(value, knob: str, what: str, minimum: int) -> int:
    """``value`` as a plain int >= ``minimum`` (any integral number, numpy's too; not bool)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise DecisionError("define_split", f"knob {knob!r}: {what} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def _factorizations(n: int, parts: int, policy: str, max_factor: int | None) -> list:
    """All ways to write ``n`` (or, with power2, cover it) as ``parts`` factors, outermost first."""
    if policy == "factors":
        candidates = [d for d in range(1, n + 1) if n % d == 0]
    elif policy == "power2":
        candidates = [1 << e for e in range(0, max(1, math.ceil(math.log2(n))) + 1)]
    else:
        raise DecisionError("define_split", f"unknown policy {policy!r}; expected 'factors' or 'power2'")
    if max_factor is not None:
        candidates = [c for c in candidates if c <= max_factor]
    out = []
    for inner in itertools.product(candidates, repeat=parts - 1):
        prod = math.prod(inner)
        if policy == "factors":
            if n % prod:
                continue
            outer = n // prod
        else:
            if prod > n and any(f > 1 for f in inner):
                continue
            outer = -(-n // prod)
        out.append([outer, *inner])
    return sorted(out, key=lambda f: f[1:])


class ConfigSpace:
    """What a space function sees as ``cfg``: define knobs, then read their values."""

    def __init__(self, src: DecisionSource):
        self.src = src
        self.values: dict = {}

    def define_split(self, name: str, extent: int, num_outputs: int = 2, policy: str = "factors",
                     max_factor: int | None = None) -> SplitEntity:
        num_outputs, extent = _int(num_outputs, name, "num_outputs", 2), _int(extent, name, "extent", 1)
        if max_factor is not None:
            max_factor = _int(max_factor, name, "max_factor", 1)
        choices = _factorizations(extent, num_outputs, policy, max_factor)
        value = SplitEntity(tuple(self.src.choose(name, choices)))
        self.values[name] = value
        return value

    def define_reorder(self, name: str, loops: list, candidates: list | None = None) -> list:
        """A loop order: one of ``candidates`` (lists of the loops), or any permutation (<= 5 loops)."""
        loops = list(loops)
        if candidates is None:
            if len(loops) > 5:
                raise DecisionError("define_reorder", f"knob {name!r}: {len(loops)} loops have {math.factorial(len(loops))} "
                                    "orders; pass candidates=[...] explicitly")
            candidates = [list(p) for p in itertools.permutations(loops)]
        for c in candidates:
            if sorted(c) != sorted(loops):
                raise DecisionError("define_reorder", f"knob {name!r}: candidate {c} is not a permutation of {loops}")
        value = list(self.src.choose(name, [list(c) for c in candidates]))
        self.values[name] = value
        return value

    def define_knob(self, name: str, values: list):
        if not values:
            raise DecisionError("define_knob", f"knob {name!r} has no values")
        value = self.src.choose(name, list(values))
        self.values[name] = value
        return value

    def __getitem__(self, name: str):
        if name not in self.values:
            raise DecisionError("knobs", f"knob {name!r} is read before it is defined (defined: {sorted(self.values)})")
        return self.values[name]


class KnobSpace:
    """A search space from a function ``fn(cfg, schedule) -> schedule``."""

    def __init__(self, tensors, fn):
        if not callable(fn):
            raise TypeError(f"KnobSpace needs a function fn(cfg, schedule) -> schedule, got {fn!r}")
        self.tensors = list(tensors)
        self.fn = fn
        self.base = Schedule(self.tensors)

    def apply(self, src: DecisionSource) -> Schedule:
        out = self.fn(ConfigSpace(src), self.base)
        if not isinstance(out, Schedule):
            raise DecisionError("knobs", f"the space function {getattr(self.fn, '__name__', self.fn)} returned "
                                f"{type(out).__name__}, expected the transformed Schedule")
        return out

    def default_decisions(self) -> dict:
        src = FixedDecisions({})
        self.apply(src)
        return dict(src.decisions)
