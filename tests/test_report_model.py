"""The report's model section: task table, estimated latency and latency curve from model-task records."""
from __future__ import annotations

import html
import json
import re
from datetime import datetime, timedelta, timezone

import onnx
import pytest

from logs import TuningLog, TuningRecord
from tests.onnx_models import mlp
from tests.test_report_html import _chromium, _run_chromium
from tuner.cli import main
from tuner.report_data import gather
from tuner.report_model import gather_models

CPU1 = {"kind": "llvm", "cpu": "znver3", "features": "+avx2,+fma", "threads": 1}
CPU2 = dict(CPU1, threads=2)
T0 = datetime(2026, 11, 26, 10, 0, 0, tzinfo=timezone.utc)
# task id -> (label, workload key, FLOP, weight)
TASKS = {0: ("Conv+Relu 1x8x8x8->1x8x8x8", "k0", 2_000_000, 2),
         1: ("Gemm 4x64->4x32", "k1", 1_000_000, 1),
         2: ("MatMul 8x64->8x64", "k2", 3_000_000, 3)}
CEILINGS = ["--peak-gflops", "150", "--bandwidth-gbs", "12"]


def rec(task, at, cost=None, model="toy.onnx", target=CPU1, trial=True, error=None, **kw):
    """A record of ``task`` at ``at`` seconds after T0 (``trial=False``: the default schedule)."""
    label, key, flops, weight = TASKS[task]
    meta = {"model": model, "task": task, "weight": weight, "origin": "sampler"} if model else {"origin": "sampler"}
    decisions = {"tile": int(at) + 1} if trial else {}
    ts = (T0 + timedelta(seconds=at)).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    return TuningRecord(workload_key=key, workload_name=f"expr:{label}", workload_params={"workload": {"not": 1}},
                        target=dict(target), trace={"instructions": [], "decisions": decisions}, decisions=decisions,
                        costs=[] if error else [cost], error_kind=error, error_msg="boom" if error else None,
                        flops=flops, timestamp=ts, meta=meta, **kw)


def toy_records() -> list:
    """Three tasks over two runs (a pause of 994 s), with an invalid ask, a failure, a confirming and a
    repeated measurement; plus the same model on 2 threads and a record of no model."""
    return [rec(0, 0, 4e-3, trial=False),          # the default schedule: a measurement, not a trial
            rec(0, 1, 2e-3),
            rec(0, 2, error="runtime"),              # a failed trial
            rec(1, 3, 1e-3),
            rec(2, 4, 5e-3),                         # every task measured: the curve starts, 20 ms
            rec(2, 5, error="schedule"),             # an invalid ask: no trial, no change
            rec(2, 6, 2e-3),                         # 11 ms
            rec(1, 1000, 2e-3),                      # a new run; slower: no change, but a trial
            rec(0, 1002, 1e-3),                      # 9 ms
            rec(0, 1003, 1.5e-3, confirmed=True),    # confirmed ranks first: 10 ms
            rec(1, 1004, 0.5e-3, remeasured=True),   # 9.5 ms
            rec(0, 7, 3e-3, target=CPU2),
            rec(2, 8, 1e-4, model=None)]             # `tensortune tune` of a model's workload: not the model's


def test_model_table_estimated_latency_and_curve():
    models = gather_models(toy_records())
    assert [(m["model"], m["target"]) for m in models] == [("toy.onnx", "znver3, 1 thread"),
                                                          ("toy.onnx", "znver3, 2 threads")]
    m = models[0]
    rows = [(t["task"], t["label"], t["flops"], t["weight"], t["best_latency_s"], t["confirmed"], t["gflops"],
             t["weighted_latency_s"], t["share"], t["trials"], t["records"]) for t in m["tasks"]]
    assert rows == [(0, TASKS[0][0], 2_000_000, 2, 1.5e-3, True, 1.333, 3e-3, 0.316, 3, 5),
                    (1, TASKS[1][0], 1_000_000, 1, 0.5e-3, False, 2.0, 0.5e-3, 0.0526, 2, 3),
                    (2, TASKS[2][0], 3_000_000, 3, 2e-3, False, 1.5, 6e-3, 0.632, 2, 3)]
    assert m["estimated_latency_s"] == 9.5e-3          # 2 x 1.5 + 1 x 0.5 + 3 x 2 ms
    assert (m["records"], m["trials"], m["tuning_seconds"], m["runs"]) == (11, 7, 10.0, 2)
    # [trials so far, seconds of tuning (the 994 s pause dropped), estimated latency]
    assert m["curve"] == [[4, 4.0, 0.02], [5, 6.0, 0.011], [6, 6.0, 0.011], [7, 8.0, 0.009],
                          [7, 9.0, 0.01], [7, 10.0, 0.0095]]
    assert m["curve"][-1][2] == m["estimated_latency_s"]
    other = models[1]
    assert [t["task"] for t in other["tasks"]] == [0] and other["estimated_latency_s"] == 6e-3
    assert other["curve"] == [[1, 0.0, 6e-3]]


def test_a_task_without_a_successful_measurement_leaves_the_estimate_open():
    (m,) = gather_models([rec(0, 0, 1e-3), rec(1, 1, error="runtime")])
    assert m["estimated_latency_s"] is None and m["curve"] == []
    assert [t["best_latency_s"] for t in m["tasks"]] == [1e-3, None]
    assert [t["share"] for t in m["tasks"]] == [None, None]
    assert gather_models([rec(2, 8, 1e-4, model=None)]) == []


@pytest.fixture()
def toy_log(tmp_path):
    path = tmp_path / "toy.jsonl"
    log = TuningLog(path)
    for r in toy_records():
        log.append(r)
    return path


def test_gather_links_each_task_to_its_workload_section(toy_log):
    data = gather([toy_log], accuracy=False)
    secs = data["sections"]
    assert len(secs) == 4 and len(data["models"]) == 2
    for model in data["models"]:
        for task in model["tasks"]:
            sec = secs[task["section"]]
            assert (sec["key"], sec["target"], sec["label"]) == (task["key"], model["target"], task["label"])
    assert gather([toy_log], workload="matmul", params=["M=4", "N=4", "K=4"], accuracy=False)["models"] == []


def test_text_and_markdown_model_section(toy_log, tmp_path, capsys):
    assert main(["report", "--log", str(toy_log)]) == 0
    text = capsys.readouterr().out
    assert text.index("== model toy.onnx on znver3, 1 thread") < text.index("== model toy.onnx on znver3, 2 threads") \
        < text.index("== Conv+Relu")
    block = text[:text.index("== model toy.onnx on znver3, 2 threads")].splitlines()
    assert block[1] == ("   estimated latency 9.500 ms (sum of weight x best latency over the tuned kernels); "
                        "3 tuned tasks, 7 trials, 10.0 s of tuning in 2 runs")
    assert block[2].split() == ["ID", "task", "FLOP", "weight", "GFLOP/s", "best", "latency", "weighted", "latency",
                                "share", "trials", "workload", "key"]
    assert block[3].split() == ["0", "Conv+Relu", "1x8x8x8->1x8x8x8", "2e+06", "2", "1.333", "1.500", "ms",
                                "3.000", "ms", "31.6%", "3", "k0"]
    assert block[5].split() == ["2", "MatMul", "8x64->8x64", "3e+06", "3", "1.5", "2.000", "ms", "6.000", "ms",
                                "63.2%", "2", "k2"]
    assert block[6] == ("   latency curve: estimated latency 20.000 ms after 4 trials (4.0 s) -> "
                        "9.500 ms after 7 trials (10.0 s)")
    assert main(["report", "--log", str(toy_log), "--format", "md", *CEILINGS]) == 0
    md = capsys.readouterr().out
    assert md.index("## Model toy.onnx on znver3, 1 thread") < md.index("## Conv+Relu")
    assert "| 1 | Gemm 4x64->4x32 | 1e+06 | 1 | 2 | 0.500 ms | 0.500 ms | 5.3% | 2 | k1 |" in md
    assert "Latency curve (plotted in the HTML report): estimated latency 20.000 ms after 4 trials" in md


def _model_sections(page: str) -> list:
    return re.findall(r'<section class="model" id="(m\d+)">(.*?)</section>', page, re.S)


def test_html_model_section_links_resolve_and_the_curve_is_drawn(toy_log, tmp_path, capsys):
    out = tmp_path / "toy.html"
    assert main(["report", "--log", str(toy_log), "--html", str(out), *CEILINGS]) == 0
    capsys.readouterr()
    page = out.read_text(encoding="utf-8")
    ids = set(re.findall(r'\bid="([^"]+)"', page))
    sections = _model_sections(page)
    assert [sid for sid, _ in sections] == ["m0", "m1"] and '<a href="#m0">' in page
    sid, body = sections[0]
    table = re.search(r'<table class="model-tasks" data-table="model-tasks" id="m0-model-tasks">(.*?)</table>',
                      body, re.S).group(1)
    links = re.findall(r'<a href="#([^"]+)">([^<]+)</a>', table)
    assert [html.unescape(label) for _, label in links] == [TASKS[i][0] for i in range(3)]
    for target, label in links:
        assert target in ids
        workload = re.search(rf'<section class="workload" id="{target}">\s*<h2>([^<]+)</h2>', page).group(1)
        assert workload.startswith(label + " on znver3, 1 thread")
    assert body.count('<figure class="plot" data-plot="model-curve"') == 1 and body.count("<svg") == 1
    assert "9.500 ms after 7 trials" in body
    # the same logs, the same bytes
    again = tmp_path / "again.html"
    assert main(["report", "--log", str(toy_log), "--html", str(again), *CEILINGS]) == 0
    assert again.read_text(encoding="utf-8") == page


PROBE = """<script>
window.addEventListener('load', function () {
  var links = Array.prototype.map.call(document.querySelectorAll('section.model table[data-table=model-tasks] a'),
    function (a) { var t = document.getElementById(a.getAttribute('href').slice(1));
                   return t ? t.className : null; });
  var boxes = Array.prototype.map.call(document.querySelectorAll('section.model figure[data-plot=model-curve] svg'),
    function (s) { var r = s.getBoundingClientRect(); return r.width * r.height; });
  var p = document.createElement('pre'); p.id = 'probe';
  p.textContent = JSON.stringify({models: document.querySelectorAll('section.model').length, links: links,
                                  boxes: boxes});
  document.body.appendChild(p);
});
</script>"""


def test_html_model_section_renders_in_headless_chromium(toy_log, tmp_path, capsys):
    exe = _chromium()
    out = tmp_path / "toy.html"
    assert main(["report", "--log", str(toy_log), "--html", str(out), *CEILINGS]) == 0
    capsys.readouterr()
    probed = tmp_path / "probed.html"
    probed.write_text(out.read_text(encoding="utf-8").replace("<head>", "<head>\n" + PROBE, 1), encoding="utf-8")
    dom = _run_chromium(exe, tmp_path, "model", "--dump-dom", probed.as_uri()).stdout
    found = json.loads(html.unescape(re.search(r'<pre id="probe">(.*?)</pre>', dom, re.S).group(1)))
    assert found["models"] == 2 and found["links"] == ["workload"] * 4, found
    assert len(found["boxes"]) == 2 and all(area > 100 * 100 for area in found["boxes"]), found


# ------------------------------------------------------------------ end to end

def test_tune_model_then_report_shows_the_model_and_both_tasks(tmp_path, capsys):
    model = tmp_path / "mlp.onnx"
    onnx.save(mlp(batch=16, sizes=(256, 512, 128, 8)), model)
    log = str(tmp_path / "log.jsonl")
    assert main(["tune-model", str(model), "--trials", "8", "--log", log, "--threads", "1", "--json",
                 "--rounds", "1"]) == 0
    tuned = [t for t in json.loads(capsys.readouterr().out)["tasks"] if t["state"] != "heuristic"]
    assert len(tuned) == 2
    assert main(["report", "--log", log]) == 0
    text = capsys.readouterr().out
    assert text.startswith("== model mlp.onnx on ") and "2 tuned tasks, 8 trials" in text
    for t in tuned:
        assert re.search(rf"^\s+{t['id']}\s+{re.escape(t['name'])}\s", text, re.M), t["name"]
    page_path = tmp_path / "r.html"
    assert main(["report", "--log", log, "--html", str(page_path), *CEILINGS]) == 0
    page = page_path.read_text(encoding="utf-8")
    ((sid, body),) = _model_sections(page)
    links = re.findall(r'<a href="#(w\d+)">([^<]+)</a>', body)
    assert sorted(html.unescape(label) for _, label in links) == sorted(t["name"] for t in tuned)
    assert all(f'<section class="workload" id="{target}">' in page for target, _ in links)
    assert 'data-plot="model-curve"' in body
