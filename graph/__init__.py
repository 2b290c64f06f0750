"""The model level: a dataflow graph IR, ONNX import, a pattern matcher, graph passes and fusion.

It sits beside ``schedules`` and imports only ``tensorir``: fused groups go down as tensor
expressions. ``graph.runtime`` (executing a compiled model) imports nothing of the compiler.

Modules: ``ir`` (values, nodes, the graph, its printer), ``builder`` (writing graphs by hand),
``ops`` (each op kind's type inference and numpy semantics), ``interpret`` (running a graph
with numpy, the reference for passes and constant folding).

This ``__init__`` imports nothing, so ``graph.runtime`` loads without the compiler.
"""
