"""`tensortune report --html / --format md`: a self-contained, deterministic report that a browser renders.

The browser tests run Debian's headless Chromium.  Outside CI (env CI unset) they skip when it is
missing; under CI (.ci/run installs it) a missing browser fails them.
"""
from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from logs import TuningLog, TuningRecord
from tuner.asm_view import innermost_loop
from tuner.cli import main
from tuner.machine_peak import machine_peak, measure_bandwidth, measure_fma_peak, read_cache

DATA = Path(__file__).parent / "data"
NEW_LOG = DATA / "report_matmul.jsonl"      # written by `tensortune tune` (origins, numpy time)
OLD_LOG = DATA / "log_v_before.jsonl"       # written before either was recorded
CEILINGS = ["--peak-gflops", "150", "--bandwidth-gbs", "12"]
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync"]
ROOT = Path(__file__).resolve().parent.parent


def run_cli(capsys, *args):
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def render(capsys, path, *logs, fmt=("--html",)):
    args = ["report"] + [a for log in logs for a in ("--log", str(log))] + list(fmt) + [str(path)] + CEILINGS
    code, out, err = run_cli(capsys, *args)
    assert code == 0, err
    return Path(path).read_text(encoding="utf-8")


# ------------------------------------------------------------------ the page

@pytest.fixture(scope="module")
def report_page(tmp_path_factory):
    """The HTML report of the new and the old log (rendered once for the tests that read it)."""
    path = tmp_path_factory.mktemp("report") / "report.html"
    assert main(["report", "--log", str(NEW_LOG), "--log", str(OLD_LOG), "--html", str(path), *CEILINGS]) == 0
    return path, path.read_text(encoding="utf-8")


def test_html_report_is_deterministic_and_self_contained(tmp_path, capsys, report_page):
    page = report_page[1]
    assert render(capsys, tmp_path / "again.html", NEW_LOG, OLD_LOG) == page
    # another process, another hash seed: the same bytes (the old log only: no xgboost import, seconds)
    env = dict(os.environ, PYTHONHASHSEED="12345", PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-m", "tuner.cli", "report", "--log", str(OLD_LOG),
                           "--html", str(tmp_path / "other.html"), *CEILINGS], capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "other.html").read_text(encoding="utf-8") == render(capsys, tmp_path / "old.html", OLD_LOG)
    # nothing to fetch: no script, stylesheet link, image or frame, no URL but the SVG namespaces
    assert not re.search(r"<(script|link|img|iframe|object|embed)\b", page)
    assert not re.search(r"(src|href)=\"(?!#)", page.replace('xmlns:xlink="http://www.w3.org/1999/xlink"', ""))
    assert set(re.findall(r"https?://[^\s\"'<>)]+", page)) == {"http://www.w3.org/2000/svg",
                                                                "http://www.w3.org/1999/xlink"}
    assert "@import" not in page and not re.search(r"url\((?!#)", page)


def _section(page: str, label: str) -> str:
    start = page.index(f"<h2>{html.escape(label)}")
    end = page.find("</section>", start)
    return page[start:end]


def test_html_report_contents(report_page):
    page = report_page[1]
    recs = TuningLog(NEW_LOG, mode="r").records()
    head = recs[0]
    new = _section(page, head.workload_label)
    # numbers recorded by the new tune: numpy's time, who chose each trial, the cost model's accuracy
    ref = next(r for r in recs if "numpy_seconds" in r.meta)
    ratio = ref.meta["numpy_seconds"] / ref.median_cost
    assert f"{float(f'{ratio:.3g}'):g}x numpy" in new
    trials = [r for r in recs if r.decisions and not r.confirmed and not r.remeasured]
    assert f"({len(trials)} trials," in new
    assert re.search(r"cost model ranking accuracy</th><td>[01]\.\d{3} pairwise", new)
    assert "candidates chosen by</th><td>not recorded" not in new
    assert "FMA peak 150 GFLOP/s, memory bandwidth 12 GB/s (given on the command line)" in new
    for part in ('data-plot="curve"', 'data-plot="roofline"', 'data-table="summary"', 'data-table="top"',
                 'class="python"', 'class="loop-nest"', 'class="asm"', "s = Schedule(tensors)"):
        assert new.count(part) == 1, part
    asm = re.search(r'<pre class="asm"[^>]*>(.*?)</pre>', new, re.S).group(1)
    assert re.search(r"^\.L\w+:", asm, re.M) and re.search(r"^\s+j\w+\s+\.L\w+", asm, re.M)
    # an older log: what it does not hold is said, not invented
    old = _section(page, "matmul(M=64, N=48, K=40, dtype=float32)")
    assert "vs numpy</th><td>not recorded" in old and "candidates chosen by</th><td>not recorded" in old
    assert "not enough trials" in old
    sections = page.count('<section class="workload"')
    assert sections == 4 and page.count("<svg") == 2 * sections


def test_markdown_report_has_the_same_tables(tmp_path, capsys):
    text = render(capsys, tmp_path / "r.md", NEW_LOG, OLD_LOG, fmt=("--format", "md", "-o"))
    assert text.count("## ") - text.count("### ") == 4
    assert "| # | latency | GFLOP/s | of peak | measured | confirmed | chosen by | decisions |" in text
    assert "| vs numpy | " in text and "```python\ns = Schedule(tensors)" in text and "```asm\n" in text
    assert "Plots (tuning curve, roofline) are in the HTML report" in text and "<svg" not in text


@pytest.mark.parametrize("args, pattern", [
    (["--peak-gflops", "10"], "go together"),
    (["--peak-gflops", "-1", "--bandwidth-gbs", "3"], "--peak-gflops must be a positive number"),
    (["--output", "x.md"], "--output needs --format md"),
    (["--remeasure", "--no-measure"], "contradict"),
    (["--html", "x.html", "--format", "md"], "--html writes HTML"),
])
def test_report_flags_bad_input_is_one_line(capsys, args, pattern):
    code, _, err = run_cli(capsys, "report", "--log", str(OLD_LOG), *args)
    assert code == 2 and err.count("\n") == 1 and pattern in err, err


# ------------------------------------------------------------------ tune records numpy

def test_tune_records_numpy_time_and_origins_and_the_report_shows_them(tmp_path, capsys):
    log = tmp_path / "t.jsonl"
    code, _, err = run_cli(capsys, "tune", "matmul", "M=16", "N=24", "K=8", "--trials", "2", "--log", str(log),
                           "--quiet", "--seed", "1")
    assert code == 0, err
    recs = TuningLog(log, mode="r").records()
    refs = [r for r in recs if "numpy_seconds" in r.meta]
    assert len(refs) == 1 and refs[0].meta["numpy_seconds"] > 0 and refs[0].remeasured and refs[0].ok
    assert all(r.meta.get("origin") for r in recs)
    page = render(capsys, tmp_path / "t.html", log)
    assert "x numpy&#x27;s speed (numpy" in page and "(2 trials," in page


def test_records_without_meta_read_and_write_as_before():
    lines = OLD_LOG.read_text().splitlines()
    recs = TuningLog(OLD_LOG, mode="r").records()
    assert len(recs) == len(lines) == 33 and all(r.meta == {} for r in recs)
    assert [r.to_json_line() for r in recs] == lines          # no "meta" key added
    rec = TuningRecord.from_json(lines[0])
    tagged = TuningRecord.from_json({**json.loads(lines[0]), "meta": {"numpy_seconds": 1e-5}})
    assert tagged.meta == {"numpy_seconds": 1e-5} and TuningRecord.from_json(tagged.to_json_line()) == tagged
    assert rec != tagged


# ------------------------------------------------------------------ pieces

ASM = """\
f:
\tmovl\t$0, %eax
.LBB0_1:
\tvmovups\t(%rdi), %ymm0
.LBB0_2:
\tvmovups\t%ymm0, (%rsi)
\taddq\t$8, %rcx
\tjne\t.LBB0_2
.LBB0_3:
\tvfmadd231ps\t(%rdx), %ymm1, %ymm2
\tvfmadd231ps\t32(%rdx), %ymm1, %ymm3
\tcmpq\t$16, %rcx
\tjne\t.LBB0_3
\tincq\t%rax
\tjmp\t.LBB0_1
\tretq
"""


def test_innermost_loop_is_the_one_with_the_vector_arithmetic():
    loop = innermost_loop(ASM)
    assert loop["label"] == ".LBB0_3" and loop["function"] == "f" and loop["loops"] == 2
    assert loop["vector_ops"] == 2 and loop["lines"][0] == ".LBB0_3:" and loop["lines"][-1] == "\tjne\t.LBB0_3"
    assert innermost_loop("f:\n\tretq\n") is None


def test_machine_ceilings_are_measured_once_and_cached(tmp_path, monkeypatch):
    import tuner.machine_peak as mp
    from tuner.target import host_target
    cpu = host_target()["cpu"]
    path = tmp_path / "machine.json"
    assert machine_peak(cpu, 1, measure=False, path=path) is None
    assert machine_peak("some-other-cpu", 1, path=path) is None        # never measured for another CPU
    monkeypatch.setattr(mp, "measure_fma_peak", lambda threads: 123.456)
    monkeypatch.setattr(mp, "measure_bandwidth", lambda threads: 7.0)
    got = machine_peak(cpu, 1, path=path)
    assert (got.peak_gflops, got.bandwidth_gbs, got.source) == (123.46, 7.0, "measured")
    monkeypatch.setattr(mp, "measure_fma_peak", lambda threads: pytest.fail("measured twice"))
    again = machine_peak(cpu, 1, path=path)
    assert (again.peak_gflops, again.bandwidth_gbs, again.source) == (123.46, 7.0, "cache")
    assert list(read_cache(path)) == [f"{cpu}/threads=1"]
    monkeypatch.setattr(mp, "measure_fma_peak", lambda threads: 200.0)      # (e.g. measured busy before)
    fresh = machine_peak(cpu, 1, path=path, refresh=True)
    assert (fresh.peak_gflops, fresh.source) == (200.0, "measured")
    assert read_cache(path)[f"{cpu}/threads=1"] == {"peak_gflops": 200.0, "bandwidth_gbs": 7.0}


def test_microbenchmarks_run_and_give_positive_figures():
    assert measure_fma_peak(1, repeats=1, seconds=0.005) > 0
    assert measure_bandwidth(1, repeats=1, nbytes=8 << 20) > 0


# ------------------------------------------------------------------ the browser

def _chromium() -> str:
    exe = shutil.which("chromium") or ("/usr/bin/chromium" if os.path.exists("/usr/bin/chromium") else None)
    if exe is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is not installed: .ci/run installs Debian's chromium package")
        pytest.skip("chromium is not installed (apt-get install -y chromium); CI runs this test")
    return exe


def _run_chromium(exe, tmp_path, name, *args):
    profile = tmp_path / f"profile-{name}"          # a fresh profile per run
    cmd = [exe, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0", *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    console = [line for line in proc.stderr.splitlines() if "CONSOLE" in line]
    assert console == [], console          # the page wrote nothing to the console
    return proc


# Records script errors, resource errors and console errors, and what the page holds once loaded.
PROBE = """<script>
window.__errs = [];
window.addEventListener('error', function (e) { window.__errs.push(String(e.message || e.target)); }, true);
console.error = function () { window.__errs.push(Array.prototype.join.call(arguments, ' ')); };
window.addEventListener('load', function () {
  var q = function (s) { return document.querySelectorAll(s).length; };
  var p = document.createElement('pre'); p.id = 'probe';
  p.textContent = JSON.stringify({errors: window.__errs, sections: q('section.workload'),
    curves: q('figure[data-plot=curve] svg'), rooflines: q('figure[data-plot=roofline] svg'),
    summaries: q('table[data-table=summary] tr'), tops: q('table[data-table=top] tbody tr'),
    asm: q('pre.asm'), resources: performance.getEntriesByType('resource').length,
    svg_boxes: Array.prototype.map.call(document.querySelectorAll('figure.plot svg'),
      function (s) { var r = s.getBoundingClientRect(); return r.width * r.height; })});
  document.body.appendChild(p);
});
</script>"""


def test_html_report_renders_in_headless_chromium(tmp_path, report_page):
    exe = _chromium()
    path, page = report_page
    probed = tmp_path / "probed.html"
    probed.write_text(page.replace("<head>", "<head>\n" + PROBE, 1), encoding="utf-8")
    dom = _run_chromium(exe, tmp_path, "dom", "--dump-dom", probed.as_uri()).stdout
    found = json.loads(html.unescape(re.search(r'<pre id="probe">(.*?)</pre>', dom, re.S).group(1)))
    assert found["errors"] == [] and found["resources"] == 0, found
    assert found["sections"] == found["curves"] == found["rooflines"] == found["asm"] == 4, found
    assert found["summaries"] >= 4 * 10 and found["tops"] >= 4, found
    assert all(area > 100 * 100 for area in found["svg_boxes"]), found
    # the page as a reader sees it: a screenshot that is not blank
    shot = tmp_path / "shot.png"
    _run_chromium(exe, tmp_path, "shot", f"--screenshot={shot}", "--window-size=1200,2000",
                  path.as_uri())
    import matplotlib.image
    img = matplotlib.image.imread(shot)[..., :3]
    assert img.shape[:2] == (2000, 1200)
    background = np.all(np.abs(img - img[5, 5]) < 0.02, axis=-1)
    assert img.std() > 0.05 and 0.02 < 1 - background.mean() < 0.9
