"""``tensortune logs``: show, merge, distill and verify tuning logs.

    tensortune logs show [LOG ...] [--json]
    tensortune logs merge OUT LOG ... [--in-place]
    tensortune logs distill OUT LOG ... --top K [--in-place]
    tensortune logs verify [LOG ...] [--top K] [--json]

The work is done by :mod:`logs.tools` and :mod:`tuner.verify`; this module
only parses arguments and prints.  Without LOG, ``show`` and ``verify`` read
the per-user log and the shipped ones (:func:`logs.default_log_paths`).
"""
from __future__ import annotations

import json
import os

from .errors import CLIError


def add_parser(sub) -> None:
    """Register ``logs`` and its actions on the CLI's subparsers."""
    p = sub.add_parser("logs", help="show, merge, distill or verify tuning logs",
                       description="Inspect and maintain tuning logs (JSON Lines).")
    acts = p.add_subparsers(dest="logs_command", metavar="ACTION")
    s = acts.add_parser("show", help="per workload and target: best latency, GFLOP/s, trials, errors, age")
    s.add_argument("logs", nargs="*", metavar="LOG", help="default: the per-user log and the shipped ones")
    s.add_argument("--json", action="store_true", help="print one JSON object")
    for name, text in (("merge", "merge logs into OUT, each schedule of a workload and target once"),
                       ("distill", "write the best K schedules per workload and target to OUT")):
        m = acts.add_parser(name, help=text, description=text + ". Every record keeps its target.")
        m.add_argument("out", metavar="OUT")
        m.add_argument("logs", nargs="+", metavar="LOG")
        if name == "distill":
            m.add_argument("--top", type=int, required=True, metavar="K", help="schedules kept per workload "
                           "and target")
        m.add_argument("--in-place", action="store_true", help="OUT may exist (or be one of the LOGs): its "
                       "records take part and it is rewritten atomically")
    v = acts.add_parser("verify", help="replay the best records on this machine and check them against numpy")
    v.add_argument("logs", nargs="*", metavar="LOG", help="default: the per-user log and the shipped ones")
    v.add_argument("--top", type=int, default=1, metavar="K", help="records checked per workload and target "
                   "(default 1)")
    v.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    v.add_argument("--json", action="store_true", help="print one JSON object")


def run(args) -> int:
    """Run the ``logs`` action named by ``args.logs_command``."""
    actions = {"show": _show, "merge": _merge, "distill": _distill, "verify": _verify}
    if args.logs_command is None:
        raise CLIError("logs: expected an action: show, merge, distill or verify")
    return actions[args.logs_command](args)


# ------------------------------------------------------------------ helpers

def _inputs(paths, default: bool) -> list:
    """The logs to read: ``paths`` checked to be files, or the default logs."""
    from logs import default_log_paths
    if not paths and default:
        return [str(p) for p in default_log_paths()]
    for path in paths:
        if os.path.isdir(path):
            raise CLIError(f"tuning log {path} is a directory; expected a log file (e.g. {path}/tuning.jsonl)")
        if not os.path.isfile(path):
            raise CLIError(f"tuning log {path} not found")
    return list(paths)


def _read(paths) -> list:
    from logs import LogError
    from logs.tools import read_log
    try:
        return [read_log(p) for p in paths]
    except LogError as err:
        raise CLIError(str(err)) from None


def _skipped_lines(logs) -> list:
    return [log.read.message for log in logs if log.read is not None and log.read.message]


def _log_info(log) -> dict:
    return {"path": log.path, "missing": log.missing, "lines": log.read.lines if log.read else 0,
            "records": len(log.entries), "skipped": dict(log.skipped)}


def _output_inputs(args) -> list:
    """The logs a merge or distill reads, after refusing to overwrite what was not offered."""
    inputs = _inputs(args.logs, default=False)
    out = os.path.abspath(os.path.expanduser(args.out))
    if os.path.isdir(out):
        raise CLIError(f"OUT {args.out} is a directory; expected a log file")
    listed = any(os.path.abspath(os.path.expanduser(p)) == out for p in inputs)
    exists = os.path.isfile(out) and os.path.getsize(out) > 0
    if listed and not args.in_place:
        raise CLIError(f"OUT {args.out} is also an input; add --in-place to merge the others into it "
                       "(it is rewritten atomically)")
    if exists and not listed:
        if not args.in_place:
            raise CLIError(f"OUT {args.out} exists; add --in-place to merge into it, or name a new file")
        inputs = [args.out, *inputs]
    return inputs


def _write(fn, args, *extra):
    from logs import LogError
    inputs = _output_inputs(args)
    try:
        return fn(args.out, inputs, *extra)
    except LogError as err:
        raise CLIError(str(err)) from None


# ------------------------------------------------------------------ actions

def _show(args) -> int:
    from logs.tools import format_age, summarize

    from .report import format_latency
    logs = _read(_inputs(args.logs, default=True))
    summaries = summarize(logs)
    if args.json:
        print(json.dumps({"logs": [_log_info(log) for log in logs],
                          "workloads": [s.to_dict() for s in summaries]}))
        return 0
    for log in logs:
        state = "missing" if log.missing else f"{len(log.entries)} records"
        print(f"log  {log.path} ({state})")
    for message in _skipped_lines(logs):
        print(f"note {message}")
    if not summaries:
        print("no tuning records")
        return 0
    rows = [("workload", "target", "best", "GFLOP/s", "records", "trials", "errors", "age")]
    for s in summaries:
        best = s.best.record if s.best else None
        rows.append((s.label, s.target_label, format_latency(best.median_cost) if best else "-",
                     f"{best.gflops:.1f}" if best and best.gflops else "-", str(s.records), str(s.trials),
                     ", ".join(f"{k} {n}" for k, n in sorted(s.errors.items())) or "-",
                     format_age(s.age_seconds())))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    right = {2, 3, 4, 5, 7}
    print()
    for r in rows:
        cells = [c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))]
        print("  ".join(cells).rstrip())
    return 0


def _report_write(result, what: str) -> int:
    for message in _skipped_lines(result.inputs):
        print(f"note {message}")
    read = sum(len(log.entries) for log in result.inputs)
    print(f"{what} {len(result.inputs)} log{'s' if len(result.inputs) != 1 else ''} ({read} records) into "
          f"{result.path}: wrote {result.written} records")
    return 0


def _merge(args) -> int:
    from logs.tools import merge
    result = _write(merge, args)
    _report_write(result, "merged")
    print(f"dropped {result.dropped} duplicate{'s' if result.dropped != 1 else ''} (same workload, target, "
          "trace and decisions; the better measurement kept)")
    return 0


def _distill(args) -> int:
    from logs.tools import distill
    if args.top < 1:
        raise CLIError(f"--top must be a positive integer, got {args.top}")
    result = _write(distill, args, args.top)
    _report_write(result, "distilled")
    print(f"kept the {args.top} fastest schedule{'s' if args.top != 1 else ''} per workload and target; left out "
          f"{result.dropped} records (failed, duplicates or slower)")
    return 0


def _verify(args) -> int:
    from logs import describe_target
    from logs.tools import best_entries

    from .verify import DESCRIBE, verify
    if args.top < 1:
        raise CLIError(f"--top must be a positive integer, got {args.top}")
    logs = _read(_inputs(args.logs, default=True))

    def show(v) -> None:
        if args.json:
            return
        rec = v.entry.record
        line = f"{DESCRIBE[v.status]:<18} {rec.workload_label} on {describe_target(rec.target)}  {v.entry.where}"
        print(line + (f"\n{'':<19}{v.detail}" if v.detail else ""), flush=True)

    if not args.json:
        for message in _skipped_lines(logs):
            print(f"note {message}")
    verdicts = verify(best_entries(logs, args.top), seed=args.seed, progress=show)
    counts = {status: sum(v.status == status for v in verdicts) for status in DESCRIBE}
    failed = sum(v.failed for v in verdicts)
    if args.json:
        print(json.dumps({"logs": [_log_info(log) for log in logs], "counts": counts,
                          "records": [{"status": v.status, "detail": v.detail, "log": v.entry.path,
                                       "line": v.entry.line, "workload": v.entry.record.workload_label,
                                       "target": v.entry.record.target} for v in verdicts]}))
    else:
        parts = ", ".join(f"{n} {DESCRIBE[s]}" for s, n in counts.items() if n)
        print(f"verified {len(verdicts)} record{'s' if len(verdicts) != 1 else ''}"
              + (f": {parts}" if parts else " (no successful records in the logs)"))
    return 1 if failed else 0
