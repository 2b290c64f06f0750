"""A compiled model: kernels run in plan order over planned buffers, on numpy inputs.

Imports nothing of the compiler (numpy only): the compile glue (``tuner.model_compile``) hands
it the kernels as callables ``kernel(*arrays)`` that write their outputs in place.

>>> outputs = model.run({"x": x})          # doctest: +SKIP
>>> model(x)                               # positional, in input order; same dict

Every value lives in a buffer of its kernel dtype (float32, float64 or int32: int64 and bool
values are stored as int32, rank 0 as shape (1,)); inputs are converted on the way in and
outputs back to their graph dtype on the way out. Where no conversion is needed, a run hands the
caller's (contiguous, aligned) input arrays and the fresh arrays it returns straight to the kernels
instead of copying through the model's buffers: a copy of the input and of every output saved per
call (a one-conv model on a 299x299 image: 1.18x at 1 thread, 1.34x at 2).
"""
from __future__ import annotations

import ctypes
import threading
import time
from dataclasses import dataclass

import numpy as np

from graph.runtime.plan import MemoryPlan, plan_memory


# False: every run copies its inputs into the model's buffers and its outputs out of them (the A/B of
# benchmarks/bench_model.py --space-ab graph.runtime.model.DIRECT_IO=False); read when a model is made.
DIRECT_IO = True


def _data_reader():
    """A function array -> the address of its first element. ``ndarray.ctypes.data`` builds a ctypes
    object per call (about 1 us, a tenth of a tiny model's run); the address is the struct's field
    after the object header (numpy's ``PyArrayObject_fields.data``), read directly where a probe
    shows it there, else through ``ctypes.data``."""
    at = ctypes.c_void_p.from_address
    header = object.__basicsize__
    probes = [np.empty(3, np.float32), np.empty((2, 5), np.float64)[:, 1:]]
    if all(at(id(a) + header).value == a.ctypes.data for a in probes):
        return lambda a: at(id(a) + header).value
    return lambda a: a.ctypes.data


_address = _data_reader()


class ModelInputError(ValueError):
    """A wrong input name, shape or dtype given to :meth:`CompiledModel.run`; one line."""


@dataclass(frozen=True)
class Buffer:
    """A value's buffer: its graph name, graph shape and dtype, kernel shape and dtype."""
    name: str
    shape: tuple
    dtype: str
    storage_shape: tuple
    storage_dtype: str

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.storage_shape)) * np.dtype(self.storage_dtype).itemsize


@dataclass(frozen=True)
class Step:
    """One kernel call: ``kernel(*[buffers[i] for i in args])``; ``label`` names the fused group;
    ``shapes``, where given, the shapes the kernel reads its arguments with (the same bytes: a group
    that computes its plane as one row sees an (N, C/b, H, W, b) buffer as (N, C/b, 1, H*W, b))."""
    kernel: object
    args: tuple
    label: str
    shapes: tuple | None = None


class CompiledModel:
    """A model ready to run: buffers, constants, kernel steps and a memory plan.

    Parameters
    ----------
    name : str
    buffers : list of Buffer
        Every value a step reads or writes; steps refer to them by index.
    inputs, outputs : list of int
        Buffer ids of the model's inputs and outputs, in call order.
    constants : dict
        Buffer id -> array (kernel dtype and shape): weights and lowering constants.
    steps : list of Step
    info : dict, optional
        Anything the compiler wants to show (kernels, lookups, compile time).
    unread : set of int, optional
        Constants no kernel reads (weights every kernel reads through a packed copy): the kernels
        take them, so they stay in ``constants`` as zeros, but an ahead-of-time build stores none.
    index_limits : dict, optional
        Input buffer id -> ``(n, where)``: the input indexes an axis of ``n`` (``where`` names the
        node), so its values must lie in ``-n..n-1``; the kernels clamp such indices, a run refuses them.
    """

    def __init__(self, name: str, buffers, inputs, outputs, constants: dict, steps, info: dict | None = None,
                 unread=(), index_limits: dict | None = None):
        self.name = name
        self.buffers = list(buffers)
        self.input_ids = list(inputs)
        self.output_ids = list(outputs)
        self.constants = dict(constants)
        self.steps = list(steps)
        self.info = dict(info or {})
        self.unread = set(unread)
        self.index_limits = dict(index_limits or {})
        self.memory = self._plan()
        self._lock = threading.Lock()
        self._arrays = None
        self._bound = None
        self._threads = None
        # (name, shape, dtype) per input for run's quick check; None: an input needs its values checked
        self._expected = None if self.index_limits else [
            (self.buffers[b].name, self.buffers[b].shape, np.dtype(self.buffers[b].dtype)) for b in self.input_ids]
        self._direct_io = DIRECT_IO

    # ------------------------------------------------------------ planning
    def _plan(self) -> MemoryPlan:
        fixed = set(self.input_ids) | set(self.output_ids) | set(self.constants)
        live = {}
        for n, step in enumerate(self.steps):
            for b in step.args:
                if b in fixed:
                    continue
                first, _ = live.get(b, (n, n))
                live[b] = (first, n)
        return plan_memory({b: self.buffers[b].nbytes for b in live}, live)

    @property
    def input_names(self) -> list:
        return [self.buffers[b].name for b in self.input_ids]

    @property
    def output_names(self) -> list:
        return [self.buffers[b].name for b in self.output_ids]

    def _allocate(self) -> list:
        arena = np.zeros(max(1, self.memory.arena_bytes) + 64, np.uint8)
        base = (-arena.ctypes.data) % 64
        arrays = [None] * len(self.buffers)
        for b, off in self.memory.offsets.items():
            buf = self.buffers[b]
            start = base + off
            arrays[b] = arena[start:start + buf.nbytes].view(buf.storage_dtype).reshape(buf.storage_shape)
        for b, a in self.constants.items():
            arrays[b] = a
        for b in self.input_ids + self.output_ids:
            if arrays[b] is None:
                buf = self.buffers[b]
                arrays[b] = np.zeros(buf.storage_shape, buf.storage_dtype)
        self._arena = arena
        return arrays

    def _bind(self) -> list:
        """The steps' bound calls; also :attr:`_slots` (buffer id -> the pointer slots that read it,
        for the buffers a run may hand to the kernels directly: :meth:`_direct_buffers`)."""
        bound, slots, unslotted, written = [], {}, set(), set()
        for step in self.steps:
            args = [self._arrays[b] for b in step.args]
            if step.shapes is not None:
                args = [a.reshape(shape) for a, shape in zip(args, step.shapes)]
            if self._threads is not None and hasattr(step.kernel, "threads"):
                # kernels may be shared with other models (the compiler caches them): a bound call
                # keeps the thread count it was bound with
                step.kernel.threads = self._threads
            bind_slots = getattr(step.kernel, "bind_slots", None)
            if bind_slots is not None:
                call, ptrs, writes = bind_slots(*args)
                for j, b in enumerate(step.args):
                    slots.setdefault(b, []).append((ptrs, j))
                    if writes[j]:
                        written.add(b)
                bound.append(call)
                continue
            unslotted.update(step.args)
            bind = getattr(step.kernel, "bind", None)
            bound.append(bind(*args) if bind is not None else (lambda k=step.kernel, a=args: k(*a)))
        self._slots = {b: v for b, v in slots.items() if b in self._direct_buffers(unslotted, written)}
        self._home = {b: self._arrays[b].ctypes.data for b in self._slots}     # restored after each run
        return bound

    def _direct_buffers(self, unslotted: set, written: set) -> set:
        """Inputs the kernels may read from the caller's array and outputs they may write into the
        array a run returns, saving a copy each: every step using them takes pointer slots, the
        kernel dtype and shape are the graph's, and no kernel writes an input."""
        ok = set()
        for b in self.input_ids + self.output_ids if self._direct_io else ():
            buf = self.buffers[b]
            same_shape = buf.storage_shape == buf.shape or (buf.shape == () and buf.storage_shape == (1,))
            if b in unslotted or buf.dtype != buf.storage_dtype or not same_shape or b in self.constants:
                continue
            if b in self.input_ids and (b in written or b in self.output_ids):
                continue
            ok.add(b)
        return ok

    @property
    def threads(self):
        """Threads of the kernels' parallel loops (None: as the kernels were built)."""
        return self._threads

    @threads.setter
    def threads(self, n: int) -> None:
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
            raise ValueError(f"model {self.name}: threads must be a positive int, got {n!r}")
        with self._lock:
            self._threads = int(n)
            self._bound = None

    # ------------------------------------------------------------ running
    def check_feeds(self, feeds: dict) -> list:
        """The feeds as kernel-dtype arrays in input order; ModelInputError naming the first problem."""
        if not isinstance(feeds, dict):
            raise ModelInputError(f"model {self.name}: feeds must be a dict name -> array, got {type(feeds).__name__}")
        names = self.input_names
        unknown = [k for k in feeds if k not in names]
        if unknown:
            raise ModelInputError(f"model {self.name}: no input named {unknown[0]!r}; inputs: {', '.join(names)}")
        out = []
        for b in self.input_ids:
            buf = self.buffers[b]
            if buf.name not in feeds:
                raise ModelInputError(f"model {self.name}: input {buf.name!r} is missing "
                                      f"(expected {buf.dtype}{list(buf.shape)})")
            a = np.asarray(feeds[buf.name])
            if a.shape != buf.shape:
                raise ModelInputError(f"model {self.name}: input {buf.name!r} has shape {a.shape}, expected "
                                      f"{buf.shape}")
            if a.dtype.name != buf.dtype:
                raise ModelInputError(f"model {self.name}: input {buf.name!r} has dtype {a.dtype.name}, expected "
                                      f"{buf.dtype}")
            if b in self.index_limits and a.size:
                n, where = self.index_limits[b]
                bad = a[(a < -n) | (a >= n)]
                if bad.size:
                    raise ModelInputError(f"model {self.name}: input {buf.name!r} holds index {bad.flat[0]} outside "
                                          f"{-n}..{n - 1} (the axis it indexes in {where})")
            out.append(a)
        return out

    def run(self, feeds: dict) -> dict:
        """Run the model on ``feeds`` (input name -> numpy array); returns output name -> array."""
        arrays = self._quick_feeds(feeds)
        if arrays is None:
            arrays = self.check_feeds(feeds)
        with self._lock:
            if self._arrays is None:
                self._arrays = self._allocate()
            if self._bound is None:
                self._bound = self._bind()
            slots, moved, result = self._slots, [], {}
            try:
                for b, a in zip(self.input_ids, arrays):
                    buf = self.buffers[b]
                    if b in slots and a.dtype.isnative and a.flags.c_contiguous and a.flags.aligned:
                        self._point(b, a, moved)        # the kernels read the caller's array
                        continue
                    if buf.dtype != buf.storage_dtype and buf.dtype == "int64" and a.size and \
                            (a.min() < -2 ** 31 or a.max() >= 2 ** 31):
                        raise ModelInputError(f"model {self.name}: input {buf.name!r} holds values outside int32")
                    np.copyto(self._arrays[b], a.reshape(buf.storage_shape), casting="unsafe")
                for b in self.output_ids:
                    if b in slots and self.buffers[b].name not in result:
                        buf = self.buffers[b]
                        out = np.empty(buf.storage_shape, buf.storage_dtype)
                        self._point(b, out, moved)      # the last kernel writes the array returned
                        result[buf.name] = out.reshape(buf.shape)
                for call in self._bound:
                    call()
            finally:
                for b in moved:         # back to the model's own buffers (profile(), the next run)
                    home = self._home[b]
                    for ptrs, j in slots[b]:
                        ptrs[j] = home
            for b in self.output_ids:
                buf = self.buffers[b]
                if buf.name not in result:
                    a = self._arrays[b].reshape(buf.shape)
                    result[buf.name] = (a != 0) if buf.dtype == "bool" else a.astype(buf.dtype, copy=True)
        return result

    def _quick_feeds(self, feeds):
        """The feeds in input order if each is an ndarray of its input's shape and dtype, the usual
        call, else None (:meth:`check_feeds` then converts them or names the problem): a tiny model
        runs in tens of microseconds, and the full check costs about three."""
        if self._expected is None or type(feeds) is not dict or len(feeds) != len(self._expected):
            return None
        out = []
        for name, shape, dtype in self._expected:
            a = feeds.get(name)
            if type(a) is not np.ndarray or a.shape != shape or a.dtype != dtype:
                return None
            out.append(a)
        return out

    def _point(self, b: int, array, moved: list) -> None:
        ptr = _address(array)
        for ptrs, j in self._slots[b]:
            ptrs[j] = ptr
        moved.append(b)

    def profile(self, feeds: dict, min_seconds: float = 0.02, min_runs: int = 5) -> list:
        """Seconds per call of each step on ``feeds``: ``[{"step", "label", "seconds"}]`` in plan order.

        The whole model runs at least ``min_runs`` times and for at least ``min_seconds``, each
        step timed where it runs (its inputs just written by the steps before, its weights pushed
        out of the caches by theirs, as in :meth:`run`; a step repeated alone would keep its
        weights warm and look faster than it is in the model); per step the median.  For finding
        which fused group dominates a model's latency, not for comparisons (use ``benchmarks/``).
        """
        self.run(feeds)
        times = [[] for _ in self.steps]
        with self._lock:
            started = time.perf_counter()
            while len(times[0]) < min_runs or time.perf_counter() - started < min_seconds:
                for n, call in enumerate(self._bound):
                    t0 = time.perf_counter()
                    call()
                    times[n].append(time.perf_counter() - t0)
                if not self._bound:
                    break
        return [{"step": n, "label": step.label, "seconds": float(np.median(ts)) if ts else 0.0}
                for n, (step, ts) in enumerate(zip(self.steps, times))]

    def __call__(self, *args, **feeds):
        """``model(x, y)`` (input order) or ``model(x=..., y=...)``: the outputs dict."""
        if args:
            if len(args) != len(self.input_ids):
                raise ModelInputError(f"model {self.name}: takes {len(self.input_ids)} input(s) "
                                      f"({', '.join(self.input_names)}), got {len(args)}")
            feeds = {**dict(zip(self.input_names, args)), **feeds}
        return self.run(feeds)

    def summary(self) -> str:
        """A few lines: inputs, outputs, kernels, steps, memory plan."""
        kernels = len({id(s.kernel) for s in self.steps})
        ins = ", ".join(f"{self.buffers[b].name}: {self.buffers[b].dtype}{list(self.buffers[b].shape)}"
                        for b in self.input_ids)
        outs = ", ".join(f"{self.buffers[b].name}: {self.buffers[b].dtype}{list(self.buffers[b].shape)}"
                         for b in self.output_ids)
        return (f"model {self.name}({ins}) -> ({outs})\n"
                f"  {len(self.steps)} steps, {kernels} distinct kernels\n  {self.memory.summary()}")
