"""The model level: a dataflow graph IR, ONNX import, a pattern matcher, graph passes and fusion.

It sits beside ``schedules`` and imports only ``tensorir``: fused groups go down as tensor
expressions. ``graph.runtime`` (executing a compiled model) imports nothing of the compiler.

Modules, in the order a model goes through them: ``onnx_import`` (ONNX -> graph, refusing in one
error what it cannot convert), ``ir`` (values, nodes, the graph, its printer), ``builder``
(writing graphs by hand), ``ops`` (each op kind's type inference, numpy semantics and fusion
pattern), ``interpret`` (running a graph with numpy: the reference for passes, folding and tests),
``pattern`` (declarative patterns, matching with failure reasons, the rewrite driver), ``passes``
(the named pass pipeline), ``fusion`` (fused groups by op pattern), ``lower`` (a group -> one
tensor expression; value layouts), ``runtime`` (the compiled model: plan, memory, run).

This ``__init__`` imports nothing, so ``graph.runtime`` loads without the compiler.
"""
