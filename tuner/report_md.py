"""``tensortune report --format md``: the report's tables and code as Markdown (plots left to ``--html``)."""
from __future__ import annotations

from .report import MODEL_HEADER, curve_summary, model_rows, model_summary
from .report_rows import TOP_HEADER, asm_caption, summary_rows, top_rows


def _cell(text) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _table(header, rows) -> list:
    out = ["| " + " | ".join(_cell(h) for h in header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return out


def _code(text: str, lang: str = "") -> list:
    fence = "````" if "```" in text else "```"
    return [fence + lang, text.rstrip("\n"), fence]


def render_markdown(data: dict) -> str:
    """The report of :func:`tuner.report_data.gather`'s ``data`` as Markdown text."""
    out = ["# tensortune report", "", f"Logs: {', '.join(data['logs']) or '(none)'}", "",
           "Plots (tuning curve, roofline) are in the HTML report: `tensortune report --html report.html`.", ""]
    if not data["sections"]:
        out.append("No tuning records.")
    for model in data.get("models", []):
        out += [f"## Model {model['model']} on {model['target']}", "", model_summary(model) + ".", ""]
        secs = data["sections"]
        rows = [r + (secs[t["section"]]["key"] if t["section"] is not None else "-",)
                for r, t in zip(model_rows(model), model["tasks"])]
        out += _table(MODEL_HEADER + ("workload key (its section below)",), rows) + [""]
        out += [f"Latency curve (plotted in the HTML report): {curve_summary(model['curve'])}.", ""]
    for sec in data["sections"]:
        out += [f"## {sec['label']} on {sec['target']}", "", f"workload key `{sec['key']}`", ""]
        out += _table(("", ""), summary_rows(sec)) + [""]
        if sec["top"]:
            out += [f"### Top {len(sec['top'])} schedules", ""]
            out += _table(TOP_HEADER, [r[:-1] + (f"`{r[-1]}`",) for r in top_rows(sec)]) + [""]
        if "unavailable" in sec:
            out += [sec["unavailable"], ""]
            continue
        sched = sec.get("schedule")
        if sched is None:
            continue
        if "error" in sched:
            out += [sched["error"], ""]
            continue
        out += ["### Why it is fast", ""] + [f"- {f}" for f in sched["facts"]] + [""]
        out += ["### Best schedule (Python)", ""] + _code(sched["python"], "python") + [""]
        out += ["### Lowered loop nest", ""] + _code(sched["loop_nest"]) + [""]
        out += ["### Innermost loop (assembly)", ""]
        asm = sched.get("asm")
        if asm:
            out += [asm_caption(asm), ""] + _code("\n".join(asm["lines"]), "asm") + [""]
        else:
            out += [sched.get("asm_error", "the compiled kernel has no loop"), ""]
    return "\n".join(out).rstrip("\n") + "\n"
