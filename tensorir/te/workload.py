"""What makes a list of tensors a workload, checked in one place.

A workload is the list a user hands to ``Schedule``, the numpy evaluator or the tuner:
its input placeholders first, then the computed tensors it outputs. Each API raises its
own error type with the message :class:`WorkloadError` carries.
"""
from __future__ import annotations

from tensorir.te.tensor import TEError, Tensor


class WorkloadError(TEError):
    """The tensor list is not a workload (not tensors, empty, duplicates, no output, inputs missing)."""


def tensor_list(tensors) -> list:
    """``tensors`` as a list, checked to be a non-empty sequence of ``te.Tensor``."""
    if isinstance(tensors, Tensor):
        raise WorkloadError(f"a workload is a list of tensors (inputs first, then outputs), got the single "
                            f"tensor {tensors.name!r}; pass [..., {tensors.name}]")
    try:
        tensors = list(tensors)
    except TypeError:
        raise WorkloadError(f"a workload is a list of te.Tensor (inputs first, then outputs), "
                            f"got {type(tensors).__name__}") from None
    if not tensors:
        raise WorkloadError("the workload is empty: expected a list of te.Tensor, inputs first, then outputs")
    for n, t in enumerate(tensors):
        if not isinstance(t, Tensor):
            raise WorkloadError(f"workload entry {n} is {type(t).__name__} {t!r}, not a te.Tensor "
                                "(placeholder or compute)")
    return tensors


def check_workload(tensors) -> list:
    """``tensors`` as a list, checked to be a workload; raises :class:`WorkloadError` naming the problem."""
    params = tensor_list(tensors)
    ids = [id(t) for t in params]
    if len(set(ids)) != len(ids):
        dup = next(t for t in params if ids.count(id(t)) > 1)
        raise WorkloadError(f"tensor {dup.name!r} appears twice in the workload list")
    if all(t.is_placeholder for t in params):
        raise WorkloadError("the workload has no output: list the computed tensors after the inputs")
    first_out = next(n for n, t in enumerate(params) if not t.is_placeholder)
    late = [t.name for t in params[first_out:] if t.is_placeholder]
    if late:
        raise WorkloadError(f"input(s) {', '.join(map(repr, late))} listed after output "
                            f"{params[first_out].name!r}; list the inputs first, then the outputs")
    listed = set(ids)
    for t in computed_tensors(params):
        for src in t.inputs:
            if src.is_placeholder and id(src) not in listed:
                raise WorkloadError(f"tensor {t.name!r} reads placeholder {src.name!r}, which is not in the "
                                    "workload list (inputs must be listed, e.g. [A, B, C])")
    return params


def computed_tensors(params) -> list:
    """Compute tensors reachable from the listed ones, producers first (deterministic)."""
    order, seen = [], set()

    def visit(t: Tensor):
        if id(t) in seen or t.is_placeholder:
            return
        seen.add(id(t))
        for src in t.inputs:
            visit(src)
        order.append(t)

    for t in params:
        visit(t)
    return order
