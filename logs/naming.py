"""Names for workloads in messages: operator and shape, and the command that would tune them.

A build gets tensors, not a workload name.  For messages that a person acts
on ("tune this"), :func:`identify` recognises a built-in workload of
:mod:`tensorir.ops.registry` from its tensors: it reads each size parameter
from the tensor dimension that parameter sets, rebuilds the workload and
compares structural keys, so a match is exact (renamed tensors still match).
"""
from __future__ import annotations

import functools
from typing import Mapping

from .record import workload_label


@functools.lru_cache(maxsize=None)
def _param_positions(name: str) -> tuple:
    """``(tensors, ((param, tensor index, dim index), ...))``: a built-in's tensor count, and where
    each of its integer parameters shows.

    Found by building the workload at its defaults and with one parameter
    raised by one: the first input dimension that grows by one is that
    parameter (outputs are not read: padding grows them too).
    """
    from tensorir.ops import registry
    w = registry.get_workload(name)
    made = w.make(**w.defaults)
    base = [t.shape if t.is_placeholder else () for t in made]
    found = []
    for p in w.params:
        if p.kind is not int or p.default is None:
            continue
        try:
            grown = [t.shape if t.is_placeholder else () for t in w.make(**{**w.defaults, p.name: p.default + 1})]
        except ValueError:
            continue
        hits = [(ti, di) for ti, (a, b) in enumerate(zip(base, grown)) if len(a) == len(b)
                for di, (x, y) in enumerate(zip(a, b)) if y == x + 1]
        if hits:
            found.append((p.name, *hits[0]))
    return len(made), tuple(found)


def identify(tensors) -> tuple[str, dict] | None:
    """``(name, params)`` of the built-in workload these tensors are, or None.

    Parameters that no dimension shows (strides, padding, ``eps``) are tried
    at their defaults only, so e.g. a convolution of stride 2 is not recognised.
    """
    from tensorir.ops import registry
    from tensorir.te.serialize import workload_key
    tensors = list(tensors)
    try:
        key = workload_key(tensors)
    except Exception:  # noqa: BLE001 - not a workload this can name; the caller describes it otherwise
        return None
    shapes = [tuple(t.shape) for t in tensors]
    for w in registry.list_workloads():
        params = dict(w.defaults)
        if "dtype" in params:
            params["dtype"] = tensors[0].dtype
        try:
            count, positions = _param_positions(w.name)
            if count != len(tensors):
                continue
            for name, ti, di in positions:
                if di >= len(shapes[ti]):
                    break
                params[name] = shapes[ti][di]
            else:
                bound = w.bind(**params)
                if workload_key(w.make(**bound)) == key:
                    return w.name, bound
        except ValueError:
            continue
    return None


def _shown_params(name: str, params: Mapping | None) -> dict:
    """The parameters worth showing: a built-in's string parameters (dtype) only when not the default."""
    from tensorir.ops import registry
    params = dict(params or {})
    try:
        defaults = registry.get_workload(name).defaults
    except (KeyError, ValueError):
        return params
    return {k: v for k, v in params.items() if not (isinstance(v, str) and defaults.get(k) == v)}


def tune_command(name: str | None, params: Mapping | None = None, threads: int | None = None) -> str:
    """The ``tensortune tune`` command line that would tune this workload.

    A built-in lists the parameters that differ from its defaults; a user
    workload (``file.py:function``) all of them; a workload without a known
    source gets the placeholder ``FILE.py:FUNCTION`` (a function returning its
    tensors).
    """
    from tensorir.ops import registry
    params = dict(params or {})
    try:
        defaults = registry.get_workload(name).defaults if name else None
    except (KeyError, ValueError):
        defaults = None
    if defaults is not None:
        shown = {k: v for k, v in params.items() if defaults.get(k) != v}
        head = name
    else:
        shown = params
        head = name if name and ":" in name else f"FILE.py:{name or 'FUNCTION'}"
    words = ["tensortune", "tune", head] + [f"{k}={v}" for k, v in shown.items()]
    if threads is not None:
        words += ["--threads", str(threads)]
    return " ".join(words)


def describe(tensors, name: str | None = None, params: Mapping | None = None,
             threads: int | None = None) -> tuple[str, str]:
    """``(label, command)`` of a workload for messages, e.g.
    ``("matmul(M=8, N=8, K=8)", "tensortune tune matmul M=8 N=8 K=8")``.

    The caller's ``name`` and ``params`` win; else a built-in is recognised
    (:func:`identify`); else the label is the outputs and the input shapes,
    e.g. ``"C(A=8x8, B=8x8)"``.
    """
    if name is None:
        found = identify(tensors)
        if found is not None:
            name, params = found
    if name is not None:
        return workload_label(name, _shown_params(name, params)), tune_command(name, params, threads)
    tensors = list(tensors)
    outs = [t.name for t in tensors if not t.is_placeholder] or ["?"]
    ins = ", ".join(f"{t.name}={'x'.join(map(str, t.shape))}" for t in tensors if t.is_placeholder)
    return f"{','.join(outs)}({ins})", tune_command(None, None, threads)
