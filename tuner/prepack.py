"""Constant inputs packed once, when a model is built, instead of in every call.

A tuned schedule often copies an input into a blocked layout (``pack``): a matrix product's
weights into panels of its register tile's columns, a convolution's into OIHW[i][o] blocks.
For a model's weights that copy is the same in every call; for a small batch it can cost more
than the product itself (the 2048x1024 weights of an MLP layer are 8 MB moved per call for
134 MFLOP). :func:`prepack` rewrites such a kernel: the packed copy becomes an input of its own
(a placeholder in the packed layout, read at the indices the pack gave its readers) and the
trace's pack instructions are dropped; :meth:`Prepacked.arrays` computes the packed arrays from
the constants, once.

Only a pack of a constant placeholder whose readers are stages of the tensor expression itself
qualifies (not stages a later primitive made); any other pack stays in the kernel.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from schedules import Schedule
from tensorir import te
from tensorir.te import ComputeOp, Tensor, TensorRead
from tensorir.te.evaluate import evaluate, topo_stages
from tensorir.te.tensor import reads
from tensorir.tir.rewrite import rewrite


def _resolve(value, decisions: dict):
    if isinstance(value, dict) and set(value) == {"$decision"}:
        return decisions[value["$decision"]]
    if isinstance(value, dict):
        return {k: _resolve(v, decisions) for k, v in value.items()}
    if isinstance(value, list):
        return [_resolve(v, decisions) for v in value]
    return value


@dataclass
class _Pack:
    source: Tensor          # the constant placeholder
    name: str               # the pack stage's name (the new placeholder's)
    splits: dict            # source dim -> block
    order: list             # keys "d", "d.o", "d.i"
    consumers: set | None   # reader stage names (None: every reader)

    def extents(self) -> dict:
        ext = {}
        for d, n in enumerate(self.source.shape):
            if d in self.splits:
                ext[f"{d}.o"], ext[f"{d}.i"] = -(-n // self.splits[d]), self.splits[d]
            else:
                ext[str(d)] = n
        return ext

    @property
    def shape(self) -> tuple:
        ext = self.extents()
        return tuple(ext[k] for k in self.order)

    def index(self, idx) -> tuple:
        parts = {}
        for d, i in enumerate(idx):
            if d in self.splits:
                parts[f"{d}.o"], parts[f"{d}.i"] = i // self.splits[d], i % self.splits[d]
            else:
                parts[str(d)] = i
        return tuple(parts[k] for k in self.order)

    def layout(self) -> list:
        """``[source, packed]``: the packed copy as a tensor expression (zero past the source's edge)."""
        def f(*axes):
            by_key = dict(zip(self.order, axes))
            idx, conds = [], []
            for d, n in enumerate(self.source.shape):
                if d in self.splits:
                    e = by_key[f"{d}.o"] * self.splits[d] + by_key[f"{d}.i"]
                    if n % self.splits[d]:
                        conds.append(e < n)
                    idx.append(e)
                else:
                    idx.append(by_key[str(d)])
            read = self.source[tuple(idx)]
            return te.if_then_else(te.all(*conds), read, te.const(0, self.source.dtype)) if conds else read
        return [self.source, te.compute(self.shape, f, self.name)]


@dataclass
class Prepacked:
    """A kernel's schedule with its constant packs moved out of the kernel.

    ``tensors``: the new workload (the original placeholders, then one placeholder per packed
    constant, then the outputs); ``feeds[i]`` says what feeds its i-th placeholder: ``("input", j)``
    the original workload's j-th placeholder, or ``("packed", j, pack)`` the packed copy of it.
    """
    schedule: Schedule
    tensors: list
    feeds: list
    packs: list

    def arrays(self, originals: list) -> list:
        """The new workload's input arrays from the original's (packing the constants: build time)."""
        out = []
        for feed in self.feeds:
            if feed[0] == "input":
                out.append(originals[feed[1]])
            else:
                out.append(evaluate(feed[2].layout(), [originals[feed[1]]])[0])
        return out


def _packs(schedule: Schedule, placeholders: list, constant: set, stage_names: set) -> tuple:
    """The qualifying packs and the trace without them (and without the instructions on their stages)."""
    trace = schedule.to_json()
    decisions = trace.get("decisions") or {}
    by_name = {t.name: j for j, t in enumerate(placeholders)}
    packs, dropped, kept = [], set(), []
    for ins in trace["instructions"]:
        kind, inputs, attrs, outputs = ins
        if any(i in dropped or str(i).split(".")[0] in dropped for i in inputs):
            continue                       # an instruction on a pack stage moved out of the kernel
        if kind == "skip_padding" and attrs.get("tensor") in dropped:
            continue                       # (a padded pack moved out is a placeholder: no stage to skip the padding of)
        if kind == "pack" and inputs and inputs[0] in by_name and by_name[inputs[0]] in constant \
                and all(p.source is not placeholders[by_name[inputs[0]]] for p in packs):
            attrs = _resolve(attrs, decisions)
            consumers = attrs.get("consumers")
            # a subsampling pack (``strides``) stays in the kernel: the build-time copy is a plain relayout
            if (consumers is None or set(consumers) <= stage_names) and not attrs.get("strides"):
                source = placeholders[by_name[inputs[0]]]
                splits = {int(d): min(int(f), source.shape[int(d)]) for d, f in (attrs.get("splits") or {}).items()}
                keys = [k for d in range(source.ndim) for k in ((f"{d}.o", f"{d}.i") if d in splits else (str(d),))]
                order = [str(k) for k in attrs.get("order") or
                         ([k for k in keys if not k.endswith(".i")] + [k for k in keys if k.endswith(".i")])]
                packs.append(_Pack(source, outputs[0], splits, order, set(consumers) if consumers else None))
                dropped.add(outputs[0])
                continue
        kept.append(ins)
    return packs, {**trace, "instructions": kept}


def prepack(tensors: list, schedule: Schedule, constant: set) -> Prepacked | None:
    """``schedule`` (on ``tensors``) with the packs of constant placeholders moved out, or None if none
    qualifies. ``constant``: indices, among the workload's placeholders, of the constant inputs."""
    placeholders = [t for t in tensors if t.is_placeholder]
    outputs = [t for t in tensors if not t.is_placeholder]
    stages = [t for t in topo_stages(tensors) if not t.is_placeholder]
    packs, trace = _packs(schedule, placeholders, constant, {t.name for t in stages})
    if not packs:
        return None
    packed = {id(p.source): (p, te.placeholder(p.shape, p.source.dtype, p.name)) for p in packs}
    memo: dict = {}

    def rebuilt(t: Tensor) -> Tensor:
        if t.is_placeholder:
            return t
        if id(t) in memo:
            return memo[id(t)]

        def fn(node):
            if not isinstance(node, TensorRead):
                return None
            idx = tuple(rewrite(i, fn) for i in node.indices)
            hit = packed.get(id(node.tensor))
            if hit is not None and (hit[0].consumers is None or t.name in hit[0].consumers):
                return TensorRead(hit[1], hit[0].index(idx))
            return TensorRead(rebuilt(node.tensor), idx)
        body = rewrite(t.op.body, fn)
        new = Tensor(t.shape, t.dtype, t.name, ComputeOp(t.op.axes, body))
        memo[id(t)] = new
        return new

    new_outputs = [rebuilt(t) for t in outputs]
    order = [id(p.source) for p in packs]
    feeds = [("input", j) for j in range(len(placeholders))]
    feeds += [("packed", placeholders.index(packed[k][0].source), packed[k][0]) for k in order]
    new_tensors = placeholders + [packed[k][1] for k in order] + new_outputs
    return Prepacked(Schedule.from_json(new_tensors, trace), new_tensors, feeds, packs)


def packed_bytes(pre: Prepacked) -> int:
    """Bytes of the packed copies (memory the model holds besides the original weights)."""
    return sum(math.prod(p.shape) * np.dtype(p.source.dtype).itemsize for p in pre.packs)


@dataclass(frozen=True, eq=False)
class PackedKernel:
    """A candidate to measure whose constant inputs are packed outside the timed call.

    ``func`` is the prepacked kernel (parameters: ``pre.tensors``); the measurer packs the constants
    of its workload once per distinct pack (:func:`pack_key`) and passes the copies after the
    original inputs, as a model build does (:func:`tuner.model_compile.build_kernels`).
    """
    func: object             # PrimFunc
    pre: Prepacked

    def __hash__(self):
        return hash(self.func)

    def __eq__(self, other):
        return isinstance(other, PackedKernel) and self.func == other.func


def pack_key(pack: _Pack, source_index: int) -> tuple:
    """What makes two packs of one workload's input the same array."""
    return (source_index, tuple(sorted(pack.splits.items())), tuple(pack.order))


def packed_arrays(pre: Prepacked, originals: list, cache: dict | None = None) -> list:
    """The packed copies ``pre`` reads (its placeholders past the original ones), computed from the
    original input arrays; ``cache`` (pack_key -> array) spares recomputing a pack another candidate
    made the same way."""
    out = []
    for feed in pre.feeds:
        if feed[0] != "packed":
            continue
        key = pack_key(feed[2], feed[1])
        if cache is not None and key in cache:
            out.append(cache[key])
            continue
        arr = evaluate(feed[2].layout(), [originals[feed[1]]])[0]
        if cache is not None:
            cache[key] = arr
        out.append(arr)
    return out


def replaced_inputs(pre: Prepacked) -> list:
    """Indices of the original inputs that ``pre``'s kernel no longer reads (every read goes to a pack)."""
    read = {id(r.tensor) for t in topo_stages(pre.tensors) if not t.is_placeholder for r in reads(t.op.body)}
    sources = {feed[1] for feed in pre.feeds if feed[0] == "packed"}
    return sorted(j for j in sources if id(pre.tensors[j]) not in read)


def constant_indices(tensors: list, names) -> set:
    """Indices, among ``tensors``' placeholders, of the placeholders named in ``names``.
    Raises ValueError naming an unknown name."""
    placeholders = [t.name for t in tensors if t.is_placeholder]
    unknown = [n for n in names if n not in placeholders]
    if unknown:
        raise ValueError(f"no input named {', '.join(map(repr, unknown))} (the workload's inputs: "
                         f"{', '.join(placeholders)})")
    return {placeholders.index(n) for n in names}
