"""Which values are stored in a layout other than the graph's row-major one.

A conv's output (and its fused epilogue) is computed with the channels innermost,
:data:`~graph.lower.core.NHWC` = (N, H*W, C): the conv is then a matrix product whose vector
axis is the output channels, with the weights packed into panels, which the generated space
tiles well; in NCHW the vector axis is a row of the image (7 to 112 wide), and the heuristic
start ran 5-10x slower (docs/decisions/024-model-conv-nhwc-layout.md). Consumers read such a value
through its layout (index arithmetic in :class:`~graph.lower.core.Val`), so any op may follow.
A group of pools and elementwise ops that reads such a value keeps the layout (its output is
NHWC too: the pool then vectorizes over the channels instead of reading across them). Graph
inputs and outputs stay row-major: a graph output such a group computes is renamed
``<name>.nhwc`` and an Identity group (a transposing copy) writes the output
(:func:`plan_layouts`).
"""
from __future__ import annotations

import dataclasses

from graph.ir import Graph, Node
from graph.lower.core import NHWC, block_of, blocked
from graph.lower.linalg import conv_block, grouped_block, is_blocked_depthwise
from graph.ops.registry import Pattern, get_op
from tensorir.target import Target
from tensorir.tir.transform.vector_chunks import vector_chunks


def out_blocks(lanes: int | None = None) -> tuple:
    """Output-channel blocks of a blocked conv output, preferred first: two vectors of float32 (the
    convolution rule's register tile starts with two weight vectors per broadcast: one contiguous
    stream of packed weights), one vector, 8. AVX-512: 32, 16, 8 (ResNet-18 at 1 thread: the 64@56
    convs 1.72-1.85 ms with blocks of 32 against 2.07-2.33 with 16; decision 035)."""
    lanes = lanes or Target.host().lanes32
    return tuple(sorted({2 * lanes, lanes, 8}, reverse=True))


SPATIAL = ("MaxPool", "AveragePool", "GlobalAveragePool")
"""Ops that keep a value's NHWC layout (besides elementwise and broadcast ops)."""


def _keeps_layout(graph: Graph, group, layouts: dict) -> bool:
    for n in group.nodes:
        try:
            pattern = get_op(n.op).pattern
        except KeyError:
            return False
        if n.op not in SPATIAL and pattern > Pattern.BROADCAST:
            return False
    return any(layouts.get(v) == NHWC for v in group.inputs)


def choose_layouts(graph: Graph, groups: list) -> dict:
    """Value -> layout: NHWC for the output of every Conv group, and of every group of pools and
    elementwise ops reading an NHWC value, graph outputs excepted (:func:`plan_layouts` handles
    those); ``groups`` in topological order."""
    layouts = {}
    for g in groups:
        if g.outputs[0] not in graph.outputs and _wants_nhwc(graph, g, layouts):
            layouts[g.outputs[0]] = NHWC
    return layouts


def _wants_nhwc(graph: Graph, group, layouts: dict) -> bool:
    if len(group.outputs) != 1 or group.outputs[0] != group.nodes[-1].outputs[0]:
        return False
    t = graph.types[group.outputs[0]]
    if t.rank != 4:
        return False
    anchor = next((n for n in group.nodes if n.op == "Conv"), None)
    if anchor is not None:
        return t.shape == graph.types[anchor.outputs[0]].shape
    return _keeps_layout(graph, group, layouts)


def plan_layouts(graph: Graph, groups: list) -> tuple:
    """``(graph, groups, layouts)``: NHWC for every Conv group's output and every group of pools and
    elementwise ops reading an NHWC value; where such a value is a graph output, the group writes
    ``<name>.nhwc`` and an Identity group after it the row-major output (groups stay in order)."""
    return _with_relayouts(graph, groups, lambda g, chosen: NHWC if _wants_nhwc(graph, g, chosen) else None, "nhwc")


def _with_relayouts(graph: Graph, groups: list, layout_of, suffix: str) -> tuple:
    """``(graph, groups, layouts)`` with ``layout_of(group, layouts so far)`` (None: row-major) for each
    group's output; a graph output so laid out is written as ``<name>.<suffix>`` and copied to the
    row-major output by an Identity group right after it."""
    from graph.fusion import FusedGroup
    layouts, out_groups, types = {}, [], dict(graph.types)
    for g in groups:
        layout = layout_of(g, layouts)
        if layout is None:
            out_groups.append(g)
            continue
        out = g.outputs[0]
        if out not in graph.outputs:
            layouts[out] = layout
            out_groups.append(g)
            continue
        inner = f"{out}.{suffix}"
        while inner in types:
            inner += "_"
        types[inner] = graph.types[out]
        last = g.nodes[-1].with_(outputs=(inner,))
        out_groups.append(dataclasses.replace(g, nodes=g.nodes[:-1] + (last,), outputs=(inner,)))
        copy = Node(f"{g.nodes[-1].name}.relayout", "Identity", (inner,), (out,))
        out_groups.append(FusedGroup((copy,), (inner,), (out,), Pattern.ELEMWISE))
        layouts[inner] = layout
    if len(out_groups) == len(groups):
        return graph, groups, layouts
    nodes = tuple(n for g in out_groups for n in g.nodes)
    return graph.replace(nodes=nodes, types=types), out_groups, layouts


def _anchor_types(graph: Graph, group):
    """``(anchor, output type, data type, weights)`` of a group anchored by a conv with constant 4-d
    float weights whose epilogue keeps the conv's shape, else None."""
    anchor = next((n for n in group.nodes if n.op == "Conv"), None)
    if anchor is None or len(group.outputs) != 1 or group.outputs[0] != group.nodes[-1].outputs[0]:
        return None
    t = graph.types[group.outputs[0]]
    x = graph.types[anchor.inputs[0]]
    w = graph.constants.get(anchor.inputs[1]) if len(anchor.inputs) > 1 else None
    if t.rank != 4 or x.rank != 4 or w is None or w.ndim != 4 \
            or t.shape != graph.types[anchor.outputs[0]].shape or t.dtype not in ("float32", "float64") \
            or x.dtype != t.dtype or w.dtype != t.dtype:
        return None
    return anchor, t, x, w


# A block of output channels whose register tile cannot cover a divisor of the output row is skipped
# for the next (docs/decisions/055-avx2-narrow-rows-take-one-vector-blocks.md); False: the first that divides
BLOCKS_FIT_ROWS = True
# blocks compared by channels per vector piece (odd channel counts, and counts that only 8 of 16 lanes divide);
# False: by the share of whole vectors filled, and 8 wherever it divides (docs/decisions/086-blocks-by-lanes-per-piece.md)
BLOCKS_BY_PIECES = True


def out_block(k: int, width: int | None = None, lanes: int | None = None) -> int:
    """The block of ``k`` output channels: the first of :func:`out_blocks` that divides ``k`` (and, given
    the output row's ``width``, whose tile fits a row: :func:`row_fits`), else :func:`odd_block`, so that
    a conv with an odd channel count does not turn its producers row-major.  Where that first block is
    narrower than a vector (8 of 16 lanes), the odd block instead if its vectors carry more lanes per piece
    (1000 channels: 40 = 16 + 16 + 8 rather than 8)."""
    lanes = lanes or Target.host().lanes32
    dividing = [b for b in out_blocks(lanes) if k % b == 0]
    blocks = dividing
    if width is not None and BLOCKS_FIT_ROWS:
        blocks = [b for b in blocks if row_fits(b, width, lanes)] or blocks
    if not blocks:
        return odd_block(k, lanes)
    if dividing[0] >= lanes or not by_pieces(lanes):
        return blocks[0]
    odd = odd_block(k, lanes)
    fits = width is None or not BLOCKS_FIT_ROWS or row_fits(odd, width, lanes)
    return odd if fits and lanes_per_piece(odd, lanes) > lanes_per_piece(blocks[0], lanes) else blocks[0]


def by_pieces(lanes: int) -> bool:
    """Whether blocks are compared by channels per vector piece: with 16 lanes (AVX-512), where it was
    measured; AVX2's 8 lanes keep decision 057's rule."""
    return BLOCKS_BY_PIECES and lanes >= 16


def lanes_per_piece(block: int, lanes: int) -> float:
    """Channels per vector register of a block: lowering cuts a vector whose width is not a power of two
    into pieces (:func:`tensorir.tir.transform.vector_chunks.vector_chunks`; 25 -> 16 + 8 + 1), each an
    FMA of its own."""
    return block / sum(-(-n // lanes) for _, n in vector_chunks(block, lanes))


def odd_block(k: int, lanes: int) -> int:
    """The block of ``k`` channels no block of 8 divides: the divisor up to four vectors whose vectors
    carry the most channels per piece (ties: the largest up to two vectors, else the largest).  Each
    block's last vector is partial, so 20 channels on AVX2 take one block of 8 + 8 + 4 lanes, not two of 8 + 2:
    a 1x1 conv to 20 channels at 31x31 ran at 21 GFLOP/s in blocks of 10, 37 in one of 20
    (docs/decisions/057-odd-channel-counts-take-the-fullest-vectors.md).  With 16 lanes, the most channels
    per vector piece instead: 100 channels take 50 = 16 x 3 + 2, not 25 = 16 + 8 + 1 (decision 086)."""
    def key(d):
        fill = lanes_per_piece(d, lanes) if by_pieces(lanes) else d / (-(-d // lanes) * lanes)
        return (fill, d <= 2 * lanes, d)
    return max((d for d in range(1, 4 * lanes + 1) if k % d == 0), key=key)


def row_fits(block: int, width: int, lanes: int) -> bool:
    """Whether a register tile of one ``block`` of output channels over some divisor (2 or more) of an
    output row of ``width`` fits the vector registers (accumulators, the block's weight vectors and a
    broadcast; 16 registers of 8 lanes, 32 of 16): AVX2's two-vector blocks leave a row of 7 one column
    per tile or a guarded edge (ResNet-18's 3x3 512@7 started at 34 GFLOP/s in blocks of 16, 57 in 8)."""
    registers = 32 if lanes >= 16 else 16
    m = -(-block // lanes)
    return width < 2 or any(width % d == 0 and m * d + m + 1 <= registers for d in range(2, width + 1))


# a stem (under 8 input channels per block: computed on row-major data, decision 023) writes its output blocked
# where blocked groups read it: its register tile is channel-innermost, so a row-major output is a transposing
# copy; False: row-major (docs/decisions/087-stem-outputs-are-blocked.md)
STEM_OUTPUTS_BLOCKED = True
# a window conv whose output channels fill their vectors no better than its output columns would, and not whole
# vectors, is computed row-major (the convolution rule's columns form vectorizes its output columns, decision 088)
# where its data is row-major or comes from groups as fast row-major; False: blocked
# (docs/decisions/089-few-channel-windows-stay-row-major.md)
FEW_CHANNEL_WINDOWS_ROW_MAJOR = True


def columns_conv(k: int, width: int, taps: int, lanes: int) -> bool:
    """Whether a group-1 conv to ``k`` channels over output rows of ``width`` with ``taps`` window taps is
    computed row-major on vectors of columns: a window (``taps`` > 1; a row-major 1x1 is a product over its
    positions, decision 081) whose block of output channels carries fewer channels per vector piece
    (:func:`lanes_per_piece`) than its output row carries columns, and whose columns fill whole vectors as
    well as its channels (the convolution rule's start then takes the columns form, schedules/conv_columns.py);
    with 8 lanes (16 registers) only ``k`` within one vector, as that start requires there. DenseNet blocks:
    growth 12 (8 + 4 lanes) at 32-56 columns ran 1.22-1.41x as fast row-major; growth 20 at 20 columns and
    24 at 28, with at least as many channels per piece as columns, 0.6x."""
    def fill(n):
        return n / (-(-n // lanes) * lanes)
    if not FEW_CHANNEL_WINDOWS_ROW_MAJOR or taps == 1 or k % lanes == 0 or (lanes < 16 and k > lanes):
        return False
    return fill(width) >= fill(k) and lanes_per_piece(width, lanes) > lanes_per_piece(out_block(k, width, lanes), lanes)


def _columns_group(graph: Graph, group) -> bool:
    """Whether a group is anchored by a group-1 conv (not a stem) that :func:`columns_conv` computes row-major."""
    found = _anchor_types(graph, group)
    if found is None or found[0].attr("group", 1) != 1:
        return False
    _, t, x, w = found
    return conv_block(x.shape[1]) >= 8 and columns_conv(t.shape[1], t.shape[3], w.shape[2] * w.shape[3],
                                                        Target.host().lanes32)


def _pointwise_group(graph: Graph, group) -> bool:
    """Whether a group is anchored by a group-1 1x1 conv: computed row-major, a product over its positions
    (decision 081), about as fast as blocked."""
    found = _anchor_types(graph, group)
    return found is not None and found[0].attr("group", 1) == 1 and found[3].shape[2] * found[3].shape[3] == 1


def columns_groups(graph: Graph, groups: list) -> set:
    """Ids of the groups computed row-major on vectors of columns (:func:`columns_conv`): those whose data is
    computed, back to graph inputs, only by elementwise, concat or pooling groups, 1x1 convs and other such
    groups. A row-major conv needs row-major data, so its producers turn row-major too; a window conv of
    many channels among them would run slower so (an ESPCN's last conv to 4 channels turned the whole
    net row-major: 2.3x as long), and the conv stays blocked."""
    producer = {v: g for g in groups for v in g.outputs}
    chosen = {id(g) for g in groups if _columns_group(graph, g)}
    while True:
        drop = set()
        for g in groups:
            if id(g) not in chosen:
                continue
            todo, seen = [next(n for n in g.nodes if n.op == "Conv").inputs[0]], set()
            while todo and id(g) not in drop:
                p = producer.get(todo.pop())
                if p is None or id(p) in seen or id(p) in chosen:
                    continue
                seen.add(id(p))
                if _is_conv_group(p) and not _pointwise_group(graph, p):
                    drop.add(id(g))
                elif _is_conv_group(p):
                    todo.append(next(n for n in p.nodes if n.op in ("Conv", "ConvTranspose")).inputs[0])
                else:
                    todo.extend(v for v in p.inputs if v not in graph.constants)
        if not drop:
            return chosen
        chosen -= drop


def _plain_conv_block(graph: Graph, group, stem: bool):
    """The output block of a group anchored by a group-1 conv (constant 4-d weights, float, an epilogue that
    keeps the conv's shape) with at least 8 input channels per block (``stem`` False: the blocked form
    computes it) or fewer (``stem`` True: a stem, which reads row-major data), else None."""
    found = _anchor_types(graph, group)
    if found is None or found[0].attr("group", 1) != 1:
        return None
    _, t, x, _ = found
    # a stem's few input channels: the row-major form packs them per row task as plain rows
    # (decision 023); computed blocked, ResNet-18's 7x7 stem took 2.2x as long
    if (conv_block(x.shape[1]) < 8) != stem:
        return None
    return out_block(t.shape[1], t.shape[3])


def _blocked_grouped(graph: Graph, group):
    """The block of a group anchored by a grouped conv the blocked grouped form computes (its output
    blocks read whole input blocks of their group: one vector, else 8 channels), else None."""
    found = _anchor_types(graph, group)
    if found is None or found[0].attr("group", 1) == 1:
        return None
    anchor, t, x, w = found
    if is_blocked_depthwise(x.shape[1], t.shape[1], anchor.attr("group", 1), w.shape):
        return None
    lanes = Target.host().lanes32
    return grouped_block(x.shape[1], t.shape[1], anchor.attr("group", 1), tuple(sorted({lanes, 8}, reverse=True)))


def _blocked_depthwise(graph: Graph, group) -> bool:
    """Whether a group is anchored by a depthwise conv the blocked form computes (one input channel
    per output channel, constant weights, float, an epilogue that keeps the conv's shape)."""
    found = _anchor_types(graph, group)
    if found is None:
        return False
    anchor, t, x, w = found
    return is_blocked_depthwise(x.shape[1], t.shape[1], anchor.attr("group", 1), w.shape)


def _is_conv_group(group) -> bool:
    return any(n.op in ("Conv", "ConvTranspose") for n in group.nodes)


# A grouped conv the blocked form computes stays blocked when it writes a graph output from row-major data
# (its row-major form ran 2.0 ms against 0.27 for 512@14 in 32 groups of 16 alone); why:
# docs/decisions/076-lane-pattern-loads.md
GROUPED_OUTPUTS_BLOCKED = True


def choose_blocked(graph: Graph, groups: list) -> dict:
    """Value -> blocked layout (``nchw32c``, ``nchw16c``, ``nchw8c``): the output of every conv group the blocked
    form computes (group-1 and many-group convs), of every depthwise conv group (in its input's block) and
    of every group of pools and
    elementwise ops that reads such a value, so that consecutive convolutions exchange their
    activations in the layout they compute in (no repack, no transposing copy-out;
    docs/decisions/035-blocked-activations-between-convs.md, 037-blocked-depthwise.md).

    A value is not blocked where a conv computed row-major (a channel multiplier, groups that fit no
    block, non-constant weights, a stem) reads it: that conv keeps reading row-major data, which the convolution rule packs
    itself. Other readers read through the layout (index arithmetic of :class:`~graph.lower.core.Val`). A graph output
    may be blocked (:func:`plan_blocked` then adds a copy to row-major). ``groups`` in topological order."""
    readers: dict = {}
    for g in groups:
        for v in g.inputs:
            readers.setdefault(v, []).append(g)
    columns = columns_groups(graph, groups)
    conv_block = {id(g): None if id(g) in columns else _plain_conv_block(graph, g, stem=False)
                  or _blocked_grouped(graph, g) for g in groups}
    # a stem reads row-major data (so it counts as a row-major conv below) but may write blocks
    stems = {id(g): STEM_OUTPUTS_BLOCKED and _plain_conv_block(graph, g, stem=True) for g in groups}
    # a depthwise conv computes blocked in its input's block (channels map one to one), or relays a
    # row-major input into the block its channels would get as a conv's output
    depthwise = {id(g): next(n for n in g.nodes if n.op == "Conv").inputs[0] for g in groups
                 if _blocked_depthwise(graph, g)}
    keeps = {id(g) for g in groups if len(g.outputs) == 1 and graph.types[g.outputs[0]].rank == 4
             and not _is_conv_group(g) and _keeps_layout(graph, g, {v: NHWC for v in g.inputs})}
    # a channel concat that blocked convs read is written in blocks (a U-Net's upsampled and skip values)
    concats = {id(g) for g in groups if BLOCKED_CONCATS and _channel_concat(graph, g)
               and any(conv_block[id(r)] or id(r) in depthwise for r in readers.get(g.outputs[0], []))}
    banned: set = set()
    while True:
        layouts = {}
        for g in groups:
            if id(g) in banned:
                continue
            out = g.outputs[0]
            if conv_block[id(g)]:
                layouts[out] = blocked(conv_block[id(g)])
            elif stems[id(g)]:
                layouts[out] = blocked(stems[id(g)])
            elif id(g) in depthwise:
                layouts[out] = layouts.get(depthwise[id(g)]) or blocked(out_block(graph.types[out].shape[1]))
            elif id(g) in concats:
                layouts[out] = blocked(_concat_block(graph, g, layouts))
            elif id(g) in keeps:
                c = graph.types[out].shape[1]
                src = next((layouts[v] for v in g.inputs if v in layouts and graph.types[v].rank == 4
                            and graph.types[v].shape[1] == c), None)
                if src is not None:
                    layouts[out] = src
        bad = set()
        for g in groups:
            # a graph output is copied to row-major after a blocked group: worth it only where its
            # conv reads blocked data (else the conv writes row-major itself, one kernel fewer; a pool or
            # elementwise group writes it row-major reading through the layout, as the copy would)
            if g.outputs and g.outputs[0] in layouts and g.outputs[0] in graph.outputs:
                anchor = next((n for n in g.nodes if n.op == "Conv"), None)
                if anchor is None or anchor.inputs[0] not in layouts and not (GROUPED_OUTPUTS_BLOCKED and
                                                                            conv_block[id(g)] and anchor.attr("group", 1) > 1):
                    bad.add(id(g))
        for v in layouts:
            for r in readers.get(v, []):
                # a conv computed row-major needs row-major data (its rule packs it); other readers
                # (keeps, reshapes, reductions, products) read through the layout
                if _is_conv_group(r) and not ((conv_block[id(r)] or id(r) in depthwise) and id(r) not in banned):
                    bad.add(id(next(g for g in groups if g.outputs[0] == v)))
        if not bad - banned:
            return layouts
        banned |= bad


# a group ending in a channel Concat whose value a blocked conv reads writes it in blocks, so the conv reads whole
# vectors; False: row-major, which the conv packs itself (docs/decisions/095-blocked-concats.md)
BLOCKED_CONCATS = True


def _channel_concat(graph: Graph, group) -> bool:
    """Whether ``group`` ends in a Concat along the channels of a rank-4 float value and holds no conv."""
    last = group.nodes[-1]
    if len(group.outputs) != 1 or last.op != "Concat" or last.outputs[0] != group.outputs[0] or _is_conv_group(group):
        return False
    t = graph.types[group.outputs[0]]
    return t.rank == 4 and t.dtype in ("float32", "float64") and last.attr("axis") in (1, -3)


def _concat_block(graph: Graph, group, layouts: dict) -> int:
    """The block of a channel concat: that of a blocked part where it divides every part's channels (each
    part's blocks then copy whole), else the block a conv output of as many channels takes."""
    parts = [graph.types[v].shape[1] for v in group.nodes[-1].inputs if v]
    for v in group.nodes[-1].inputs:
        b = block_of(layouts.get(v))
        if b and all(c % b == 0 for c in parts):
            return b
    t = graph.types[group.outputs[0]]
    return out_block(t.shape[1], t.shape[3])


def plan_blocked(graph: Graph, groups: list) -> tuple:
    """``(graph, groups, layouts)``: the blocked layouts of :func:`choose_blocked`; where such a value
    is a graph output, its group writes ``<name>.blocked`` and an Identity group after it the
    row-major output (groups stay in order)."""
    chosen = choose_blocked(graph, groups)
    graph, groups, layouts = _with_relayouts(graph, groups, lambda g, _: chosen.get(g.outputs[0]) if g.outputs else None,
                                             "blocked")
    return _blocked_residuals(graph, groups, layouts) if BLOCK_RESIDUALS else (graph, groups, layouts)


# A row-major value that a blocked group adds to its output (a residual: a block's own input) is copied
# into the block once by an Identity group, which the blocked convs reading it read too; False: that group
# reads it row-major, a strided gather per vector (why: docs/decisions/069-row-major-residuals-are-blocked-once.md)
BLOCK_RESIDUALS = True


def _residual_block(graph: Graph, group, v: str, layouts: dict):
    """The block of ``group``'s blocked output if the group reads row-major ``v`` of the output's shape
    other than as its conv's data (an epilogue operand), else None."""
    block = block_of(layouts.get(group.outputs[0])) if len(group.outputs) == 1 else None
    anchor = next((n for n in group.nodes if n.op == "Conv"), None)
    if block is None or anchor is None or anchor.inputs[0] == v or graph.types[v] != graph.types[group.outputs[0]]:
        return None
    return block if any(v in n.inputs for n in group.nodes if n is not anchor) else None


def _blocked_residuals(graph: Graph, groups: list, layouts: dict) -> tuple:
    """``(graph, groups, layouts)`` with a blocked copy of every row-major rank-4 float value that a
    blocked conv group adds to its output; the groups that add it and the blocked convs that read it
    read the copy (the copy goes right before the first of them)."""
    from graph.fusion import FusedGroup
    types, out = dict(graph.types), list(groups)
    for v in sorted({v for g in groups for v in g.inputs}):
        t = graph.types[v]
        if v in layouts or v in graph.constants or t.rank != 4 or t.dtype not in ("float32", "float64"):
            continue
        blocks = {_residual_block(graph, g, v, layouts) for g in out} - {None}
        if len(blocks) != 1:
            continue
        block = blocks.pop()
        copy = f"{v}.nchw{block}c"
        while copy in types:
            copy += "_"
        readers = [n for n, g in enumerate(out) if _residual_block(graph, g, v, layouts) == block
                   or (block_of(layouts.get(g.outputs[0]) if g.outputs else None)
                       and any(n2.op == "Conv" and n2.inputs[0] == v for n2 in g.nodes))]
        for n in readers:
            g = out[n]
            nodes = tuple(node.with_(inputs=tuple(copy if i == v else i for i in node.inputs)) for node in g.nodes)
            out[n] = dataclasses.replace(g, nodes=nodes, inputs=tuple(copy if i == v else i for i in g.inputs))
        types[copy], layouts[copy] = t, blocked(block)
        node = Node(f"{v}.block{block}", "Identity", (v,), (copy,))
        out.insert(readers[0], FusedGroup((node,), (v,), (copy,), Pattern.ELEMWISE))
    if len(out) == len(groups):
        return graph, groups, layouts
    return graph.replace(nodes=tuple(n for g in out for n in g.nodes), types=types), out, layouts
