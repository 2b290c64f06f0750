"""``tensortune report --html PATH`` / ``--format md``: the flags, and writing the report file.

The CLI (``tuner.cli.cmd_report``) calls :func:`add_arguments` on its ``report`` parser and
:func:`write`, which returns False when the plain-text report was asked for instead.
"""
from __future__ import annotations

import math
import sys


class ReportError(ValueError):
    """Bad report flags: one line for the user."""


def add_arguments(r) -> None:
    """The file-report flags of the ``report`` subparser ``r``."""
    r.add_argument("--html", metavar="PATH", help="write a self-contained HTML report (plots, roofline, assembly)")
    r.add_argument("--format", choices=("text", "md", "html"), default="text",
                   help="report format (default text; md and html go to --output, or stdout)")
    r.add_argument("-o", "--output", metavar="PATH", help="file for --format md/html (default: stdout)")
    r.add_argument("--peak-gflops", type=float, metavar="G", help="the machine's FMA peak to compare with, "
                   "instead of the measured one (with --bandwidth-gbs)")
    r.add_argument("--bandwidth-gbs", type=float, metavar="B", help="the machine's memory bandwidth, GB/s")
    r.add_argument("--no-measure", action="store_true", help="do not measure the machine's peak and bandwidth; "
                   "use only the cached values")
    r.add_argument("--remeasure", action="store_true", help="measure the machine's peak and bandwidth again "
                   "(replacing the cached values, e.g. ones measured while the machine was busy)")


def _peaks(args):
    from .machine_peak import MachinePeak, cache_path, machine_peak
    given = (args.peak_gflops, args.bandwidth_gbs)
    if any(v is not None for v in given):
        if any(v is None for v in given):
            raise ReportError("--peak-gflops and --bandwidth-gbs go together (give both or neither)")
        for flag, v in zip(("--peak-gflops", "--bandwidth-gbs"), given):
            if not (math.isfinite(v) and v > 0):
                raise ReportError(f"{flag} must be a positive number, got {v:g}")
        return lambda cpu, threads: MachinePeak(cpu, threads, given[0], given[1], "given")
    if args.remeasure and args.no_measure:
        raise ReportError("--remeasure and --no-measure contradict each other")
    told = set()

    def peaks(cpu, threads):
        found = None if args.remeasure else machine_peak(cpu, threads, measure=False)
        if found is None and not args.no_measure:
            if (cpu, threads) not in told:
                told.add((cpu, threads))
                print(f"tensortune: measuring this machine's FMA peak and memory bandwidth at {threads} threads "
                      f"(once: cached in {cache_path()})", file=sys.stderr)
            found = machine_peak(cpu, threads, measure=True, refresh=args.remeasure)
        return found
    return peaks


def write(args) -> bool:
    """Write the report ``args`` ask for; False if they ask for the plain-text report.

    Raises
    ------
    ReportError
        Bad flags or an output file that cannot be written.
    tuner.spec.SpecError
        The workload named on the command line is not valid.
    """
    from logs import default_log_paths

    from .report_data import gather
    peaks = _peaks(args)
    fmt = "html" if args.html else args.format
    if fmt == "text":
        if args.output:
            raise ReportError("--output needs --format md or --format html")
        return False
    if args.html and args.format == "md":
        raise ReportError("--html writes HTML; for Markdown use --format md [--output PATH]")
    if args.html and args.output:
        raise ReportError("give the HTML file once: --html PATH, or --format html --output PATH")
    path = args.html or args.output
    data = gather(args.log or default_log_paths(), args.workload, args.params, top=args.top, peaks=peaks)
    if fmt == "html":
        from .report_html import render_html
        text = render_html(data)
    else:
        from .report_md import render_markdown
        text = render_markdown(data)
    if path is None:
        sys.stdout.write(text)
        return True
    try:
        with open(path, "w", encoding="utf-8", newline="\n") as f:
            f.write(text)
    except OSError as err:
        raise ReportError(f"cannot write {path}: {err.strerror or err}") from None
    n = len(data["sections"])
    print(f"wrote {path} ({n} workload{'s' if n != 1 else ''} and target{'s' if n != 1 else ''})")
    return True
