"""Isolated, never-raising measurement of schedule candidates.

>>> spec = WorkloadSpec.parse("matmul", ["M=256", "N=256", "K=256"])
>>> with Measurer(spec, MeasureConfig(repeat=5)) as m:          # doctest: +SKIP
...     results = m.measure([schedule, trace_dict, prim_func])
...     base = m.baseline_default()
>>> results[0].ok, results[0].median                            # doctest: +SKIP

A candidate goes through four steps, each failure becoming an ``error_kind``:
replay the trace (``"schedule"``) and lower it (``"lower"``) in the parent, so
the caller also gets the PrimFunc (``MeasureResult.func``) for features;
compile it to an object file in a builder process (``"compile"``); link and
run it in the runner process, check its outputs (``"wrong_answer"``) and time
it.  A kernel that segfaults kills only the runner (``"crash"``, with the
signal), one that runs past ``timeout_s`` is killed (``"timeout"``); either
way a fresh runner is started for the next candidate.

How timings are protected from noise
------------------------------------
- **One quiet process times kernels.**  Kernels run in a dedicated runner
  process that does nothing else.  Inputs, output buffers and the reference
  outputs are allocated once per workload; each candidate is linked into the
  JIT before its clock starts, and Python's garbage collector is off while
  timing.  The parent only sleeps on the runner's pipe meanwhile (the tuner's
  thread that prepares the next round's candidates during compilation is
  paused through ``measure(..., before_timing=...)`` before the first kernel
  is timed).
- **No compiling while timing.**  With ``threads`` equal to the number of
  cores (the default), a batch is first compiled by builder processes that use
  every core; timing starts only once all builds of the batch are done and the
  builders sleep on their pipes.  With fewer threads than cores, compiling the
  next candidates overlaps timing the current one, but never on the same core:
  the runner is pinned (``sched_setaffinity``) to ``threads`` cores and the
  builders to the other ones (they still share the last-level cache and memory
  bandwidth).
- **No other runtime's threads spinning.**  The numpy reference is computed
  in the parent before the workers start, so no OpenBLAS thread pool is busy
  in the runner.  The thread pool's workers spin only briefly after
  each call (about 10 us, decision 052); the link and the check run of the
  next candidate come before its timing starts.
- **Warm-up, then calibrated repeats.**  The first call, on outputs filled
  with NaN, is the correctness check and warms caches, page tables and the
  OpenMP thread pool.  ``number`` (calls per repeat) is then calibrated so a
  repeat lasts at least ``min_repeat_ms`` (40 ms), which averages away timer
  resolution, call overhead and short interruptions; ``repeat`` repeats (5)
  give ``costs`` (seconds per call), and their median ranks candidates.  A
  candidate whose first repeat is already ``screen`` (1.5) times slower than
  the best so far stops there: it cannot become the best, and the time goes
  to the contenders (docs/decisions/007-screening-slow-candidates.md).
- **Weights cold, as a model runs them.**  A model runs each kernel once
  per inference, after the other kernels' weights have pushed its own out
  of the caches; timed in a loop, the same kernel keeps them warm (a 32-row
  product with 8 MB of weights: 1.1 ms warm, 2.5 ms in the model).  So the
  constant inputs (``Measurer(..., constants=...)``: weights, and their
  packed copies) are evicted from every cache level before each timed call
  (``flush_cache="constants"``, the default; decision 031), and each call is
  timed alone; ``flush_cache=True`` evicts every argument, False none.
- **Arrays placed as users' are.**  Inputs and outputs start 16 bytes past a
  page boundary, like large numpy arrays (:func:`tuner.layout.placed`), in
  the runner and in every side-by-side comparison: a kernel's speed depends
  on where its arrays start (vector accesses split across cache lines, 4K
  aliasing), and unpickled arrays start anywhere
  (docs/decisions/008-arrays-placed-like-numpy.md).
- **What it cannot remove.**  Other processes on a shared machine.  Absolute
  numbers drift between runs and within one; the tuner therefore re-times
  its fastest few candidates together at the end (``measure(...,
  screen=False)`` in interleaved rounds, see :mod:`tuner.search`), and final
  comparisons measure ratios side by side in one process with
  :func:`tuner.compare.side_by_side`.
"""
from __future__ import annotations

import dataclasses
import math
import os
import statistics
import time
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from multiprocessing.connection import wait as _wait_any

from logs.record import ErrorKind
from schedules.errors import ScheduleError
from tensorir.tir.ir import Allocate, PrimFunc, walk_stmts

from . import worker as W
from .measure_config import MeasureConfig
from .prepack import PackedKernel, packed_arrays, replaced_inputs
from .spec import WorkloadSpec
from .target import host_target
from .text import one_line

OBJECT_CACHE_SIZE = 256
PACK_CACHE_SIZE = 8        # packed constants kept (a few MB each)
_GRACE_S = 0.5   # beyond the runner's own budget before it is killed
# While screening, a candidate gets at most this many times the fastest median so far (and at least
# _SLOW_FLOOR_S) for its whole run: a scalar loop nest of a large workload can take seconds a call
# where the contenders take milliseconds, and it cannot become the best.
_SLOW_FACTOR = 100
_SLOW_FLOOR_S = 1.0


@dataclass
class MeasureResult:
    """The outcome of measuring one candidate.

    Attributes
    ----------
    costs : list of float
        Seconds per kernel call, one entry per repeat (one entry if the
        candidate was screened out as clearly slow, see
        ``MeasureConfig.screen``); empty on error.
    error_kind : str or None
        None, or one of :data:`logs.record.ERROR_KINDS`.
    error_msg : str or None
        One line saying what went wrong.
    compile_seconds : float
        Codegen + LLVM time of the object (measured when it was first built;
        objects are cached per PrimFunc) plus the JIT link.
    run_seconds : float
        Wall time of the run step (link, check, calibration, repeats).
    func : PrimFunc or None
        The lowered candidate (None if it did not lower).
    """
    costs: list = field(default_factory=list)
    error_kind: str | None = None
    error_msg: str | None = None
    compile_seconds: float = 0.0
    run_seconds: float = 0.0
    func: PrimFunc | None = field(default=None, repr=False, compare=False)

    @property
    def ok(self) -> bool:
        return self.error_kind is None and bool(self.costs)

    @property
    def median(self) -> float:
        """Median cost in seconds; ``inf`` on error."""
        return statistics.median(self.costs) if self.ok else math.inf

    def gflops(self, flops: int) -> float:
        """GFLOP/s at the median cost (0.0 on error)."""
        return flops / self.median / 1e9 if self.ok and self.median > 0 else 0.0


def _fail(kind: str, msg, func=None, **kw) -> MeasureResult:
    return MeasureResult(error_kind=kind, error_msg=one_line(msg, 500), func=func, **kw)


def replay_and_lower(replay, scheduled_only: bool = False) -> tuple:
    """``(schedule, func, scheduled, None)``: the schedule ``replay()`` builds, the loop nest code
    generation compiles and the schedule's own nest before the code-generation passes (what the
    cost model's features read); or ``(schedule or None, None, None, failure)``, a failed result of
    kind ``"schedule"`` (``replay()`` raised) or ``"lower"``.  Never raises: the one place where the
    measurer and the tuner's candidates classify these failures.  ``scheduled_only``: stop at the
    schedule's own nest (``func`` is then None; :func:`finish_lowering` makes it)."""
    from schedules.lowering import SCHEDULED
    try:
        sch = replay()
    except ScheduleError as err:
        return None, None, None, _fail(ErrorKind.SCHEDULE, err)
    except Exception as err:  # noqa: BLE001 - a bug in a primitive still only sinks this candidate
        return None, None, None, _fail(ErrorKind.SCHEDULE, f"{type(err).__name__}: {err}")
    try:
        if scheduled_only:
            return sch, None, sch.lower(until=SCHEDULED), None
        steps = sch.lower_steps()
        return sch, steps[-1][1], dict(steps)[SCHEDULED], None
    except ScheduleError as err:
        return sch, None, None, _fail(ErrorKind.LOWER, err)
    except Exception as err:  # noqa: BLE001
        return sch, None, None, _fail(ErrorKind.LOWER, f"{type(err).__name__}: {err}")


def finish_lowering(scheduled: PrimFunc) -> tuple:
    """``(func, None)``: the schedule's own nest (``replay_and_lower(..., scheduled_only=True)``)
    through the remaining lowering passes, the loop nest code generation compiles; or ``(None,
    failure)``, a failed result of kind ``"lower"``.  Never raises."""
    from schedules.lowering import PASS_NAMES, SCHEDULED, apply_passes
    try:
        return apply_passes(scheduled, names=PASS_NAMES[PASS_NAMES.index(SCHEDULED) + 1:]), None
    except ScheduleError as err:
        return None, _fail(ErrorKind.LOWER, err)
    except Exception as err:  # noqa: BLE001
        return None, _fail(ErrorKind.LOWER, f"{type(err).__name__}: {err}")


def prepare(tensors, candidate) -> PrimFunc | MeasureResult:
    """Replay and lower one candidate in this process.

    Parameters
    ----------
    tensors : list of te.Tensor
        The workload the candidate schedules.
    candidate : Schedule, dict, str or PrimFunc
        A schedule, a trace (dict or JSON text, as ``Schedule.to_json``) or
        an already lowered function.

    Returns
    -------
    PrimFunc or MeasureResult
        The lowered function, or a failed result of kind ``"schedule"`` (the
        trace does not replay) or ``"lower"`` (it does not lower, or the
        function's parameters do not match the workload).  Never raises.
    """
    from schedules.schedule import Schedule
    if isinstance(candidate, PrimFunc):
        func = candidate
    else:
        if not isinstance(candidate, (dict, str, Schedule)):
            return _fail(ErrorKind.SCHEDULE, f"cannot measure a {type(candidate).__name__}; expected a Schedule, "
                         "a trace dict or JSON text, or a PrimFunc")
        _, func, _, failure = replay_and_lower(
            lambda: candidate if isinstance(candidate, Schedule) else Schedule.from_json(tensors, candidate))
        if failure is not None:
            return failure
    want = [(tuple(t.shape), t.dtype) for t in tensors]
    got = [(tuple(b.shape), b.dtype) for b in func.params]
    if want != got:
        return _fail(ErrorKind.LOWER, f"kernel parameters {got} do not match the workload's tensors {want}", func)
    return func


def allocated_bytes(func: PrimFunc) -> int:
    """Bytes of every buffer the kernel allocates, each counted once (a lower bound)."""
    return sum(s.buffer.nbytes for s in walk_stmts(func.body) if isinstance(s, Allocate))


def _pin_threads(cpus) -> bool:
    """Run every thread of this process on ``cpus``; False where the OS does not allow it."""
    try:
        tids = [int(t) for t in os.listdir("/proc/self/task")]
    except OSError:
        tids = [0]
    done = False
    for tid in tids:
        try:
            os.sched_setaffinity(tid, cpus)
            done = True
        except OSError:     # (a thread that ended meanwhile, or a sandbox that forbids it)
            pass
    return done


class Measurer:
    """Measures candidates of one workload in long-lived worker processes.

    Parameters
    ----------
    spec : WorkloadSpec
        The workload.
    config : MeasureConfig, optional
        Defaults to ``MeasureConfig()``.

    Use as a context manager, or call :meth:`start` and :meth:`close`.
    Starting computes the inputs and reference once and spawns the workers;
    it raises if the reference cannot be computed or the runner cannot start.
    """

    def __init__(self, spec: WorkloadSpec, config: MeasureConfig | None = None, constants=()):
        self.spec = spec
        self.config = config or MeasureConfig()
        self.constants = sorted(int(i) for i in constants)   # placeholder indices of the weights
        cpus = sorted(os.sched_getaffinity(0))
        self.threads = self.config.threads or len(cpus)
        self.overlap = self.threads < len(cpus)
        runner_cpus = cpus[:self.threads] if self.overlap else None
        builder_cpus = cpus[self.threads:] if self.overlap else None
        self._cpus, self._builder_cpus, self._pinned = cpus, builder_cpus, False
        n_builders = self.config.builders or (len(builder_cpus) if self.overlap else len(cpus))
        self.target = host_target(self.threads)
        limit = self.config.memory_limit_mb
        self._builders = [W.WorkerProcess("builder", {"affinity": builder_cpus, "memory_limit_mb": limit})
                          for _ in range(max(1, n_builders))]
        self._runner_init = {"affinity": runner_cpus, "memory_limit_mb": limit}
        self._runner = None
        self._objects: OrderedDict = OrderedDict()   # PrimFunc -> (object, uses_openmp, compile_seconds)
        self._best_s = math.inf     # fastest median timed so far (for screening)
        self._screen = True
        self._started = False
        self._before_timing = None
        self._packed: dict = {}       # this batch: index -> Prepacked (see tuner.prepack.PackedKernel)
        self._pack_cache: dict = {}   # pack_key -> packed constant

    # ------------------------------------------------------------ lifecycle
    def start(self) -> "Measurer":
        """Compute inputs and reference, spawn the workers and wait for the runner."""
        if self._started:
            return self
        spec, cfg = self.spec, self.config
        inputs = spec.inputs(cfg.seed)
        reference = spec.reference(inputs)
        outs = spec.output_tensors()
        self._runner_init.update(
            inputs=inputs, reference=reference, output_names=[t.name for t in outs],
            output_dtypes=[t.dtype for t in outs], reduction_length=spec.reduction_length,
            threads=self.threads, config=dataclasses.asdict(cfg), constants=self.constants)
        for b in self._builders:
            b.start()
        self._runner = W.WorkerProcess("runner", self._runner_init)
        self._runner.start()
        self._started = True
        if self._builder_cpus:
            # this process (asking, training the cost model) keeps off the cores that time kernels:
            # left free, the scheduler put it on the runner's core in about 1 sample in 8
            self._pinned = _pin_threads(self._builder_cpus)
        try:
            self._runner.wait_ready()
        except BaseException:
            self.close()
            raise
        return self

    @property
    def running(self) -> bool:
        """Whether the worker processes are up (``start`` brings them back after ``close``)."""
        return self._started

    def close(self) -> None:
        """Stop every worker process."""
        for w in self._builders + ([self._runner] if self._runner else []):
            w.stop()
        self._started = False
        if self._pinned:
            _pin_threads(self._cpus)
            self._pinned = False

    def __enter__(self) -> "Measurer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------ measuring
    def baseline_default(self) -> MeasureResult:
        """Measure the default (unscheduled) loop nest of the workload."""
        from schedules.schedule import Schedule
        return self.measure([Schedule(self.spec.tensors())])[0]

    def measure(self, candidates: list, before_timing=None, screen: bool = True) -> list:
        """Measure candidates; one :class:`MeasureResult` each, in order.  Never raises.

        Parameters
        ----------
        candidates : list
            Schedules, traces (dict or JSON text) or PrimFuncs of this workload, or
            :class:`tuner.prepack.PackedKernel` (its constants packed outside the timed call).
        before_timing : callable, optional
            Called once, just before the first kernel is sent to the runner
            (e.g. to pause other work in this process while kernels are timed).
        screen : bool
            False times every candidate fully, whatever ``MeasureConfig.screen``.

        Returns
        -------
        list of MeasureResult
        """
        if not self._started:
            self.start()
        tensors = self.spec.tensors()
        results: list = [None] * len(candidates)
        waiting: dict = {}      # PrimFunc -> indices waiting for its build
        ready: deque = deque()  # indices whose object is in the cache
        limit = self.config.memory_limit_mb
        self._packed = {}       # index -> the Prepacked of a candidate whose constants are packed outside
        for i, cand in enumerate(candidates):
            if isinstance(cand, PackedKernel):
                self._packed[i] = cand.pre
                func = prepare(cand.pre.tensors, cand.func)
            else:
                func = prepare(tensors, cand)
            if isinstance(func, MeasureResult):
                results[i] = func
                continue
            try:
                need = allocated_bytes(func)
                if limit and need > limit * 2 ** 20:
                    results[i] = _fail("memory", f"the kernel allocates {need / 2 ** 20:.0f} MiB of intermediate "
                                       f"buffers, more than memory_limit_mb={limit}", func)
                    continue
                results[i] = func   # replaced by its result once run
                if func in self._objects:
                    ready.append(i)
                else:
                    waiting.setdefault(func, []).append(i)
            except Exception as err:  # noqa: BLE001 - e.g. a hand-made PrimFunc holding unhashable parts
                results[i] = _fail(ErrorKind.LOWER, f"malformed PrimFunc: {type(err).__name__}: {err}")
        self._before_timing = before_timing
        self._screen = screen
        try:
            self._run_batch(results, waiting, ready)
        except Exception as err:  # noqa: BLE001 - measure() never raises; the workers are reset
            msg = f"internal measurer error: {type(err).__name__}: {err}"
            for i, r in enumerate(results):
                if not isinstance(r, MeasureResult):
                    results[i] = _fail(ErrorKind.RUNTIME, msg, r)
            self._reset_workers()
        return results

    def _reset_workers(self) -> None:
        for b in self._builders:
            b.restart()
        if self._runner is not None:
            self._runner.kill()

    def _run_batch(self, results: list, waiting: dict, ready: deque) -> None:
        cfg = self.config
        pending = deque(waiting)
        building: dict = {}     # builder -> (func, deadline)
        running = None          # (index, deadline, t_sent, compile_seconds)
        while pending or building or ready or running:
            now = time.monotonic()
            if pending and (self.overlap or running is None):
                for b in self._builders:
                    if b not in building and pending:
                        func = pending.popleft()
                        if not b.alive:
                            b.restart()
                        b.send(("build", func))
                        building[b] = (func, now + cfg.timeout_s)
            if running is None and ready and (self.overlap or not (pending or building)):
                if self._before_timing is not None:
                    hook, self._before_timing = self._before_timing, None
                    hook()
                i = ready.popleft()
                running = self._send_run(i, results)
            conns = {b.conn: b for b in building}
            if running is not None:
                conns[self._runner.conn] = self._runner
            if not conns:
                continue
            deadlines = [d for _, d in building.values()] + ([running[1]] if running else [])
            for conn in _wait_any(list(conns), timeout=max(0.0, min(deadlines) - time.monotonic())):
                w = conns[conn]
                if w is self._runner:
                    self._finish_run(running, results)
                    running = None
                else:
                    self._finish_build(w, building.pop(w)[0], waiting, results, ready)
            now = time.monotonic()
            for b, (func, deadline) in list(building.items()):
                if now >= deadline:
                    del building[b]
                    b.restart()
                    for i in waiting.pop(func, []):
                        results[i] = _fail(ErrorKind.TIMEOUT, f"compilation took longer than timeout_s={cfg.timeout_s:g}",
                                           func, compile_seconds=cfg.timeout_s)
            if running is not None and now >= running[1]:
                i, _, t_sent, compile_s, slow = running
                self._runner.kill()
                results[i] = _fail(ErrorKind.TIMEOUT, f"the kernel did not finish within {now - t_sent:.3g} s and was killed"
                                   + self._not_a_contender(slow), results[i], compile_seconds=compile_s,
                                   run_seconds=now - t_sent)
                running = None

    def _finish_build(self, b, func, waiting: dict, results: list, ready: deque) -> None:
        try:
            _, reply = b.recv(0)
        except W.WorkerDied as err:
            b.start()
            reply = {"error_kind": ErrorKind.COMPILE, "error_msg": f"code generation crashed: {err}"}
        indices = waiting.pop(func, [])
        if reply.get("error_kind"):
            for i in indices:
                results[i] = _fail(reply["error_kind"], reply["error_msg"], func)
            return
        self._objects[func] = (reply["object"], reply["uses_openmp"], reply["compile_seconds"])
        while len(self._objects) > OBJECT_CACHE_SIZE:
            self._objects.popitem(last=False)
        ready.extend(indices)

    def _send_run(self, i: int, results: list):
        func = results[i]
        obj, omp, compile_s = self._objects[func]
        self._objects.move_to_end(func)
        try:
            if self._runner.proc is None or not self._runner.alive:
                self._runner.restart()
            self._runner.wait_ready()
        except (W.WorkerDied, TimeoutError) as err:
            results[i] = _fail(ErrorKind.RUNTIME, f"could not start the runner process: {err}", func)
            return None
        budget = max(0.05, self.config.timeout_s - compile_s)
        screen = self.config.screen if self._screen else None
        cutoff = screen * self._best_s if screen is not None and math.isfinite(self._best_s) else None
        slow = None       # the budget was cut to a multiple of the best so far
        if cutoff is not None and max(_SLOW_FLOOR_S, _SLOW_FACTOR * self._best_s) < budget:
            budget = slow = max(_SLOW_FLOOR_S, _SLOW_FACTOR * self._best_s)
        extra, packed = [], []
        if i in self._packed:     # (built once per distinct pack; sent with every run of a kernel that reads it)
            pre = self._packed[i]
            extra = packed_arrays(pre, self._runner_init["inputs"], self._pack_cache)
            while len(self._pack_cache) > PACK_CACHE_SIZE:
                self._pack_cache.pop(next(iter(self._pack_cache)))
            packed = replaced_inputs(pre)
        self._runner.send(("run", {"func": func, "object": obj, "uses_openmp": omp, "budget_s": budget,
                                   "cutoff_s": cutoff, "extra_inputs": extra, "packed_inputs": packed}))
        now = time.monotonic()
        return (i, now + budget + _GRACE_S, now, compile_s, slow)

    def _not_a_contender(self, slow) -> str:
        """What a timeout message adds when the budget was cut by screening."""
        if slow is None:
            return f" (timeout_s={self.config.timeout_s:g})"
        return (f" (screening: a run may take {_SLOW_FACTOR}x the fastest call so far, {self._best_s * 1e3:.3g} ms, "
                f"or {_SLOW_FLOOR_S:g} s; this candidate is not a contender)")

    def _finish_run(self, running, results: list) -> None:
        i, _, t_sent, compile_s, slow = running
        func = results[i]
        try:
            _, reply = self._runner.recv(0)
        except W.WorkerDied as err:
            kind, msg = ErrorKind.CRASH, f"the kernel crashed: {err}"
            limit, need = self.config.memory_limit_mb, allocated_bytes(func)
            if limit and need > limit * 2 ** 20 // 2:
                # (allocations are checked, see tensorir.codegen.safety: this is a crash near the limit)
                kind = "memory"
                msg += f"; it allocates {need / 2 ** 20:.0f} MiB, near memory_limit_mb={limit}"
            results[i] = _fail(kind, msg, func, compile_seconds=compile_s, run_seconds=time.monotonic() - t_sent)
            return
        compile_s += reply.get("link_seconds", 0.0)
        run_s = reply.get("run_seconds", time.monotonic() - t_sent)
        if reply.get("error_kind"):
            msg = reply["error_msg"] + (self._not_a_contender(slow) if reply["error_kind"] == ErrorKind.TIMEOUT else "")
            results[i] = _fail(reply["error_kind"], msg, func, compile_seconds=compile_s, run_seconds=run_s)
        else:
            results[i] = MeasureResult(costs=list(reply["costs"]), compile_seconds=compile_s, run_seconds=run_s,
                                       func=func)
            self._best_s = min(self._best_s, results[i].median)


def measure_once(spec: WorkloadSpec, candidates: list, config: MeasureConfig | None = None) -> list:
    """Start a :class:`Measurer`, measure ``candidates`` and stop it."""
    with Measurer(spec, config) as m:
        return m.measure(candidates)


__all__ = ["MeasureConfig", "MeasureResult", "Measurer", "prepare", "replay_and_lower", "finish_lowering",
           "measure_once", "allocated_bytes"]
