"""The converter table: for each supported ONNX op type, its conversion function, the attributes
it honours (each with an optional check of the value) and an optional whole-node check.

An attribute missing from a converter's table is refused by the scan, never ignored.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

# The oldest opset of the default domain the importer reads; the newest is the installed onnx's.
MIN_OPSET = 13


@dataclass(frozen=True)
class Converter:
    """``convert(ctx, node)`` defines the node's outputs in the import context.

    ``attrs`` maps each honoured attribute to ``None`` (any value) or ``check(value) -> problem``
    (a string saying why the value is refused, or None). ``check(node, initializer_shapes)``
    returns problems found before converting (e.g. a 3-d Conv).
    """
    op_type: str
    convert: Callable
    attrs: dict = field(default_factory=dict)
    check: Callable | None = None


CONVERTERS: dict = {}


def converter(*op_types: str, attrs: dict | None = None, check: Callable | None = None):
    """Register the decorated function as the converter of ``op_types``."""
    def register(fn):
        for op_type in op_types:
            if op_type in CONVERTERS:
                raise ValueError(f"ONNX op {op_type} has two converters")
            CONVERTERS[op_type] = Converter(op_type, fn, dict(attrs or {}), check)
        return fn
    return register


def one_of(*allowed) -> Callable:
    """An attribute check accepting only ``allowed`` values."""
    def check(value):
        if value not in allowed:
            return f"is not supported (supported: {', '.join(map(repr, allowed))})"
        return None
    return check


def all_ones(value):
    """An attribute check for dilations that must be 1."""
    return None if all(v == 1 for v in value) else "is not supported (only 1s)"
