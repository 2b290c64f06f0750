"""What is being tuned: a built-in workload or a user function, with its parameters.

>>> spec = WorkloadSpec.parse("matmul", ["M=64", "N=64", "K=64"])
>>> spec.label
'matmul(M=64, N=64, K=64)'
>>> spec = WorkloadSpec.parse("ops/stencil.py:blur", ["n=256"])   # doctest: +SKIP

A user workload is ``"path/to/file.py:function"``: the function takes the
parameters as keyword arguments and returns the workload's tensors, inputs
first, then outputs.  Its reference is :func:`tensorir.evaluate.evaluate`
(the tensor expression computed with numpy); a built-in's is the registry's
numpy implementation.  Every bad input raises :class:`SpecError` with one line
that names the culprit.
"""
from __future__ import annotations

import importlib.util
import inspect
import itertools
import os
import sys
from typing import Callable

import numpy as np

from tensorir.ops import registry as registry
from tensorir.te.workload import WorkloadError, check_workload

from .layout import placed, placed_empty
from .text import one_line

_module_ids = itertools.count()


class SpecError(ValueError):
    """A workload or parameter given by the user is invalid (one-line message)."""


def _parse_value(text: str):
    """``"64"`` -> 64, ``"0.5"`` -> 0.5, ``"true"`` -> True, anything else stays a string."""
    low = text.lower()
    if low in ("true", "false"):
        return low == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def is_user_workload(name: str) -> bool:
    """Whether ``name`` looks like ``"path/to/file.py:function"``."""
    path, sep, func = str(name).rpartition(":")
    return bool(sep) and path.endswith(".py") and bool(func)


def load_function(ref: str, what: str = "workload") -> Callable:
    """The function named by ``"path/to/file.py:function"``; one-line :class:`SpecError` otherwise."""
    shown, _, fname = ref.rpartition(":")
    if not shown or not fname:
        raise SpecError(f"expected {what} as path/to/file.py:function, got {ref!r}")
    path = os.path.abspath(os.path.expanduser(shown))
    if not os.path.isfile(path):
        raise SpecError(f"{what} file {shown!r} not found (looked for {path})")
    mod_name = f"_tensortune_user_{next(_module_ids)}"
    folder = os.path.dirname(path)
    if folder not in sys.path:   # as under `python file.py`, the file may import modules next to it
        sys.path.append(folder)
    try:
        mspec = importlib.util.spec_from_file_location(mod_name, path)
        module = importlib.util.module_from_spec(mspec)
        mspec.loader.exec_module(module)
    except BaseException as err:  # noqa: BLE001 - a user file may raise anything, even SystemExit
        if isinstance(err, KeyboardInterrupt):
            raise
        raise SpecError(f"{what} file {shown!r} failed to import: {type(err).__name__}: "
                        f"{one_line(err)}") from None
    fn = getattr(module, fname, None)
    if fn is None or not callable(fn):
        found = sorted(n for n, v in vars(module).items()
                       if inspect.isfunction(v) and v.__module__ == mod_name and not n.startswith("_"))
        kind = "no function" if fn is None else "a non-callable"
        raise SpecError(f"{what} file {shown!r} has {kind} named {fname!r}; functions: "
                        f"{', '.join(found) or '(none)'}")
    return fn


EXPR_PREFIX = "expr:"
"""Names of workloads carried as their tensor expression (``params["workload"]``: the canonical JSON
form, :func:`tensorir.te.serialize.workload_to_json`), such as a model's fused groups."""


def is_expr_workload(name: str) -> bool:
    return str(name).startswith(EXPR_PREFIX)


class WorkloadSpec:
    """A workload to tune: a registry name, ``"file.py:function"`` or an ``"expr:LABEL"`` form, plus parameters.

    Parameters
    ----------
    name : str
        A built-in workload name (see :func:`tensorir.ops.registry.list_workloads`)
        or ``"path/to/file.py:function"``.
    params : dict, optional
        Keyword parameters.  For a built-in they are validated and completed
        with defaults (:meth:`tensorir.ops.registry.Workload.bind`).

    Raises
    ------
    SpecError
        Unknown built-in or invalid built-in parameters (user files are
        loaded, and checked, by :meth:`tensors`).
    """

    def __init__(self, name: str, params: dict | None = None):
        self.name = str(name)
        params = dict(params or {})
        self._tensors = None
        self._file = None
        self._func_name = None
        if is_expr_workload(self.name):
            if not isinstance(params.get("workload"), dict) or set(params) != {"workload"}:
                raise SpecError(f"workload {self.name!r}: an expression workload takes one parameter, "
                                "'workload' (its JSON form)")
            self._workload = None
        elif is_user_workload(self.name):
            path, _, self._func_name = self.name.rpartition(":")
            self._file = os.path.abspath(os.path.expanduser(path))
            self._workload = None
        else:
            try:
                self._workload = registry.get_workload(self.name)
                params = self._workload.bind(**params)
            except registry.WorkloadError as err:
                raise SpecError(one_line(err)) from None
        self.params = params

    # ------------------------------------------------------------ construction
    @classmethod
    def parse(cls, workload: str, items: list | tuple | str = ()) -> "WorkloadSpec":
        """Parse a workload and command-line ``NAME=VALUE`` items, then load it.

        Parameters
        ----------
        workload : str
            Built-in name or ``"path/to/file.py:function"``.
        items : list of str
            ``["M=512", "dtype=float64"]``.  For a user function, values are
            read as int, float, bool (``true``/``false``) or else string.

        Returns
        -------
        WorkloadSpec
            With its tensors already built, so every error surfaces here.

        Raises
        ------
        SpecError
            Any problem with the workload or its parameters.
        """
        if isinstance(items, str):
            items = items.split()
        if not is_user_workload(workload):
            if str(workload).endswith(".py"):
                raise SpecError(f"workload {workload!r} looks like a file: name the function that returns "
                                f"the tensors, as {workload}:function")
            try:
                params = registry.get_workload(workload).parse_params(list(items))
            except registry.WorkloadError as err:
                raise SpecError(one_line(err)) from None
            spec = cls(workload, params)
        else:
            params = {}
            for item in items:
                key, sep, text = str(item).partition("=")
                key, text = key.strip(), text.strip()
                if not sep or not key.isidentifier() or not text:
                    raise SpecError(f"workload {workload!r}: expected NAME=VALUE, got {item!r}")
                if key in params:
                    raise SpecError(f"workload {workload!r}: parameter {key!r} given twice")
                params[key] = _parse_value(text)
            spec = cls(workload, params)
        spec.tensors()
        return spec

    @classmethod
    def from_tensors(cls, tensors, label: str) -> "WorkloadSpec":
        """A spec carrying ``tensors`` as their JSON form (rebuilt anywhere with the same key).

        ``label`` names it in logs and reports, e.g. ``"conv2d_relu_1x64x56x56"``.
        """
        from tensorir.te.serialize import SerializeError, workload_to_json
        tensors = check_workload(tensors)
        try:
            form = workload_to_json(tensors)
        except SerializeError as err:
            raise SpecError(f"workload {label!r}: {one_line(err)}") from None
        spec = cls(EXPR_PREFIX + label, {"workload": form})
        spec._tensors = spec._check_tensors(tensors)
        return spec

    def to_json(self) -> dict:
        """A JSON-able dict that :meth:`from_json` turns back into an equal spec."""
        out = {"name": self.name, "params": dict(self.params)}
        if self._file is not None:
            out["file"] = self._file
        return out

    @classmethod
    def from_json(cls, obj: dict) -> "WorkloadSpec":
        """Rebuild a spec from :meth:`to_json` (the user file is found by its absolute path)."""
        if not isinstance(obj, dict) or "name" not in obj:
            raise SpecError(f"a workload spec is a JSON object with 'name' and 'params', got {obj!r}")
        name = obj["name"]
        if obj.get("file") and is_user_workload(name):
            name = f"{obj['file']}:{name.rpartition(':')[2]}"
        spec = cls(name, obj.get("params") or {})
        spec.name = obj["name"]
        return spec

    def __eq__(self, other) -> bool:
        return isinstance(other, WorkloadSpec) and self.to_json() == other.to_json()

    def __hash__(self) -> int:
        if is_expr_workload(self.name):
            return hash((self.name, self.key))
        return hash((self.name, tuple(sorted(self.params.items(), key=lambda kv: kv[0]))))

    def __repr__(self) -> str:
        return f"WorkloadSpec({self.label})"

    # ------------------------------------------------------------- the workload
    @property
    def is_builtin(self) -> bool:
        return self._workload is not None

    def tensors(self) -> list:
        """The workload's tensors (inputs first, then outputs); built once and cached.

        Raises
        ------
        SpecError
            The file is missing or does not import, the function is missing,
            takes other parameters, raises, or does not return tensors.
        """
        if self._tensors is None:
            if self._workload is not None:
                tensors = self._workload.builder(**self.params)
            elif is_expr_workload(self.name):
                from tensorir.te.deserialize import workload_from_json
                from tensorir.te.serialize import SerializeError
                try:
                    tensors = workload_from_json(self.params["workload"])
                except SerializeError as err:
                    raise SpecError(f"workload {self.name!r}: {one_line(err)}") from None
            else:
                tensors = self._call_user_function()
            self._tensors = self._check_tensors(tensors)
        return list(self._tensors)

    def _load_function(self) -> Callable:
        return load_function(self.name, "workload")

    def _call_user_function(self) -> list:
        fn = self._load_function()
        where = f"workload {self.name!r}"
        try:
            sig = inspect.signature(fn)
        except (TypeError, ValueError):
            sig = None
        if sig is not None:
            takes_kwargs = any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values())
            names = [n for n, p in sig.parameters.items() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
            for key in self.params:
                if key not in names and not takes_kwargs:
                    raise SpecError(f"{where}: unknown parameter {key!r}; {self._func_name}() takes "
                                    f"{', '.join(names) or 'no parameters'}")
            try:
                sig.bind(**self.params)
            except TypeError as err:
                raise SpecError(f"{where}: {one_line(err)}") from None
        try:
            return fn(**self.params)
        except BaseException as err:  # noqa: BLE001 - report the user's error in one line, even SystemExit
            if isinstance(err, KeyboardInterrupt):
                raise
            raise SpecError(f"{where}: {self._func_name}() raised {type(err).__name__}: "
                            f"{one_line(err)}") from None

    def _check_tensors(self, tensors) -> list:
        where = f"workload {self.name!r}"
        try:
            check_workload(tensors)
        except WorkloadError as err:
            raise SpecError(f"{where}: {err}") from None
        from schedules.schedule import Schedule
        from schedules.errors import ScheduleError
        try:
            Schedule(tensors)
        except ScheduleError as err:
            raise SpecError(f"{where}: {one_line(err)}") from None
        return list(tensors)

    # --------------------------------------------------------------- derived
    @property
    def key(self) -> str:
        """Structural workload key (:func:`tensorir.te.serialize.workload_key`)."""
        from tensorir.te.serialize import workload_key
        return workload_key(self.tensors())

    @property
    def flops(self) -> int:
        """Floating-point operations of one run."""
        if self._workload is not None:
            return int(self._workload.flops_fn(**self.params))
        from tensorir.te.evaluate import count_flops
        return int(count_flops(self.tensors()))

    @property
    def label(self) -> str:
        """Readable instance name, e.g. ``matmul(M=512, N=512, K=512)``.

        String parameters are shown only when they differ from the default.
        """
        if self._workload is not None:
            defaults = self._workload.defaults
            shown = {k: v for k, v in self.params.items() if not (isinstance(v, str) and defaults.get(k) == v)}
            base = self.name
        elif is_expr_workload(self.name):
            return self.name[len(EXPR_PREFIX):]
        else:
            shown = self.params
            base = f"{os.path.basename(self.name.rpartition(':')[0])}:{self._func_name}"
        return f"{base}({', '.join(f'{k}={v}' for k, v in shown.items())})"

    @property
    def reduction_length(self) -> int:
        """Largest number of terms any one stage reduces over (1 if there is no reduction)."""
        from tensorir.te.evaluate import topo_stages
        longest = 1
        for t in topo_stages(self.tensors()):
            if not t.is_placeholder:
                n = 1
                for ax in t.op.reduce_axes:
                    n *= ax.extent
                longest = max(longest, n)
        return longest

    def inputs(self, seed: int = 0) -> list:
        """Reproducible random inputs, one array per placeholder.

        Floats are uniform in [-1, 1]; int32 inputs are uniform integers in [-8, 8).
        Each array starts 16 bytes past a page boundary, as large numpy arrays do
        (see :func:`placed`).
        """
        if self._workload is not None:
            return [placed(a) for a in self._workload.inputs(seed, **self.params)]
        rng = np.random.default_rng(seed)
        out = []
        for t in self.tensors():
            if t.is_placeholder:
                if t.dtype == "int32":
                    out.append(rng.integers(-8, 8, size=t.shape).astype(np.int32))
                else:
                    out.append(rng.uniform(-1.0, 1.0, t.shape).astype(t.dtype))
        return [placed(a) for a in out]

    def reference(self, inputs) -> list:
        """The expected outputs for ``inputs``: numpy implementation (built-in) or the evaluator."""
        if self._workload is not None:
            return list(self._workload.reference_fn(list(inputs), **self.params))
        from tensorir.te.evaluate import evaluate
        return evaluate(self.tensors(), list(inputs))

    def numpy_impl(self) -> Callable | None:
        """A callable ``f(inputs) -> outputs`` running the plain numpy implementation, or None.

        None for user workloads (the evaluator is a checker, not a fair
        baseline).  The callable skips parameter validation so it can be timed.
        """
        if self._workload is None:
            return None
        ref, params = self._workload.reference_fn, dict(self.params)
        return lambda inputs: ref(inputs, **params)

    def check_memory(self, available: tuple | None = None) -> None:
        """Refuse a workload whose tensors cannot fit in memory, before any is allocated.

        Tuning holds every input and output (and the reference computation
        every intermediate stage) in memory at once.

        Parameters
        ----------
        available : (int, str), optional
            Bytes available and what they are (default:
            :func:`tensorir.runtime.safety.available_memory`).

        Raises
        ------
        SpecError
            One line naming the tensor (or saying all of them together) and the bytes.
        """
        from tensorir.runtime.safety import available_memory, format_bytes, short_bytes
        from tensorir.te.evaluate import topo_stages
        limit, source = available if available is not None else available_memory()
        if limit is None:
            return
        outputs = {id(t) for t in self.output_tensors()}
        total = 0
        for t in topo_stages(self.tensors()):
            n = int(np.dtype(t.dtype).itemsize)
            for d in t.shape:
                n *= int(d)
            total += n
            if n > limit:
                role = "input" if t.is_placeholder else "output" if id(t) in outputs else "intermediate"
                raise SpecError(f"workload {self.label}: {role} tensor '{t.name}' "
                                f"({'x'.join(map(str, t.shape))} {t.dtype}) needs {format_bytes(n)}, more than the "
                                f"{short_bytes(limit)} of {source}")
        if total > limit:
            raise SpecError(f"workload {self.label}: its tensors need {format_bytes(total)} together (tuning holds "
                            f"them at once), more than the {short_bytes(limit)} of {source}")

    def output_tensors(self) -> list:
        """The computed tensors of the workload list, in order."""
        return [t for t in self.tensors() if not t.is_placeholder]

    def empty_outputs(self) -> list:
        """Uninitialised output arrays, placed like the inputs (see :func:`placed`)."""
        return [placed_empty(t.shape, t.dtype) for t in self.output_tensors()]
