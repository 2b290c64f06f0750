"""ONNX import: ``load_onnx(path_or_model, shapes=None) -> Graph`` (opsets 13 to the current one;
older models are converted to 13 by ``onnx.version_converter`` first).

The whole model is scanned first and refused in one :class:`OnnxImportError` listing every
unsupported op type, attribute value and unpinned symbolic dimension; then it is converted to
the canonical op kinds of :mod:`graph.ops` with shape plumbing folded away.
"""
from graph.onnx_import.errors import OnnxImportError
from graph.onnx_import.load import load_onnx
from graph.onnx_import.registry import CONVERTERS

__all__ = ["OnnxImportError", "load_onnx", "supported_ops"]


def supported_ops() -> tuple:
    """The ONNX op types (default domain) the importer converts."""
    return tuple(sorted(CONVERTERS))
