"""Errors raised for illegal schedules.

Every message says which primitive, which stage or loop, what was expected and
what was found.  The search catches :class:`ScheduleError` and records the
candidate as invalid; users see one readable line.
"""
from __future__ import annotations


class ScheduleError(ValueError):
    """Base class: an illegal schedule primitive or an unlowerable schedule."""

    def __init__(self, primitive: str, message: str, *, stage: str | None = None,
                 loop: str | None = None):
        self.primitive = primitive
        self.stage = stage
        self.loop = loop
        self.nest = None  # filled in by Schedule for the detailed render
        super().__init__(f"{primitive}: {message}")

    def detail(self) -> str:
        """The message followed by the loop nest with the culprit marked."""
        if not self.nest:
            return str(self)
        return f"{self}\n{self.nest}"


class WorkloadListError(ScheduleError):
    """The workload's tensor list is malformed (missing inputs, duplicates...)."""


class UnknownHandleError(ScheduleError):
    """A stage or loop name that the schedule does not have."""


class SplitError(ScheduleError):
    pass


class FuseError(ScheduleError):
    pass


class ReorderError(ScheduleError):
    pass


class AnnotationError(ScheduleError):
    """vectorize / unroll / parallel used on a loop that cannot take it."""


class ComputeAtError(ScheduleError):
    pass


class ComputeInlineError(ScheduleError):
    pass


class CacheWriteError(ScheduleError):
    pass


class PackError(ScheduleError):
    pass


class RFactorError(ScheduleError):
    pass


class PrefetchError(ScheduleError):
    pass


class SkipPaddingError(ScheduleError):
    pass


class DecisionError(ScheduleError):
    """A trace refers to a decision that has no value, or the value is malformed."""


class LoweringError(ScheduleError):
    """The primitives were individually legal but the whole schedule cannot be lowered."""
