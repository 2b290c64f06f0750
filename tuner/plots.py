"""Report plots as SVG text: the tuning curve, the roofline and a model's latency curve (matplotlib, no
pyplot, no display).

Figures are made with :class:`matplotlib.figure.Figure` and written by the SVG backend, so no
global backend is set and nothing opens a window.  The SVG is deterministic: no date in the
metadata, a fixed ``svg.hashsalt`` (ids of clip paths and glyphs are hashes salted with it;
each plot gets its own salt so ids do not collide when several SVGs share one HTML page), and
text kept as text (``svg.fonttype = "none"``), so the same data gives the same bytes.
"""
from __future__ import annotations

import io


def _svg(fig, salt: str) -> str:
    import matplotlib
    buf = io.StringIO()
    with matplotlib.rc_context({"svg.hashsalt": salt, "svg.fonttype": "none"}):
        fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None})
    text = buf.getvalue()
    text = text[text.index("<svg"):]           # inline: no XML declaration or DOCTYPE
    start, end = text.find("<metadata>"), text.find("</metadata>")
    if 0 <= start < end:                       # (an empty RDF block naming its vocabularies by URL)
        text = text[:start] + text[end + len("</metadata>"):].lstrip("\n")
    return text


def _figure(width: float, height: float, ncols: int = 1):
    from matplotlib.figure import Figure
    fig = Figure(figsize=(width, height), dpi=72, layout="constrained")
    axes = fig.subplots(1, ncols, squeeze=False)[0]
    return fig, list(axes)


def tuning_curve_svg(curve: list, salt: str) -> str:
    """Best GFLOP/s so far against trials and against seconds, side by side.

    Parameters
    ----------
    curve : list of [trial, seconds, best_gflops]
        One point per trial, in order (:func:`tuner.report_data.gather`).
    salt : str
        Unique per plot on a page (SVG ids).
    """
    fig, (ax_n, ax_t) = _figure(9.0, 3.2, 2)
    trials = [p[0] for p in curve]
    secs = [p[1] for p in curve]
    best = [p[2] for p in curve]
    for ax, xs, label in ((ax_n, trials, "trials measured"), (ax_t, secs, "seconds of tuning")):
        ax.step(xs, best, where="post", color="#1f77b4", linewidth=1.8)
        ax.plot(xs, best, "o", color="#1f77b4", markersize=3)
        ax.set_xlabel(label)
        ax.set_ylabel("best GFLOP/s so far")
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
    ax_n.set_title("tuning curve (by trial)", fontsize=10)
    ax_t.set_title("tuning curve (by time)", fontsize=10)
    return _svg(fig, salt)


def roofline_svg(intensity: float, gflops: float, salt: str, peak_gflops: float | None = None,
                 bandwidth_gbs: float | None = None, estimated: float | None = None) -> str:
    """The best schedule on a roofline: GFLOP/s against arithmetic intensity (FLOP per byte), log-log.

    The roof is ``min(peak, bandwidth * intensity)`` when both ceilings are known.  ``intensity``
    counts compulsory traffic; ``estimated``, if given, is the intensity from the loop nest's
    estimated traffic, drawn as a second, hollow point.
    """
    fig, (ax,) = _figure(5.5, 3.8)
    xs_all = [intensity] + ([estimated] if estimated else [])
    lo = min(*xs_all, 1.0) / 8
    hi = max(*xs_all, (peak_gflops / bandwidth_gbs) if peak_gflops and bandwidth_gbs else 1.0) * 8
    xs = [lo * (hi / lo) ** (i / 63) for i in range(64)]
    if peak_gflops and bandwidth_gbs:
        ax.plot(xs, [min(peak_gflops, bandwidth_gbs * x) for x in xs], color="#444444", linewidth=1.5,
                label=f"roof: {peak_gflops:.0f} GFLOP/s, {bandwidth_gbs:.0f} GB/s")
    elif peak_gflops:
        ax.axhline(peak_gflops, color="#444444", linewidth=1.5, label=f"FMA peak {peak_gflops:.0f} GFLOP/s")
    elif bandwidth_gbs:
        ax.plot(xs, [bandwidth_gbs * x for x in xs], color="#444444", linewidth=1.5,
                label=f"bandwidth {bandwidth_gbs:.0f} GB/s")
    ax.plot([intensity], [gflops], "o", color="#d62728", markersize=8,
            label=f"best: {gflops:.3g} GFLOP/s (compulsory traffic)")
    if estimated:
        ax.plot([estimated], [gflops], "o", markerfacecolor="none", markeredgecolor="#d62728", markersize=8,
                label="best (estimated loop-nest traffic)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    roof_lo = min(v for v in (peak_gflops, bandwidth_gbs * lo if bandwidth_gbs else None) if v) \
        if peak_gflops or bandwidth_gbs else gflops
    ax.set_ylim(min(gflops, roof_lo) / 4, max(gflops, peak_gflops or 0) * 3)
    ax.set_xlabel("arithmetic intensity (FLOP / compulsory byte)")
    ax.set_ylabel("GFLOP/s")
    ax.set_title("roofline", fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="upper left", fontsize=8)
    return _svg(fig, salt)


def latency_curve_svg(curve: list, salt: str, ylabel: str = "estimated latency") -> str:
    """A latency (lower is better) against trials and against seconds, side by side.

    Parameters
    ----------
    curve : list of [trial, seconds, latency_s]
        Points in order, e.g. a model section's ``curve`` (:func:`tuner.report_model.gather_models`).
    salt : str
        Unique per plot on a page (SVG ids).
    ylabel : str
        What the latency is; the axis adds the unit (ms, or us below 1 ms).
    """
    fig, (ax_n, ax_t) = _figure(9.0, 3.2, 2)
    lat = [p[2] for p in curve]
    scale, unit = (1e3, "ms") if max(lat, default=0.0) >= 1e-3 else (1e6, "us")
    ys = [v * scale for v in lat]
    for ax, xs, label in ((ax_n, [p[0] for p in curve], "trials measured"),
                          (ax_t, [p[1] for p in curve], "seconds of tuning")):
        ax.step(xs, ys, where="post", color="#2ca02c", linewidth=1.8)
        ax.plot(xs, ys, "o", color="#2ca02c", markersize=3)
        ax.set_xlabel(label)
        ax.set_ylabel(f"{ylabel} ({unit})")
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
    ax_n.set_title("latency (by trial; lower is better)", fontsize=10)
    ax_t.set_title("latency (by time; lower is better)", fontsize=10)
    return _svg(fig, salt)
