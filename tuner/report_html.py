"""``tensortune report --html``: one self-contained HTML page (inline CSS and SVG, no script, no links out).

Tuned models' sections (``<section class="model">``: task table, latency curve, links to each
task's workload section) come first, then one section per workload and target.  Rendering is a
pure function of :func:`tuner.report_data.gather`'s dict: no clock, no environment, sections in
the dict's (sorted) order, plots as deterministic SVG (:mod:`tuner.plots`), so the same logs give
the same bytes.  Every plot is a ``<figure
class="plot" data-plot=...>`` and every table a ``<table data-table=...>``, so a test (or a
reader's script) can find them.
"""
from __future__ import annotations

from html import escape

from . import plots
from .report import MODEL_HEADER, curve_summary, model_rows, model_summary
from .report_rows import NOT_RECORDED, TOP_HEADER, asm_caption, summary_rows, top_rows

CSS = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1100px; color: #222; padding: 0 1em; }
h1 { font-size: 1.6em; } h2 { font-size: 1.3em; border-bottom: 1px solid #ccc; padding-bottom: .2em; margin-top: 2em; }
h3 { font-size: 1.05em; margin-top: 1.4em; }
table { border-collapse: collapse; margin: .6em 0; font-size: .9em; }
th, td { border: 1px solid #ccc; padding: .25em .6em; text-align: left; vertical-align: top; }
th { background: #f2f2f2; }
table.summary th { width: 16em; }
td.decisions { font-family: ui-monospace, monospace; font-size: .85em; word-break: break-all; max-width: 40em; }
pre { background: #f7f7f7; border: 1px solid #ddd; padding: .6em; overflow-x: auto; font-size: .82em; }
figure.plot { margin: 1em 0; } figure.plot svg { max-width: 100%; height: auto; }
figcaption, p.note { font-size: .85em; color: #555; }
nav ul { columns: 2; }
"""


def _table(name: str, sid: str, header, rows, classes=()) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in header) if header else ""
    body = []
    for row in rows:
        cells = []
        for i, cell in enumerate(row):
            cls = f' class="{classes[i]}"' if i < len(classes) and classes[i] else ""
            cells.append(f"<td{cls}>{escape(str(cell))}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    thead = f"<thead><tr>{head}</tr></thead>" if head else ""
    return (f'<table class="{name}" data-table="{name}" id="{sid}-{name}">{thead}<tbody>'
            + "\n".join(body) + "</tbody></table>")


def _summary(sid: str, sec: dict) -> str:
    rows = "\n".join(f"<tr><th>{escape(k)}</th><td>{escape(v)}</td></tr>" for k, v in summary_rows(sec))
    return f'<table class="summary" data-table="summary" id="{sid}-summary"><tbody>{rows}</tbody></table>'


def _figure(sid: str, kind: str, svg: str, caption: str) -> str:
    return (f'<figure class="plot" data-plot="{kind}" id="{sid}-{kind}">{svg}'
            f"<figcaption>{escape(caption)}</figcaption></figure>")


def _plots(sid: str, sec: dict) -> list:
    out = []
    peak = sec["peak"]
    if sec["curve"]:
        out.append(_figure(sid, "curve", plots.tuning_curve_svg(sec["curve"], f"{sid}-curve"),
                           "Best GFLOP/s measured so far (single measurements while tuning) against trials "
                           "and against seconds of tuning (record timestamps; pauses between runs dropped)."))
    best = sec["best"]
    if best is not None and sec.get("intensity"):
        out.append(_figure(sid, "roofline", plots.roofline_svg(
            sec["intensity"], best["gflops"], f"{sid}-roofline", peak["gflops"] if peak else None,
            peak["bandwidth_gbs"] if peak else None, sec.get("intensity_estimated")),
            "The best schedule against the machine's measured FMA peak and memory bandwidth. Arithmetic "
            "intensity counts compulsory traffic only (each tensor read or written once), so it is an upper "
            "bound and the filled point sits at or right of its true place; the hollow point uses the loop nest's "
            "traffic past a 1 MiB cache as the cost model's features estimate it."))
    return out


def _schedule(sid: str, sched: dict) -> list:
    if "error" in sched:
        return [f'<p class="note">{escape(sched["error"])}</p>']
    out = ["<h3>Why it is fast</h3><ul>" + "".join(f"<li>{escape(f)}</li>" for f in sched["facts"]) + "</ul>",
           "<h3>Best schedule (Python)</h3>",
           f'<pre class="python" id="{sid}-python">{escape(sched["python"])}</pre>',
           "<h3>Lowered loop nest</h3>",
           f'<pre class="loop-nest" id="{sid}-loop-nest">{escape(sched["loop_nest"])}</pre>',
           "<h3>Innermost loop (assembly)</h3>"]
    asm = sched.get("asm")
    if asm:
        out.append(f'<p class="note">{escape(asm_caption(asm))}</p>')
        out.append(f'<pre class="asm" id="{sid}-asm">{escape(chr(10).join(asm["lines"]))}</pre>')
    else:
        out.append(f'<p class="note">{escape(sched.get("asm_error", "the compiled kernel has no loop"))}</p>')
    return out


def _section(i: int, sec: dict) -> str:
    sid = f"w{i}"
    parts = [f'<section class="workload" id="{sid}">',
             f"<h2>{escape(sec['label'])} on {escape(sec['target'])}</h2>",
             f'<p class="note">workload key {escape(sec["key"])}</p>', _summary(sid, sec)]
    parts += _plots(sid, sec)
    if sec["top"]:
        parts.append(f"<h3>Top {len(sec['top'])} schedules</h3>")
        parts.append(_table("top", sid, TOP_HEADER, top_rows(sec), classes=[""] * 7 + ["decisions"]))
        parts.append('<p class="note">Each schedule once, at its best measurement; confirmed measurements '
                     "(re-timed side by side at the end of a run) rank first.</p>")
    if "unavailable" in sec:
        parts.append(f'<p class="note">{escape(sec["unavailable"])}</p>')
    elif "schedule" in sec:
        parts += _schedule(sid, sec["schedule"])
    parts.append("</section>")
    return "\n".join(parts)


MODEL_NOTE = ("Estimated latency: the sum over the model's tuned kernels of weight (occurrences in the model) "
              "x best latency, the kernel a build would use (confirmed measurements first); kernels built with "
              "their heuristic start and the time between kernels are not in it. Each task links to its "
              "workload's section.")


def _model_table(sid: str, model: dict) -> str:
    body = []
    for row, task in zip(model_rows(model), model["tasks"]):
        cells = [escape(c) for c in row]
        if task["section"] is not None:
            cells[1] = f'<a href="#w{task["section"]}">{cells[1]}</a>'
        body.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    head = "".join(f"<th>{escape(h)}</th>" for h in MODEL_HEADER)
    return (f'<table class="model-tasks" data-table="model-tasks" id="{sid}-model-tasks"><thead><tr>{head}'
            "</tr></thead><tbody>" + "\n".join(body) + "</tbody></table>")


def _model_section(i: int, model: dict) -> str:
    sid = f"m{i}"
    parts = [f'<section class="model" id="{sid}">',
             f"<h2>Model {escape(model['model'])} on {escape(model['target'])}</h2>",
             f"<p>{escape(model_summary(model))}</p>", _model_table(sid, model),
             f'<p class="note">{escape(MODEL_NOTE)}</p>']
    if model["curve"]:
        parts.append(_figure(sid, "model-curve", plots.latency_curve_svg(model["curve"], f"{sid}-curve"),
                             "Estimated model latency against trials and against seconds of tuning (record "
                             "timestamps; pauses between runs dropped), from the moment every task has a "
                             "measurement: each task at its best so far, ranked as a build ranks them, so a "
                             "confirming re-timing at the end of a run can raise it. From "
                             + curve_summary(model["curve"]) + "."))
    else:
        parts.append(f'<p class="note">{escape(curve_summary(model["curve"]))}</p>')
    parts.append("</section>")
    return "\n".join(parts)


def render_html(data: dict) -> str:
    """The report page of :func:`tuner.report_data.gather`'s ``data``, as text."""
    secs = data["sections"]
    logs = ", ".join(data["logs"]) or "(none)"
    body = ["<h1>tensortune report</h1>", f'<p class="note">Logs: {escape(logs)}</p>']
    if not secs:
        body.append(f"<p>No tuning records{' for ' + escape(data['workload']) if data.get('workload') else ''}.</p>")
    else:
        models = data.get("models", [])
        body.append("<nav><ul>" + "".join(f'<li><a href="#m{i}">Model {escape(m["model"])} on '
                                           f'{escape(m["target"])}</a></li>' for i, m in enumerate(models))
                    + "".join(f'<li><a href="#w{i}">{escape(s["label"])} on {escape(s["target"])}</a></li>'
                              for i, s in enumerate(secs)) + "</ul></nav>")
        body += [_model_section(i, m) for i, m in enumerate(models)]
        body += [_section(i, s) for i, s in enumerate(secs)]
    body.append(f'<p class="note">Values shown as "{NOT_RECORDED}" are absent from the log '
                "(written by an older tensortune).</p>")
    return ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
            f"<title>tensortune report</title>\n<style>{CSS}</style>\n</head>\n<body>\n"
            + "\n".join(body) + "\n</body>\n</html>\n")
