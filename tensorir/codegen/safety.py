"""Run-time failures of generated code: heap allocations that fail and, in checked
builds, loads and stores out of bounds.  A mixin of
:class:`~tensorir.codegen.function.FunctionGen`.

The kernel returns an i32 status: 0, or the 1-based number of the *site* that
failed.  Sites are listed, in order, in a JSON string the module exports as
``<name>.tensortune_sites`` (``{"checked": bool, "sites": [...]}``; an
allocation site is ``{"kind": "alloc", "buffer", "scope", "bytes"}``, an
access site ``{"kind": "load" | "store", "buffer", "shape"}``;
allocation sites also give ``"shape"`` and ``"dtype"``).  A checked
kernel also writes the failing access to the exported ``i64`` array
``<name>.tensortune_oob``: ``[site, index 0, index 1, ...]`` (first failure
wins; at most :data:`OOB_SLOTS` - 1 indices).

On a failure the code frees every heap buffer it allocated and returns the
status.  Inside a parallel region (an outlined worker run by every thread of
the team) the failing thread frees its own buffers, stores the status in a
flag the caller passed through the closure and skips the rest of its block;
threads skip the region's later loops once a failure is flagged (they still
meet at every barrier), and the caller returns the flagged status after the
region.

Default builds pay one compare and a branch per heap allocation (and one
per parallel region holding one); nothing per load or store.
"""
from __future__ import annotations

import json

from llvmlite import ir

from tensorir.codegen.types import I1, I32, I64, PTR, VOID
from tensorir.tir.ir import Allocate, Buffer, Scope, walk_stmts
from tensorir.tir.transform.promote import LOCAL_STACK_LIMIT

ALLOC_ALIGN = 64
OOB_SLOTS = 32          # site + up to 31 indices of the failing access
_COLD = [1, 1 << 20]    # branch weights: (fail, ok)


def sites_symbol(name: str) -> str:
    """The exported symbol holding the kernel's site table (JSON, NUL-terminated)."""
    return f"{name}.tensortune_sites"


def oob_symbol(name: str) -> str:
    """The exported ``i64[OOB_SLOTS]`` a checked kernel writes its failing access to."""
    return f"{name}.tensortune_oob"


def is_heap(buf: Buffer) -> bool:
    """Whether codegen allocates ``buf`` on the heap (GLOBAL, or LOCAL beyond the stack limit)."""
    return buf.scope is Scope.GLOBAL or max(buf.nbytes, 1) > LOCAL_STACK_LIMIT


def may_fail(stmt, checked: bool) -> bool:
    """Whether code for ``stmt`` can report a failure (a heap allocation, or any access when checked)."""
    return checked or any(isinstance(s, Allocate) and is_heap(s.buffer) for s in walk_stmts(stmt))


def site(mod, desc: dict) -> int:
    """The status number of site ``desc`` (equal descriptions share one)."""
    key = json.dumps(desc, sort_keys=True)
    if key not in mod.sites:
        mod.sites[key] = len(mod.sites) + 1
    return mod.sites[key]


def emit_tables(mod) -> None:
    """Define the exported site table and failing-access record of ``mod``."""
    descs = [json.loads(k) for k in sorted(mod.sites, key=mod.sites.get)]
    text = json.dumps({"checked": bool(mod.checked), "sites": descs}).encode() + b"\0"
    arr = ir.ArrayType(ir.IntType(8), len(text))
    table = ir.GlobalVariable(mod.module, arr, sites_symbol(mod.name))
    table.global_constant = True
    table.initializer = ir.Constant(arr, bytearray(text))
    oob_record(mod)


def oob_record(mod) -> ir.GlobalVariable:
    g = mod.module.globals.get(oob_symbol(mod.name))
    if g is None:
        ty = ir.ArrayType(I64, OOB_SLOTS)
        g = ir.GlobalVariable(mod.module, ty, oob_symbol(mod.name))
        g.initializer = ir.Constant(ty, None)
        g.align = 8
        g.type = PTR          # opaque, as the code generator's other pointers
    return g


def record_function(mod, ndims: int) -> ir.Function:
    """``void @<name>.oob_record<ndims>(i64 site, i64 index...)``: the first call of a
    kernel run writes the failure record (cold code shared by every check)."""
    name = f"{mod.name}.oob_record{ndims}"
    fn = mod.module.globals.get(name)
    if fn is not None:
        return fn
    fn = ir.Function(mod.module, ir.FunctionType(VOID, [I64] * (ndims + 1)), name)
    fn.linkage = "internal"
    for a in ("nounwind", "cold", "noinline"):
        fn.attributes.add(a)
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    rec = oob_record(mod)

    def slot(i):
        return b.gep(rec, [ir.Constant(I32, 0), ir.Constant(I32, i)], inbounds=True,
                     source_etype=ir.ArrayType(I64, OOB_SLOTS))
    res = b.cmpxchg(slot(0), ir.Constant(I64, 0), fn.args[0], "monotonic", "monotonic")
    write, done = fn.append_basic_block("write"), fn.append_basic_block("done")
    b.cbranch(b.extract_value(res, 1), write, done)
    b.position_at_end(write)
    for d, v in enumerate(fn.args[1:]):
        b.store(v, slot(d + 1))
    b.branch(done)
    b.position_at_end(done)
    b.ret_void()
    return fn


class Safety:
    """Allocation checks, failure paths and (checked builds) bounds checks.

    Uses ``heap_live`` (heap pointers of the enclosing Allocates, outermost
    first), ``status_flag`` (a worker's pointer to its region's status) and
    ``abort_block`` (where a worker's failing thread resumes).
    """

    # -------------------------------------------------------- failure paths
    def guard(self, bad, status, record=None) -> None:
        """If ``bad`` (i1): run ``record()`` then fail with ``status``; continue on the ok path."""
        fail_bb, ok_bb = self.block("fail"), self.block("ok")
        self.b.cbranch(bad, fail_bb, ok_bb).set_weights(_COLD)
        self.b.position_at_end(fail_bb)
        if record is not None:
            record()
        self.fail(status)
        self.b.position_at_end(ok_bb)

    def fail(self, status) -> None:
        """Free the live heap buffers of this function and report ``status`` (i32); terminates the block."""
        if isinstance(status, int):
            status = ir.Constant(I32, status)
        free = self.mod.declare("free", VOID, [PTR])
        for ptr in reversed(self.heap_live):
            self.b.call(free, [ptr])
        if self.in_parallel:
            self.b.cmpxchg(self.status_flag, ir.Constant(I32, 0), status, "monotonic", "monotonic")
            self.b.branch(self.abort_block)
        else:
            self.b.ret(status)

    def heap_alloc(self, buf: Buffer):
        """``aligned_alloc`` for ``buf``, failing with its site when it returns NULL."""
        nbytes = max(buf.nbytes, 1)
        size = -(-nbytes // ALLOC_ALIGN) * ALLOC_ALIGN   # aligned_alloc wants a multiple
        alloc = self.mod.declare("aligned_alloc", PTR, [I64, I64])
        ptr = self.b.call(alloc, [ir.Constant(I64, ALLOC_ALIGN), ir.Constant(I64, size)])
        k = site(self.mod, {"kind": "alloc", "buffer": buf.name, "scope": buf.scope.value, "bytes": nbytes,
                            "shape": list(buf.shape), "dtype": buf.dtype})
        self.guard(self.b.icmp_unsigned("==", ptr, ir.Constant(PTR, None)), k)
        return ptr

    # -------------------------------------------------------- parallel regions
    def region_status(self, loops):
        """An i32 status slot for a parallel region that may fail (else None), reset to 0."""
        if not any(may_fail(s.body, self.mod.checked) for s in loops):
            return None
        flag = self.entry_alloca(I32, 4)
        self.b.store(ir.Constant(I32, 0), flag)
        return flag

    def region_done(self, flag) -> None:
        """After the region: fail with its status if a thread flagged one."""
        if flag is not None:
            status = self.b.load(flag, typ=I32)
            self.guard(self.b.icmp_unsigned("!=", status, ir.Constant(I32, 0)), status)

    def begin_partition(self, n: int):
        """Worker, before loop ``n`` of a region: where a failing thread resumes (skip
        the loop if an earlier one failed).  Returns the block to close with :meth:`end_partition`."""
        if self.status_flag is None:
            return None
        after = self.block(f"part{n}.done")
        if n:
            status = self.b.load_atomic(self.status_flag, "monotonic", 4, typ=I32)
            run = self.block(f"part{n}.run")
            self.b.cbranch(self.b.icmp_unsigned("!=", status, ir.Constant(I32, 0)), after, run)
            self.b.position_at_end(run)
        self.abort_block = after
        return after

    def end_partition(self, after) -> None:
        if after is not None:
            self.b.branch(after)
            self.b.position_at_end(after)

    # -------------------------------------------------------- checked builds
    def reset_oob(self) -> None:
        if self.mod.checked:
            self.b.store(ir.Constant(I64, 0), self._oob_slot(0))

    def _oob_slot(self, i: int):
        rec = oob_record(self.mod)
        return self.b.gep(rec, [ir.Constant(I32, 0), ir.Constant(I32, i)], inbounds=True,
                          source_etype=ir.ArrayType(I64, OOB_SLOTS))

    def check_access(self, buf: Buffer, indices, kind: str) -> None:
        """Checked builds: fail unless every index of ``buf[indices]`` is within its extent.

        Vector indices are checked lane by lane, only in the lanes the current
        mask enables; a scalar access under a mask when any lane is enabled.
        """
        if not self.mod.checked:
            return
        vals = [self.expr(i) for i in indices]
        bad = None
        for v, extent in zip(vals, buf.shape):
            if isinstance(v, ir.Constant) and not isinstance(v.type, ir.VectorType):
                if 0 <= v.constant < extent:
                    continue
                out = ir.Constant(I1, 1)
            else:
                out = self.b.icmp_unsigned(">=", v, self.const_like(v, extent, I32))
            bad = out if bad is None else self.b.or_(*self.unify(bad, out))
        if bad is None:
            return
        mask = self.vec.mask if self.vec is not None else None
        vector = isinstance(bad.type, ir.VectorType)
        if vector:
            if mask is not None:
                bad = self.b.and_(bad, mask)
            lanes = bad.type.count
            any_bad = self.call_intrinsic(f"llvm.vector.reduce.or.v{lanes}i1", I1, [bad])
        else:
            any_bad = bad
            if mask is not None:
                lanes = mask.type.count
                any_on = self.call_intrinsic(f"llvm.vector.reduce.or.v{lanes}i1", I1, [mask])
                any_bad = self.b.and_(bad, any_on)
        k = site(self.mod, {"kind": kind, "buffer": buf.name, "shape": list(buf.shape)})

        def record():
            lane = None
            if vector:
                bits = self.b.bitcast(bad, ir.IntType(lanes))
                lane = self.call_intrinsic(f"llvm.cttz.i{lanes}", bits.type, [bits, ir.Constant(I1, 1)])
            args = [ir.Constant(I64, k)]
            for v in vals[:OOB_SLOTS - 1]:
                if isinstance(v.type, ir.VectorType):
                    v = self.b.extract_element(v, lane)
                args.append(self.b.sext(v, I64))
            self.b.call(record_function(self.mod, len(args) - 1), args)

        self.guard(any_bad, k, record)
