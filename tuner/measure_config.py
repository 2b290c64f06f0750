"""How candidates are measured (:class:`MeasureConfig`); the method is described in :mod:`tuner.measure`."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class MeasureConfig:
    """How candidates are measured.

    Attributes
    ----------
    repeat : int
        Timed repeats per candidate; ``costs`` has this many entries (5).
    min_repeat_ms : float
        Each repeat calls the kernel ``number`` times, with ``number``
        calibrated so a repeat lasts at least this long (40 ms).
    number : int or None
        Calls per repeat; None (default) calibrates it.
    timeout_s : float
        Budget per candidate for build plus run (10 s).  The runner gives up
        by itself ("timeout") when the remaining repeats cannot fit, and is
        killed if a call does not return within the budget plus 0.5 s.
    flush_cache : bool or "constants"
        What is evicted from the caches before each timed call
        (:func:`tensorir.runtime.cacheflush.evict`): ``"constants"`` (default)
        the constant inputs given to the :class:`Measurer` and their packed
        copies (nothing if none is), True every argument, False nothing.
    threads : int or None
        Threads for parallel loops; None (default) uses every core.  With
        fewer threads than cores, compilation overlaps timing on the free cores.
    check : bool
        Check the outputs of every candidate against the reference (True).
    rtol, atol : float
        Output tolerance: ``|got - ref| <= atol * max|ref| * sqrt(L) + rtol * |ref|``
        elementwise, where ``max|ref|`` is the largest reference magnitude of
        that output (1 if all zero) and ``L`` the longest reduction of the
        workload (product of a stage's reduce extents, 1 if none): rounding
        error grows with the magnitude of the terms and, for a reordered
        reduction, about with the square root of its length.  Defaults
        (1e-4, 1e-5) suit float32; int32 outputs must match exactly.
    memory_limit_mb : int or None
        Address-space limit of each worker (RLIMIT_AS), 8192; None for none.
    seed : int
        Seed of the random inputs (0).
    builders : int or None
        Builder processes; None: every core (or the cores left free by
        ``threads``), at least one.
    screen : float or None
        A candidate whose first repeat is more than ``screen`` times slower
        than the fastest candidate this measurer has timed stops after that
        repeat (its ``costs`` then hold that one entry): a clearly slow
        candidate needs no precise median, and tuning spends its time on the
        contenders (1.5).  While screening, a candidate whose whole run
        (check, calibration, repeats) would last more than 100 times the
        fastest median so far, and more than 1 s, is stopped there (or
        killed) as a ``"timeout"``.  None times every candidate fully.
    """
    repeat: int = 5
    min_repeat_ms: float = 40.0
    number: int | None = None
    timeout_s: float = 10.0
    flush_cache: bool | str = "constants"
    threads: int | None = None
    check: bool = True
    rtol: float = 1e-4
    atol: float = 1e-5
    memory_limit_mb: int | None = 8192
    seed: int = 0
    builders: int | None = None
    screen: float | None = 1.5

    def __post_init__(self):
        def positive(name, value, kind=(int,)):
            if isinstance(value, bool) or not isinstance(value, kind) or value <= 0:
                raise ValueError(f"MeasureConfig.{name} must be a positive number, got {value!r}")
        positive("repeat", self.repeat)
        positive("min_repeat_ms", self.min_repeat_ms, (int, float))
        positive("timeout_s", self.timeout_s, (int, float))
        for name in ("number", "threads", "memory_limit_mb", "builders"):
            if getattr(self, name) is not None:
                positive(name, getattr(self, name))
        if self.screen is not None and (isinstance(self.screen, bool) or not isinstance(self.screen, (int, float))
                                        or not self.screen >= 1):
            raise ValueError(f"MeasureConfig.screen must be None or a number >= 1, got {self.screen!r}")
        if not (isinstance(self.flush_cache, bool) or self.flush_cache == "constants"):
            raise ValueError(f"MeasureConfig.flush_cache must be True, False or 'constants', got {self.flush_cache!r}")
        for name in ("rtol", "atol"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise ValueError(f"MeasureConfig.{name} must be a number >= 0, got {value!r}")
