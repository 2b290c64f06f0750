"""``load_onnx``: an ONNX model file (or ModelProto) to a static graph of canonical op kinds.

The model is read, never run: its opset is checked, then the whole model is scanned and refused
in one error if anything is unsupported, then every node is converted in order. Initializers
and Constant nodes become graph constants (only those a graph node reads), shape plumbing is
folded from the static shapes, graph inputs keep their ONNX names and graph outputs too.
"""
from __future__ import annotations

import os

import onnx
import onnx.version_converter
from onnx import numpy_helper

from graph.ir import Graph
from graph.onnx_import import composite, einsum, extra_ops, nn_ops, resize, scatter, tensor_ops  # noqa: F401  (registers the converters)
from graph.onnx_import.context import ImportContext
from graph.onnx_import.errors import OnnxImportError
from graph.onnx_import.registry import CONVERTERS, MIN_OPSET
from graph.onnx_import.scan import DEFAULT_DOMAINS, decode_node, model_opset, scan

# onnx.checker takes a ModelProto only below protobuf's 2 GB limit
CHECKABLE_BYTES = 2**31 - 1


def _read(source) -> tuple:
    if isinstance(source, onnx.ModelProto):
        return source, source.graph.name or "model"
    path = os.fspath(source)
    if not os.path.isfile(path):
        raise OnnxImportError(f"{path}: no such file")
    try:
        return onnx.load(path), path
    except Exception as e:  # noqa: BLE001  (protobuf and onnx raise many types for a corrupt file)
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise OnnxImportError(f"{path}: not a readable ONNX model ({first})") from None


def _parse_shapes(shapes) -> dict:
    out = {}
    for name, dims in (shapes or {}).items():
        if isinstance(dims, str):
            try:
                dims = tuple(int(d) for d in dims.replace(",", "x").split("x"))
            except ValueError:
                raise OnnxImportError(f"shape {dims!r} for input {name} is not like 1x3x224x224") from None
        out[name] = tuple(dims)
    return out


def load_onnx(source, shapes: dict | None = None) -> Graph:
    """Import an ONNX model as a :class:`~graph.ir.Graph` of canonical op kinds.

    Parameters
    ----------
    source : path of an ``.onnx`` file, or an ``onnx.ModelProto``.
    shapes : input name -> static shape (a tuple, or a string like ``"1x3x224x224"``) pinning the
        symbolic dimensions of that input.

    Raises
    ------
    OnnxImportError
        One line: an unreadable file, an opset past the current one or an older one that
        onnx.version_converter cannot bring to 13, or everything the
        model uses that is unsupported (op types with their nodes, attribute values, symbolic
        dimensions not pinned), or every node whose conversion fails (an attribute-like input
        that is not a constant, shapes that do not fit).
    """
    model, where = _read(source)
    model = _upgrade(model)
    opset = model_opset(model)
    nodes = [decode_node(n, opset, i) for i, n in enumerate(model.graph.node)]
    inputs = scan(model, nodes, opset, _parse_shapes(shapes))
    try:
        if model.ByteSize() < CHECKABLE_BYTES:
            onnx.checker.check_model(model)
    except (onnx.checker.ValidationError, ValueError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise OnnxImportError(f"{where}: not a valid ONNX model ({first})") from None
    return convert(model, nodes, inputs)


def _upgrade(model: onnx.ModelProto) -> onnx.ModelProto:
    """A model of an opset older than the importer reads (e.g. the ONNX model zoo's 7 to 12),
    converted to MIN_OPSET by ``onnx.version_converter``; any other model as it is."""
    versions = [o.version for o in model.opset_import if o.domain in DEFAULT_DOMAINS]
    if not versions or versions[0] >= MIN_OPSET:
        return model
    try:
        return onnx.version_converter.convert_version(model, MIN_OPSET)
    except Exception as e:  # noqa: BLE001 - the converter's own failures (RuntimeError, ValidationError...)
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        first = first.split("failed: ")[-1]     # past the converter's source location
        raise OnnxImportError(f"{model.graph.name or 'model'}: opset {versions[0]} is not supported (supported: "
                              f"{MIN_OPSET} to {onnx.defs.onnx_opset_version()}) and onnx.version_converter "
                              f"cannot convert it ({first[:200]})") from None


def convert(model: onnx.ModelProto, nodes: list, inputs: dict) -> Graph:
    """Convert the scanned model (``inputs``: name -> (shape, dtype) of the runtime inputs)."""
    g = model.graph
    reserved = {v for n in g.node for v in list(n.input) + list(n.output)} | {v.name for v in g.input} \
        | {t.name for t in g.initializer} | {v.name for v in g.output} | {n.name for n in g.node}
    ctx = ImportContext(g.name or "model", reserved - {""})
    for t in g.initializer:
        try:
            ctx.set_known(t.name, numpy_helper.to_array(t))
        except (OSError, ValueError, TypeError) as e:     # external data missing or unreadable
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise OnnxImportError(f"{g.name or 'model'}: cannot read initializer {t.name} ({first})") from None
    for name, (shape, dtype) in inputs.items():
        ctx.add_input(name, shape, dtype)
    for node in nodes:
        for v in node.inputs:
            ctx.readers.setdefault(v, []).append((node.op_type, list(node.outputs)))
    # a node that cannot be converted is reported and its outputs poisoned, so the nodes reading
    # them are skipped rather than reported again: every independent failure lands in one error
    problems, poisoned = [], set()
    for node in nodes:
        if any(v in poisoned for v in node.inputs):
            poisoned.update(node.outputs)
            continue
        missing = [v for v in node.inputs if v and v not in ctx.known and v not in ctx.values]
        try:
            if missing:
                raise node.error(f"reads {missing[0]!r}, which nothing defines before it")
            CONVERTERS[node.op_type].convert(ctx, node)
        except OnnxImportError as e:
            problems.append(str(e))
            poisoned.update(node.outputs)
    if problems:
        raise OnnxImportError(f"{g.name or 'model'}: cannot import: " + "; ".join(problems))
    return ctx.finish([v.name for v in g.output])
