"""Lowering a schedule to loop IR."""
from schedules.lowering.emit import as_graph, loop_nest  # noqa: F401

lower = loop_nest
