"""Lowering a schedule to the loop IR that code generation compiles, as a named list of passes.

Modules: :mod:`.pipeline` (``PASSES``, ``lower``, ``lower_steps``), :mod:`.bounds` (bound
inference), :mod:`.emit` (the ``loop_nest`` pass), :mod:`.guards` (guard placement and edge-tile
versioning), :mod:`.prefetch` (the prefetch statements of a loop), :mod:`.checks` (limits of
unrolling and vectorization).
"""
from schedules.lowering.emit import as_graph, loop_nest  # noqa: F401
from schedules.lowering.pipeline import (  # noqa: F401
    PASS_NAMES, PASSES, SCHEDULED, LowerContext, apply_passes, lower, lower_steps,
)
