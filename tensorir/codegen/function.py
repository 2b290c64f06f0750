"""Statements and expressions of one LLVM function (:class:`FunctionGen`).

See :mod:`tensorir.codegen.module` for how loop kinds map to LLVM.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from llvmlite import ir

from tensorir.te.expr import (COMPARE_OPS, FLOAT_DTYPES, Binary, BinOp, Cast, Const, Select, Unary, UnOp,
                   Var)
from tensorir.tir.ir import Allocate, For, ForKind, IfThenElse, Load, Prefetch, Scope, Seq, Store, is_simd_loop
from tensorir.codegen.types import (ITEMSIZE, F32, FP_FLAGS, I1, I32, I64, LLTYPE, PTR, VOID, CodegenError,
                         is_scalar_const, splat, scoped, type_suffix)
from tensorir.codegen.address import Addressing
from tensorir.codegen.simd_math import vector_exp, vector_log, vector_tanh
from tensorir.codegen.vector import VectorContext
from tensorir.codegen.parallel import ParallelRegions
from tensorir.codegen.safety import ALLOC_ALIGN, Safety, is_heap

if TYPE_CHECKING:
    from tensorir.codegen.module import ModuleGen


_ICMP = {BinOp.LT: "<", BinOp.LE: "<=", BinOp.GT: ">", BinOp.GE: ">=", BinOp.EQ: "==", BinOp.NE: "!="}
_FLOAT_BINOPS = {BinOp.ADD: "fadd", BinOp.SUB: "fsub", BinOp.MUL: "fmul", BinOp.DIV: "fdiv"}
_INT_BINOPS = {BinOp.ADD: "add", BinOp.SUB: "sub", BinOp.MUL: "mul"}
_FLOAT_INTRINSIC = {UnOp.EXP: "exp", UnOp.LOG: "log", UnOp.SQRT: "sqrt", UnOp.TANH: "tanh"}

class _Poison(ir.Constant):
    """``poison`` of any type (llvmlite spells vector undef element by element)."""

    def __init__(self, typ):
        super().__init__(typ, None)

    def _get_reference(self):
        return "poison"

def _builder_before_terminator(block) -> ir.IRBuilder:
    builder = ir.IRBuilder(block)
    builder.position_before(block.terminator)
    return builder

def ident(name: str) -> str:
    return "".join(c if c.isalnum() or c == "_" else "_" for c in name) or "arg"

# ---------------------------------------------------------------- small IR queries

def is_nonnegative(e) -> bool:
    """Conservative proof that an int expression is >= 0 (loop vars are)."""
    if isinstance(e, Const):
        return e.value >= 0
    if isinstance(e, Var):
        return True
    if isinstance(e, Binary):
        if e.op in (BinOp.ADD, BinOp.MUL, BinOp.MIN, BinOp.MAX):
            return is_nonnegative(e.a) and is_nonnegative(e.b)
        if e.op in (BinOp.FLOORDIV, BinOp.MOD):
            return isinstance(e.b, Const) and e.b.value > 0 and (
                e.op is BinOp.MOD or is_nonnegative(e.a))
    return False




# ---------------------------------------------------------------- function generation

class FunctionGen(Addressing, ParallelRegions, Safety):
    """Emits statements and expressions into one LLVM function.

    ``vars`` maps loop-variable names to i32 values (constants when unrolled);
    ``bufs`` maps buffers to their base pointers.  When ``vec`` is set (inside a
    VECTORIZED loop), expressions may evaluate to vectors and memory accesses go
    through :class:`tensorir.codegen.vector.VectorContext`.
    """

    def __init__(self, mod: ModuleGen, fn: ir.Function, in_parallel: bool):
        self.mod = mod
        self.fn = fn
        self.in_parallel = in_parallel
        self.entry = fn.append_basic_block("entry")          # allocas only
        prologue = fn.append_basic_block("prologue")         # hoisted loop-invariant math
        body = fn.append_basic_block("body")
        ir.IRBuilder(self.entry).branch(prologue)
        ir.IRBuilder(prologue).branch(body)
        self.b = ir.IRBuilder(body)
        self.vars: dict = {}
        self.bufs: dict = {}
        self.vec = None
        self.num_threads = None
        self.running = None       # (buffer, indices) of the store being generated: see store()
        # Pure (load-free) index math is hoisted and shared: each loop keeps an
        # anchor in its header, and a value is emitted once, at the anchor of
        # the innermost loop binding one of its variables.  (entry anchor, cache)
        self.anchors: list = [(_builder_before_terminator(prologue), {})]
        self.depth: dict = {}     # variable name -> index of its anchor (0 for constants)
        self.stack_slots: dict = {}   # id -> entry-block alloca (defined before any anchor)
        self.vars64: dict = {}    # loop variable name -> its i64 counter
        self.buf_depth: dict = {}     # heap buffer -> first anchor index its pointer dominates
        self.heap_live: list = []     # heap pointers of the enclosing Allocates (freed on failure)
        self.status_flag = None       # worker: the region's i32 status (see tensorir.codegen.safety)
        self.abort_block = None       # worker: where a thread resumes after a failure

    def emit_body(self, stmt) -> None:
        """The kernel's body; it returns status 0 (failures return early, see :mod:`.safety`)."""
        self.reset_oob()
        self.stmt(stmt)
        self.b.ret(ir.Constant(I32, 0))

    # -------------------------------------------------------- helpers
    def block(self, label: str):
        return self.fn.append_basic_block(label)

    def entry_alloca(self, ty, align: int):
        eb = ir.IRBuilder(self.entry)
        eb.position_at_start(self.entry)
        slot = eb.alloca(ty)
        slot.align = align
        slot.type = PTR          # keep llvmlite's typed-pointer layer out of the IR
        self.stack_slots[id(slot)] = slot
        return slot

    def hoisted(self, key, names, compute, keep):
        """``compute()`` emitted once per binding of ``names``, as early as they allow.

        ``key`` holds ids only (hashing IR nodes is recursive); ``keep`` pins
        the objects behind those ids while the cache entry lives.
        """
        bound = tuple(self.vars.get(n) for n in names)
        anchor, cache = self.anchors[max((self.depth.get(n, 0) for n in names), default=0)]
        full_key = (key, tuple(map(id, bound)))
        hit = cache.get(full_key)
        if hit is None:
            saved, self.b = self.b, anchor
            try:
                hit = cache[full_key] = (compute(), bound, keep)
            finally:
                self.b = saved
        return hit[0]

    def call_intrinsic(self, name: str, ret, args):
        return self.b.call(self.mod.declare(name, ret, [a.type for a in args]), args)

    # -------------------------------------------------------- statements
    def stmt(self, s) -> None:
        if isinstance(s, Seq):
            stmts, i = s.stmts, 0
            while i < len(stmts):
                j = i
                while j < len(stmts) and self._outlined(stmts[j]):
                    j += 1
                if j > i:       # consecutive parallel loops share one thread team
                    self.parallel_or_serial(stmts[i:j])
                    i = j
                else:
                    self.stmt(stmts[i])
                    i += 1
        elif isinstance(s, Store):
            self.store(s)
        elif isinstance(s, For):
            self.loop(s)
        elif isinstance(s, IfThenElse):
            self.if_then_else(s)
        elif isinstance(s, Allocate):
            self.allocate(s)
        elif isinstance(s, Prefetch):
            self.prefetch(s)
        else:
            raise CodegenError(f"cannot generate code for statement {type(s).__name__}")

    def store(self, s: Store) -> None:
        if s.value.dtype != s.buffer.dtype:
            raise CodegenError(f"store of a {s.value.dtype} value into {s.buffer.dtype} buffer "
                               f"{s.buffer.name!r}")
        # a running min/max (``acc = max(acc, x)``, a reduction's step) keeps the plain compare-select
        self.running = (s.buffer, s.indices)
        if self.vec is not None:
            self.vec.store(s)
            return
        value = self.expr(s.value)
        self.check_access(s.buffer, s.indices, "store")
        self.b.store(value, self.address(s.buffer, s.indices), align=ITEMSIZE[s.buffer.dtype])

    def prefetch(self, s: Prefetch) -> None:
        """``llvm.prefetch`` (read, data cache) of ``&buffer[indices]`` plus ``offset`` bytes.

        A prefetch does not fault, so it is neither checked (checked builds) nor guarded, and its
        address may lie outside the buffer: no ``inbounds`` on its pointer arithmetic.  Inside a
        vectorized loop it prefetches the first lane's line.
        """
        if self.vec is not None:
            vec, self.vec = self.vec, None
            try:
                with scoped(self.vars, vec.var, self.mod.i32(0)):
                    self.prefetch(s)
            finally:
                self.vec = vec
            return
        ptr = self.address(s.buffer, s.indices, inbounds=False)
        if s.offset:
            ptr = self.b.gep(ptr, [ir.Constant(I64, s.offset)], source_etype=ir.IntType(8))
        args = [ptr, ir.Constant(I32, 0), ir.Constant(I32, s.locality), ir.Constant(I32, 1)]
        self.call_intrinsic("llvm.prefetch.p0", VOID, args)

    def loop(self, s: For) -> None:
        if s.extent <= 0:
            return
        if s.extent == 1 or s.kind is ForKind.UNROLLED:
            for k in range(s.extent):
                with scoped(self.vars, s.var.name, self.mod.i32(k)):
                    self.stmt(s.body)
            return
        if self.vec is None and is_simd_loop(s):   # (widths lowering's vector_chunks pass chose)
            VectorContext(self, s).emit()
            return
        if self._outlined(s):
            self.parallel_or_serial([s])
            return
        self.serial_loop(s.var.name, ir.Constant(I32, 0), ir.Constant(I32, s.extent), s.body,
                         known_nonempty=True)

    def _outlined(self, s) -> bool:
        """Does ``s`` run on the thread team (a parallel loop not nested in another)?"""
        return (isinstance(s, For) and s.kind is ForKind.PARALLEL and s.extent > 1
                and not self.in_parallel and self.vec is None)

    def serial_loop(self, name, start, end, body, known_nonempty=False) -> None:
        """``for name in range(start, end)`` as a rotated loop with an i64 counter.

        ``start``/``end`` are i32; the body sees the variable as i32 (a free
        truncation) and addresses use the i64 counter, so no sign extension
        runs per iteration.
        """
        start64, end64 = (ir.Constant(I64, v.constant) if isinstance(v, ir.Constant)
                          else self.b.sext(v, I64) for v in (start, end))
        pre = self.b.block
        head, exit_ = self.block(f"{name}.loop"), self.block(f"{name}.exit")
        if known_nonempty:
            self.b.branch(head)
        else:
            self.b.cbranch(self.b.icmp_signed("<", start64, end64), head, exit_)
        self.b.position_at_end(head)
        iv64 = self.b.phi(I64, name=name)
        iv64.add_incoming(start64, pre)
        iv = self.b.trunc(iv64, I32, name=name + ".i32")
        first = self.block(f"{name}.body")
        self.b.branch(first)
        self.anchors.append((_builder_before_terminator(head), {}))
        self.b.position_at_end(first)
        with scoped(self.vars, name, iv), scoped(self.vars64, name, iv64), \
                scoped(self.depth, name, len(self.anchors) - 1):
            self.stmt(body)
        self.anchors.pop()
        nxt = self.b.add(iv64, ir.Constant(I64, 1), flags=("nuw", "nsw"))
        iv64.add_incoming(nxt, self.b.block)
        self.b.cbranch(self.b.icmp_signed("<", nxt, end64), head, exit_)
        self.b.position_at_end(exit_)

    def if_then_else(self, s: IfThenElse) -> None:
        if isinstance(s.cond, Const):
            chosen = s.then if s.cond.value else s.otherwise
            if chosen is not None:
                self.stmt(chosen)
            return
        cond = self.expr(s.cond)
        if isinstance(cond.type, ir.VectorType):
            self.vec.masked_if(cond, s)
            return
        then_bb, merge = self.block("then"), self.block("endif")
        else_bb = self.block("else") if s.otherwise is not None else merge
        self.b.cbranch(cond, then_bb, else_bb)
        self.b.position_at_end(then_bb)
        self.stmt(s.then)
        self.b.branch(merge)
        if s.otherwise is not None:
            self.b.position_at_end(else_bb)
            self.stmt(s.otherwise)
            self.b.branch(merge)
        self.b.position_at_end(merge)

    def allocate(self, s: Allocate) -> None:
        buf = s.buffer
        if buf.scope is Scope.PARAM:
            raise CodegenError(f"cannot allocate parameter buffer {buf.name!r}")
        heap = is_heap(buf)
        if heap:
            ptr = self.heap_alloc(buf)      # checked: a NULL result fails the call
            self.buf_depth[buf] = len(self.anchors)     # loops opened from here on may hoist
            self.heap_live.append(ptr)
        else:
            ptr = self.entry_alloca(ir.ArrayType(LLTYPE[buf.dtype], max(buf.size, 1)), ALLOC_ALIGN)
        with scoped(self.bufs, buf, ptr):
            self.stmt(s.body)
        if heap:
            self.heap_live.pop()
            self.b.call(self.mod.declare("free", VOID, [PTR]), [ptr])

    # -------------------------------------------------------- vector plumbing
    def const_like(self, like, value, scalar_ty):
        if isinstance(like.type, ir.VectorType):
            return splat(scalar_ty, value, like.type.count)
        return ir.Constant(scalar_ty, value)

    def broadcast(self, v, lanes: int):
        if isinstance(v, ir.Constant):
            return splat(v.type, v.constant, lanes)
        vty = ir.VectorType(v.type, lanes)
        poison = _Poison(vty)
        one = self.b.insert_element(poison, v, ir.Constant(I32, 0))
        return self.b.shuffle_vector(one, poison, ir.Constant(ir.VectorType(I32, lanes), None))

    def unify(self, a, b):
        """Broadcast whichever of ``a``/``b`` is scalar when the other is a vector."""
        va, vb = isinstance(a.type, ir.VectorType), isinstance(b.type, ir.VectorType)
        if va and not vb:
            b = self.broadcast(b, a.type.count)
        elif vb and not va:
            a = self.broadcast(a, b.type.count)
        return a, b

    # -------------------------------------------------------- expressions
    def expr(self, e):
        if isinstance(e, Const):
            return ir.Constant(LLTYPE[e.dtype], e.value)
        if isinstance(e, Var):
            v = self.vars.get(e.name)
            if v is None:
                raise CodegenError(f"variable {e.name!r} is used but not bound by an enclosing loop")
            return v
        if isinstance(e, Load):
            if self.vec is not None:
                return self.vec.load(e)
            self.check_access(e.buffer, e.indices, "load")
            return self.b.load(self.address(e.buffer, e.indices), typ=LLTYPE[e.dtype],
                               align=ITEMSIZE[e.dtype])
        if not isinstance(e, (Binary, Unary, Cast, Select)):
            raise CodegenError(f"cannot generate code for expression {e!r}")
        if self.mod.unsafe(e):
            return self.compound(e)
        return self.hoisted(self.mod.canon(e), self.mod.free_vars(e), lambda: self.compound(e), e)

    def compound(self, e):
        if isinstance(e, Binary):
            return self.binary(e)
        if isinstance(e, Unary):
            return self.unary(e.op, self.expr(e.a), e.a.dtype)
        if isinstance(e, Cast):
            return self.cast(self.expr(e.a), e.a.dtype, e.to)
        return self.select(e.cond, e.t, e.f)

    def binary(self, e: Binary):
        op = e.op
        if op is BinOp.ADD and e.a.dtype in FLOAT_DTYPES:
            for prod, acc in ((e.b, e.a), (e.a, e.b)):
                if isinstance(prod, Binary) and prod.op is BinOp.MUL:
                    return self.fmuladd(prod, acc)
        if op in (BinOp.AND, BinOp.OR) and self.mod.unsafe(e.b):
            # Short-circuit so a guard like `i < n and A[i] > 0` never reads A[n].
            false, true = Const(False, "bool"), Const(True, "bool")
            return self.select(e.a, e.b, false) if op is BinOp.AND else self.select(e.a, true, e.b)
        a, b = self.unify(self.expr(e.a), self.expr(e.b))
        bld, is_float = self.b, e.a.dtype in FLOAT_DTYPES
        if not is_float:
            folded = _fold_int(op, a, b)
            if folded is not None:
                return folded
        if op in COMPARE_OPS:
            if not is_float:
                return bld.icmp_signed(_ICMP[op], a, b)
            if op is BinOp.NE:
                return bld.fcmp_unordered("!=", a, b)
            return bld.fcmp_ordered(_ICMP[op], a, b)
        if op in (BinOp.MIN, BinOp.MAX):
            pred = "<" if op is BinOp.MIN else ">"
            if not is_float:
                return bld.select(bld.icmp_signed(pred, a, b), a, b)
            if isinstance(e.a, Load) and (e.a.buffer, e.a.indices) == self.running:
                return bld.select(bld.fcmp_ordered(pred, a, b), a, b)
            return _float_min_max(bld, pred, a, b, _not_nan(e.a), _not_nan(e.b))
        if op in (BinOp.AND, BinOp.OR):
            return bld.and_(a, b) if op is BinOp.AND else bld.or_(a, b)
        if is_float and op in _FLOAT_BINOPS:
            return getattr(bld, _FLOAT_BINOPS[op])(a, b, flags=() if op is BinOp.DIV else FP_FLAGS)
        if not is_float and op in _INT_BINOPS:
            return getattr(bld, _INT_BINOPS[op])(a, b, flags=("nsw",))
        if not is_float and op in (BinOp.FLOORDIV, BinOp.MOD):
            return self.floor_divmod(op, a, b, e)
        raise CodegenError(f"operator {op.value!r} is not defined for {e.a.dtype}")

    def fmuladd(self, prod: Binary, acc):
        """``a*b + acc`` as llvm.fmuladd: one instruction, an FMA where the target has one."""
        a, b, c = self.expr(prod.a), self.expr(prod.b), self.expr(acc)
        lanes = max((v.type.count for v in (a, b, c) if isinstance(v.type, ir.VectorType)), default=0)
        if lanes:
            a, b, c = (v if isinstance(v.type, ir.VectorType) else self.broadcast(v, lanes)
                       for v in (a, b, c))
        return self.call_intrinsic(f"llvm.fmuladd.{type_suffix(a.type)}", a.type, [a, b, c])

    def floor_divmod(self, op, a, b, e: Binary):
        """Python-style floor division / modulo on i32 (vectors too)."""
        bld = self.b
        positive_const = isinstance(e.b, Const) and e.b.value > 0
        if positive_const and is_nonnegative(e.a):
            return bld.udiv(a, b) if op is BinOp.FLOORDIV else bld.urem(a, b)
        if not (isinstance(e.b, Const) and e.b.value != 0) and self.vec is not None \
                and self.vec.mask is not None and isinstance(b.type, ir.VectorType):
            # Inactive lanes may hold a zero divisor; x86 traps on that.
            b = bld.select(self.vec.mask, b, self.const_like(b, 1, I32))
        zero = self.const_like(a, 0, I32)
        q, r = bld.sdiv(a, b), bld.srem(a, b)
        if positive_const:
            adjust = bld.icmp_signed("<", r, zero)
        else:
            signs_differ = bld.icmp_signed("<", bld.xor(r, b), zero)
            adjust = bld.and_(bld.icmp_signed("!=", r, zero), signs_differ)
        if op is BinOp.FLOORDIV:
            return bld.sub(q, bld.zext(adjust, q.type))
        return bld.select(adjust, bld.add(r, b), r)

    def unary(self, op, a, dtype: str):
        bld = self.b
        if op is UnOp.NOT:
            return bld.not_(a)
        if op is UnOp.EXP:
            return self.exp(a)
        if op in (UnOp.TANH, UnOp.LOG) and isinstance(a.type, ir.VectorType) and a.type.element == F32:
            return (vector_tanh if op is UnOp.TANH else vector_log)(self, a)
        if op in _FLOAT_INTRINSIC:
            return self.call_intrinsic(f"llvm.{_FLOAT_INTRINSIC[op]}.{type_suffix(a.type)}", a.type, [a])
        if op is UnOp.SIGMOID:
            one = self.const_like(a, 1.0, LLTYPE[dtype])
            ex = self.exp(bld.fneg(a))
            return bld.fdiv(one, bld.fadd(one, ex))
        if op is UnOp.ABS:
            if dtype in FLOAT_DTYPES:
                return self.call_intrinsic(f"llvm.fabs.{type_suffix(a.type)}", a.type, [a])
            return self.call_intrinsic(f"llvm.abs.{type_suffix(a.type)}", a.type,
                                       [a, ir.Constant(I1, 0)])
        raise CodegenError(f"unknown unary operator {op!r}")

    def exp(self, x):
        """``exp(x)``: a SIMD polynomial for float32 vectors (see
        :func:`tensorir.codegen.vector.vector_exp`), ``llvm.exp`` otherwise."""
        if isinstance(x.type, ir.VectorType) and x.type.element == F32:
            return vector_exp(self, x)
        return self.call_intrinsic(f"llvm.exp.{type_suffix(x.type)}", x.type, [x])

    def cast(self, v, src: str, dst: str):
        if src == dst:
            return v
        lanes = v.type.count if isinstance(v.type, ir.VectorType) else None
        to = LLTYPE[dst] if lanes is None else ir.VectorType(LLTYPE[dst], lanes)
        bld = self.b
        if src == "bool":
            return bld.uitofp(v, to) if dst in FLOAT_DTYPES else bld.zext(v, to)
        if dst == "bool":
            if src in FLOAT_DTYPES:
                return bld.fcmp_unordered("!=", v, self.const_like(v, 0.0, LLTYPE[src]))
            return bld.icmp_signed("!=", v, self.const_like(v, 0, I32))
        if src == "int32":
            return bld.sitofp(v, to)
        if dst == "int32":
            return bld.fptosi(v, to)
        return bld.fpext(v, to) if dst == "float64" else bld.fptrunc(v, to)

    def select(self, cond_e, t_e, f_e):
        """``t if cond else f``, never evaluating a faulting branch speculatively."""
        cond = self.expr(cond_e)
        lazy_t, lazy_f = self.mod.unsafe(t_e), self.mod.unsafe(f_e)
        if isinstance(cond.type, ir.VectorType):
            return self.vec.masked_select(cond, t_e, f_e, lazy_t, lazy_f)
        if is_scalar_const(cond):       # unrolled index math: only the taken branch is code
            return self.expr(t_e if cond.constant else f_e)
        if not (lazy_t or lazy_f):
            t, f = self.unify(self.expr(t_e), self.expr(f_e))
            return self.b.select(cond, t, f)
        if isinstance(cond, ir.Constant):
            return self.expr(t_e if cond.constant else f_e)
        then_bb, else_bb, merge = self.block("sel.t"), self.block("sel.f"), self.block("sel.end")
        self.b.cbranch(cond, then_bb, else_bb)
        self.b.position_at_end(then_bb)
        t, t_end = self.expr(t_e), self.b.block
        self.b.position_at_end(else_bb)
        f, f_end = self.expr(f_e), self.b.block
        if isinstance(t.type, ir.VectorType) != isinstance(f.type, ir.VectorType):
            if isinstance(t.type, ir.VectorType):
                f = self.broadcast(f, t.type.count)      # still positioned in f_end
            else:
                self.b.position_at_end(t_end)
                t = self.broadcast(t, f.type.count)
        for end in (t_end, f_end):
            self.b.position_at_end(end)
            self.b.branch(merge)
        self.b.position_at_end(merge)
        phi = self.b.phi(t.type)
        phi.add_incoming(t, t_end)
        phi.add_incoming(f, f_end)
        return phi


_PY_COMPARE = {BinOp.LT: lambda x, y: x < y, BinOp.LE: lambda x, y: x <= y, BinOp.GT: lambda x, y: x > y,
               BinOp.GE: lambda x, y: x >= y, BinOp.EQ: lambda x, y: x == y, BinOp.NE: lambda x, y: x != y}


def _fold_int(op, a, b):
    """Fold integer operations whose result is known: +, -, *, comparisons, min/max, floor division,
    modulo and logic of two scalar constants, and the identities x+0, x-0, x*1, x*0.  Unrolled index math
    stays small, and a select on an unrolled index (a transform's taps) becomes its taken branch only."""
    ca = a.constant if is_scalar_const(a) else None
    cb = b.constant if is_scalar_const(b) else None
    if ca is not None and cb is not None:
        x, y = int(ca), int(cb)
        if op in (BinOp.ADD, BinOp.SUB, BinOp.MUL):
            r = {BinOp.ADD: x + y, BinOp.SUB: x - y, BinOp.MUL: x * y}[op]
            return ir.Constant(I32, r) if -2 ** 31 <= r < 2 ** 31 else None
        if op in _PY_COMPARE:
            return ir.Constant(I1, int(_PY_COMPARE[op](x, y)))
        if op in (BinOp.AND, BinOp.OR):
            return ir.Constant(a.type, int(x and y) if op is BinOp.AND else int(x or y))
        if op in (BinOp.MIN, BinOp.MAX):
            return ir.Constant(a.type, min(x, y) if op is BinOp.MIN else max(x, y))
        if op in (BinOp.FLOORDIV, BinOp.MOD) and y != 0:
            return ir.Constant(a.type, x // y if op is BinOp.FLOORDIV else x % y)
        return None
    if (op is BinOp.ADD and ca == 0) or (op is BinOp.MUL and ca == 1):
        return b
    if (op in (BinOp.ADD, BinOp.SUB) and cb == 0) or (op is BinOp.MUL and cb == 1):
        return a
    if op is BinOp.MUL and (ca == 0 or cb == 0):
        return ir.Constant(I32, 0) if not isinstance(a.type, ir.VectorType) else None
    return None


def _not_nan(e) -> bool:
    """``e`` is a constant that is not NaN."""
    return isinstance(e, Const) and e.value == e.value


def _float_min_max(bld, pred: str, a, b, a_const: bool, b_const: bool):
    """Elementwise ``min``/``max`` (``pred`` ``<``/``>``) that is NaN where either operand is, as numpy's
    ``minimum``/``maximum`` and onnxruntime's Relu, Clip and Max are: a plain compare and select
    (minps/maxps) returns the other operand when the first is NaN, so ``max(x, 0)`` would turn a NaN into 0.
    Against a constant: one compare and a select, as before; else a second compare, on ``b``. (A
    reduction's running step keeps the plain form: :func:`tensorir.te.max`.)"""
    if b_const:
        return bld.select(bld.fcmp_unordered(pred, a, b), a, b)       # a NaN: unordered, a
    if a_const:
        return bld.select(bld.fcmp_ordered(pred, a, b), a, b)         # b NaN: b
    pick = bld.select(bld.fcmp_ordered(pred, b, a), b, a)             # a NaN: a
    return bld.select(bld.fcmp_unordered("uno", b, b), b, pick)
