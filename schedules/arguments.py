"""Checking the arguments of schedule primitives, one path for Python calls and replayed traces.

Every instruction's kind, arity, input and output types and attributes are checked here before it
is applied, so a malformed trace is as readable an error as a wrong Python call; integers of any
integral type become plain ``int``; new loop and stage names are checked against what exists.
"""
from __future__ import annotations

import numbers
import operator
import re

from schedules.errors import (AnnotationError, CacheWriteError, ComputeAtError, ComputeInlineError,
                              FuseError, PackError, PrefetchError, ReorderError, RFactorError, ScheduleError,
                              SkipPaddingError, SplitError)
from schedules.state import Stage, StageGraph

#
# One path for every argument of every primitive: a Python call (``Schedule.split`` ...) and a
# replayed trace (``Schedule.from_json``, user input like any other) both reach the primitive
# through ``check_instruction``, which checks the arity, the types and the plain values of the
# inputs, attributes and output names, and turns integral numbers (numpy's included) into
# ints.  What depends on the schedule (does the loop exist, is the name free, does the factor
# fit the extent) is checked by the primitive itself, the same way for both callers.

ERRORS = {"split": SplitError, "fuse": FuseError, "reorder": ReorderError, "unroll": AnnotationError,
          "vectorize": AnnotationError, "parallel": AnnotationError, "compute_at": ComputeAtError,
          "compute_root": ComputeAtError, "compute_inline": ComputeInlineError,
          "cache_write": CacheWriteError, "pack": PackError, "rfactor": RFactorError,
          "prefetch": PrefetchError, "skip_padding": SkipPaddingError}

# (inputs, attributes, output names): inputs are "loop" handles ('C.i'), "stage" or "tensor"
# names, "loops" one or more loop handles; outputs is how many names the primitive makes
# (0: none) and what they name.
SIGNATURES = {
    "split": (("loop",), ("factor", "nparts"), (2, "loop")),
    "fuse": (("loop", "loop"), (), (1, "loop")),
    "reorder": (("loops",), (), (0, None)),
    "unroll": (("loop",), (), (0, None)),
    "vectorize": (("loop",), (), (0, None)),
    "parallel": (("loop",), (), (0, None)),
    "compute_at": (("stage", "loop"), (), (0, None)),
    "compute_root": (("stage",), (), (0, None)),
    "compute_inline": (("stage",), (), (0, None)),
    "cache_write": (("stage",), (), (1, "stage")),
    "pack": (("tensor",), ("splits", "order", "consumers", "strides"), (1, "stage")),
    "rfactor": (("stage",), ("factor", "axis"), (1, "stage")),
    # the tensor is an attribute, not an input: it names no handle the trace makes or consumes
    # (tuner.prepack drops the instructions on a pack it moves out, but keeps a prefetch of it)
    "prefetch": (("loop",), ("tensor", "offset", "offset_bytes", "first"), (0, None)),
    "skip_padding": (("loop",), ("tensor",), (0, None)),
}

_WHAT = {"loop": "a loop handle like 'C.i'", "stage": "a stage name", "tensor": "a tensor name",
         "loops": "one or more loop handles like 'C.i'"}
_LOOP_NAME = re.compile(r"\w+(\.\w+)*")     # 'i_o', 'i.0', 'i_j_fused'
_STAGE_NAME = re.compile(r"(?!\d)\w+")   # no '.': handles are 'stage.loop'


def show(value, limit: int = 60) -> str:
    """``repr(value)`` on one line, cut to ``limit`` characters (for error messages)."""
    text = " ".join(repr(value).split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def as_int(value, prim: str, what: str, minimum: int | None = 1) -> int:
    """``value`` as a plain int: any integral number (numpy's too), not bool, not a float."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        kind = "a positive integer" if minimum == 1 else "an integer"
        raise ERRORS.get(prim, ScheduleError)(prim, f"{what} must be {kind}, got {show(value)}")
    value = int(operator.index(value))
    if minimum is not None and value < minimum:
        raise ERRORS.get(prim, ScheduleError)(prim, f"{what} must be a positive integer, got {value}")
    return value


def _check_printable(name: str, prim: str, what: str) -> None:
    """A name given to a primitive is printable: no name has a line break or another control character
    (new names are checked against ``_LOOP_NAME`` / ``_STAGE_NAME``), and an error that names what it
    was given must stay one line."""
    if not name.isprintable():
        raise ERRORS.get(prim, ScheduleError)(prim, f"expected {what}, got {show(name)}: a name with a line "
                                              "break or another control character is not accepted")


def _seq(value) -> bool:
    return isinstance(value, (list, tuple))


def check_instruction(kind, inputs, attrs, outputs) -> tuple:
    """Check one instruction's arguments; returns (inputs, attrs, outputs) as plain JSON values.

    ``outputs`` are the names the instruction is to give what it makes (``"stage.loop"``
    handles for split and fuse, stage names for the others; empty: the primitive's defaults).
    """
    if not isinstance(kind, str) or kind not in SIGNATURES:
        raise ScheduleError("replay", f"unknown instruction {show(kind)}; known: {sorted(SIGNATURES)}")
    exc = ERRORS[kind]
    want_in, known_attrs, (n_out, out_kind) = SIGNATURES[kind]
    # inputs
    if not _seq(inputs):
        raise exc(kind, f"expected a list of inputs ({', '.join(_WHAT[w] for w in want_in)}), got {show(inputs)}")
    inputs = list(inputs)
    if want_in == ("loops",):
        if not inputs:
            raise exc(kind, "expected at least one loop handle like 'C.i', got none")
        want_in = ("loop",) * len(inputs)
    if len(inputs) != len(want_in):
        raise exc(kind, f"expected {len(want_in)} input(s) ({', '.join(_WHAT[w] for w in want_in)}), got "
                  f"{len(inputs)}: {show(inputs)}")
    for x, w in zip(inputs, want_in):
        if not isinstance(x, str):
            raise exc(kind, f"expected {_WHAT[w]}, got {show(x)}")
        _check_printable(x, kind, _WHAT[w])
    # attributes
    if attrs is None:
        attrs = {}
    if not isinstance(attrs, dict):
        raise exc(kind, f"expected the attributes as a dict, got {show(attrs)}")
    unknown = [k for k in attrs if k not in known_attrs]
    if unknown:
        allowed = f"expected only {list(known_attrs)}" if known_attrs else "it takes none"
        raise exc(kind, f"unexpected attribute(s) {show(unknown)}; {allowed}")
    attrs = {k: v for k, v in attrs.items() if v is not None}
    checker = _ATTR_CHECKS.get(kind)
    if checker is not None:
        attrs = checker(inputs, attrs)
    # output names
    if not _seq(outputs):
        raise exc(kind, f"expected the names of the new {out_kind or 'loop'}s as a list, got {show(outputs)}")
    outputs = list(outputs)
    if outputs:
        if n_out == 0:
            raise exc(kind, f"{kind} makes nothing to name; got names {show(outputs)}")
        if len(outputs) != n_out:
            what = "2 names (outer, inner)" if n_out == 2 else "1 name"
            raise exc(kind, f"expected {what} for the new {out_kind}{'s' if n_out > 1 else ''}, got "
                      f"{len(outputs)}: {show(outputs)}")
        for o in outputs:
            if not isinstance(o, str):
                raise exc(kind, f"expected a {out_kind} name (a string), got {show(o)}")
        if out_kind == "loop":   # "stage.loop" handles of the input's stage
            stage = inputs[0].split(".", 1)[0]
            for o in outputs:
                if not o.startswith(stage + "."):
                    raise exc(kind, f"new loop {o!r} must be a loop of stage {stage} (a handle '{stage}.name')")
            outputs = [o[len(stage) + 1:] for o in outputs]
    return inputs, attrs, outputs


def _check_split_attrs(inputs, attrs):
    for key in ("factor", "nparts"):
        if key in attrs:
            attrs[key] = as_int(attrs[key], "split", f"{key} for loop {inputs[0]}")
    return attrs


def _dim_map(tname: str, what: str, value, example: str, noun: str) -> dict:
    """A pack's ``{dimension: positive int}`` attribute (``splits``, ``strides``) with string keys."""
    if not isinstance(value, dict):
        raise PackError("pack", f"{what} of {tname} must map a dimension to {example}; got {show(value)}")
    out = {}
    for d, f in value.items():
        if isinstance(d, str) and re.fullmatch(r"[0-9]+", d, re.ASCII):
            dim = int(d)
        elif isinstance(d, numbers.Integral) and not isinstance(d, bool):
            dim = int(operator.index(d))
        else:
            raise PackError("pack", f"{what} of {tname} must map a dimension (an integer) to a positive integer; "
                            f"got the key {show(d)}")
        if str(dim) in out:
            raise PackError("pack", f"{what} of {tname} give dimension {dim} twice")
        out[str(dim)] = as_int(f, "pack", f"{noun} of dimension {dim} of {tname}")
    return out


def _check_pack_attrs(inputs, attrs):
    (tname,) = inputs
    attrs["splits"] = _dim_map(tname, "splits", attrs.get("splits", {}), "a block size, like {1: 16}", "split factor")
    if "strides" in attrs:
        attrs["strides"] = _dim_map(tname, "strides", attrs["strides"], "a step, like {2: 2, 3: 2}", "stride")
    if "order" in attrs:
        order = attrs["order"]
        if not _seq(order) or not all(isinstance(k, str) or (isinstance(k, numbers.Integral) and
                                                            not isinstance(k, bool)) for k in order):
            raise PackError("pack", f"order of {tname} must list dimension keys like ['1.o', '0', '1.i']; got "
                            f"{show(order)}")
        attrs["order"] = [k if isinstance(k, str) else str(int(k)) for k in order]
        for k in attrs["order"]:
            _check_printable(k, "pack", f"a dimension key of the order of {tname}")
    if "consumers" in attrs:
        cons = attrs["consumers"]
        if not _seq(cons) or not all(isinstance(c, str) for c in cons):
            raise PackError("pack", f"consumers of the packed {tname} must be a list of stage names; got "
                            f"{show(cons)}")
        attrs["consumers"] = list(cons)
        for c in cons:
            _check_printable(c, "pack", f"a consumer of the packed {tname} (a stage name)")
    return attrs


def _check_rfactor_attrs(inputs, attrs):
    if "factor" not in attrs:
        raise RFactorError("rfactor", f"expected a factor for stage {inputs[0]}, got none")
    attrs["factor"] = as_int(attrs["factor"], "rfactor", f"factor of stage {inputs[0]}", minimum=None)
    if "axis" in attrs and not isinstance(attrs["axis"], str):
        raise RFactorError("rfactor", f"axis of stage {inputs[0]} must be the name of a reduce loop, got "
                           f"{show(attrs['axis'])}")
    if "axis" in attrs:
        _check_printable(attrs["axis"], "rfactor", f"a reduce loop of stage {inputs[0]}")
    return attrs


def _check_prefetch_attrs(inputs, attrs):
    (loop,) = inputs
    tensor = attrs.get("tensor")
    if not isinstance(tensor, str):
        raise PrefetchError("prefetch", f"expected the name of a tensor to prefetch in loop {loop}, got "
                            f"{show(tensor)}")
    _check_printable(tensor, "prefetch", "a tensor name")
    given = [k for k in ("offset", "offset_bytes") if k in attrs]
    if len(given) != 1:
        raise PrefetchError("prefetch", f"give exactly one of offset= (iterations) or offset_bytes= for {tensor} "
                            f"in loop {loop}")
    key = given[0]
    value = as_int(attrs[key], "prefetch", f"{key} of {tensor} in loop {loop}", minimum=None)
    if value < 0:
        raise PrefetchError("prefetch", f"{key} of {tensor} in loop {loop} must be >= 0 (a prefetch reads "
                            f"ahead), got {value}")
    attrs[key] = value
    if "first" in attrs:
        first = attrs["first"]
        if not isinstance(first, (list, tuple)) or not all(isinstance(h, str) for h in first):
            raise PrefetchError("prefetch", f"first= of {tensor} in loop {loop} must be a list of loop handles "
                                f"like 'C.i', got {show(first)}")
        attrs["first"] = list(first)
    return attrs


def _check_skip_attrs(inputs, attrs):
    tensor = attrs.get("tensor")
    if not isinstance(tensor, str):
        raise SkipPaddingError("skip_padding", f"expected the name of a padded tensor for loop {inputs[0]}, got "
                               f"{show(tensor)}")
    _check_printable(tensor, "skip_padding", "a tensor name")
    return attrs


_ATTR_CHECKS = {"split": _check_split_attrs, "pack": _check_pack_attrs, "rfactor": _check_rfactor_attrs,
                "prefetch": _check_prefetch_attrs, "skip_padding": _check_skip_attrs}


def unique_name(base: str, taken) -> str:
    name, n = base, 1
    while name in taken:
        name, n = f"{base}_{n}", n + 1
    return name


def new_loop_names(st: Stage, given: list, defaults: list, prim: str, accepted=()) -> list:
    """Names for the loops ``prim`` adds to ``st``: ``given`` (checked) or ``defaults`` (made unique).

    A given name must be new to the stage and to the other new loops; a name equal to the default
    or in ``accepted`` (the default of an earlier version, in recorded traces) skips the spelling check.
    """
    exc = ERRORS[prim]
    out: list = []
    if not given:
        for d in defaults:
            out.append(unique_name(d, set(st.loops) | set(out)))
        return out
    for name, default in zip(given, defaults):
        if name != default and name not in accepted and not _LOOP_NAME.fullmatch(name):
            raise exc(prim, f"loop name {name!r} is not valid; expected letters, digits and '_', in parts "
                      "joined by '.' (like 'i_o' or 'i.0')", stage=st.name)
        if name in st.loops:
            raise exc(prim, f"loop name {st.name}.{name} is already taken; expected a name stage {st.name} "
                      "has not used for a loop", stage=st.name)
        if name in out:
            raise exc(prim, f"the new loops need distinct names, got {st.name}.{name} twice", stage=st.name)
        out.append(name)
    return out


def new_stage_name(g: StageGraph, given: list, default: str, prim: str) -> str:
    """The name of the stage ``prim`` creates: ``given[0]`` (checked) or ``default`` made unique."""
    exc = ERRORS[prim]
    if not given:
        return g.fresh_name(default)
    (name,) = given
    if not _STAGE_NAME.fullmatch(name):
        raise exc(prim, f"stage name {name!r} is not valid; expected letters, digits and '_', not starting "
                  "with a digit (no '.': loops are named 'stage.loop')")
    if g.stage(name) is not None or name in g.names.values():
        raise exc(prim, f"name {name!r} is already taken; expected a name no tensor or stage of the workload has")
    return name
