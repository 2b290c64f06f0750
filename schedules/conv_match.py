"""Recognizing convolution anchors from their index expressions (no operator names): the row-major
forms (a conv, a depthwise conv, a pooling window over NCHW), and the built-in blocked forms of a
model's activations (``conv2d_nchwc``, the blocked depthwise conv, a pooling window over NCHW[b]c).
The convolution rule (``schedules/conv_space.py``) schedules what :func:`find_convs` returns.
"""
from __future__ import annotations

from dataclasses import dataclass

from tensorir.te import AxisKind, Reduce, TensorRead
from tensorir.te.expr import Binary, BinOp, Const, Var
from tensorir.tir.analysis.affine import coefficient, mentions


@dataclass(frozen=True)
class ConvInfo:
    """A recognized convolution anchor."""
    anchor: str
    data: str              # the tensor the anchor reads (placeholder, or the padding stage)
    pad_stage: str | None  # the padding stage (packed, then inlined into its pack)
    weights: str | None    # None: pooling (a depthwise window without weights)
    depthwise: bool
    C: int                 # input channels (depthwise: channels)
    K: int                 # output channels
    P: int
    Q: int
    R: int
    S: int
    c_var: str = ""        # names of the reduce variables (input channels, taps)
    r_var: str = ""
    s_var: str = ""
    ci_var: str = ""       # blocked built-in: the variable of the input channels within a block
    blocked: bool = False  # the built-in blocked form (conv2d_nchwc): layouts given, nothing packed
    cb: int = 0            # its blocks of input and output channels
    kb: int = 0
    stride: int = 1        # of a pooling window or a 1x1 convolution without padding (rows and columns alike)
    grouped: bool = False  # blocked: each output block reads its group's input blocks only
    lane_group: int = 0    # grouped, blocks of whole groups: each lane reads its group's ``lane_group`` channels


def _bare(e, var_set) -> Var | None:
    return e if isinstance(e, Var) and e in var_set else None


def matching_stages(g, match) -> dict:
    """``{stage name: match(g, stage)}`` for the stages of ``g`` where ``match`` answers (not None)."""
    found = ((st.name, match(g, st)) for st in g.stages)
    return {name: info for name, info in found if info is not None}


def find_convs(g) -> dict:
    """``{anchor name: ConvInfo}`` for every convolution-shaped reduction of stage graph ``g``."""
    return matching_stages(g, _match)


def _match(g, st) -> ConvInfo | None:
    body = st.body
    if not isinstance(body, Reduce) or st.dtype not in ("float32", "float64"):
        return None
    spatial = st.spatial_root
    red = {st.root_vars[a] for a in st.root if st.loops[a].kind is AxisKind.REDUCE}
    src = body.source
    if isinstance(src, TensorRead) and len(spatial) == 4:
        return _match_pool(g, st, red, src)
    if isinstance(src, TensorRead) and len(spatial) == 5:
        return _match_pool_blocked(g, st, red, src)
    if body.reducer.value != "sum":
        return None
    if not (isinstance(src, Binary) and src.op is BinOp.MUL and isinstance(src.a, TensorRead)
            and isinstance(src.b, TensorRead)):
        return None
    if len(spatial) == 5:
        return _match_blocked(g, st, red, src) or _match_blocked_depthwise(g, st, red, src)
    if len(spatial) != 4:
        return None
    n, k, p, q = (st.root_vars[a] for a in spatial)
    for d, w in ((src.a, src.b), (src.b, src.a)):
        if len(d.indices) != 4 or len(w.indices) != 4 or d.tensor is w.tensor:
            continue
        wi, di = w.indices, d.indices
        r, s = _bare(wi[2], red), _bare(wi[3], red)
        if r is None or s is None or r == s or wi[0] != k:
            continue
        c = _bare(wi[1], red)
        depthwise = c is None and isinstance(wi[1], Const) and w.tensor.shape[1] == 1
        if c is None and not depthwise:
            continue
        chan = k if depthwise else c
        if di[0] != n or di[1] != chan or not (mentions(di[2], p) and mentions(di[2], r)) \
                or not (mentions(di[3], q) and mentions(di[3], s)) or mentions(di[2], q) or mentions(di[3], p):
            continue
        if red != ({r, s} if depthwise else {c, r, s}):
            continue
        if not getattr(w.tensor, "is_placeholder", False):
            continue
        ok, pad = _data_stage(g, d)
        if not ok:
            continue
        K, P, Q = st.shape[1], st.shape[2], st.shape[3]
        C = K if depthwise else d.tensor.shape[1]
        R, S = w.tensor.shape[2], w.tensor.shape[3]
        stride = 1
        if R * S == 1 and pad is None and not depthwise:
            sh, sw = coefficient(di[2], p), coefficient(di[3], q)
            stride = sh if sh == sw and sh and sh > 1 else 1
        return ConvInfo(st.name, g.name_of(d.tensor), pad, g.name_of(w.tensor), depthwise, C, K, P, Q,
                        R, S, "" if depthwise else c.name, r.name, s.name, stride=stride)
    return None


def _data_stage(g, d) -> tuple:
    """(ok, padding stage name or None) for the tensor a window reads: a placeholder, or one
    elementwise stage of a placeholder read by nothing else (the padding)."""
    if getattr(d.tensor, "is_placeholder", False):
        return True, None
    ps = g.stage_of(d.tensor)
    if ps is None or ps.is_output or ps.is_reduction or len(ps.read_tensors()) != 1 \
            or not getattr(ps.read_tensors()[0], "is_placeholder", False) or len(g.consumers(ps)) != 1:
        return False, None
    return True, ps.name


def _match_pool(g, st, red, d) -> ConvInfo | None:
    """``Y[n, c, p, q] = max or sum over (r, s) of D[n, c, p*st + r, q*st + s]``: pooling, a depthwise
    window without weights."""
    n, c, p, q = (st.root_vars[a] for a in st.spatial_root)
    if len(d.indices) != 4 or len(red) != 2 or d.indices[0] != n or d.indices[1] != c:
        return None
    r = next((v for v in red if mentions(d.indices[2], v)), None)
    s = next((v for v in red if mentions(d.indices[3], v)), None)
    if r is None or s is None or r == s or not mentions(d.indices[2], p) or not mentions(d.indices[3], q) \
            or mentions(d.indices[2], s) or mentions(d.indices[3], r):
        return None
    ok, pad = _data_stage(g, d)
    if not ok:
        return None
    R = next(st.loops[a].extent for a in st.root if st.root_vars[a] == r)
    S = next(st.loops[a].extent for a in st.root if st.root_vars[a] == s)
    C, P, Q = st.shape[1], st.shape[2], st.shape[3]
    sh, sw = coefficient(d.indices[2], p), coefficient(d.indices[3], q)
    return ConvInfo(st.name, g.name_of(d.tensor), pad, None, True, C, C, P, Q, R, S, "", r.name, s.name,
                    stride=sh if sh == sw and sh and sh > 1 else 1)


def _match_pool_blocked(g, st, red, d) -> ConvInfo | None:
    """``Y[n, co, p, q, ci] = max or sum over (r, s) of D[n, co, p*st + r, q*st + s, ci]``: pooling on
    the blocked layout (a model's activations between convolutions)."""
    n, co, p, q, ci = (st.root_vars[a] for a in st.spatial_root)
    di = d.indices
    if len(di) != 5 or len(red) != 2 or di[0] != n or di[1] != co or di[4] != ci:
        return None
    r = next((v for v in red if mentions(di[2], v)), None)
    s = next((v for v in red if mentions(di[3], v)), None)
    if r is None or s is None or r == s or not mentions(di[2], p) or not mentions(di[3], q) \
            or mentions(di[2], s) or mentions(di[3], r):
        return None
    pad = None
    if not getattr(d.tensor, "is_placeholder", False):
        ps = g.stage_of(d.tensor)
        if ps is None or ps.is_output or ps.is_reduction:
            return None
        pad = ps.name
    R = next(st.loops[a].extent for a in st.root if st.root_vars[a] == r)
    S = next(st.loops[a].extent for a in st.root if st.root_vars[a] == s)
    b = st.shape[4]
    C, P, Q = st.shape[1] * b, st.shape[2], st.shape[3]
    return ConvInfo(st.name, g.name_of(d.tensor), pad, None, True, C, C, P, Q, R, S, "", r.name, s.name,
                    "", True, b, b)


def _lane_group(e, ki, ci) -> bool:
    """Whether a data channel index is ``(ki // g) * g + ci``: a block of whole groups, each lane ``ki``
    reading its own group's channels (a grouped conv's lane form, ``graph.lower.linalg.LANE_GROUPS``)."""
    if not (isinstance(e, Binary) and e.op is BinOp.ADD and e.b == ci and isinstance(e.a, Binary)
            and e.a.op is BinOp.MUL and isinstance(e.a.b, Const)):
        return False
    div = e.a.a
    return isinstance(div, Binary) and div.op is BinOp.FLOORDIV and div.a == ki and div.b == e.a.b


def _blocked_data(g, d) -> tuple:
    """(ok, padding stage name or None) for the data a blocked form reads: a placeholder (the
    producer's blocked output), or an elementwise stage of it (the padding, or a relayout)."""
    if getattr(d.tensor, "is_placeholder", False):
        return True, None
    ps = g.stage_of(d.tensor)
    if ps is None or ps.is_output or ps.is_reduction:
        return False, None
    return True, ps.name


def _match_blocked_depthwise(g, st, red, src) -> ConvInfo | None:
    """``Y[n, c, p, q, ci] = sum over (r, s) of D[n, c, p.., q.., ci] * W[c, r, s, ci]``: a depthwise
    conv on the blocked layout, its weights packed to (C/b, R, S, b)."""
    n, co, p, q, ci = (st.root_vars[a] for a in st.spatial_root)
    for d, w in ((src.a, src.b), (src.b, src.a)):
        if len(d.indices) != 5 or len(w.indices) != 4 or not getattr(w.tensor, "is_placeholder", False):
            continue
        wi, di = w.indices, d.indices
        r, s = _bare(wi[1], red), _bare(wi[2], red)
        if r is None or s is None or r == s or red != {r, s} or wi[0] != co or wi[3] != ci:
            continue
        if di[0] != n or di[1] != co or di[4] != ci or not (mentions(di[2], p) and mentions(di[2], r)) \
                or not (mentions(di[3], q) and mentions(di[3], s)) or mentions(di[2], s) or mentions(di[3], r):
            continue
        ok, pad = _blocked_data(g, d)
        if not ok:
            continue
        b = st.shape[4]
        return ConvInfo(st.name, g.name_of(d.tensor), pad, g.name_of(w.tensor), True, st.shape[1] * b,
                        st.shape[1] * b, st.shape[2], st.shape[3], w.tensor.shape[1], w.tensor.shape[2],
                        "", r.name, s.name, "", True, b, b)
    return None


def _match_blocked(g, st, red, src) -> ConvInfo | None:
    """``Y[n, ko, p, q, ki] = sum D[n, co, p.., q.., ci] * W[ko, co, r, s, ci, ki]`` (conv2d_nchwc)."""
    n, ko, p, q, ki = (st.root_vars[a] for a in st.spatial_root)
    for d, w in ((src.a, src.b), (src.b, src.a)):
        if len(d.indices) != 5 or len(w.indices) != 6 or not getattr(w.tensor, "is_placeholder", False):
            continue
        wi, di = w.indices, d.indices
        co, r, s, ci = (_bare(wi[i], red) for i in (1, 2, 3, 4))
        if None in (co, r, s, ci) or len({co, r, s, ci}) != 4 or red != {co, r, s, ci} \
                or wi[0] != ko or wi[5] != ki:
            continue
        # grouped: the output block's group's input blocks, D[n, ko * m + co, ...] (block-diagonal weights)
        grouped = di[1] != co
        if grouped and not (mentions(di[1], ko) and mentions(di[1], co) and coefficient(di[1], co) == 1):
            continue
        if di[0] != n or not (di[4] == ci or grouped and _lane_group(di[4], ki, ci)) \
                or not (mentions(di[2], p) and mentions(di[2], r)) or not (mentions(di[3], q) and mentions(di[3], s)):
            continue
        pad = None
        if not getattr(d.tensor, "is_placeholder", False):
            ps = g.stage_of(d.tensor)
            if ps is None or ps.is_output or ps.is_reduction:
                continue
            pad = ps.name
        cb, kb = w.tensor.shape[4], w.tensor.shape[5]
        lane_group = 0 if di[4] == ci else int(di[4].a.b.value)
        return ConvInfo(st.name, g.name_of(d.tensor), pad, g.name_of(w.tensor), False,
                        w.tensor.shape[1] * cb, w.tensor.shape[0] * kb, st.shape[2], st.shape[3],
                        w.tensor.shape[2], w.tensor.shape[3], co.name, r.name, s.name, ci.name, True, cb, kb,
                        grouped=grouped, lane_group=lane_group)
    return None
