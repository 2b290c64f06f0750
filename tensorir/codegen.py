"""Loop-nest IR -> LLVM IR, built with ``llvmlite.ir``.

A :class:`~tensorir.ir.PrimFunc` becomes ``void @name(ptr %p0, ..., i32 %num_threads)``
with one pointer per parameter buffer (dense, row-major).  Loop kinds map as:

* ``SERIAL``: a counted loop (rotated, since every extent is a positive constant);
* ``UNROLLED``: the body emitted ``extent`` times with the variable a constant;
* ``PARALLEL``: the body is outlined into ``void(ptr closure)`` and run through
  ``GOMP_parallel`` with a static block partition (nested ones run serially);
* ``VECTORIZED``: the body is emitted once with ``extent``-lane LLVM vectors
  (:class:`VectorContext`); bodies holding non-unrolled loops fall back to a
  serial loop.

Index arithmetic is i32; buffer offsets are flattened in i64.
"""
from __future__ import annotations

from llvmlite import ir

from .expr import COMPARE_OPS, FLOAT_DTYPES, Binary, BinOp, Cast, Const, Select, Unary, UnOp, Var
from .ir import Allocate, Buffer, For, ForKind, IfThenElse, Load, PrimFunc, Scope, Seq, Store, walk_stmts

LOCAL_STACK_LIMIT = 64 * 1024   # LOCAL buffers up to this size live on the stack
ALLOC_ALIGN = 64

I1, I32, I64 = ir.IntType(1), ir.IntType(32), ir.IntType(64)
F32, F64 = ir.FloatType(), ir.DoubleType()
PTR = ir.PointerType()
VOID = ir.VoidType()
LLTYPE = {"float32": F32, "float64": F64, "int32": I32, "bool": I1}
_ITEMSIZE = {"float32": 4, "float64": 8, "int32": 4, "bool": 1}
FP_FLAGS = ("contract",)        # lets LLVM fuse a*b+c into an FMA, nothing else

_ICMP = {BinOp.LT: "<", BinOp.LE: "<=", BinOp.GT: ">", BinOp.GE: ">=", BinOp.EQ: "==", BinOp.NE: "!="}
_FLOAT_INTRINSIC = {UnOp.EXP: "exp", UnOp.LOG: "log", UnOp.SQRT: "sqrt", UnOp.TANH: "tanh"}


class CodegenError(ValueError):
    """The loop IR cannot be compiled (unbound variable, type mismatch, ...)."""


def codegen(func: PrimFunc) -> ir.Module:
    """Translate a lowered function into an LLVM module.

    Parameters
    ----------
    func : PrimFunc
        The loop-nest function.  Its parameters must have scope PARAM.

    Returns
    -------
    llvmlite.ir.Module
        A module defining ``void @<func.name>(ptr, ..., ptr, i32 num_threads)``
        plus internal outlined parallel bodies.  ``str()`` gives LLVM IR text.
        ``module.uses_openmp`` tells whether it calls libgomp.
    """
    gen = ModuleGen(func.name)
    fnty = ir.FunctionType(VOID, [PTR] * len(func.params) + [I32])
    fn = ir.Function(gen.module, fnty, func.name)
    fn.attributes.add("nounwind")
    fg = FunctionGen(gen, fn, in_parallel=False)
    for arg, buf in zip(fn.args, func.params):
        if buf.scope is not Scope.PARAM:
            raise CodegenError(f"parameter {buf.name!r} has scope {buf.scope.value}, expected param")
        arg.name = _ident(buf.name)
        # Kernel.__call__ rejects overlapping arrays, so params never alias.
        arg.add_attribute("noalias")
        fg.bufs[buf] = arg
    fn.args[-1].name = "num_threads"
    fg.num_threads = fn.args[-1]
    fg.emit_body(func.body)
    gen.module.uses_openmp = "GOMP_parallel" in gen.module.globals
    return gen.module


def _ident(name: str) -> str:
    return "".join(c if c.isalnum() or c == "_" else "_" for c in name) or "arg"


# ---------------------------------------------------------------- small IR queries

class _Memo:
    """Per-codegen memo of structural queries, keyed by node identity.

    Hashing frozen dataclasses is recursive, so caching by ``id`` keeps the
    queries linear in the IR size; the IR is alive for the whole codegen run.
    """

    def __init__(self):
        self.cache = {}

    def query(self, kind, node, compute):
        key = (kind, id(node))
        hit = self.cache.get(key)
        if hit is None:
            hit = self.cache[key] = (compute(node), node)
        return hit[0]


def expr_children(e) -> tuple:
    if isinstance(e, Binary):
        return (e.a, e.b)
    if isinstance(e, (Unary, Cast)):
        return (e.a,)
    if isinstance(e, Select):
        return (e.cond, e.t, e.f)
    if isinstance(e, Load):
        return e.indices
    return ()


def stmt_exprs(s) -> tuple:
    if isinstance(s, Store):
        return tuple(s.indices) + (s.value,)
    if isinstance(s, IfThenElse):
        return (s.cond,)
    return ()


def _any_expr(e, pred) -> bool:
    stack = [e]
    while stack:
        n = stack.pop()
        if pred(n):
            return True
        stack.extend(expr_children(n))
    return False


def _unsafe_node(n) -> bool:
    """A node that must not be evaluated speculatively (may fault)."""
    if isinstance(n, Load):
        return True
    return (isinstance(n, Binary) and n.op in (BinOp.FLOORDIV, BinOp.MOD)
            and not (isinstance(n.b, Const) and n.b.value != 0))


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


def free_names(stmt) -> tuple:
    """(variable names, buffers) referenced anywhere under ``stmt``."""
    names, bufs = set(), set()
    for s in walk_stmts(stmt):
        if isinstance(s, Store):
            bufs.add(s.buffer)
        stack = list(stmt_exprs(s))
        while stack:
            n = stack.pop()
            if isinstance(n, Var):
                names.add(n.name)
            elif isinstance(n, Load):
                bufs.add(n.buffer)
            stack.extend(expr_children(n))
    return names, bufs


def strides(buf: Buffer) -> list:
    out, acc = [], 1
    for extent in reversed(buf.shape):
        out.append(acc)
        acc *= extent
    return out[::-1]


# ---------------------------------------------------------------- module state

class ModuleGen:
    """Module-wide state: the llvmlite module, declarations, outlined names."""

    def __init__(self, name: str):
        self.name = name
        self.module = ir.Module(name=_ident(name))
        self.memo = _Memo()
        self._decls = {}
        self._outlined = 0

    def declare(self, name: str, ret, args) -> ir.Function:
        fn = self._decls.get(name)
        if fn is None:
            fn = self.module.globals.get(name)
            if fn is None:
                fn = ir.Function(self.module, ir.FunctionType(ret, list(args)), name)
            self._decls[name] = fn
        return fn

    def outlined_name(self) -> str:
        self._outlined += 1
        return f"{self.name}.par{self._outlined - 1}"

    # memoized IR queries
    def unsafe(self, e) -> bool:
        return self.memo.query("unsafe", e, lambda n: _any_expr(n, _unsafe_node))

    def uses_var(self, e, name: str) -> bool:
        return self.memo.query(("uses", name), e, lambda n: _any_expr(
            n, lambda x: isinstance(x, Var) and x.name == name))


def type_suffix(ty) -> str:
    """LLVM intrinsic name mangling for a (vector of) scalar type."""
    if isinstance(ty, ir.VectorType):
        return f"v{ty.count}{type_suffix(ty.element)}"
    if isinstance(ty, ir.PointerType):
        return "p0"
    return {F32: "f32", F64: "f64"}.get(ty) or f"i{ty.width}"


# ---------------------------------------------------------------- function generation

class FunctionGen:
    """Emits statements and expressions into one LLVM function.

    ``vars`` maps loop-variable names to i32 values (constants when unrolled);
    ``bufs`` maps buffers to their base pointers.  When ``vec`` is set (inside a
    VECTORIZED loop), expressions may evaluate to vectors and memory accesses go
    through :class:`VectorContext`.
    """

    def __init__(self, mod: ModuleGen, fn: ir.Function, in_parallel: bool):
        self.mod = mod
        self.fn = fn
        self.in_parallel = in_parallel
        self.entry = fn.append_basic_block("entry")
        body = fn.append_basic_block("body")
        ir.IRBuilder(self.entry).branch(body)
        self.b = ir.IRBuilder(body)
        self.vars: dict = {}
        self.bufs: dict = {}
        self.vec = None
        self.num_threads = None

    def emit_body(self, stmt) -> None:
        self.stmt(stmt)
        self.b.ret_void()

    # -------------------------------------------------------- helpers
    def block(self, label: str):
        return self.fn.append_basic_block(label)

    def entry_alloca(self, ty, align: int):
        eb = ir.IRBuilder(self.entry)
        eb.position_at_start(self.entry)
        slot = eb.alloca(ty)
        slot.align = align
        slot.type = PTR          # keep llvmlite's typed-pointer layer out of the IR
        return slot

    def call_intrinsic(self, name: str, ret, args):
        return self.b.call(self.mod.declare(name, ret, [a.type for a in args]), args)

    def bind(self, name: str, value):
        old = self.vars.get(name)
        self.vars[name] = value
        return old

    def unbind(self, name: str, old) -> None:
        if old is None:
            self.vars.pop(name, None)
        else:
            self.vars[name] = old

    # -------------------------------------------------------- statements
    def stmt(self, s) -> None:
        if isinstance(s, Seq):
            for c in s.stmts:
                self.stmt(c)
        elif isinstance(s, Store):
            self.store(s)
        elif isinstance(s, For):
            self.loop(s)
        elif isinstance(s, IfThenElse):
            self.if_then_else(s)
        elif isinstance(s, Allocate):
            self.allocate(s)
        else:
            raise CodegenError(f"cannot generate code for statement {type(s).__name__}")

    def store(self, s: Store) -> None:
        if s.value.dtype != s.buffer.dtype:
            raise CodegenError(f"store of a {s.value.dtype} value into {s.buffer.dtype} buffer "
                               f"{s.buffer.name!r}")
        if self.vec is not None:
            self.vec.store(s)
            return
        value = self.expr(s.value)
        self.b.store(value, self.address(s.buffer, s.indices), align=_ITEMSIZE[s.buffer.dtype])

    def loop(self, s: For) -> None:
        if s.extent <= 0:
            return
        if s.extent == 1 or s.kind is ForKind.UNROLLED:
            for k in range(s.extent):
                old = self.bind(s.var.name, ir.Constant(I32, k))
                self.stmt(s.body)
                self.unbind(s.var.name, old)
            return
        if s.kind is ForKind.VECTORIZED and self.vec is None and _vectorizable(s.body):
            VectorContext(self, s).emit()
            return
        if s.kind is ForKind.PARALLEL and not self.in_parallel and self.vec is None:
            self.parallel(s)
            return
        self.serial_loop(s.var.name, ir.Constant(I32, 0), ir.Constant(I32, s.extent), s.body,
                         known_nonempty=True)

    def serial_loop(self, name, start, end, body, known_nonempty=False) -> None:
        """``for name in range(start, end)`` as a rotated loop."""
        pre = self.b.block
        head, exit_ = self.block(f"{name}.loop"), self.block(f"{name}.exit")
        if known_nonempty:
            self.b.branch(head)
        else:
            self.b.cbranch(self.b.icmp_signed("<", start, end), head, exit_)
        self.b.position_at_end(head)
        iv = self.b.phi(I32, name=name)
        iv.add_incoming(start, pre)
        old = self.bind(name, iv)
        self.stmt(body)
        self.unbind(name, old)
        nxt = self.b.add(iv, ir.Constant(I32, 1), flags=("nuw", "nsw"))
        iv.add_incoming(nxt, self.b.block)
        self.b.cbranch(self.b.icmp_signed("<", nxt, end), head, exit_)
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
        nbytes = max(buf.nbytes, 1)
        heap = buf.scope is Scope.GLOBAL or nbytes > LOCAL_STACK_LIMIT
        if heap:
            size = -(-nbytes // ALLOC_ALIGN) * ALLOC_ALIGN   # aligned_alloc wants a multiple
            alloc = self.mod.declare("aligned_alloc", PTR, [I64, I64])
            ptr = self.b.call(alloc, [ir.Constant(I64, ALLOC_ALIGN), ir.Constant(I64, size)])
        else:
            ptr = self.entry_alloca(ir.ArrayType(LLTYPE[buf.dtype], max(buf.size, 1)), ALLOC_ALIGN)
        old = self.bufs.get(buf)
        self.bufs[buf] = ptr
        self.stmt(s.body)
        if old is None:
            del self.bufs[buf]
        else:
            self.bufs[buf] = old
        if heap:
            self.b.call(self.mod.declare("free", VOID, [PTR]), [ptr])

    # -------------------------------------------------------- parallel loops
    def parallel(self, s: For) -> None:
        """Outline ``s`` and run it on libgomp's thread team."""
        names, used_bufs = free_names(s.body)
        names.discard(s.var.name)
        cap_bufs = [b for b in self.bufs if b in used_bufs]
        cap_vars, const_vars = [], {}
        for n in sorted(names & self.vars.keys()):   # the rest are bound inside the body
            v = self.vars[n]
            if isinstance(v, ir.Constant):
                const_vars[n] = v
            else:
                cap_vars.append(n)

        # Trampoline unpacks the closure and calls the worker, whose noalias
        # pointer arguments keep the aliasing facts of the kernel's params.
        tname = self.mod.outlined_name()
        worker_ty = ir.FunctionType(VOID, [PTR] * len(cap_bufs) + [I32] * len(cap_vars))
        worker = ir.Function(self.mod.module, worker_ty, tname + ".worker")
        worker.linkage = "internal"
        worker.attributes.add("nounwind")
        wg = FunctionGen(self.mod, worker, in_parallel=True)
        for arg, buf in zip(worker.args, cap_bufs):
            arg.add_attribute("noalias")
            wg.bufs[buf] = arg
        for arg, n in zip(worker.args[len(cap_bufs):], cap_vars):
            wg.vars[n] = arg
        wg.vars.update(const_vars)
        wg.emit_partitioned(s)

        closure_ty = ir.LiteralStructType([PTR] * len(cap_bufs) + [I32] * len(cap_vars))
        tramp = ir.Function(self.mod.module, ir.FunctionType(VOID, [PTR]), tname)
        tramp.linkage = "internal"
        tramp.attributes.add("nounwind")
        tb = ir.IRBuilder(tramp.append_basic_block("entry"))
        args = []
        for i, ty in enumerate(closure_ty.elements):
            field = tb.gep(tramp.args[0], [ir.Constant(I32, 0), ir.Constant(I32, i)],
                           inbounds=True, source_etype=closure_ty)
            args.append(tb.load(field, typ=ty))
        tb.call(worker, args)
        tb.ret_void()

        closure = self.entry_alloca(closure_ty, 8)
        values = [self.bufs[b] for b in cap_bufs] + [self.vars[n] for n in cap_vars]
        for i, v in enumerate(values):
            field = self.b.gep(closure, [ir.Constant(I32, 0), ir.Constant(I32, i)],
                               inbounds=True, source_etype=closure_ty)
            self.b.store(v, field)
        # One thread: skip the runtime entirely (omp_get_* then report 0 of 1).
        one = self.b.icmp_signed("==", self.num_threads, ir.Constant(I32, 1))
        direct, team, done = self.block("par.direct"), self.block("par.team"), self.block("par.done")
        self.b.cbranch(one, direct, team)
        self.b.position_at_end(direct)
        self.b.call(tramp, [closure])
        self.b.branch(done)
        self.b.position_at_end(team)
        gomp = self.mod.declare("GOMP_parallel", VOID, [PTR, PTR, I32, I32])
        nthreads = self.b.select(self.b.icmp_signed(">", self.num_threads, ir.Constant(I32, 0)),
                                 self.num_threads, ir.Constant(I32, 0))
        self.b.call(gomp, [tramp, closure, nthreads, ir.Constant(I32, 0)])
        self.b.branch(done)
        self.b.position_at_end(done)

    def emit_partitioned(self, s: For) -> None:
        """Worker body: this thread's static block of ``range(s.extent)``."""
        b = self.b
        tid = b.call(self.mod.declare("omp_get_thread_num", I32, []), [])
        nt = b.call(self.mod.declare("omp_get_num_threads", I32, []), [])
        extent = ir.Constant(I32, s.extent)
        chunk = b.sdiv(b.add(extent, b.sub(nt, ir.Constant(I32, 1))), nt)
        start = b.mul(tid, chunk)
        end = b.add(start, chunk)
        end = b.select(b.icmp_signed("<", end, extent), end, extent)
        self.serial_loop(s.var.name, start, end, s.body)
        b.ret_void()

    # -------------------------------------------------------- memory
    def offset(self, buf: Buffer, indices):
        """Row-major element offset (i64) of ``buf[indices]``; may be a vector."""
        if len(indices) != len(buf.shape):
            raise CodegenError(f"buffer {buf.name!r} has {len(buf.shape)} dimensions, "
                               f"indexed with {len(indices)}")
        total = None
        for idx, stride in zip(indices, strides(buf)):
            term = self.widen(self.expr(idx))
            if stride != 1:
                term = self.b.mul(term, self.const_like(term, stride, I64), flags=("nsw",))
            total = term if total is None else self.add_mixed(total, term)
        return total if total is not None else ir.Constant(I64, 0)

    def widen(self, v):
        """Sign-extend an i32 (vector) index to i64."""
        if isinstance(v, ir.Constant) and not isinstance(v.type, ir.VectorType):
            return ir.Constant(I64, v.constant)
        ty = ir.VectorType(I64, v.type.count) if isinstance(v.type, ir.VectorType) else I64
        return self.b.sext(v, ty)

    def add_mixed(self, a, b):
        a, b = self.unify(a, b)
        return self.b.add(a, b, flags=("nsw",))

    def base_pointer(self, buf: Buffer):
        ptr = self.bufs.get(buf)
        if ptr is None:
            raise CodegenError(f"buffer {buf.name!r} is used outside its allocation "
                               "(not a parameter and not allocated by an enclosing Allocate)")
        return ptr

    def address(self, buf: Buffer, indices):
        return self.b.gep(self.base_pointer(buf), [self.offset(buf, indices)], inbounds=True,
                          source_etype=LLTYPE[buf.dtype])

    # -------------------------------------------------------- vector plumbing
    def const_like(self, like, value, scalar_ty):
        if isinstance(like.type, ir.VectorType):
            return ir.Constant(ir.VectorType(scalar_ty, like.type.count), [value] * like.type.count)
        return ir.Constant(scalar_ty, value)

    def broadcast(self, v, lanes: int):
        if isinstance(v, ir.Constant):
            return ir.Constant(ir.VectorType(v.type, lanes), [v.constant] * lanes)
        vty = ir.VectorType(v.type, lanes)
        one = self.b.insert_element(ir.Constant(vty, ir.Undefined), v, ir.Constant(I32, 0))
        return self.b.shuffle_vector(one, ir.Constant(vty, ir.Undefined),
                                     ir.Constant(ir.VectorType(I32, lanes), None))

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
            return self.b.load(self.address(e.buffer, e.indices), typ=LLTYPE[e.dtype],
                               align=_ITEMSIZE[e.dtype])
        if isinstance(e, Binary):
            return self.binary(e)
        if isinstance(e, Unary):
            return self.unary(e.op, self.expr(e.a), e.a.dtype)
        if isinstance(e, Cast):
            return self.cast(self.expr(e.a), e.a.dtype, e.to)
        if isinstance(e, Select):
            return self.select(e.cond, e.t, e.f)
        raise CodegenError(f"cannot generate code for expression {e!r}")

    def binary(self, e: Binary):
        op = e.op
        if op in (BinOp.AND, BinOp.OR) and self.mod.unsafe(e.b):
            # Short-circuit so a guard like `i < n and A[i] > 0` never reads A[n].
            false, true = Const(False, "bool"), Const(True, "bool")
            return self.select(e.a, e.b, false) if op is BinOp.AND else self.select(e.a, true, e.b)
        a, b = self.unify(self.expr(e.a), self.expr(e.b))
        dtype = e.a.dtype
        bld = self.b
        if op in COMPARE_OPS:
            if dtype in FLOAT_DTYPES:
                if op is BinOp.NE:
                    return bld.fcmp_unordered("!=", a, b)
                return bld.fcmp_ordered(_ICMP[op], a, b)
            return bld.icmp_signed(_ICMP[op], a, b)
        if op is BinOp.AND:
            return bld.and_(a, b)
        if op is BinOp.OR:
            return bld.or_(a, b)
        if dtype in FLOAT_DTYPES:
            if op is BinOp.ADD:
                return bld.fadd(a, b, flags=FP_FLAGS)
            if op is BinOp.SUB:
                return bld.fsub(a, b, flags=FP_FLAGS)
            if op is BinOp.MUL:
                return bld.fmul(a, b, flags=FP_FLAGS)
            if op is BinOp.DIV:
                return bld.fdiv(a, b)
            if op is BinOp.MIN:
                return bld.select(bld.fcmp_ordered("<", a, b), a, b)
            if op is BinOp.MAX:
                return bld.select(bld.fcmp_ordered(">", a, b), a, b)
        else:
            if op is BinOp.ADD:
                return bld.add(a, b, flags=("nsw",))
            if op is BinOp.SUB:
                return bld.sub(a, b, flags=("nsw",))
            if op is BinOp.MUL:
                return bld.mul(a, b, flags=("nsw",))
            if op is BinOp.MIN:
                return bld.select(bld.icmp_signed("<", a, b), a, b)
            if op is BinOp.MAX:
                return bld.select(bld.icmp_signed(">", a, b), a, b)
            if op in (BinOp.FLOORDIV, BinOp.MOD):
                return self.floor_divmod(op, a, b, e)
        raise CodegenError(f"operator {op.value!r} is not defined for {dtype}")

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
        if op in _FLOAT_INTRINSIC:
            return self.call_intrinsic(f"llvm.{_FLOAT_INTRINSIC[op]}.{type_suffix(a.type)}", a.type, [a])
        if op is UnOp.SIGMOID:
            one = self.const_like(a, 1.0, LLTYPE[dtype])
            ex = self.call_intrinsic(f"llvm.exp.{type_suffix(a.type)}", a.type, [bld.fneg(a)])
            return bld.fdiv(one, bld.fadd(one, ex))
        if op is UnOp.ABS:
            if dtype in FLOAT_DTYPES:
                return self.call_intrinsic(f"llvm.fabs.{type_suffix(a.type)}", a.type, [a])
            return self.call_intrinsic(f"llvm.abs.{type_suffix(a.type)}", a.type,
                                       [a, ir.Constant(I1, 0)])
        raise CodegenError(f"unknown unary operator {op!r}")

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


def _vectorizable(body) -> bool:
    """A vector body may hold only unrolled (or trivial) loops."""
    return all(not isinstance(s, For) or s.kind is ForKind.UNROLLED or s.extent <= 1
               for s in walk_stmts(body))


# ---------------------------------------------------------------- vector loops

def _add(a, b):
    if a is None or b is None:
        return b if a is None else a
    return Binary(BinOp.ADD, a, b)


def _sub(a, b):
    if b is None:
        return a
    return Binary(BinOp.SUB, Const(0, "int32") if a is None else a, b)


class VectorContext:
    """Emits the body of a VECTORIZED loop once, with ``extent`` lanes.

    The loop variable is bound to the constant vector ``<0, 1, ..., n-1>``, so
    every expression that depends on it evaluates to a vector and everything
    else stays scalar (broadcast where the two meet).  Memory accesses are
    classified by the coefficient of the loop variable in the flattened offset:
    0 -> scalar access, 1 -> contiguous vector access, otherwise gather/scatter.
    Lane-dependent conditions become the lane ``mask`` applied to every memory
    access beneath them.
    """

    def __init__(self, fg: FunctionGen, loop: For):
        self.fg = fg
        self.var = loop.var.name
        self.lanes = loop.extent
        self.body = loop.body
        self.mask = None

    def emit(self) -> None:
        fg = self.fg
        ramp = ir.Constant(ir.VectorType(I32, self.lanes), list(range(self.lanes)))
        old = fg.bind(self.var, ramp)
        fg.vec = self
        try:
            fg.stmt(self.body)
        finally:
            fg.vec = None
            fg.unbind(self.var, old)

    # -------------------------------------------------------- access analysis
    def linear(self, e):
        """``(c, rest)`` with ``e == c*var + rest`` and ``rest`` free of var (None = 0).

        Returns None when ``e`` is not linear in the loop variable with a
        constant coefficient; other sub-terms are treated as opaque.
        """
        if not self.fg.mod.uses_var(e, self.var):
            return 0, e
        if isinstance(e, Var):
            return 1, None
        if isinstance(e, Binary) and e.op in (BinOp.ADD, BinOp.SUB):
            la, lb = self.linear(e.a), self.linear(e.b)
            if la is None or lb is None:
                return None
            if e.op is BinOp.ADD:
                return la[0] + lb[0], _add(la[1], lb[1])
            return la[0] - lb[0], _sub(la[1], lb[1])
        if isinstance(e, Binary) and e.op is BinOp.MUL:
            for x, y in ((e.a, e.b), (e.b, e.a)):
                if isinstance(y, Const):
                    lx = self.linear(x)
                    if lx is None:
                        return None
                    rest = None if lx[1] is None else Binary(BinOp.MUL, lx[1], y)
                    return lx[0] * y.value, rest
        return None

    def access(self, buf: Buffer, indices):
        """Classify ``buf[indices]``: ("scalar", ptr), ("contig", ptr) or ("gather", ptrs)."""
        fg = self.fg
        elt = LLTYPE[buf.dtype]
        parts = [self.linear(i) for i in indices]
        if all(p is not None for p in parts) and len(indices) == len(buf.shape):
            coef = sum(p[0] * st for p, st in zip(parts, strides(buf)))
            rests = [Const(0, "int32") if p[1] is None else p[1] for p in parts]
            ptr = fg.address(buf, rests)
            if coef == 0:
                return "scalar", ptr
            if coef == 1:
                return "contig", ptr
            steps = ir.Constant(ir.VectorType(I64, self.lanes), [coef * k for k in range(self.lanes)])
            return "gather", self.vector_gep(ptr, steps, elt)
        off = fg.offset(buf, indices)
        if not isinstance(off.type, ir.VectorType):
            return "scalar", fg.b.gep(fg.base_pointer(buf), [off], inbounds=True, source_etype=elt)
        return "gather", self.vector_gep(fg.base_pointer(buf), off, elt)

    def vector_gep(self, base, offsets, elt):
        g = self.fg.b.gep(base, [offsets], inbounds=True, source_etype=elt)
        g.type = ir.VectorType(PTR, self.lanes)   # llvmlite types it as a scalar ptr
        return g

    # -------------------------------------------------------- masks
    def all_true(self):
        return ir.Constant(ir.VectorType(I1, self.lanes), [1] * self.lanes)

    def and_mask(self, cond):
        return cond if self.mask is None else self.fg.b.and_(self.mask, cond)

    def if_any_lane(self, emit):
        """Run ``emit()`` only when some lane of the current mask is active."""
        fg = self.fg
        any_on = fg.call_intrinsic(f"llvm.vector.reduce.or.v{self.lanes}i1", I1, [self.mask])
        pre, body, merge = fg.b.block, fg.block("anylane"), fg.block("anylane.end")
        fg.b.cbranch(any_on, body, merge)
        fg.b.position_at_end(body)
        value = emit()
        body_end = fg.b.block
        fg.b.branch(merge)
        fg.b.position_at_end(merge)
        if value is None:
            return None
        phi = fg.b.phi(value.type)
        phi.add_incoming(value, body_end)
        phi.add_incoming(ir.Constant(value.type, None), pre)
        return phi

    def masked_if(self, cond, s: IfThenElse) -> None:
        fg, old = self.fg, self.mask
        self.mask = self.and_mask(cond)
        fg.stmt(s.then)
        if s.otherwise is not None:
            self.mask = old
            self.mask = self.and_mask(fg.b.not_(cond))
            fg.stmt(s.otherwise)
        self.mask = old

    def masked_select(self, cond, t_e, f_e, lazy_t: bool, lazy_f: bool):
        fg, old = self.fg, self.mask
        if lazy_t:
            self.mask = self.and_mask(cond)
        t = fg.expr(t_e)
        self.mask = old
        if lazy_f:
            self.mask = self.and_mask(fg.b.not_(cond))
        f = fg.expr(f_e)
        self.mask = old
        t, f = fg.unify(t, f)
        if not isinstance(t.type, ir.VectorType):
            t, f = fg.broadcast(t, self.lanes), fg.broadcast(f, self.lanes)
        return fg.b.select(cond, t, f)

    # -------------------------------------------------------- memory
    def load(self, e: Load):
        fg = self.fg
        elt, align = LLTYPE[e.dtype], _ITEMSIZE[e.dtype]
        vty = ir.VectorType(elt, self.lanes)
        kind, ptr = self.access(e.buffer, e.indices)
        if kind == "scalar":
            if self.mask is None:
                return fg.b.load(ptr, typ=elt, align=align)
            return self.if_any_lane(lambda: fg.b.load(ptr, typ=elt, align=align))
        zero, align_c = ir.Constant(vty, None), ir.Constant(I32, align)
        if kind == "contig":
            if self.mask is None:
                return fg.b.load(ptr, typ=vty, align=align)
            return fg.call_intrinsic(f"llvm.masked.load.{type_suffix(vty)}.p0", vty,
                                     [ptr, align_c, self.mask, zero])
        mask = self.all_true() if self.mask is None else self.mask
        return fg.call_intrinsic(f"llvm.masked.gather.{type_suffix(vty)}.v{self.lanes}p0", vty,
                                 [ptr, align_c, mask, zero])

    def store(self, s: Store) -> None:
        fg = self.fg
        elt, align = LLTYPE[s.buffer.dtype], _ITEMSIZE[s.buffer.dtype]
        value = fg.expr(s.value)
        kind, ptr = self.access(s.buffer, s.indices)
        align_c = ir.Constant(I32, align)
        if kind == "scalar" and not isinstance(value.type, ir.VectorType):
            if self.mask is None:
                fg.b.store(value, ptr, align=align)
            else:
                self.if_any_lane(lambda: fg.b.store(value, ptr, align=align) and None)
            return
        if not isinstance(value.type, ir.VectorType):
            value = fg.broadcast(value, self.lanes)
        vty = value.type
        if kind == "contig":
            if self.mask is None:
                fg.b.store(value, ptr, align=align)
            else:
                fg.call_intrinsic(f"llvm.masked.store.{type_suffix(vty)}.p0", VOID,
                                  [value, ptr, align_c, self.mask])
            return
        if kind == "scalar":
            # A vector stored to one address: scatter's lane order makes the
            # last active lane win, as in the sequential loop.
            ptr = fg.broadcast(ptr, self.lanes)
        mask = self.all_true() if self.mask is None else self.mask
        fg.call_intrinsic(f"llvm.masked.scatter.{type_suffix(vty)}.v{self.lanes}p0", VOID,
                          [value, ptr, align_c, mask])
