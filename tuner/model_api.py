"""The Python API for whole models: load, compile, call on numpy arrays.

>>> from tuner.model_api import load, compile_model
>>> graph = load("model.onnx", shapes={"x": (1, 3, 224, 224)})     # doctest: +SKIP
>>> model = compile_model(graph, log="run.jsonl", threads=2)       # doctest: +SKIP
>>> model({"x": x}) or model(x)                                    # doctest: +SKIP
"""
from __future__ import annotations

import os

from graph.ir import Graph, GraphError
from graph.runtime import CompiledModel
from tuner.model_compile import compile_graph


def load(path, shapes: dict | None = None) -> Graph:
    """The graph of the ONNX model at ``path`` (``shapes``: input name -> dims pinning symbolic ones).

    Raises GraphError (one line) for a missing or unreadable file, unsupported ops or attributes,
    or a symbolic dimension left unpinned.
    """
    try:
        from graph.onnx_import import load_onnx
    except ImportError:
        raise GraphError("ONNX import is not available in this build (graph.onnx_import is missing)") from None
    if isinstance(path, (str, os.PathLike)):
        path = os.fspath(path)
        if not os.path.exists(path):
            raise GraphError(f"model file {path!r} does not exist")
        if os.path.isdir(path):
            raise GraphError(f"model file {path!r} is a directory, not an ONNX file")
    return load_onnx(path, shapes)


def compile_model(graph_or_path, log=None, threads: int | None = None, shapes: dict | None = None,
                  passes: bool = True, layouts: bool = False, blocked: bool = True) -> CompiledModel:
    """A callable :class:`~graph.runtime.CompiledModel` from a Graph or an ONNX path.

    Parameters
    ----------
    graph_or_path : Graph, path or onnx.ModelProto
    log : path or list of paths, optional
        Tuning logs searched first for each kernel's schedule (then the default logs); a
        kernel without a record uses the heuristic start.
    threads : int, optional
        Threads of the kernels' parallel loops (default: all usable cores).
    shapes : dict, optional
        Pins symbolic input dimensions when loading a model file.
    passes : bool
        Run the graph pass pipeline (``graph.passes``) before fusion.
    layouts : bool
        Compute conv outputs channels-innermost (off by default: decision 024).
    blocked : bool
        Keep activations blocked (NCHW16c) between convolutions (default; see
        :func:`graph.lower.layout.choose_blocked`); False: every value row-major.
    """
    graph = graph_or_path if isinstance(graph_or_path, Graph) else load(graph_or_path, shapes)
    return compile_graph(graph, log=log, threads=threads, passes=passes, layouts=layouts, blocked=blocked)
