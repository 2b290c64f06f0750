"""``tensortune build``: workloads -> one shared library (or object file) and its C header.

    tensortune build matmul M=256 N=256 K=256 -o out/libmm.so
    tensortune build --workload "mm=matmul M=256 N=256 K=256" --workload "softmax rows=64" -o libk.so
    tensortune build kernels.json more.json -o libk.o

Each workload is built with the best schedule its tuning logs hold (``logs.best_schedule``),
or with the logs' fallback (``logs.build``) when none holds one; the library itself is
written by :func:`tensorir.runtime.aot.build_library`.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import shlex
import sys
from dataclasses import dataclass, field

from .errors import CLIError, require_logs

DESCRIPTION = """\
Compile workloads into one shared library (-o OUT.so) or object file (-o OUT.o), and write the C
header OUT.h beside it. Each workload becomes a plain C function, by default named after the
workload:  int matmul(const float *A, const float *B, float *C);  one pointer per tensor in the
workload's order (inputs, then outputs), typed by dtype (float, double, int32_t), returning 0 on
success. The header documents every tensor's shape and dtype, and declares
const char *tensortune_<LIB>_metadata(void), a JSON string with the target CPU and features, the
thread count, each kernel's schedule hash and the tensortune version (<LIB>: the file name
without extension and 'lib' prefix). The library needs only libc and libm: parallel kernels run
on a thread pool inside it (no libgomp). The code is compiled for this machine's CPU, or for --target-cpu/--target-features
(tensortune's load_library refuses a library whose CPU features the host lacks)."""

EPILOG = """\
workloads (any mix of the three forms below except 1 with 3):
  1. WORKLOAD [NAME=VALUE ...] [--name SYMBOL]     one workload, as for `tensortune tune`
  2. --workload "[SYMBOL=]WORKLOAD [NAME=VALUE ...]"  repeatable, one kernel each
  3. FILE.json ...                                 each file holds one object or a list of objects
                                                   {"workload": "matmul", "params": {"M": 64},
                                                    "symbol": "mm"}  ("params", "symbol" optional;
                                                   a relative file.py path is read from the JSON's folder)
  Symbols must be distinct C identifiers; two kernels of one workload need names of their own.

examples:
  tensortune build matmul M=256 N=256 K=256 -o out/libmm.so
  tensortune build --workload "mm=matmul M=1 N=4096 K=4096" --workload "softmax rows=64" -o libk.so
  tensortune build kernels.json --log tuned.jsonl --threads 4 -o libk.o
  tensortune build matmul --target-cpu znver3 --target-features "$(cat znver3-features.txt)" -o libmm.so
  cc main.c -L. -lk -Wl,-rpath,'$ORIGIN' -o main      (main.c includes "libk.h")"""


@dataclass
class Request:
    """One kernel asked for: a workload with its NAME=VALUE items and an optional symbol."""
    workload: str
    items: list = field(default_factory=list)
    symbol: str | None = None
    origin: str = "the command line"


def add_parser(sub) -> argparse.ArgumentParser:
    """Register ``build`` on the CLI's subparsers."""
    b = sub.add_parser("build", help="compile workloads into a shared library (or object) with a C header",
                       description=DESCRIPTION, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    b.add_argument("items", nargs="*", metavar="WORKLOAD [NAME=VALUE] | FILE.json")
    b.add_argument("--workload", action="append", default=[], metavar="'[SYMBOL=]WORKLOAD NAME=VALUE ...'",
                   help="a kernel of the library (repeatable)")
    b.add_argument("-o", "--output", required=True, metavar="OUT.so|OUT.o",
                   help="the shared library or object file to write; OUT.h is written beside it")
    b.add_argument("--name", metavar="SYMBOL", help="the C name of the positional WORKLOAD (default: its name)")
    b.add_argument("--log", action="append", metavar="PATH",
                   help="tuning log to take schedules from (repeatable; default: the per-user and shipped logs)")
    b.add_argument("--threads", type=int, default=0, metavar="T",
                   help="threads of parallel kernels, baked into the library; also the thread count whose "
                        "tuning records are preferred (default 0: OMP_NUM_THREADS if set, else all cores)")
    b.add_argument("--target-cpu", metavar="CPU", help="compile for this LLVM CPU instead of this machine's "
                   "(with --target-features; schedules are then looked up for that CPU)")
    b.add_argument("--target-features", metavar="FEATURES", help="the target CPU's complete LLVM feature string "
                   "(+avx2,+fma,...; as a tuning log's target records it); tensortune's load_library refuses the "
                   "library on a host lacking any of them")
    b.add_argument("--untuned", choices=("heuristic", "naive"), default="heuristic",
                   help="what a workload without a tuning record gets: the tuner's heuristic start (default) "
                        "or the naive loop nest")
    b.add_argument("--require-tuned", action="store_true",
                   help="fail, naming them, if any workload has no tuned schedule")
    b.add_argument("--quiet", action="store_true", help="print nothing but errors and warnings")
    return b


def run(args) -> int:
    """``tensortune build``: 0 on success; raises :class:`CLIError` on bad input; 1 if linking failed."""
    from tensorir.runtime import ToolchainError
    try:
        return _run(args)
    except ToolchainError as err:   # not the user's input: one line, but not the usage status
        print(f"tensortune: error: {err}", file=sys.stderr)
        return 1


# ------------------------------------------------------------------ requests

def requests_from_args(args) -> list:
    """The kernels asked for on the command line, in order (see the command's epilog)."""
    items = list(args.items)
    out = []
    files = [i for i in items if i.endswith(".json")]
    if files and len(files) != len(items):
        others = [i for i in items if not i.endswith(".json")]
        raise CLIError(f"give either JSON workload files or one WORKLOAD [NAME=VALUE ...], not both "
                         f"(got {', '.join(files)} and {' '.join(others)}); use --workload for more workloads")
    if files:
        for path in files:
            out.extend(_read_json(path))
    elif items:
        out.append(Request(items[0], items[1:], args.name, "the command line"))
    if args.name is not None and (files or not items):
        raise CLIError("--name names the positional WORKLOAD; name a --workload as 'SYMBOL=WORKLOAD ...' "
                         "and a JSON workload with \"symbol\"")
    for text in args.workload:
        try:
            words = shlex.split(text)
        except ValueError as err:
            raise CLIError(f"--workload {text!r}: {err}") from None
        if not words:
            raise CLIError("--workload needs a workload: '[SYMBOL=]WORKLOAD [NAME=VALUE ...]'")
        symbol, sep, workload = words[0].rpartition("=")
        if sep and not (symbol and workload):
            raise CLIError(f"--workload {text!r}: expected '[SYMBOL=]WORKLOAD [NAME=VALUE ...]'")
        out.append(Request(workload, words[1:], symbol or None, f"--workload {text!r}"))
    if not out:
        raise CLIError("nothing to build: give WORKLOAD [NAME=VALUE ...], --workload SPEC or FILE.json "
                         "(see tensortune build --help)")
    return out


def _read_json(path: str) -> list:
    try:
        with open(path) as f:
            data = json.load(f)
    except FileNotFoundError:
        raise CLIError(f"workload file {path} not found") from None
    except (OSError, UnicodeDecodeError) as err:
        raise CLIError(f"cannot read workload file {path}: {err}") from None
    except json.JSONDecodeError as err:
        raise CLIError(f"workload file {path} is not JSON: {err}") from None
    entries = data if isinstance(data, list) else [data]
    if not entries:
        raise CLIError(f"workload file {path} holds an empty list")
    out = []
    for n, e in enumerate(entries):
        where = f"{path}" + (f" entry {n}" if isinstance(data, list) else "")
        if not isinstance(e, dict) or not isinstance(e.get("workload"), str):
            raise CLIError(f"{where}: expected an object with \"workload\" (and optional \"params\", \"symbol\"), "
                             f"got {json.dumps(e)[:80]}")
        unknown = sorted(set(e) - {"workload", "params", "symbol"})
        if unknown:
            raise CLIError(f"{where}: unknown key(s) {', '.join(unknown)}; expected workload, params, symbol")
        params = e.get("params", {})
        if not isinstance(params, dict):
            raise CLIError(f"{where}: \"params\" must be an object of NAME: VALUE, got {json.dumps(params)[:80]}")
        symbol = e.get("symbol")
        if symbol is not None and not isinstance(symbol, str):
            raise CLIError(f"{where}: \"symbol\" must be a string, got {json.dumps(symbol)}")
        workload = e["workload"]
        head, sep, fn = workload.rpartition(":")
        if sep and head.endswith(".py") and not os.path.isabs(os.path.expanduser(head)):
            workload = os.path.join(os.path.dirname(os.path.abspath(path)), head) + ":" + fn
        items = [f"{k}={json.dumps(v) if isinstance(v, bool) else v}" for k, v in params.items()]
        out.append(Request(workload, items, symbol, where))
    return out


def _default_symbol(workload: str) -> str:
    from tensorir.runtime.aot import c_identifier
    return c_identifier(workload.rpartition(":")[2] if ":" in workload else workload)


# ------------------------------------------------------------------ build

def schedule_hash(workload_key: str, trace: dict) -> str:
    """A short stable hash of a schedule: its workload key and trace (canonical JSON).

    The key is included so that one hash names one compiled kernel: the untuned
    schedules of all workloads have the same (empty) trace.
    """
    text = json.dumps({"workload_key": workload_key, "trace": trace}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def target_from_args(args):
    """The Target to compile for: this host, or ``--target-cpu`` / ``--target-features``."""
    from .target import compile_target
    host = compile_target(args.threads or None)
    if args.target_cpu is None and args.target_features is None:
        return host
    cpu = args.target_cpu or host.cpu
    if cpu != host.cpu and not args.target_features:
        raise CLIError(f"--target-cpu {cpu} needs --target-features: the CPU's complete LLVM feature string "
                         "(as a tuning log's target records it), which the library's metadata lists and "
                         "load_library checks")
    features = args.target_features or host.features
    known = {f[1:] for f in host.features.split(",") if f[:1] in "+-"}
    for f in features.split(","):
        if f[:1] not in ("+", "-") or (known and f[1:] not in known):
            raise CLIError(f"--target-features: {f!r} is not an LLVM x86 feature as +name or -name "
                             "(e.g. +avx2,+fma)")
    if not cpu.replace("-", "").replace(".", "").replace("_", "").isalnum():
        raise CLIError(f"--target-cpu {cpu!r} is not an LLVM CPU name (e.g. znver3, skylake-avx512, x86-64-v3)")
    return compile_target(args.threads or None, cpu, features)


def _cross_schedule(spec, logs_paths, target, untuned: str):
    """``(schedule, how)`` for another CPU than this one: the logs' best record for ``target``, else the default."""
    import logs
    from schedules import Schedule
    from schedules.errors import ScheduleError
    tensors = spec.tensors()

    def replays(record) -> bool:
        try:
            Schedule.from_json(tensors, record.trace)
            return True
        except (ScheduleError, ValueError, TypeError, KeyError):
            return False
    lookup = logs.find_best(spec.key, target.record(), logs_paths, name=spec.name, params=spec.params,
                            usable=replays)
    if lookup.record is None:
        if untuned == "heuristic":
            try:
                return logs.heuristic_schedule(tensors, target), f"untuned for {target.cpu}: the heuristic start"
            except ScheduleError:
                pass
        return Schedule(tensors), f"untuned for {target.cpu}: the naive loop nest"
    return Schedule.from_json(tensors, lookup.record.trace), f"tuned: {lookup.match} match in {lookup.source}"


def _schedule_for(spec, logs_paths, threads, target, host, untuned: str):
    """``(schedule, how)``: the logs' best schedule for ``spec`` on ``target``, or the logs' fallback."""
    import logs
    if target.cpu != host.cpu:
        return _cross_schedule(spec, logs_paths, target, untuned)
    tensors = spec.tensors()
    sch, lookup = logs.best_schedule(tensors, logs_paths, threads, name=spec.name, params=spec.params)
    if sch is None:   # the fallback is the logs' to choose (and to report, once, at the end of the scope)
        kernel = logs.build(tensors, log=logs_paths, threads=threads, name=spec.name, params=spec.params,
                            fallback=untuned)
        sch, lookup = getattr(kernel, "schedule", None), getattr(kernel, "lookup", lookup)
        if sch is None:
            from schedules import Schedule
            sch = Schedule(tensors)
    record = getattr(lookup, "record", None)
    if record is not None:
        source = getattr(lookup, "source", None)
        how = f"tuned: {getattr(lookup, 'match', 'found')} match" + (f" in {source}" if source else "")
    else:
        built = {"heuristic": "the heuristic start", "naive": "the naive loop nest"}.get(getattr(lookup, "match", ""))
        how = f"untuned: {built or 'the default schedule'} (no tuning record for this workload)"
    return sch, how


def _run(args) -> int:
    import logs
    from logs import installed_version
    from schedules.errors import ScheduleError
    from tensorir.ops.registry import get_workload
    from tensorir.runtime.aot import AotKernel, LibraryError, build_library, check_output, check_symbol

    from .spec import SpecError, WorkloadSpec
    from .target import compile_target
    if args.threads < 0:
        raise CLIError(f"--threads must be an integer >= 0 (0: all cores), got {args.threads}")
    require_logs(args.log)
    try:
        check_output(args.output)
    except LibraryError as err:
        raise CLIError(str(err)) from None
    host = compile_target(args.threads or None)
    target = target_from_args(args)
    requests = requests_from_args(args)
    named = {}
    for r in requests:
        symbol = r.symbol or _default_symbol(r.workload)
        try:
            check_symbol(symbol)
        except LibraryError as err:
            raise CLIError(f"{r.origin}: {err}" + ("" if r.symbol else " (give it a name)")) from None
        if symbol in named:
            raise CLIError(f"symbol {symbol!r} is given to two kernels ({named[symbol].origin} and {r.origin}); "
                             "name them apart (--workload 'NAME=WORKLOAD ...', \"symbol\" in JSON)")
        r.symbol = symbol
        named[symbol] = r
    threads = args.threads or None
    specs = []
    for r in requests:
        try:
            specs.append(WorkloadSpec.parse(r.workload, r.items))
        except SpecError as err:
            raise CLIError(f"{err}" + ("" if r.origin == "the command line" else f" (in {r.origin})")) from None
    # one scope for the command: the workloads built without a tuned schedule are reported once, together
    try:
        with logs.apply_best([], strict=args.require_tuned):
            schedules = [_schedule_for(spec, args.log, threads, target, host, args.untuned) for spec in specs]
            if args.require_tuned and target.cpu != host.cpu:
                untuned = [s.label for s, (_, how) in zip(specs, schedules) if how.startswith("untuned")]
                if untuned:
                    raise logs.TuningRequiredError(f"no tuned schedule for {target.cpu}: {', '.join(untuned)}")
    except logs.TuningRequiredError as err:
        raise CLIError(str(err)) from None
    kernels = []
    rows = []
    for r, spec, (sch, how) in zip(requests, specs, schedules):
        try:
            func = sch.lower(target=target)
        except ScheduleError as err:
            raise CLIError(f"{spec.label}: the schedule does not lower: {str(err).splitlines()[0]}") from None
        trace = sch.to_json()
        description = get_workload(spec.name).description if spec.is_builtin else ""
        title = spec.label + (f": {description}" if description else "")
        info = {"workload": spec.name, "workload_params": spec.params, "label": spec.label,
                "workload_key": spec.key, "schedule_hash": schedule_hash(spec.key, trace), "schedule_source": how,
                "trace": trace}
        kernels.append(AotKernel(r.symbol, func, title, info))
        rows.append((r.symbol, spec.label, how, info["schedule_hash"]))
    try:
        lib = build_library(kernels, args.output, target=target, threads=args.threads, version=installed_version(),
                            command=_command(requests, args, target))
    except LibraryError as err:
        raise CLIError(str(err)) from None
    if not args.quiet:
        width = max(len(s) for s, *_ in rows)
        for symbol, label, how, h in rows:
            print(f"{symbol:<{width}}  {label}  schedule {h} ({how})")
        size = os.path.getsize(lib.path)
        meta_fn = f"tensortune_{lib.metadata['library']}_metadata"
        print(f"wrote {lib.path} ({size:,} bytes) and {lib.header} in {lib.seconds:.2f} s; "
              f"metadata: {meta_fn}()")
    return 0


def _command(requests, args, target) -> str:
    """A command that builds the same library (for the header)."""
    parts = ["tensortune", "build"]
    for r in requests:
        parts += ["--workload", shlex.quote(" ".join([f"{r.symbol}={r.workload}", *r.items]))]
    for path in args.log or []:
        parts += ["--log", shlex.quote(path)]
    if args.threads:
        parts += ["--threads", str(args.threads)]
    if args.untuned != "heuristic":
        parts += ["--untuned", args.untuned]
    if args.target_cpu or args.target_features:
        parts += ["--target-cpu", shlex.quote(target.cpu), "--target-features", shlex.quote(target.features)]
    return " ".join(parts + ["-o", shlex.quote(os.path.basename(args.output))])
