"""The importer's error and the decoded view of an ONNX node that scan and converters share."""
from __future__ import annotations

from dataclasses import dataclass, field

from graph.ir import GraphError


class OnnxImportError(GraphError):
    """A model the importer cannot convert (or cannot read); the message is one line listing every
    reason found (unsupported op types, attribute values, unpinned symbolic dimensions)."""


@dataclass
class OnnxNode:
    """An ONNX node with decoded attributes and the version of its op in the model's opset.

    ``since`` is the ``since_version`` of the op's schema in effect (e.g. 18 for ReduceMean in an
    opset-20 model), which decides attributes-vs-inputs. Absent optional inputs are ``""``.
    """
    name: str
    op_type: str
    domain: str
    inputs: tuple
    outputs: tuple
    attrs: dict = field(default_factory=dict)
    since: int = 0

    @property
    def label(self) -> str:
        return f"node {self.name} ({self.op_type})"

    def input(self, i: int) -> str:
        """The i-th input's name, ``""`` when absent."""
        return self.inputs[i] if i < len(self.inputs) else ""

    def output(self, i: int) -> str:
        return self.outputs[i] if i < len(self.outputs) else ""

    def attr(self, key: str, default=None):
        return self.attrs.get(key, default)

    def error(self, message: str) -> OnnxImportError:
        return OnnxImportError(f"{self.label}: {message}")
