"""Loop-nest IR -> LLVM IR, built with ``llvmlite.ir``.

A :class:`~tensorir.tir.ir.PrimFunc` becomes ``i32 @name(ptr %p0, ..., i32 %num_threads)``
with one pointer per parameter buffer (dense, row-major), returning 0 or the number of the
failure site (a heap allocation, or in checked builds an access out of bounds; see
:mod:`tensorir.codegen.safety`).  Loop kinds map as:

* ``SERIAL``: a counted loop (rotated, since every extent is a positive constant);
* ``UNROLLED``: the body emitted ``extent`` times with the variable a constant;
* ``PARALLEL``: outlined and run through ``GOMP_parallel`` with guided chunks
  of iterations, consecutive parallel loops in one region (:mod:`tensorir.codegen.parallel`;
  nested ones run serially);
* ``VECTORIZED``: the body is emitted once with ``extent``-lane LLVM vectors
  (:mod:`tensorir.codegen.vector`); bodies holding non-unrolled loops (and
  extents above ``tensorir.tir.ir.MAX_SIMD_LANES``) fall back to a serial loop.

Code generation compiles exactly the function it is given: register promotion
and the cutting of vector loops into native-width pieces are lowering passes
(``tensorir.tir.transform.promote``, ``tensorir.tir.transform.vector_chunks``;
the pipeline is ``schedules.lowering.PASSES``).

Pure index arithmetic is hoisted to the outermost loop header where its
variables are bound and shared between accesses (:meth:`FunctionGen.hoisted`),
which keeps the IR handed to LLVM small: compile time matters to the tuner.

Index arithmetic is i32; buffer offsets are flattened in i64.
"""
from __future__ import annotations

import itertools

from llvmlite import ir

from tensorir.codegen import pool
from tensorir.codegen.function import FunctionGen, ident
from tensorir.codegen.safety import emit_tables
from tensorir.codegen.types import I32, PTR, VOID, CodegenError
from tensorir.target import Target
from tensorir.te.expr import Binary, BinOp, Const, Var, children
from tensorir.tir.analysis.affine import affine
from tensorir.tir.ir import Load
from tensorir.tir.ir import PrimFunc, Scope


def codegen(func: PrimFunc, target: Target | None = None, checked: bool = False) -> ir.Module:
    """Translate a lowered function into an LLVM module.

    Parameters
    ----------
    func : PrimFunc
        The loop-nest function.  Its parameters must have scope PARAM.
    target : Target, optional
        The CPU the code is for; default: the host.  (Lowering already cut vector
        loops to its vector width.)
    checked : bool
        Check every load and store index against its buffer's extents (an
        access out of bounds fails the call instead of touching memory).

    Returns
    -------
    llvmlite.ir.Module
        A module defining ``i32 @<func.name>(ptr, ..., ptr, i32 num_threads)`` (the status),
        its site table and failure record (:mod:`tensorir.codegen.safety`)
        plus internal outlined parallel bodies.  ``str()`` gives LLVM IR text.
        ``module.uses_openmp`` tells whether it runs parallel regions (on the pool of
        :mod:`tensorir.codegen.pool`, or libgomp).
    """
    gen = ModuleGen(func.name, target or Target.host(), checked)
    fnty = ir.FunctionType(I32, [PTR] * len(func.params) + [I32])
    fn = ir.Function(gen.module, fnty, func.name)
    fn.attributes.add("nounwind")
    fg = FunctionGen(gen, fn, in_parallel=False)
    for arg, buf in zip(fn.args, func.params):
        if buf.scope is not Scope.PARAM:
            raise CodegenError(f"parameter {buf.name!r} has scope {buf.scope.value}, expected param")
        arg.name = ident(buf.name)
        # Kernel.__call__ rejects overlapping arrays, so params never alias.
        arg.add_attribute("noalias")
        fg.bufs[buf] = arg
    fn.args[-1].name = "num_threads"
    fg.num_threads = fn.args[-1]
    fg.emit_body(func.body)
    emit_tables(gen)
    gen.module.uses_openmp = "GOMP_parallel" in gen.module.globals or pool.PARALLEL in gen.module.globals
    return gen.module


# ---------------------------------------------------------------- small IR queries

def _any_expr(e, pred) -> bool:
    stack = [e]
    while stack:
        n = stack.pop()
        if pred(n):
            return True
        stack.extend(children(n))
    return False


def _unsafe_node(n) -> bool:
    """A node that must not be evaluated speculatively (may fault)."""
    if isinstance(n, Load):
        return True
    return (isinstance(n, Binary) and n.op in (BinOp.FLOORDIV, BinOp.MOD)
            and not (isinstance(n.b, Const) and n.b.value != 0))


# ---------------------------------------------------------------- module state

class ModuleGen:
    """Module-wide state: the llvmlite module, declarations, outlined names."""

    def __init__(self, name: str, target: Target, checked: bool = False):
        self.name = name
        self.target = target
        self.checked = checked      # bounds-checked loads and stores
        self.sites = {}             # failure site description (JSON) -> status number
        self.module = ir.Module(name=ident(name))
        self._memo = {}     # (query, id(node)) -> (answer, node): linear-time IR queries
        self._outlined = itertools.count()
        self.linear_memo = {}   # VectorContext.linear results, shared by all vector loops
        self._canon = {}
        self._consts = {}

    def declare(self, name: str, ret, args) -> ir.Function:
        """The external function (or intrinsic) ``name``, declared on first use."""
        fn = self.module.globals.get(name)
        return fn if fn is not None else ir.Function(self.module, ir.FunctionType(ret, list(args)), name)

    def internal_function(self, name: str, argtypes, *attrs) -> ir.Function:
        fn = ir.Function(self.module, ir.FunctionType(VOID, list(argtypes)), name)
        fn.linkage = "internal"
        for a in ("nounwind",) + attrs:
            fn.attributes.add(a)
        return fn

    def outlined_name(self) -> str:
        return f"{self.name}.par{next(self._outlined)}"

    def _query(self, kind, node, pred) -> bool:
        # Keyed by identity (hashing frozen dataclasses recurses); the node is
        # kept alive in the entry so its id cannot be reused.
        hit = self._memo.get((kind, id(node)))
        if hit is None:
            hit = self._memo[(kind, id(node))] = (_any_expr(node, pred), node)
        return hit[0]

    def canon(self, e) -> int:
        """Identity of a structurally equal representative (for value-cache keys)."""
        hit = self._memo.get(("canon", id(e)))
        if hit is None:
            hit = self._memo[("canon", id(e))] = (id(self._canon.setdefault(e, e)), e)
        return hit[0]

    def i32(self, k: int) -> ir.Constant:
        """Interned i32 constant, so values computed from it share cache keys."""
        c = self._consts.get(k)
        if c is None:
            c = self._consts[k] = ir.Constant(I32, k)
        return c

    def ramp(self, lanes: int) -> ir.Constant:
        """The interned vector ``<0, 1, ..., lanes-1>``."""
        c = self._consts.get(("ramp", lanes))
        if c is None:
            c = self._consts[("ramp", lanes)] = ir.Constant(ir.VectorType(I32, lanes), list(range(lanes)))
        return c

    def free_vars(self, e) -> tuple:
        hit = self._memo.get(("vars", id(e)))
        if hit is None:
            names, stack = set(), [e]
            while stack:
                n = stack.pop()
                if isinstance(n, Var):
                    names.add(n.name)
                stack.extend(children(n))
            hit = self._memo[("vars", id(e))] = (tuple(sorted(names)), e)
        return hit[0]

    def affine(self, e):
        """``e`` as ``({key: coef}, const, atoms)``: a sum of loop variables and opaque atoms.

        The affine form of :func:`tensorir.tir.analysis.affine.affine`, keyed for
        codegen: variables by name (str), other atoms by identity (int, see
        :meth:`canon`); ``atoms`` maps the latter to their (non-linear, load-free)
        expressions.  Returns None when ``e`` reads memory.  Memoized by identity.
        """
        hit = self._memo.get(("affine", id(e)))
        if hit is None:
            hit = self._memo[("affine", id(e))] = (self._affine(e), e)
        return hit[0]

    def _affine(self, e):
        if not isinstance(e, (Const, Var)) and self.unsafe(e):
            return None
        form = affine(e)
        coefs, atoms = {}, {}
        for t, c in form.terms.items():
            if isinstance(t, Var):
                key = t.name
            else:
                key = self.canon(t)
                atoms[key] = t
            coefs[key] = c
        return coefs, form.const, atoms

    def unsafe(self, e) -> bool:
        """Whether evaluating ``e`` speculatively could fault."""
        return self._query("unsafe", e, _unsafe_node)

    def uses_var(self, e, name: str) -> bool:
        return self._query(("uses", name), e, lambda x: isinstance(x, Var) and x.name == name)
