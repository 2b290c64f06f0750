"""A heuristic start's constant set for one measurement: ``--set package.module.NAME=VALUE`` of the
A/B benchmarks (``bench_conv_starts.py``, ``bench_small_rows.py``, ``bench_model.py --space-ab``,
``profile_model.py --ab-set``)."""
from __future__ import annotations

import ast
import contextlib
import importlib
import warnings


def parse_setting(text: str, tool: str, default_module: str | None = None) -> tuple:
    """``"package.module.NAME=VALUE"`` -> (module, name, value). VALUE is a Python literal (a number,
    True/False, a tuple of tiles); ``default_module`` is used when ``text`` names no module."""
    where, sep, value = text.partition("=")
    mod_name, _, name = where.rpartition(".")
    mod_name = mod_name or default_module
    if not sep or not mod_name:
        raise SystemExit(f"{tool}: write the setting as package.module.NAME=VALUE, not {text!r}")
    try:
        module = importlib.import_module(mod_name)
    except ImportError:
        raise SystemExit(f"{tool}: no module {mod_name!r} (write package.module.NAME=VALUE)")
    if not name or not hasattr(module, name):
        raise SystemExit(f"{tool}: {mod_name} has no constant {name!r}")
    try:
        parsed = ast.literal_eval(value)
    except (ValueError, SyntaxError):
        raise SystemExit(f"{tool}: value {value!r} is not a Python literal (a number, True/False, a tuple)")
    return module, name, parsed


@contextlib.contextmanager
def setting(module, name: str, value):
    """``module.<name>`` is ``value`` inside the block, restored after."""
    saved = getattr(module, name)
    setattr(module, name, value)
    try:
        yield
    finally:
        setattr(module, name, saved)


def compiled_with_setting(graph, threads: int, module, name: str, value, model=None):
    """The model compiled with ``module.<name>`` set to ``value`` (restored after); the compile cache is
    cleared before and after, so a code generation constant rebuilds kernels whose loop nests are the same.
    An import constant (a module of ``graph.onnx_import``) re-imports ``model`` (the ONNX model) under it."""
    from tensorir.runtime import clear_cache
    from tuner.model_api import compile_model, load
    clear_cache()
    try:
        with setting(module, name, value), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if module.__name__.startswith("graph.onnx_import"):
                if model is None:
                    raise SystemExit(f"{module.__name__}.{name} is an import constant: the ONNX model is needed")
                graph = load(model)
            return compile_model(graph, threads=threads)
    finally:
        clear_cache()
