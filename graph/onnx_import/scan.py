"""The up-front scan: everything that stops a model from converting, found before converting.

Unsupported op types (with the opset and the nodes using them), attributes a converter does not
honour or values it refuses, graph inputs with symbolic dimensions not pinned by ``shapes`` or
pins that contradict the model: all are gathered into ONE :class:`OnnxImportError`.
"""
from __future__ import annotations

import onnx
from onnx import helper

from graph.onnx_import.errors import OnnxImportError, OnnxNode
from graph.onnx_import.registry import CONVERTERS, MIN_OPSET
from graph.ops.elementwise import DTYPES

DEFAULT_DOMAINS = ("", "ai.onnx")


def model_opset(model: onnx.ModelProto) -> int:
    """The default domain's opset, refused in one line outside the supported range."""
    current = onnx.defs.onnx_opset_version()
    versions = [o.version for o in model.opset_import if o.domain in DEFAULT_DOMAINS]
    if not versions:
        raise OnnxImportError(f"{model.graph.name or 'model'}: the model imports no ai.onnx opset")
    opset = versions[0]
    if not MIN_OPSET <= opset <= current:
        raise OnnxImportError(f"{model.graph.name or 'model'}: opset {opset} is not supported (supported: "
                              f"{MIN_OPSET} to {current}; convert it with onnx.version_converter)")
    return opset


def _decode(value):
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, list):
        return tuple(_decode(v) for v in value)
    return value


def decode_node(node: onnx.NodeProto, opset: int, index: int) -> OnnxNode:
    """``node`` with decoded attributes and its op's version in ``opset`` (0 if ONNX has no such op)."""
    since = 0
    if node.domain in DEFAULT_DOMAINS:
        try:
            since = onnx.defs.get_schema(node.op_type, opset, "").since_version
        except onnx.defs.SchemaError:
            since = 0
    attrs = {a.name: _decode(helper.get_attribute_value(a)) for a in node.attribute}
    name = node.name or (node.output[0] if node.output and node.output[0] else f"{node.op_type}_{index}")
    return OnnxNode(name, node.op_type, node.domain, tuple(node.input), tuple(node.output), attrs, since)


def _names(nodes: list) -> str:
    shown = ", ".join(nodes[:5])
    return shown + (f" and {len(nodes) - 5} more" if len(nodes) > 5 else "")


def _scan_nodes(nodes: list, opset: int, initializer_shapes: dict) -> list:
    unsupported, problems = {}, []
    for node in nodes:
        conv = CONVERTERS.get(node.op_type) if node.domain in DEFAULT_DOMAINS and node.since else None
        if conv is None:
            domain = f"{node.domain}." if node.domain not in DEFAULT_DOMAINS else ""
            unsupported.setdefault(f"{domain}{node.op_type}", []).append(node.name)
            continue
        for key, value in node.attrs.items():
            if key not in conv.attrs:
                problems.append(f"{node.label}: attribute {key} is not supported")
            elif conv.attrs[key] is not None and (why := conv.attrs[key](value)):
                shown = repr(value) if isinstance(value, (int, float, str, tuple)) else "<tensor>"
                problems.append(f"{node.label}: {key}={shown} {why}")
        if conv.check:
            problems += [f"{node.label}: {p}" for p in conv.check(node, initializer_shapes)]
    ops = [f"{op} ({'not in ' if op in CONVERTERS else ''}opset {opset}) at node{'s' if len(n) > 1 else ''} "
           f"{_names(n)}" for op, n in unsupported.items()]
    return ([f"unsupported op type{'s' if len(ops) > 1 else ''}: " + "; ".join(ops)] if ops else []) + problems


def _static_shape(value: onnx.ValueInfoProto):
    """(dims with None for symbolic ones, dim labels) of a graph input, or (None, None) unranked."""
    t = value.type.tensor_type
    if not t.HasField("shape"):
        return None, None
    dims, labels = [], []
    for i, d in enumerate(t.shape.dim):
        known = d.HasField("dim_value")
        dims.append(d.dim_value if known else None)
        labels.append(str(d.dim_value) if known else (d.dim_param or f"?{i}"))
    return dims, labels


def input_shape(value: onnx.ValueInfoProto, pinned) -> tuple | str:
    """The static shape of a graph input, or a problem naming the input and the dimension."""
    dims, labels = _static_shape(value)
    if pinned is not None:
        pinned = tuple(pinned)
        if dims is not None and (len(pinned) != len(dims) or any(
                d is not None and d != p for d, p in zip(dims, pinned))):
            return f"input {value.name} is [{','.join(labels)}] in the model, pinned as {list(pinned)}"
        if any(isinstance(p, bool) or not isinstance(p, int) or p < 0 for p in pinned):
            return f"input {value.name}: pinned shape {list(pinned)} must be non-negative ints"
        return pinned
    if dims is None:
        return (f"input {value.name} has no shape: pin it (shapes={{{value.name!r}: (...)}}; on the command line "
                f"--shape {value.name}=DIMS)")
    free = [f"dimension {i} ({labels[i]})" for i, d in enumerate(dims) if d is None]
    if free:
        return (f"input {value.name} [{','.join(labels)}] has the symbolic {', '.join(free)}: pin it "
                f"(shapes={{{value.name!r}: (...)}}; on the command line --shape {value.name}=DIMS)")
    return tuple(dims)


def element_dtype(elem_type: int) -> str | None:
    """The numpy dtype name of an ONNX element type the graph holds, else None."""
    try:
        name = helper.tensor_dtype_to_np_dtype(elem_type).name
    except (KeyError, TypeError, ValueError):
        return None
    return name if name in DTYPES else None


def input_dtype(value: onnx.ValueInfoProto) -> str | None:
    return element_dtype(value.type.tensor_type.elem_type)


def scan(model: onnx.ModelProto, nodes: list, opset: int, shapes: dict) -> dict:
    """Static shapes and dtypes of the runtime inputs; raises OnnxImportError listing every problem."""
    g = model.graph
    initializers = {t.name: tuple(t.dims) for t in g.initializer}
    problems = _scan_nodes(nodes, opset, initializers)
    if len(g.sparse_initializer):
        problems.append("sparse initializers are not supported")
    read = {v for n in g.node for v in n.input}
    odd = [t.name for t in g.initializer if t.name in read and element_dtype(t.data_type) is None]
    if odd:
        problems.append(f"initializers of unsupported element types: {_names(odd)} (supported: {', '.join(DTYPES)})")
    runtime = [v for v in g.input if v.name not in initializers]
    unknown = sorted(set(shapes) - {v.name for v in runtime})
    if unknown:
        problems.append(f"shapes names no input {', '.join(unknown)} (inputs: "
                        f"{', '.join(v.name for v in runtime) or 'none'})")
    inputs = {}
    for v in runtime:
        shape, dtype = input_shape(v, shapes.get(v.name)), input_dtype(v)
        if isinstance(shape, str):
            problems.append(shape)
        if dtype is None:
            problems.append(f"input {v.name} has an unsupported element type "
                            f"(supported: {', '.join(DTYPES)})")
        inputs[v.name] = (shape, dtype)
    if problems:
        raise OnnxImportError(f"{g.name or 'model'}: cannot import: " + "; ".join(problems))
    return inputs
