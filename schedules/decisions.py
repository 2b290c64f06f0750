"""Where a generated space's decisions come from: fixed values (replay, resume), random draws,
mutations of a parent, or an Optuna trial. Every source answers ``choose(name, choices)``."""
from __future__ import annotations

import abc
import random

from schedules.errors import DecisionError

class DecisionSource(abc.ABC):
    """Where decisions come from; records what was chosen."""

    def __init__(self):
        self.decisions: dict = {}      # name -> chosen value
        self.choices: dict = {}        # name -> list of choices offered

    def choose(self, name: str, choices: list):
        if not choices:
            raise DecisionError("space", f"decision {name!r} has no choices")
        value = self._pick(name, list(choices))
        self.decisions[name] = value
        self.choices[name] = list(choices)
        return value

    @abc.abstractmethod
    def _pick(self, name, choices):
        """Return one of ``choices`` for decision ``name``."""

    def hint(self, name: str, value) -> None:
        """A rule's guess of a good value for the next ``choose(name, ...)``; only the heuristic uses it."""


class FixedDecisions(DecisionSource):
    """Replays a decision dict; a missing decision takes ``default`` (or its first choice)."""

    def __init__(self, values: dict, strict: bool = False):
        super().__init__()
        self.values = dict(values)
        self.strict = strict

    def _pick(self, name, choices):
        if name not in self.values:
            if self.strict:
                raise DecisionError("space", f"no value for decision {name!r}")
            return choices[0]
        v = self.values[name]
        if v not in choices:
            raise DecisionError("space", f"decision {name!r} = {v!r} is not one of its choices {choices}")
        return v


class RandomDecisions(DecisionSource):
    def __init__(self, seed: int | None = None):
        super().__init__()
        self.rng = random.Random(seed)

    def _pick(self, name, choices):
        return self.rng.choice(choices)


class MutatedDecisions(DecisionSource):
    """A parent's decisions with the ones named in ``mutate`` changed (local search).

    A mutated decision moves to a neighbouring choice (half the time) or to any
    other choice; a decision the parent lacks, or whose value is no longer
    offered (an earlier mutation changed the choices), is drawn at random.
    """

    def __init__(self, parent: dict, mutate, rng: random.Random):
        super().__init__()
        self.parent, self.mutate, self.rng = dict(parent), set(mutate), rng

    def _pick(self, name, choices):
        v = self.parent.get(name)
        if v in choices and name not in self.mutate:
            return v
        if v in choices and len(choices) > 1:
            i = choices.index(v)
            if self.rng.random() < 0.5:
                step = self.rng.choice((-1, 1))
                return choices[i + step if 0 <= i + step < len(choices) else i - step]
            return choices[self.rng.choice([j for j in range(len(choices)) if j != i])]
        return self.rng.choice(choices)


class OptunaDecisions(DecisionSource):
    """Each decision is an integer index ``suggest_int(name, 0, n-1)`` into its ordered choices.

    Integers (not categoricals) keep the choices ordered, so TPE, CMA-ES and GP
    samplers can all exploit that a tile of 16 is between 8 and 32.
    """

    def __init__(self, trial):
        super().__init__()
        self.trial = trial

    def _pick(self, name, choices):
        return choices[self.trial.suggest_int(name, 0, len(choices) - 1)]
