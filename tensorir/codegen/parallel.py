"""Parallel loops: outlined into one worker per run of consecutive parallel loops,
run on tensortune's thread pool (:mod:`tensorir.codegen.pool`), each loop's iterations
handed out in shrinking chunks from a shared counter (guided); a loop starts once the
previous loop's iterations are done.  A mixin of :class:`~tensorir.codegen.function.FunctionGen`.

Guided rather than static blocks: a thread that starts late (woken from sleep, or
sharing its core with another process) no longer holds the others up with a fixed
half of the work; the ones already running take its chunks
(docs/decisions/042-parallel-loops-hand-out-guided-chunks.md).

A run of parallel loops whose work is below :data:`MIN_REGION_WORK` stores runs
serially instead: starting a thread team costs microseconds, so a parallel loop
nested in a long serial loop would otherwise spend hours in fork/join
(docs/decisions/021-small-parallel-regions-run-serially.md).
"""
from __future__ import annotations

from llvmlite import ir

from tensorir.te.expr import Var, children
from tensorir.tir.ir import Allocate, For, IfThenElse, Load, Prefetch, Seq, Store, walk_stmts
from tensorir.codegen import pool, spread
from tensorir.codegen.types import I32, PTR, VOID

# Stores one thread-team start must cover.  A team start costs ~2-20 us; at
# 1/4 ns or more per store, 2^14 stores bound the fork/join overhead by about
# the work itself however the loops are nested (see the decision note).
MIN_REGION_WORK = 1 << 14
# Stores a chunk of a guided loop covers at least: the atomic grab that hands it out costs
# tens of nanoseconds when the threads contend for the counter.
MIN_CHUNK_WORK = 1 << 8
# False: the static balanced blocks of decision 020 (kept for benchmarks/bench_parallel_schedule.py).
GUIDED = True
# Guided regions run on tensortune's own pool (pool.py); False: on libgomp (GOMP_parallel), the
# A/B of docs/decisions/079-an-own-thread-pool-that-never-waits-for-a-late-worker.md. Static
# blocks (GUIDED False) need every thread to run and stay on libgomp.
POOL = True


def work(stmt) -> int:
    """Stores ``stmt`` executes (both branches of a condition counted: an upper bound)."""
    if isinstance(stmt, Store):
        return 1
    if isinstance(stmt, For):
        return stmt.extent * work(stmt.body)
    if isinstance(stmt, Seq):
        return sum(map(work, stmt.stmts))
    if isinstance(stmt, IfThenElse):
        return work(stmt.then) + (work(stmt.otherwise) if stmt.otherwise is not None else 0)
    if isinstance(stmt, Allocate):
        return work(stmt.body)
    return 0


def free_names(stmt) -> tuple:
    """(variable names, buffers) referenced anywhere under ``stmt``."""
    names, bufs = set(), set()
    for s in walk_stmts(stmt):
        stack = []
        if isinstance(s, Store):
            bufs.add(s.buffer)
            stack = [*s.indices, s.value]
        elif isinstance(s, Prefetch):
            bufs.add(s.buffer)
            stack = list(s.indices)
        elif isinstance(s, IfThenElse):
            stack = [s.cond]
        while stack:
            n = stack.pop()
            if isinstance(n, Var):
                names.add(n.name)
            elif isinstance(n, Load):
                bufs.add(n.buffer)
            stack.extend(children(n))
    return names, bufs


def _field(builder, ptr, struct_ty, i: int):
    return builder.gep(ptr, [ir.Constant(I32, 0), ir.Constant(I32, i)], inbounds=True,
                       source_etype=struct_ty)


class ParallelRegions:
    def parallel_or_serial(self, loops: list) -> None:
        """Run parallel ``loops`` on the thread team, or serially here if their work is small."""
        if sum(map(work, loops)) >= MIN_REGION_WORK:
            self.parallel(loops)
            return
        for s in loops:
            self.serial_loop(s.var.name, ir.Constant(I32, 0), ir.Constant(I32, s.extent), s.body,
                             known_nonempty=True)

    def parallel(self, loops: list) -> None:
        """Outline parallel ``loops`` (consecutive statements) into one worker function
        and run it on the thread pool (libgomp's team for the A/B settings), the loops apart.

        One region instead of one per loop saves a fork/join per call and a
        worker and trampoline function per loop (about 1.5 ms of machine code
        generation each; docs/decisions/020-one-openmp-region-per-kernel.md).
        """
        names, used = set(), set()
        for s in loops:
            n, u = free_names(s.body)
            names |= n - {s.var.name}
            used |= u
        bufs = [b for b in self.bufs if b in used]
        bound = {n: self.vars[n] for n in sorted(names & self.vars.keys())}
        consts = {n: v for n, v in bound.items() if isinstance(v, ir.Constant)}
        var_names = [n for n in bound if n not in consts]
        types = [PTR] * len(bufs) + [I32] * len(var_names)
        values = [self.bufs[b] for b in bufs] + [bound[n] for n in var_names]
        flag = self.region_status(loops)     # where a failing thread reports (None: cannot fail)
        if flag is not None:
            types, values = types + [PTR], values + [flag]
        counters, dones = [], []
        if GUIDED:                           # each loop's next unclaimed iteration, reset per call
            counters = [self.entry_alloca(I32, 64) for _ in loops]
            for c in counters:
                self.b.store(ir.Constant(I32, 0), c)
            types, values = types + [PTR] * len(loops), values + counters
        pooled = POOL and GUIDED
        if pooled:                           # iterations finished per loop but the last (the join covers it)
            dones = [self.entry_alloca(I32, 64) for _ in loops[:-1]]
            for c in dones:
                self.b.store(ir.Constant(I32, 0), c)
            types, values = types + [PTR] * len(dones), values + dones

        # The worker's noalias pointer arguments keep the params' aliasing facts;
        # noinline because inlining it into the trampoline only costs compile time.
        name = self.mod.outlined_name()
        worker = self.mod.internal_function(name + ".worker", types + ([I32] if pooled else []), "noinline")
        wg = type(self)(self.mod, worker, in_parallel=True)
        for arg, b in zip(worker.args, bufs):
            arg.add_attribute("noalias")
            wg.bufs[b] = arg
        wg.vars.update(zip(var_names, worker.args[len(bufs):]))
        wg.vars.update(consts)
        first = len(types) - len(dones) - len(counters)        # the counters' first argument
        if flag is not None:
            wg.status_flag = worker.args[first - 1]
        wg.emit_partitioned(loops, worker.args[first:first + len(counters)] if counters else None,
                            worker.args[first + len(counters):len(types)], worker.args[-1] if pooled else None)

        # The pool (GOMP_parallel) runs void(ptr data, i32 tid, i32 team) (void(ptr data)) on every
        # thread: unpack the closure (and, last, the master's core, which a worker woken on it
        # moves off: spread.py).
        spreads = spread.SPREAD_WORKERS and not pooled       # the pool moves its own workers (pool.py)
        closure_ty = ir.LiteralStructType(types + ([I32] if spreads else []))
        # The trampoline is cold glue: optnone spares it the optimizer and
        # instruction selection proper (about a millisecond per function).
        tramp = self.mod.internal_function(name, [PTR] + ([I32, I32] if pooled else []), "noinline", "optnone")
        tb = ir.IRBuilder(tramp.append_basic_block("entry"))
        if spreads:
            spread.spread_call(self.mod, tb, tb.load(_field(tb, tramp.args[0], closure_ty, len(types)), typ=I32))
        tb.call(worker, [tb.load(_field(tb, tramp.args[0], closure_ty, i), typ=t)
                         for i, t in enumerate(types)] + ([tramp.args[2]] if pooled else []))
        tb.ret_void()
        closure = self.entry_alloca(closure_ty, 8)
        for i, v in enumerate(values):
            self.b.store(v, _field(self.b, closure, closure_ty, i))
        if spreads:
            self.b.store(spread.master_cpu(self.mod, self.b), _field(self.b, closure, closure_ty, len(types)))
        positive = self.b.icmp_signed(">", self.num_threads, ir.Constant(I32, 0))
        nthreads = self.b.select(positive, self.num_threads, ir.Constant(I32, 0))   # 0: default
        if pooled:
            self.b.call(self.mod.declare(pool.PARALLEL, VOID, [PTR, PTR, I32]), [tramp, closure, nthreads])
        else:
            gomp = self.mod.declare("GOMP_parallel", VOID, [PTR, PTR, I32, I32])
            self.b.call(gomp, [tramp, closure, nthreads, ir.Constant(I32, 0)])
        self.region_done(flag)

    def emit_partitioned(self, loops: list, counters=None, dones=(), team=None) -> None:
        """Worker body: for each loop, guided chunks claimed from its counter (``counters``:
        one pointer per loop; None: this thread's static block of ``range(extent)``). Between
        loops, on the pool (``team``: the team size argument), a thread waits until the
        previous loop's iterations are done (``dones``: one finished-iterations counter per
        loop but the last); on libgomp all threads meet at a barrier."""
        b = self.b
        if team is None:
            tid = b.call(self.mod.declare("omp_get_thread_num", I32, []), [])
            nt = b.call(self.mod.declare("omp_get_num_threads", I32, []), [])
        else:
            nt = team
        for n, s in enumerate(loops):
            if n and team is not None:
                flag = self.status_flag if self.status_flag is not None else ir.Constant(PTR, None)
                wait = self.mod.declare(pool.WAIT, VOID, [PTR, I32, PTR])
                self.b.call(wait, [dones[n - 1], ir.Constant(I32, loops[n - 1].extent), flag])
            elif n:
                self.b.call(self.mod.declare("GOMP_barrier", VOID, []), [])
            after = self.begin_partition(n)     # a failing thread resumes there (every thread meets every barrier)
            if counters is not None:
                self.guided_loop(s, counters[n], nt, dones[n] if team is not None and n < len(dones) else None)
                self.end_partition(after)
                continue
            b = self.b
            # Balanced blocks: the first extent % nt threads take one extra iteration.
            extent = ir.Constant(I32, s.extent)
            q, r = b.udiv(extent, nt), b.urem(extent, nt)
            extra = b.icmp_unsigned("<", tid, r)
            start = b.add(b.mul(tid, q), b.select(extra, tid, r))
            end = b.add(b.add(start, q), b.zext(extra, I32))
            self.serial_loop(s.var.name, start, end, s.body)
            self.end_partition(after)
        self.b.ret_void()

    def guided_loop(self, s, counter, nt, finished=None) -> None:
        """``s`` over chunks claimed from ``counter`` until none is left: each chunk is the
        unclaimed iterations / (2 x threads), at least enough for ``MIN_CHUNK_WORK`` stores, so
        chunks shrink towards the end and the threads finish together (OpenMP's guided schedule).
        ``finished``: the loop's finished-iterations counter, to which the thread adds what it ran
        once it finds no chunk left (one atomic per thread, after all its stores)."""
        b = self.b
        extent = ir.Constant(I32, s.extent)
        least = ir.Constant(I32, max(1, MIN_CHUNK_WORK // max(1, work(s.body))))
        pre = b.block
        grab, claim, run, done = (self.block(f"{s.var.name}.{k}") for k in ("grab", "claim", "run", "done"))
        first = b.load_atomic(counter, "monotonic", 4, typ=I32)
        b.branch(grab)
        b.position_at_end(grab)
        cur, ran = b.phi(I32), b.phi(I32)
        cur.add_incoming(first, pre)
        ran.add_incoming(ir.Constant(I32, 0), pre)
        b.cbranch(b.icmp_signed("<", cur, extent), claim, done)
        b.position_at_end(claim)
        share = b.udiv(b.sub(extent, cur), b.shl(nt, ir.Constant(I32, 1)))
        chunk = b.select(b.icmp_unsigned(">", share, least), share, least)
        end = b.add(cur, chunk)
        end = b.select(b.icmp_signed("<", end, extent), end, extent)
        res = b.cmpxchg(counter, cur, end, "monotonic", "monotonic")
        seen, won = b.extract_value(res, 0), b.extract_value(res, 1)
        cur.add_incoming(seen, claim)                 # lost the race: retry from what the winner left
        ran.add_incoming(ran, claim)
        b.cbranch(won, run, grab)
        b.position_at_end(run)
        self.serial_loop(s.var.name, cur, end, s.body, known_nonempty=True)
        b = self.b
        ran.add_incoming(b.add(ran, b.sub(end, cur)), b.block)
        again = b.load_atomic(counter, "monotonic", 4, typ=I32)
        cur.add_incoming(again, b.block)
        b.branch(grab)
        b.position_at_end(done)
        if finished is not None:
            report, after = self.block(f"{s.var.name}.report"), self.block(f"{s.var.name}.reported")
            b.cbranch(b.icmp_signed(">", ran, ir.Constant(I32, 0)), report, after)
            b.position_at_end(report)
            b.call(self.mod.declare(pool.DONE, VOID, [PTR, I32, I32]), [finished, ran, extent])
            b.branch(after)
            b.position_at_end(after)
