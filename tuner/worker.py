"""Worker processes of the measurer: builders (PrimFunc -> object bytes) and the runner.

Both kinds are fresh interpreters that talk to the parent over a socket
(a ``multiprocessing`` connection), strictly request/reply, so a worker that dies (segfault, abort,
``kill`` on timeout) shows up as end-of-file on its pipe and takes nothing
else with it.  Messages are tuples ``(kind, payload)``; payloads are plain
dicts, numpy arrays, bytes and PrimFuncs (frozen dataclasses, picklable).

The runner gets the inputs and the reference outputs once, at start, and
keeps them for every candidate; see :mod:`tuner.measure` for how timings are
protected from noise.
"""
from __future__ import annotations

import ctypes
import gc
import math
import multiprocessing.connection
import os
import signal
import socket
import subprocess
import sys
import time

from logs.record import ErrorKind
from tensorir.te.check import check_outputs  # noqa: F401  (the runner's check; tuner.cli and tuner.verify use it)

INIT_TIMEOUT_S = 120.0
_PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class WorkerDied(RuntimeError):
    """The worker process ended while the parent waited for it (message: how it ended)."""


def exit_description(exitcode) -> str:
    """``"killed by SIGSEGV (Segmentation fault)"`` or ``"exited with status 3"``."""
    if exitcode is None:
        return "died (exit status unknown)"
    if exitcode < 0:
        try:
            sig = signal.Signals(-exitcode)
            return f"killed by {sig.name} ({signal.strsignal(sig) or sig.name})"
        except ValueError:
            return f"killed by signal {-exitcode}"
    return f"exited with status {exitcode}"


class WorkerProcess:
    """One worker process and its connection; restartable.

    The child is a fresh interpreter (``python -c ...``), never a fork: the
    parent may hold OpenMP, OpenBLAS and LLVM state that does not survive
    ``fork``.  Unlike ``multiprocessing``'s spawn it does not re-import the
    caller's ``__main__``, so scripts need no ``if __name__ == "__main__"``.

    Parameters
    ----------
    role : str
        ``"builder"`` or ``"runner"``.
    init : dict
        Start-up settings (affinity, memory limit, inputs, ...), sent first.
    """

    def __init__(self, role: str, init: dict):
        self.role, self._init = role, init
        self.proc = None
        self.conn = None
        self.ready = False

    def start(self) -> None:
        parent, child = socket.socketpair()
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (_PACKAGE_ROOT, env.get("PYTHONPATH")) if p)
        code = "import sys; from tuner.worker import child_main; child_main(sys.argv[1], int(sys.argv[2]))"
        self.proc = subprocess.Popen([sys.executable, "-c", code, self.role, str(child.fileno())],
                                     pass_fds=[child.fileno()], env=env, stdin=subprocess.DEVNULL)
        child.close()
        self.conn = multiprocessing.connection.Connection(parent.detach())
        self.ready = False
        self.conn.send({**self._init, "parent_pid": os.getpid()})

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def wait_ready(self, timeout: float = INIT_TIMEOUT_S) -> None:
        """Block until the child reported it is initialized.

        Raises
        ------
        WorkerDied
            If it failed to start (the message carries its error).
        """
        if self.ready:
            return
        try:
            kind, payload = self.recv(timeout)
        except TimeoutError:
            self.kill()
            raise WorkerDied(f"{self.role} process did not start within {timeout:g} s") from None
        if kind != "ready":
            self.kill()
            raise WorkerDied(f"{self.role} process failed to start: {payload}")
        self.ready = True

    def send(self, msg) -> None:
        self.conn.send(msg)

    def recv(self, timeout: float | None = None):
        """Next message; raises ``TimeoutError`` or :class:`WorkerDied`."""
        if not self.conn.poll(timeout):
            raise TimeoutError(f"{self.role} did not answer within {timeout:.1f} s")
        try:
            return self.conn.recv()
        except (EOFError, OSError):
            try:
                code = self.proc.wait(5.0)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                code = self.proc.wait()
            self._forget()
            raise WorkerDied(f"{self.role} process {exit_description(code)}") from None

    def kill(self) -> None:
        """End the process now (SIGKILL) and release the connection."""
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait()
        self._forget()

    def stop(self, timeout: float = 2.0) -> None:
        """Ask the child to exit, then kill it if it does not."""
        if self.proc is None:
            return
        try:
            if self.proc.poll() is None:
                self.conn.send(("exit", None))
                self.proc.wait(timeout)
        except (OSError, ValueError, subprocess.TimeoutExpired):
            pass
        self.kill()

    def restart(self) -> None:
        self.kill()
        self.start()

    def _forget(self) -> None:
        if self.conn is not None:
            self.conn.close()
        self.conn = None
        self.proc = None
        self.ready = False


# ===================================================================== in the child

def _die_with_parent(parent_pid: int | None) -> None:
    """Ask Linux to SIGKILL this process when its parent ends.

    Without this a runner stuck in a hanging kernel would outlive a tuner
    that was killed (a closed socket is only noticed between candidates).
    """
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, int(signal.SIGKILL), 0, 0, 0)   # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if parent_pid is not None and os.getppid() != parent_pid:
        os._exit(1)   # the parent died before prctl took effect


def _setup_child(init: dict) -> None:
    _die_with_parent(init.get("parent_pid"))
    cpus = init.get("affinity")
    if cpus:
        os.sched_setaffinity(0, cpus)
    limit_mb = init.get("memory_limit_mb")
    if limit_mb:
        import resource
        limit = int(limit_mb) * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def _error_reply(kind: str, err: BaseException, prefix: str = "") -> tuple:
    from .text import one_line
    return ("result", {"error_kind": kind, "error_msg": prefix + f"{type(err).__name__}: {one_line(err)}"})


def compile_object(func):
    """Codegen + verify + optimize + emit: ``func`` as ELF object bytes.

    The same steps as :func:`tensorir.runtime.compile_func` (default LLVM
    pipeline settings) without the JIT link, so the object can be made in one
    process and linked in another.

    Returns
    -------
    (bytes, bool)
        The object image and whether it runs parallel regions (on the thread pool).
    """
    from tensorir.runtime import compile_module
    _, obj, uses_openmp = compile_module(func)
    return obj, uses_openmp


def builder_main(conn, init: dict) -> None:
    """Builder loop: ``("build", func)`` -> ``("result", {"object", "uses_openmp", "compile_seconds"})``.

    A builder sends no ready message: jobs queue in its socket while it starts.
    """
    from tensorir.runtime.safety import AllocationError
    setup_error = None
    try:
        _setup_child(init)
        from tensorir.runtime import llvm as runtime
        runtime.target_machine()
    except BaseException as err:  # noqa: BLE001 - reported with every job, never raised in the parent
        setup_error = f"builder process failed to start: {type(err).__name__}: {err}"
    def build_one(payload):
        t0 = time.perf_counter()
        if setup_error:
            return ("result", {"error_kind": ErrorKind.COMPILE, "error_msg": setup_error})
        try:
            obj, omp = compile_object(payload)
            return ("result", {"object": obj, "uses_openmp": omp, "compile_seconds": time.perf_counter() - t0})
        except AllocationError as err:     # refused: its buffers cannot fit (tensorir.runtime.safety)
            return _error_reply("memory", err)
        except MemoryError as err:
            return _error_reply("memory", err, "out of memory while compiling: ")
        except BaseException as err:  # noqa: BLE001 - codegen/LLVM errors of any type are "compile"
            return _error_reply(ErrorKind.COMPILE, err)

    _serve(conn, build_one)


def _serve(conn, handle) -> None:
    """Answer ``(kind, payload)`` jobs with ``handle(payload)`` until "exit" or the parent goes away."""
    while True:
        try:
            kind, payload = conn.recv()
        except EOFError:
            return
        if kind == "exit":
            return
        conn.send(handle(payload))


class _Runner:
    """Runner state kept across candidates: inputs, reference, output buffers."""

    def __init__(self, init: dict):
        import numpy as np
        self.np = np
        self.cfg = init["config"]
        from .layout import placed, placed_empty
        self.placed = placed
        self.inputs = [placed(a) for a in init["inputs"]]     # (unpickled arrays start anywhere)
        self.reference = [np.asarray(r) for r in init["reference"]]
        self.out_names = init["output_names"]
        self.outputs = [placed_empty(r.shape, d) for r, d in zip(self.reference, init["output_dtypes"])]
        self.arrays = self.inputs + self.outputs
        self.ptrs = [ctypes.c_void_p(a.ctypes.data) for a in self.arrays]
        self.red_len = max(1, int(init["reduction_length"]))
        self.threads = int(init["threads"])
        # input indices that are constants (weights): evicted before each timed call when
        # flush_cache is "constants" (tensorir.runtime.cacheflush)
        self.constants = [int(i) for i in init.get("constants", ())]
        from tensorir.runtime import cacheflush, jit, llvm, safety
        llvm.target_machine()
        self.evict = cacheflush.evict
        self.cold = []
        self.runtime = jit
        self.safety = safety

    # ----------------------------------------------------------- correctness
    def check(self) -> str | None:
        """None if every output matches the reference, else the one-line reason."""
        return check_outputs(self.out_names, self.outputs, self.reference, self.cfg["rtol"], self.cfg["atol"],
                             self.red_len)

    # ---------------------------------------------------------------- timing
    def run(self, job: dict) -> dict:
        t_start = time.perf_counter()
        budget = job["budget_s"]
        func = job["func"]
        try:
            tracker, address = self.runtime.jit_link(job["object"], func.name, need_omp=job["uses_openmp"],
                                                     extra_symbols=self.safety.table_symbols(func.name))
        except BaseException as err:  # noqa: BLE001
            return _error_reply(ErrorKind.COMPILE, err, "JIT link failed: ")[1]
        link_s = time.perf_counter() - t_start
        extra = [self.placed(a) for a in job.get("extra_inputs") or ()]   # packed constants, after the inputs
        n = len(self.inputs)
        self.cold = self._cold_arrays(extra, job.get("packed_inputs") or ())
        ptrs = (*self.ptrs[:n], *(ctypes.c_void_p(a.ctypes.data) for a in extra), *self.ptrs[n:])
        # The kernel returns a status: nonzero (an allocation failed) raises from _measure.
        proto = ctypes.CFUNCTYPE(ctypes.c_int32, *([ctypes.c_void_p] * len(ptrs)), ctypes.c_int32)
        cfunc = proto(address)
        args = (*ptrs, self.threads)
        sites = self.safety.SiteTable(func.name, tracker.__getitem__)   # (reads the table now)
        try:
            result = self._measure(cfunc, args, budget, t_start, job.get("cutoff_s"), sites)
        finally:
            del cfunc, tracker  # frees the JIT code of this candidate
        result["link_seconds"] = link_s
        result["run_seconds"] = time.perf_counter() - t_start
        return result

    def _cold_arrays(self, extra: list, packed_inputs) -> list:
        """The arrays to evict before each timed call (MeasureConfig.flush_cache)."""
        mode = self.cfg["flush_cache"]
        if mode is True:
            return self.inputs + extra + self.outputs
        if mode == "constants":
            # a constant the kernel reads only through its packed copy is not evicted: it stays cold
            packed = set(packed_inputs)
            return [self.inputs[i] for i in self.constants if i not in packed] + extra
        return []

    def _measure(self, cfunc, args, budget: float, t_start: float, cutoff: float | None = None,
                 sites=None) -> dict:
        """Check and time one kernel.  A call that returns a nonzero status (a failed
        allocation) raises its error: a failed call must not count as a fast one."""
        cfg = self.cfg
        for out in self.outputs:
            out.fill(self.np.iinfo(out.dtype).min if out.dtype.kind in "iu" else self.np.nan)

        def failed(status):
            if sites is None:
                return RuntimeError(f"the kernel failed with status {status}")
            return sites.error(status)

        t0 = time.perf_counter()
        status = cfunc(*args)
        first = time.perf_counter() - t0
        if status:
            raise failed(status)
        if cfg["check"]:
            problem = self.check()
            if problem:
                return {"error_kind": ErrorKind.WRONG_ANSWER, "error_msg": problem}

        def out_of_time(runs_left: float, per_run: float):
            spent = time.perf_counter() - t_start
            if spent + runs_left * per_run <= budget:
                return None
            return {"error_kind": ErrorKind.TIMEOUT,
                    "error_msg": f"one run takes {per_run:.3g} s; {cfg['repeat']} repeats of the measurement "
                                 f"do not fit in its budget of {budget:.3g} s (spent {spent:.2f} s)"}

        per_run = first
        if cfg["number"]:
            number = int(cfg["number"])
        else:
            number, per_run = self._calibrate(cfunc, args, first, cfg["min_repeat_ms"] / 1000.0)
            if per_run is None:
                raise failed(number)
        # a candidate already slower than the cutoff is timed once (see the loop below)
        too_long = out_of_time((1 if cutoff is not None and per_run > cutoff else cfg["repeat"]) * number, per_run)
        if too_long:
            return too_long
        costs = []
        gc_was_enabled = gc.isenabled()
        gc.disable()
        try:
            for _ in range(cfg["repeat"]):
                status = 0
                t0 = time.perf_counter()
                if self.cold:
                    dt = 0.0
                    for _ in range(number):
                        self.evict(self.cold)
                        t1 = time.perf_counter()
                        status = cfunc(*args) or status
                        dt += time.perf_counter() - t1
                else:
                    for _ in range(number):
                        status = cfunc(*args) or status
                    dt = time.perf_counter() - t0
                wall = time.perf_counter() - t0
                if status:
                    raise failed(status)
                costs.append(dt / number)
                if len(costs) == 1 and cutoff is not None and costs[0] > cutoff:
                    break   # clearly slower than the best so far: one repeat is enough
                too_long = out_of_time(cfg["repeat"] - len(costs), wall)
                if too_long:
                    return too_long
        finally:
            if gc_was_enabled:
                gc.enable()
        return {"costs": costs, "number": number}

    @staticmethod
    def _calibrate(cfunc, args, first: float, min_repeat_s: float) -> tuple:
        """Calls per repeat so one repeat lasts at least ``min_repeat_s`` (timeit's autorange).

        ``(status, None)`` if a call returned a nonzero status.
        """
        if first >= min_repeat_s:
            return 1, first
        # The check run (cold) gives a first estimate; the loop corrects it.
        n = int(max(1, min(1 << 20, 0.25 * min_repeat_s / max(first, 1e-9))))
        while True:
            status = 0
            t0 = time.perf_counter()
            for _ in range(n):
                status = cfunc(*args) or status
            dt = time.perf_counter() - t0
            if status:
                return status, None
            if dt >= 0.2 * min_repeat_s or n >= 1 << 24:
                break
            n *= 10 if dt < 0.02 * min_repeat_s else 2
        per_run = dt / n
        return max(1, math.ceil(min_repeat_s / max(per_run, 1e-9))), per_run


def runner_main(conn, init: dict) -> None:
    """Runner loop: ``("run", job)`` -> ``("result", {...costs or error...})``."""
    try:
        _setup_child(init)
        runner = _Runner(init)
    except BaseException as err:  # noqa: BLE001 - reported to the parent
        conn.send(("error", f"{type(err).__name__}: {err}"))
        return
    conn.send(("ready", None))

    def run_one(payload):
        try:
            return ("result", runner.run(payload))
        except MemoryError as err:
            return _error_reply("memory", err)
        except BaseException as err:  # noqa: BLE001 - anything else is a runtime error of this candidate
            return _error_reply(ErrorKind.RUNTIME, err)

    _serve(conn, run_one)


def child_main(role: str, fd: int) -> None:
    """Entry point of a worker interpreter: read the init message, run the loop."""
    # Ctrl-C in a terminal reaches the whole process group: the parent handles
    # it (stops the workers, says how to resume); workers print nothing.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    conn = multiprocessing.connection.Connection(fd)
    try:
        init = conn.recv()
    except EOFError:
        return
    {"builder": builder_main, "runner": runner_main}[role](conn, init)
