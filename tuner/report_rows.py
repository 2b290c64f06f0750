"""The tables of a report as rows of text, shared by the HTML and Markdown renderers."""
from __future__ import annotations

from .report import ARMS, format_latency

NOT_RECORDED = "not recorded"


def _pct(x) -> str:
    return f"{100 * x:.1f}%" if x is not None else "-"


def _count(n: int, what: str) -> str:
    return f"{n} {what}" + ("" if n == 1 else "s")


def _flops(n) -> str:
    if n is None:
        return NOT_RECORDED
    return f"{n / 1e9:.3f} GFLOP ({n:,} FLOP)" if n >= 1e7 else f"{n:,} FLOP"


def _bytes(n: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.2f} {unit} ({n:,} B)"
    return f"{n:,} B"


def origin_label(origin: str) -> str:
    """A reader's name for a tuner arm (``TuneResult.arms`` keys)."""
    return ARMS.get(origin, origin)


def ceilings_text(peak) -> str:
    """The machine ceilings of a section, or why there are none."""
    if peak is None:
        return ("not measured: no cached ceilings for this CPU and thread count, and the log was written "
                "on another CPU (or measuring was turned off)")
    # (a first measurement and a cache hit read the same: the report does not depend on which)
    how = "given on the command line" if peak["source"] == "given" else "measured on this machine, cached"
    return f"FMA peak {peak['gflops']:g} GFLOP/s, memory bandwidth {peak['bandwidth_gbs']:g} GB/s ({how})"


def summary_rows(sec: dict) -> list:
    """``[(name, value)]`` of a section's summary table, in display order."""
    rows = [("operator", sec["operator"]),
            ("parameters", ", ".join(f"{k}={v}" for k, v in sec["params"].items()) or "-"),
            ("target", sec["target"]),
            ("FLOPs per call", _flops(sec["flops"])),
            ("records", f"{sec['records']} ({_count(sec['trials'], 'trial')}, {sec['invalid']} invalid asks)")]
    errs = sec["errors"]
    rows.append(("errors by kind", ", ".join(f"{k}: {v}" for k, v in errs.items()) if errs else "none"))
    origins = sec["origins"]
    rows.append(("candidates chosen by",
                 ", ".join(f"{origin_label(k)}: {v}" for k, v in origins.items()) if origins
                 else NOT_RECORDED + " (log written before tensortune recorded each candidate's origin)"))
    rows.append(("tuning time", f"{sec['tuning_seconds']:.1f} s in {_count(sec['runs'], 'run')}, from the first "
                 "record to the last (record timestamps: a run's start-up before its first record is not in the log)"))
    best = sec["best"]
    if best is None:
        rows.append(("best", "no successful measurement"))
        return rows
    rows.append(("best latency", format_latency(best["latency_s"])
                 + (" (confirmed: re-timed side by side at the end of a run)" if best["confirmed"] else "")))
    rows.append(("best GFLOP/s", f"{best['gflops']:g}"))
    ref = sec["numpy"]
    if ref:
        vs = (f"{ref['speedup']:g}x numpy's speed (numpy {format_latency(ref['numpy_seconds'])}, "
              f"tuned {format_latency(ref['tuned_seconds'])}, timed side by side when tuned)")
    else:
        vs = (f"{NOT_RECORDED} (the log holds no numpy timing: written before tensortune recorded it, "
              "or the workload has no numpy implementation)")
    rows.append(("vs numpy", vs))
    rows.append(("machine ceilings", ceilings_text(sec["peak"])))
    if "fraction_of_peak" in best:
        over = best["fraction_of_peak"] > 1 or best["fraction_of_bandwidth"] > 1
        rows.append(("fraction of FMA peak", _pct(best["fraction_of_peak"])
                     + (" (above 100%: the ceilings were measured while the machine was busy, or the working set "
                        "stayed in cache; `tensortune report --remeasure` measures them again)" if over else "")))
        rows.append(("fraction of memory bandwidth", f"{_pct(best['fraction_of_bandwidth'])} "
                     f"({best['gbs']:g} GB/s of compulsory traffic)"))
    if "bytes" in sec:
        rows.append(("bytes moved (compulsory)", _bytes(sec["bytes"])))
        rows.append(("arithmetic intensity", f"{sec['intensity']:g} FLOP/byte (upper bound: compulsory traffic)"))
    traffic = (sec.get("schedule") or {}).get("traffic_bytes")
    if traffic:
        rows.append(("estimated traffic (loop nest)", (f"{_bytes(int(traffic))} past a 1 MiB cache (cost-model "
                                                        f"features), intensity {sec['intensity_estimated']:g} FLOP/byte")))
    cm = sec.get("cost_model")
    if cm is not None:
        rows.append(("cost model ranking accuracy",
                     f"{cm['accuracy']:.3f} pairwise ({cm['note']})" if cm["accuracy"] is not None else cm["note"]))
    return rows


TOP_HEADER = ("#", "latency", "GFLOP/s", "of peak", "measured", "confirmed", "chosen by", "decisions")


def top_rows(sec: dict) -> list:
    """Rows (tuples of str, as :data:`TOP_HEADER`) of a section's top schedules."""
    peak = sec["peak"]
    out = []
    for row in sec["top"]:
        gf = row["gflops"]
        out.append((str(row["rank"]), format_latency(row["latency_s"]), f"{gf:g}" if gf else "-",
                    _pct(gf / peak["gflops"]) if gf and peak else "-", str(row["measurements"]),
                    "yes" if row["confirmed"] else "no", origin_label(row["origin"]), row["decisions"]))
    return out


ASM_NOTE = ("Innermost loop: a jump back to an earlier label marks a loop; of the loops with no loop inside, "
            "the one with the most vector arithmetic instructions is shown (then the longest). "
            "Compiled on this machine for its CPU.")


def asm_caption(asm: dict) -> str:
    return (f"{asm['label']} in {asm['function']}: {asm['vector_ops']} vector arithmetic instructions "
            f"(of {asm['loops']} innermost loops). {ASM_NOTE}")
