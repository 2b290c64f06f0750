"""A team thread woken on its master's core moves off it before it takes work.

On the virtual machines this runs on, a libgomp worker that slept (idle for more than the
spin count of decision 052, e.g. between two calls a few milliseconds apart) is often woken
on the core of the thread that woke it, and the two then share one core for tens of
milliseconds while the other core idles: a 2-thread model ran at its 1-thread speed after
every pause. Binding every thread (``OMP_PROC_BIND``) avoids it but pins the caller's own
thread, and every thread it starts later, to one core. Instead each region's master records
its core and yields once, so that a worker woken behind it runs at once rather than after
the master's time slice; a worker that finds itself on the master's core sets its affinity
to its own mask without that core (the kernel migrates it there and then) and restores the
mask, so the thread is left unpinned. A worker whose mask holds no other core (a user's
binding) stays where it is. docs/decisions/075-workers-move-off-the-masters-core.md

This module emits it into regions that run on libgomp (the A/B settings of
``parallel.POOL``); tensortune's own pool does the same in its worker loop (``tt.spread``
in :mod:`tensorir.codegen.pool`), before the worker claims the region.
"""
from __future__ import annotations

from llvmlite import ir

from tensorir.codegen.types import I32, I64, PTR

# False: workers run where the scheduler woke them (the A/B of the decision note).
SPREAD_WORKERS = True
# cpu_set_t as glibc sizes it: 1024 CPUs in 16 words.
_WORDS = 16


def master_cpu(mod, builder: ir.IRBuilder):
    """The core the calling thread runs on (``sched_getcpu``), for :func:`spread_call`."""
    return builder.call(mod.declare("sched_getcpu", I32, []), [])


def spread_call(mod, builder: ir.IRBuilder, cpu) -> None:
    """Emit, where ``builder`` stands in a team thread's function (the region's trampoline), the
    master's yield and a worker's move off core ``cpu``; ``builder`` is left after it. Inline
    rather than a function of its own: every function costs a compiled candidate about a
    millisecond of code generation."""
    b, fn = builder, builder.function
    mask_ty = ir.ArrayType(I64, _WORDS)
    orig, mask = b.alloca(mask_ty), b.alloca(mask_ty)      # the trampoline's entry block: static slots
    orig.type = mask.type = PTR      # as FunctionGen.entry_alloca: no typed pointers in the IR
    master, yield_, worker, check, move, clear, apply, done = (
        fn.append_basic_block(f"spread.{n}")
        for n in ("master", "yield", "worker", "check", "move", "clear", "apply", "done"))
    tid = b.call(mod.declare("omp_get_thread_num", I32, []), [])
    b.cbranch(b.icmp_signed("==", tid, ir.Constant(I32, 0)), master, worker)

    b.position_at_end(master)
    team = b.call(mod.declare("omp_get_num_threads", I32, []), [])
    b.cbranch(b.icmp_signed(">", team, ir.Constant(I32, 1)), yield_, done)

    b.position_at_end(yield_)
    b.call(mod.declare("sched_yield", I32, []), [])
    b.branch(done)

    b.position_at_end(worker)
    in_range = b.and_(b.icmp_signed(">=", cpu, ir.Constant(I32, 0)),
                      b.icmp_signed("<", cpu, ir.Constant(I32, 64 * _WORDS)))
    b.cbranch(in_range, check, done)

    b.position_at_end(check)
    here = b.call(mod.declare("sched_getcpu", I32, []), [])
    b.cbranch(b.icmp_signed("==", here, cpu), move, done)

    b.position_at_end(move)
    size = ir.Constant(I64, 8 * _WORDS)
    getaff = mod.declare("sched_getaffinity", I32, [I32, I64, PTR])
    got = b.call(getaff, [ir.Constant(I32, 0), size, orig])
    b.cbranch(b.icmp_signed("==", got, ir.Constant(I32, 0)), clear, done)

    b.position_at_end(clear)        # mask = orig without the master's core, word by word
    word = b.lshr(cpu, ir.Constant(I32, 6))
    bit = b.shl(ir.Constant(I64, 1), b.zext(b.and_(cpu, ir.Constant(I32, 63)), I64))
    loop, after = fn.append_basic_block("spread.loop"), fn.append_basic_block("spread.cleared")
    b.branch(loop)
    b.position_at_end(loop)
    w, others = b.phi(I32), b.phi(I64)
    w.add_incoming(ir.Constant(I32, 0), clear)
    others.add_incoming(ir.Constant(I64, 0), clear)
    v = b.load(b.gep(orig, [ir.Constant(I32, 0), w], source_etype=mask_ty), typ=I64)
    v = b.and_(v, b.select(b.icmp_unsigned("==", w, word), b.xor(bit, ir.Constant(I64, -1)), ir.Constant(I64, -1)))
    b.store(v, b.gep(mask, [ir.Constant(I32, 0), w], source_etype=mask_ty))
    rest, nxt = b.or_(others, v), b.add(w, ir.Constant(I32, 1))
    w.add_incoming(nxt, loop)
    others.add_incoming(rest, loop)
    b.cbranch(b.icmp_unsigned("<", nxt, ir.Constant(I32, _WORDS)), loop, after)
    b.position_at_end(after)
    b.cbranch(b.icmp_unsigned("!=", rest, ir.Constant(I64, 0)), apply, done)

    b.position_at_end(apply)
    setaff = mod.declare("sched_setaffinity", I32, [I32, I64, PTR])
    b.call(setaff, [ir.Constant(I32, 0), size, mask])     # migrates this thread off the master's core
    b.call(setaff, [ir.Constant(I32, 0), size, orig])     # and leaves it as free as it was
    b.branch(done)

    b.position_at_end(done)
