"""What an ahead-of-time library says about itself, and whether this host can run it.

A library written by :func:`tensorir.runtime.aot.build_library` exports, for
each public kernel ``SYMBOL``:

* ``SYMBOL``: the C entry point, ``int SYMBOL(T0 *p0, ..., TN *pN)``;
* ``SYMBOL.tensortune_kernel``: the compiled kernel with its thread-count
  argument (``int32_t (void *p0, ..., void *pN, int32_t num_threads)``) and its
  site table ``SYMBOL.tensortune_kernel.tensortune_sites``, which is what
  :func:`tensorir.runtime.load_library` calls from Python;
* ``SYMBOL.tensortune_metadata``: an alias of the library's metadata function
  ``const char *tensortune_<lib>_metadata(void)``, so a loader that knows one
  kernel symbol finds the metadata without knowing the library's name.

The names holding a dot cannot clash with C identifiers.  The metadata is
JSON (:data:`FORMAT`): the target the code was compiled for, the thread count
baked into the entry points, the tensortune version, and per kernel its
parameters, schedule hash and failure sites.
"""
from __future__ import annotations

import ctypes
import json
import os

from tensorir.target import Target

FORMAT = 1
"""Version of the metadata JSON (its ``"format"`` field)."""


class LibraryTargetError(RuntimeError):
    """An ahead-of-time library was compiled for CPU features this host lacks."""


class LibraryFormatError(ValueError):
    """A library's tensortune metadata is unreadable or of another format version."""


def kernel_symbol(symbol: str) -> str:
    """The exported kernel (with its ``num_threads`` argument) behind the C entry point ``symbol``."""
    return f"{symbol}.tensortune_kernel"


def metadata_symbol(symbol: str) -> str:
    """The exported alias of the library's metadata function, one per kernel ``symbol``."""
    return f"{symbol}.tensortune_metadata"


def metadata_function(library: str) -> str:
    """The C name of the metadata function of library ``library`` (a C identifier)."""
    return f"tensortune_{library}_metadata"


def read_metadata(lib: ctypes.CDLL, symbol: str, path="library") -> dict | None:
    """The metadata of a loaded library that defines kernel ``symbol``, or None if it has none.

    None means the library was not written by ``build_library`` (e.g. by
    :meth:`tensorir.runtime.Kernel.export_library`).

    Raises
    ------
    LibraryFormatError
        The metadata is not JSON or has another :data:`FORMAT`.
    """
    try:
        fn = lib[metadata_symbol(symbol)]
    except AttributeError:
        return None
    fn.restype, fn.argtypes = ctypes.c_char_p, []
    raw = fn()
    try:
        meta = json.loads(raw.decode())
    except (AttributeError, UnicodeDecodeError, json.JSONDecodeError):
        raise LibraryFormatError(f"{os.fspath(path)}: the tensortune metadata of kernel '{symbol}' "
                                 "is not JSON") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        found = meta.get("format") if isinstance(meta, dict) else None
        raise LibraryFormatError(f"{os.fspath(path)}: tensortune library metadata format {found!r}, "
                                 f"this tensortune reads format {FORMAT}; rebuild the library")
    return meta


def enabled_features(features: str) -> set:
    """The ``+feature`` names of an LLVM feature string."""
    return {f[1:] for f in features.split(",") if f.startswith("+")}


def missing_features(target: dict, host: Target) -> list:
    """Features the library's ``target`` (metadata ``{"cpu", "features"}``) enables and ``host`` lacks."""
    return sorted(enabled_features(target.get("features", "")) - enabled_features(host.features))


def check_target(meta: dict, host: Target, path="library") -> None:
    """Refuse a library compiled for CPU features ``host`` lacks (its code could fault on any call).

    Raises
    ------
    LibraryTargetError
        One line naming the library, its CPU and the missing features.
    """
    target = meta.get("target") or {}
    missing = missing_features(target, host)
    if missing:
        shown = ", ".join(f"+{f}" for f in missing[:8]) + (f" and {len(missing) - 8} more" if len(missing) > 8 else "")
        raise LibraryTargetError(
            f"{os.fspath(path)} was compiled for CPU '{target.get('cpu')}' and needs {shown}, which this host "
            f"('{host.cpu}') lacks; rebuild it on this machine (tensortune build ...)")


def check_params(meta: dict, symbol: str, params, path="library") -> None:
    """Refuse parameters (``(name, dtype, shape)`` triples) other than those kernel ``symbol`` was built for.

    Raises
    ------
    ValueError
        One line naming the first parameter whose dtype or shape differs, or the counts.
    """
    kernel = next((k for k in meta.get("kernels", []) if k.get("symbol") == symbol), None)
    if kernel is None:
        raise ValueError(f"{os.fspath(path)} does not define kernel '{symbol}'")
    built = [(p["name"], p["dtype"], [int(d) for d in p["shape"]]) for p in kernel["params"]]
    given = [(n, str(d), [int(x) for x in s]) for n, d, s in params]
    if len(built) != len(given):
        raise ValueError(f"{os.fspath(path)}: kernel '{symbol}' takes {len(built)} arrays, the function given "
                         f"has {len(given)} parameters")
    for i, ((name, dtype, shape), (_, gdtype, gshape)) in enumerate(zip(built, given)):
        if (dtype, shape) != (gdtype, gshape):
            raise ValueError(f"{os.fspath(path)}: kernel '{symbol}' parameter {i} ('{name}') is "
                             f"{gdtype}{gshape} in the function given, {dtype}{shape} in the library")
