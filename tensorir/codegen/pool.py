"""The thread pool parallel regions run on, in place of libgomp's ``GOMP_parallel``.

A region's caller posts the region to the pool's workers, runs it itself as thread 0,
and at the end takes back every post a worker has not claimed yet: it never waits for a
worker that has not started (onnxruntime's pool does the same). A libgomp team instead
waits at the region's end for every worker it woke; on the virtual machines this runs on,
waking a sleeping worker costs 35-100 us, which a region of a small model paid at every
call. Parallel loops hand out guided chunks from a shared counter, so the threads that
run take a missing worker's share; loops of one region wait for the previous loop's
iterations to be done (a count of finished iterations), not for every thread, so a worker
that claims late joins at the loop the others have reached.
docs/decisions/079-an-own-thread-pool-that-never-waits-for-a-late-worker.md

The pool is LLVM IR (no C compiler at run time): the JIT compiles it once per process; a
shared library or object file carries its own copy (``linkonce_odr``, hidden), so every
kernel of one library shares one pool. Entry points:

* ``tensortune_parallel_v1(fn, data, threads)``: run ``fn(data, tid, team)`` on a team of
  ``threads`` (<= 0: ``OMP_NUM_THREADS``, else every core the process may use);
* ``tensortune_done_v1(counter, n, extent)``: add ``n`` finished iterations;
* ``tensortune_wait_v1(counter, extent, status)``: wait until ``extent`` iterations are
  finished, or ``status`` (may be null) is non-zero (a thread failed).

A second caller that finds the pool busy (another thread of the process in a region) runs
its region alone; after ``fork`` the child starts new workers. x86-64 Linux only, as the rest
of the code generator: the futex system call is number 202 and the spin uses ``pause``.
"""
from __future__ import annotations

PARALLEL = "tensortune_parallel_v1"
DONE = "tensortune_done_v1"
WAIT = "tensortune_wait_v1"
SYMBOLS = (PARALLEL, DONE, WAIT)

# Pauses a caller waiting for a worker that claimed its post spins before it sleeps: about 8 us
# on Zen 4 (docs/decisions/052-openmp-threads-spin-briefly-then-sleep.md).
SPIN_COUNT = 300
# Pauses an idle worker spins before it sleeps (about 80 us on Zen 4: back-to-back calls of a small
# model find it awake), yielding its core every YIELD_EVERY of them (a power of two), so that beside
# other work it gives the core up. docs/decisions/080-idle-workers-spin-longer-and-yield.md
IDLE_SPIN_COUNT = 3000
YIELD_EVERY = 64
# The caller yields once after posting to a sleeping worker, so that the worker, if woken behind it
# on its core, runs (and moves off) at once rather than after the caller's time slice (decision 075).
YIELD_AFTER_POST = True
# Workers beside the caller: teams of up to 64 threads.
MAX_WORKERS = 63
# A thread waiting for a loop's iterations re-checks its region's failure status this often
# (a thread that failed never reports its chunk done).
WAIT_CHECK_NS = 1_000_000

# slot: state, tid, team, the worker sleeps, fn, data, the caller sleeps (waiting for it to be
# done), pad to 64 bytes (one cache line per worker). state: 0 idle, 1 posted, 2 claimed, 3 done.
# A waker makes the futex call only when the flag says someone sleeps (both sides store, then
# load, sequentially consistent: one of them sees the other).
_IR = r"""
%slot = type {{ i32, i32, i32, i32, ptr, ptr, i32, i32, [3 x i64] }}

@tt.lock = internal global i32 0, align 64
@tt.workers = internal global i32 0, align 64
@tt.default = internal global i32 0, align 4
@tt.hooked = internal global i32 0, align 4
@tt.poster = internal global i32 -1, align 4
@tt.slots = internal global [{max_workers} x %slot] zeroinitializer, align 64
@tt.timeout = internal constant {{ i64, i64 }} {{ i64 0, i64 {wait_ns} }}, align 8
@tt.omp = internal constant [16 x i8] c"OMP_NUM_THREADS\00", align 1

declare i64 @syscall(i64, ...)
declare i32 @pthread_create(ptr, ptr, ptr, ptr)
declare i32 @pthread_detach(i64)
declare i32 @{atfork}
declare ptr @getenv(ptr)
declare i64 @strtol(ptr, ptr, i32)
declare i32 @sched_getaffinity(i32, i64, ptr)
declare i32 @sched_setaffinity(i32, i64, ptr)
declare i32 @sched_getcpu()
declare i32 @sched_yield()
declare void @llvm.x86.sse2.pause()
declare i64 @llvm.ctpop.i64(i64)
declare void @llvm.memset.p0.i64(ptr, i8, i64, i1)

define internal void @tt.sleep(ptr %addr, i32 %seen, ptr %timeout) {{
  %v = zext i32 %seen to i64
  %r = call i64 (i64, ...) @syscall(i64 202, ptr %addr, i64 128, i64 %v, ptr %timeout)
  ret void
}}

define internal void @tt.wake(ptr %addr) {{
  %r = call i64 (i64, ...) @syscall(i64 202, ptr %addr, i64 129, i64 2147483647)
  ret void
}}

; Sleep on %addr while it holds %seen, with %flag raised for the waker.
define internal void @tt.sleep_flagged(ptr %addr, i32 %seen, ptr %flag) {{
entry:
  store atomic i32 1, ptr %flag seq_cst, align 4
  %now = load atomic i32, ptr %addr seq_cst, align 4
  %same = icmp eq i32 %now, %seen
  br i1 %same, label %sleep, label %out
sleep:
  call void @tt.sleep(ptr %addr, i32 %seen, ptr null)
  br label %out
out:
  store atomic i32 0, ptr %flag monotonic, align 4
  ret void
}}

; After a sequentially consistent store to %addr: wake its sleeper if %flag says there is one.
define internal i1 @tt.wake_flagged(ptr %addr, ptr %flag) {{
entry:
  %f = load atomic i32, ptr %flag seq_cst, align 4
  %sleeps = icmp ne i32 %f, 0
  br i1 %sleeps, label %wake, label %out
wake:
  call void @tt.wake(ptr %addr)
  br label %out
out:
  ret i1 %sleeps
}}

; Spin up to %limit pauses (yielding the core every {yield_every} of them if %yields), then sleep with
; %flag raised, until *%addr is %want; true if it slept.
define internal i1 @tt.await(ptr %addr, i32 %want, ptr %flag, i32 %limit, i1 %yields) {{
entry:
  br label %check
check:
  %spins = phi i32 [ 0, %entry ], [ %spins1, %spin ], [ %spins1, %yield ], [ %limit, %sleep ]
  %slept = phi i1 [ false, %entry ], [ %slept, %spin ], [ %slept, %yield ], [ true, %sleep ]
  %s = load atomic i32, ptr %addr seq_cst, align 4
  %hit = icmp eq i32 %s, %want
  br i1 %hit, label %out, label %wait
wait:
  %more = icmp ult i32 %spins, %limit
  br i1 %more, label %pause, label %sleep
pause:
  call void @llvm.x86.sse2.pause()
  %spins1 = add i32 %spins, 1
  %low = and i32 %spins1, {yield_mask}
  %tick = icmp eq i32 %low, 0
  %y = and i1 %tick, %yields
  br i1 %y, label %yield, label %spin
spin:
  br label %check
yield:
  %yr = call i32 @sched_yield()
  br label %check
sleep:
  call void @tt.sleep_flagged(ptr %addr, i32 %s, ptr %flag)
  br label %check
out:
  ret i1 %slept
}}

; A worker: wait until its slot is posted; claim it, run it, report it done.
define internal ptr @tt.worker(ptr %slot) {{
entry:
  %wflag = getelementptr inbounds %slot, ptr %slot, i32 0, i32 3
  %mflag = getelementptr inbounds %slot, ptr %slot, i32 0, i32 6
  br label %idle
idle:
  %slept = call i1 @tt.await(ptr %slot, i32 1, ptr %wflag, i32 {idle_spin}, i1 true)
  {spread_call}
  br label %claim
claim:
  %c = cmpxchg ptr %slot, i32 1, i32 2 seq_cst seq_cst
  %won = extractvalue {{ i32, i1 }} %c, 1
  br i1 %won, label %run, label %idle
run:
  %tidp = getelementptr inbounds %slot, ptr %slot, i32 0, i32 1
  %tid = load i32, ptr %tidp, align 4
  %teamp = getelementptr inbounds %slot, ptr %slot, i32 0, i32 2
  %team = load i32, ptr %teamp, align 4
  %fnp = getelementptr inbounds %slot, ptr %slot, i32 0, i32 4
  %fn = load ptr, ptr %fnp, align 8
  %datap = getelementptr inbounds %slot, ptr %slot, i32 0, i32 5
  %data = load ptr, ptr %datap, align 8
  call void %fn(ptr %data, i32 %tid, i32 %team)
  store atomic i32 3, ptr %slot seq_cst, align 4
  %w = call i1 @tt.wake_flagged(ptr %slot, ptr %mflag)
  br label %idle
}}

; A worker about to claim a post made from its own core (woken or spinning there) moves off that
; core before it claims (the kernel migrates it at once) and leaves its mask as it was; a worker
; whose mask holds no other core stays. docs/decisions/075-workers-move-off-the-masters-core.md
define internal void @tt.spread() {{
entry:
  %orig = alloca [16 x i64], align 8
  %mask = alloca [16 x i64], align 8
  %cpu = load atomic i32, ptr @tt.poster monotonic, align 4
  %here = call i32 @sched_getcpu()
  %same = icmp eq i32 %here, %cpu
  %valid = icmp ult i32 %cpu, 1024
  %move = and i1 %same, %valid
  br i1 %move, label %get, label %out
get:
  %rc = call i32 @sched_getaffinity(i32 0, i64 128, ptr %orig)
  %got = icmp eq i32 %rc, 0
  br i1 %got, label %clear, label %out
clear:
  %word = lshr i32 %cpu, 6
  %b = and i32 %cpu, 63
  %b64 = zext i32 %b to i64
  %bit = shl i64 1, %b64
  %nbit = xor i64 %bit, -1
  br label %loop
loop:
  %w = phi i32 [ 0, %clear ], [ %w1, %loop ]
  %any = phi i64 [ 0, %clear ], [ %any1, %loop ]
  %src = getelementptr inbounds [16 x i64], ptr %orig, i32 0, i32 %w
  %v = load i64, ptr %src, align 8
  %isw = icmp eq i32 %w, %word
  %m = select i1 %isw, i64 %nbit, i64 -1
  %v1 = and i64 %v, %m
  %dst = getelementptr inbounds [16 x i64], ptr %mask, i32 0, i32 %w
  store i64 %v1, ptr %dst, align 8
  %any1 = or i64 %any, %v1
  %w1 = add i32 %w, 1
  %fin = icmp eq i32 %w1, 16
  br i1 %fin, label %cleared, label %loop
cleared:
  %others = icmp ne i64 %any1, 0
  br i1 %others, label %apply, label %out
apply:
  %r1 = call i32 @sched_setaffinity(i32 0, i64 128, ptr %mask)
  %r2 = call i32 @sched_setaffinity(i32 0, i64 128, ptr %orig)
  br label %out
out:
  ret void
}}

; In a child process after fork: the parent's workers do not exist here.
define internal void @tt.forked() {{
  store i32 0, ptr @tt.workers, align 4
  store i32 0, ptr @tt.lock, align 4
  call void @llvm.memset.p0.i64(ptr @tt.slots, i8 0, i64 {slots_bytes}, i1 false)
  ret void
}}

; The team size asked for: threads > 0, else OMP_NUM_THREADS, else the cores this process may use.
define internal i32 @tt.team(i32 %threads) {{
entry:
  %given = icmp sgt i32 %threads, 0
  br i1 %given, label %clamp, label %default
default:
  %known = load i32, ptr @tt.default, align 4
  %has = icmp sgt i32 %known, 0
  br i1 %has, label %clamp, label %env
env:
  %e = call ptr @getenv(ptr @tt.omp)
  %none = icmp eq ptr %e, null
  br i1 %none, label %cores, label %parse
parse:
  %n = call i64 @strtol(ptr %e, ptr null, i32 10)
  %ok = icmp sgt i64 %n, 0
  %n32 = trunc i64 %n to i32
  %big = icmp sgt i64 %n, 4096
  %n1 = select i1 %big, i32 4096, i32 %n32
  br i1 %ok, label %store, label %cores
cores:
  %mask = alloca [16 x i64], align 8
  call void @llvm.memset.p0.i64(ptr %mask, i8 0, i64 128, i1 false)
  %rc = call i32 @sched_getaffinity(i32 0, i64 128, ptr %mask)
  br label %count
count:
  %i = phi i32 [ 0, %cores ], [ %i1, %count ]
  %acc = phi i64 [ 0, %cores ], [ %acc1, %count ]
  %wp = getelementptr inbounds [16 x i64], ptr %mask, i32 0, i32 %i
  %w = load i64, ptr %wp, align 8
  %pc = call i64 @llvm.ctpop.i64(i64 %w)
  %acc1 = add i64 %acc, %pc
  %i1 = add i32 %i, 1
  %fin = icmp eq i32 %i1, 16
  br i1 %fin, label %counted, label %count
counted:
  %got = icmp eq i32 %rc, 0
  %c32 = trunc i64 %acc1 to i32
  %pos = icmp sgt i32 %c32, 0
  %both = and i1 %got, %pos
  %c1 = select i1 %both, i32 %c32, i32 1
  br label %store
store:
  %d = phi i32 [ %n1, %parse ], [ %c1, %counted ]
  store i32 %d, ptr @tt.default, align 4
  br label %clamp
clamp:
  %t = phi i32 [ %threads, %entry ], [ %known, %default ], [ %d, %store ]
  %over = icmp sgt i32 %t, {max_team}
  %t1 = select i1 %over, i32 {max_team}, i32 %t
  ret i32 %t1
}}

; Start workers until there are want - 1 (the caller holds the lock); the team size got.
define internal i32 @tt.start(i32 %want) {{
entry:
  %tid = alloca i64, align 8
  %h = load i32, ptr @tt.hooked, align 4
  %first = icmp eq i32 %h, 0
  br i1 %first, label %hook, label %loop0
hook:
  %r = call i32 @{atfork_call}
  store i32 1, ptr @tt.hooked, align 4
  br label %loop0
loop0:
  %have0 = load i32, ptr @tt.workers, align 4
  %need = sub i32 %want, 1
  br label %loop
loop:
  %have = phi i32 [ %have0, %loop0 ], [ %have1, %made ]
  %enough = icmp sge i32 %have, %need
  br i1 %enough, label %done, label %make
make:
  %slot = getelementptr inbounds [{max_workers} x %slot], ptr @tt.slots, i32 0, i32 %have
  %rc = call i32 @pthread_create(ptr %tid, ptr null, ptr @tt.worker, ptr %slot)
  %failed = icmp ne i32 %rc, 0
  br i1 %failed, label %done, label %made
made:
  %t = load i64, ptr %tid, align 8
  %d = call i32 @pthread_detach(i64 %t)
  %have1 = add i32 %have, 1
  store i32 %have1, ptr @tt.workers, align 4
  br label %loop
done:
  %n = phi i32 [ %have, %loop ], [ %have, %make ]
  %team0 = add i32 %n, 1
  %less = icmp slt i32 %team0, %want
  %team = select i1 %less, i32 %team0, i32 %want
  ret i32 %team
}}

define {linkage} void @{parallel}(ptr %fn, ptr %data, i32 %threads) {{
entry:
  %want = call i32 @tt.team(i32 %threads)
  %multi = icmp sgt i32 %want, 1
  br i1 %multi, label %lock, label %alone
alone:
  call void %fn(ptr %data, i32 0, i32 1)
  ret void
lock:
  %l = cmpxchg ptr @tt.lock, i32 0, i32 1 acquire monotonic
  %got = extractvalue {{ i32, i1 }} %l, 1
  br i1 %got, label %start, label %alone
start:
  %team = call i32 @tt.start(i32 %want)
  %workers = sub i32 %team, 1
  {poster}
  br label %post
post:
  %i = phi i32 [ 0, %start ], [ %i1, %posted ]
  %woke = phi i1 [ false, %start ], [ %woke1, %posted ]
  %more = icmp slt i32 %i, %workers
  br i1 %more, label %post1, label %run
post1:
  %slot = getelementptr inbounds [{max_workers} x %slot], ptr @tt.slots, i32 0, i32 %i
  %tidp = getelementptr inbounds %slot, ptr %slot, i32 0, i32 1
  %i1 = add i32 %i, 1
  store i32 %i1, ptr %tidp, align 4
  %teamp = getelementptr inbounds %slot, ptr %slot, i32 0, i32 2
  store i32 %team, ptr %teamp, align 4
  %fnp = getelementptr inbounds %slot, ptr %slot, i32 0, i32 4
  store ptr %fn, ptr %fnp, align 8
  %datap = getelementptr inbounds %slot, ptr %slot, i32 0, i32 5
  store ptr %data, ptr %datap, align 8
  store atomic i32 1, ptr %slot seq_cst, align 4
  %wflag = getelementptr inbounds %slot, ptr %slot, i32 0, i32 3
  %w = call i1 @tt.wake_flagged(ptr %slot, ptr %wflag)
  %woke1 = or i1 %woke, %w
  br label %posted
posted:
  br label %post
run:
  {yield_}
  call void %fn(ptr %data, i32 0, i32 %team)
  br label %ran
ran:
  br label %join
join:
  %j = phi i32 [ 0, %ran ], [ %j1, %joined ]
  %left = icmp slt i32 %j, %workers
  br i1 %left, label %take, label %unlock
take:
  %jslot = getelementptr inbounds [{max_workers} x %slot], ptr @tt.slots, i32 0, i32 %j
  %c = cmpxchg ptr %jslot, i32 1, i32 0 seq_cst seq_cst
  %revoked = extractvalue {{ i32, i1 }} %c, 1
  br i1 %revoked, label %joined, label %await
await:
  %mflag = getelementptr inbounds %slot, ptr %jslot, i32 0, i32 6
  %x = call i1 @tt.await(ptr %jslot, i32 3, ptr %mflag, i32 {spin}, i1 false)
  br label %reset
reset:
  store atomic i32 0, ptr %jslot seq_cst, align 4
  br label %joined
joined:
  %j1 = add i32 %j, 1
  br label %join
unlock:
  store atomic i32 0, ptr @tt.lock release, align 4
  ret void
}}

define {linkage} void @{done}(ptr %counter, i32 %n, i32 %extent) {{
entry:
  %old = atomicrmw add ptr %counter, i32 %n seq_cst, align 4
  %new = add i32 %old, %n
  %last = icmp sge i32 %new, %extent
  br i1 %last, label %wake, label %out
wake:
  call void @tt.wake(ptr %counter)
  br label %out
out:
  ret void
}}

define {linkage} void @{wait}(ptr %counter, i32 %extent, ptr %status) {{
entry:
  %checks = icmp ne ptr %status, null
  br label %check
check:
  %spins = phi i32 [ 0, %entry ], [ %spins1, %spin ], [ {spin}, %sleep ]
  %v = load atomic i32, ptr %counter seq_cst, align 4
  %fin = icmp sge i32 %v, %extent
  br i1 %fin, label %out, label %failed
failed:
  br i1 %checks, label %status1, label %wait
status1:
  %st = load atomic i32, ptr %status monotonic, align 4
  %bad = icmp ne i32 %st, 0
  br i1 %bad, label %out, label %wait
wait:
  %again = icmp ult i32 %spins, {spin}
  br i1 %again, label %spin, label %sleep
spin:
  call void @llvm.x86.sse2.pause()
  %spins1 = add i32 %spins, 1
  br label %check
sleep:
  call void @tt.sleep(ptr %counter, i32 %v, ptr @tt.timeout)
  br label %check
out:
  ret void
}}
"""


def pool_ir(shared: bool, spread: bool = True, yield_after_post: bool | None = None) -> str:
    """The pool as LLVM IR text. ``shared``: for an object or shared library (entry points
    ``linkonce_odr hidden``: one pool per library however many objects carry it); else for
    the JIT (external entry points, one pool per process). ``spread``: a worker woken on its
    poster's core moves off it (decision 075); ``yield_after_post`` (default
    :data:`YIELD_AFTER_POST`): the poster then yields once, if it woke a sleeping worker."""
    if yield_after_post is None:
        yield_after_post = YIELD_AFTER_POST
    if YIELD_EVERY < 1 or YIELD_EVERY & (YIELD_EVERY - 1):
        raise ValueError(f"pool.YIELD_EVERY must be a power of two, got {YIELD_EVERY}")
    # pthread_atfork ties the handler to the library (glibc unregisters it at dlclose); the
    # JIT cannot link it (libc_nonshared.a), so it registers through glibc's exported name.
    atfork = (("pthread_atfork(ptr, ptr, ptr)", "pthread_atfork(ptr null, ptr null, ptr @tt.forked)") if shared else
              ("__register_atfork(ptr, ptr, ptr, ptr)", "__register_atfork(ptr null, ptr null, ptr @tt.forked, ptr null)"))
    return _IR.format(linkage="linkonce_odr hidden" if shared else "", parallel=PARALLEL, done=DONE,
                      atfork=atfork[0], atfork_call=atfork[1],
                      spread_call="call void @tt.spread()" if spread else "",
                      poster=("%cpu = call i32 @sched_getcpu()\n  store atomic i32 %cpu, ptr @tt.poster monotonic, align 4"
                              if spread else ""),
                      yield_=("br i1 %woke, label %yield1, label %work\n"
                              "yield1:\n  %y = call i32 @sched_yield()\n  br label %work\nwork:" if spread and yield_after_post else ""),
                      wait=WAIT, spin=SPIN_COUNT, idle_spin=IDLE_SPIN_COUNT,
                      yield_every=YIELD_EVERY, yield_mask=YIELD_EVERY - 1, max_workers=MAX_WORKERS, max_team=MAX_WORKERS + 1,
                      wait_ns=WAIT_CHECK_NS, slots_bytes=64 * MAX_WORKERS)
