"""Memory addressing: buffer offsets and affine pointer chains hoisted per loop
level.  A mixin of :class:`~tensorir.codegen.function.FunctionGen`.
"""
from __future__ import annotations

from llvmlite import ir

from tensorir.tir.ir import Buffer
from tensorir.codegen.types import I64, LLTYPE, CodegenError, is_scalar_const, strides


class Addressing:
    def offset(self, buf: Buffer, indices):
        """Row-major element offset (i64) of ``buf[indices]``; may be a vector."""
        if len(indices) != len(buf.shape):
            raise CodegenError(f"buffer {buf.name!r} has {len(buf.shape)} dimensions, "
                               f"indexed with {len(indices)}")
        if any(self.mod.unsafe(i) for i in indices):
            return self._offset(buf, indices, hoist=False)
        names = sorted({n for i in indices for n in self.mod.free_vars(i)})
        key = ("offset", buf.shape, tuple(self.mod.canon(i) for i in indices))
        return self.hoisted(key, names, lambda: self._offset(buf, indices, hoist=True), indices)

    def _offset(self, buf: Buffer, indices, hoist: bool):
        total, folded = None, 0
        for idx, stride in zip(indices, strides(buf)):
            v = self.expr(idx)
            if is_scalar_const(v):
                folded += v.constant * stride
                continue
            if hoist:   # share sext(i) * stride between accesses
                term = self.hoisted(("term", self.mod.canon(idx), stride), self.mod.free_vars(idx),
                                    lambda v=v, stride=stride: self.scaled(v, stride), idx)
            else:
                term = self.scaled(v, stride)
            total = term if total is None else self.add_mixed(total, term)
        if total is None:
            return ir.Constant(I64, folded)
        if folded:
            total = self.add_mixed(total, ir.Constant(I64, folded))
        return total

    def scaled(self, v, stride: int):
        """``sext(v) * stride`` in i64 (v an i32 index, maybe a vector)."""
        term = self.b.sext(v, ir.VectorType(I64, v.type.count) if isinstance(v.type, ir.VectorType) else I64)
        if stride != 1:
            term = self.b.mul(term, self.const_like(term, stride, I64), flags=("nsw",))
        return term

    def add_mixed(self, a, b):
        a, b = self.unify(a, b)
        return self.b.add(a, b, flags=("nsw",))

    def base_pointer(self, buf: Buffer):
        ptr = self.bufs.get(buf)
        if ptr is None:
            raise CodegenError(f"buffer {buf.name!r} is used outside its allocation "
                               "(not a parameter and not allocated by an enclosing Allocate)")
        return ptr

    def address(self, buf: Buffer, indices, inbounds: bool = True):
        """Pointer to the scalar element ``buf[indices]`` (a vector of pointers for gathers).

        Affine offsets become a chain of pointers, one link per loop level that
        contributes a term, each emitted in that loop's header and shared by
        every access; the constant part is a final GEP at the access, which
        instruction selection folds into the addressing mode.  So unrolled
        accesses ``A[i + 0, k]`` .. ``A[i + 7, k]`` share one pointer per ``k``
        and differ by displacements, with no help from LLVM's loop passes.
        """
        # Under a lane mask the first lane's address may lie outside the buffer
        # (padding reads A[-1] in a masked-off lane): no inbounds there; nor for
        # a prefetch (``inbounds=False``), whose address may lie anywhere.
        inbounds = inbounds and (self.vec is None or self.vec.mask is None)
        etype = LLTYPE[buf.dtype]
        chain = self.affine_chain(buf, indices)
        if chain is None:
            off = self.offset(buf, indices)
            return self.b.gep(self.base_pointer(buf), [off], inbounds=inbounds, source_etype=etype)
        levels, const = chain
        ptr = self.base_pointer(buf)
        floor = self.buf_depth.get(buf, 0)       # heap buffers exist from their Allocate on
        here = len(self.anchors) - 1
        key = (id(ptr),)
        for depth, terms in levels:
            key += ((depth, tuple((k, c, id(v)) for k, c, v in terms)),)
            at = max(depth, floor)
            cache = self.anchors[at][1] if at <= here else None
            hit = cache.get(key) if cache is not None else None
            if hit is None:
                saved = self.b
                if cache is not None:
                    self.b = self.anchors[at][0]
                try:
                    total = None
                    for _, c, v in terms:
                        t = v if c == 1 else self.b.mul(v, ir.Constant(I64, c), flags=("nsw",))
                        total = t if total is None else self.b.add(total, t, flags=("nsw",))
                    link = self.b.gep(ptr, [total], source_etype=etype)
                finally:
                    self.b = saved
                hit = (link, ptr, terms)
                if cache is not None:
                    cache[key] = hit
            ptr = hit[0]
        if const or not levels:
            ptr = self.b.gep(ptr, [ir.Constant(I64, const)], inbounds=inbounds, source_etype=etype)
        return ptr

    def affine_chain(self, buf: Buffer, indices):
        """``([(depth, [(key, coef, i64 value)])], const)`` for a scalar affine offset, else None."""
        if len(indices) != len(buf.shape):
            raise CodegenError(f"buffer {buf.name!r} has {len(buf.shape)} dimensions, "
                               f"indexed with {len(indices)}")
        coefs, const, atoms = {}, 0, {}
        for idx, stride in zip(indices, strides(buf)):
            aff = self.mod.affine(idx)
            if aff is None:
                return None
            for k, c in aff[0].items():
                coefs[k] = coefs.get(k, 0) + c * stride
            const += aff[1] * stride
            atoms.update(aff[2])
        by_depth = {}
        for k, c in coefs.items():
            if c == 0:
                continue
            if isinstance(k, str):
                v = self.vars.get(k)
                if v is None:
                    raise CodegenError(f"variable {k!r} is used but not bound by an enclosing loop")
                depth = self.depth.get(k, 0)
            else:
                v = self.expr(atoms[k])
                depth = max((self.depth.get(n, 0) for n in self.mod.free_vars(atoms[k])), default=0)
            if isinstance(v.type, ir.VectorType):
                return None
            if isinstance(v, ir.Constant):
                const += c * v.constant
                continue
            by_depth.setdefault(depth, []).append((k, c, self.wide(k, v, depth)))
        # variables by name, then atoms by their text: the same IR always gives the same code
        # (an atom's key is an object identity, which changes from run to run)
        def order(term):
            return (0, term[0]) if isinstance(term[0], str) else (1, str(atoms[term[0]]))
        levels = [(d, sorted(by_depth[d], key=order)) for d in sorted(by_depth)]
        return levels, const

    def wide(self, key, v, depth: int):
        """i64 value of the i32 index ``v`` (a loop's own i64 counter when there is one)."""
        if isinstance(key, str) and key in self.vars64:
            return self.vars64[key]
        anchor, cache = self.anchors[depth]
        hit = cache.get(("sext", id(v)))
        if hit is None:
            saved, self.b = self.b, anchor
            try:
                hit = cache[("sext", id(v))] = (self.b.sext(v, I64), v)
            finally:
                self.b = saved
        return hit[0]
