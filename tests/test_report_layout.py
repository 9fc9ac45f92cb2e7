"""Layout of the report as a reader sees it: every figure of the quickstart and of a 3-task sweep
has no overlapping or clipped text (matplotlib's renderer gives the boxes), the page holds inline
SVG with downloads and interactive views, the tables sort and filter, and the page opens in
Debian's headless chromium (screenshots kept under ``$REPORT_SCREENSHOTS`` when set).

The sweeps are the real configs (``experiments/quickstart.yaml``, and a 3-model MNIST-1D config)
run through ``harness.orchestrate.run.run_sweep`` and the real MLflow tracking, with the trainer replaced
by :func:`conftest.fake_result` made to differ by model, optimizer and seed (so seeds end at
different times, one optimizer misses the target, throughput differs).
"""

from __future__ import annotations

import dataclasses
import html as htmlmod
import io
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from conftest import fake_result

ROOT = Path(__file__).resolve().parents[1]
SPEED = {"sgd": 1.6, "momentum": 1.0, "adam": 0.8}
MODEL_MS = {"mlp": 0.4, "cnn": 1.1, "logreg": 0.2, "cnn1d": 0.9}
THREE_TASKS = {
    "name": "three-tasks",
    "models": ["logreg", {"name": "mlp", "hparams": {"width": 32, "depth": 1}},
               {"name": "cnn1d", "hparams": {"width": 8, "depth": 1}}],
    "optimizers": [{"name": "momentum", "hparams": {"step_size": [0.01, 0.1], "mass": 0.9}},
                   {"name": "adam", "hparams": {"step_size": [0.001, 0.01]}}],
    "schedules": ["constant"],
    "datasets": ["mnist1d"],
    "seeds": 2,
    "batch_size": 64,
    "budget": {"steps": 200},
    "eval_every": 50,
    "steps_per_dispatch": 50,
    "target": {"metric": "eval/accuracy", "value": 0.5},
    "measure_perf": False,
}


def _varied(spec):
    """``fake_result`` with wall-clock times, time to target and throughput that depend on the
    model, optimizer and seed; ``logreg`` with momentum never reaches the target."""
    from harness.core.spec import PerfResult

    res = fake_result(spec)
    ms = MODEL_MS.get(spec.model, 1.0) * SPEED.get(spec.optimizer, 1.0) * (1 + 0.15 * spec.seed)
    curves = res.curves
    for f in dataclasses.fields(curves):
        if f.name.endswith("wall_s"):
            setattr(curves, f.name, [v * ms for v in getattr(curves, f.name)])
    res.train_seconds *= ms
    if spec.model == "logreg" and spec.optimizer == "momentum":
        res.steps_to_target = res.seconds_to_target = None
    elif res.seconds_to_target is not None:
        res.steps_to_target = int(res.steps_to_target * SPEED.get(spec.optimizer, 1.0))
        res.seconds_to_target = res.steps_to_target * 1e-3 * ms
    res.perf = PerfResult(compile_s=0.4 + ms / 10, step_time_ms=ms, step_time_ms_p10=0.9 * ms,
                          step_time_ms_p90=1.2 * ms, examples_per_sec=spec.batch_size / ms * 1000.0,
                          flops_per_step=1e6, peak_flops=1e10, utilization=1e6 / (ms / 1000) / 1e10)
    return res


@pytest.fixture(scope="module")
def sweeps(tmp_path_factory):
    """Run the quickstart and the 3-task sweep (fake trainer) into one store; write both reports."""
    from rich.console import Console

    import harness.train.loop as trainer
    import reports
    from harness.orchestrate.run import run_sweep

    root = tmp_path_factory.mktemp("layout")
    uri = f"sqlite:///{root / 'mlflow.db'}"
    three = root / "three.yaml"
    three.write_text(yaml.safe_dump(THREE_TASKS, sort_keys=False))
    out: dict = {"uri": uri, "root": root, "summaries": {}}
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(trainer, "run_trial", lambda spec, **kw: _varied(spec))
        mp.setattr(trainer, "run_trials_batched", lambda specs, **kw: [_varied(s) for s in specs])
        mp.setattr(trainer, "should_batch", lambda specs: False)
        mp.chdir(root)
        for name, cfg in (("quickstart", ROOT / "experiments" / "quickstart.yaml"), ("three-tasks", three)):
            buf = io.StringIO()
            console = Console(file=buf, width=80, force_terminal=False, color_system=None)
            run_sweep(cfg, tracking_uri=uri, console=console)
            out["summaries"][name] = buf.getvalue()
            out[name] = reports.make_report(name, output=str(root / f"{name}.html"), tracking_uri=uri)
    return out


@pytest.mark.parametrize("name", ["quickstart", "three-tasks"])
def test_no_text_overlaps_or_leaves_any_figure(sweeps, name):
    import reports
    from reports import figures as F
    from reports import layout as L

    frame = reports.load_frame(name, tracking_uri=sweeps["uri"])
    figs = F.make_figures(frame)
    drawn = {k: f for k, f in figs.items() if f is not None and not isinstance(f, str)}
    ladder_only = {"scaling", "scaling_frontier"}
    expected = {s.key for s in F.FIGURES} - ladder_only - ({"sensitivity"} if name == "quickstart" else set())
    assert set(drawn) == expected
    for key, fig in drawn.items():
        assert L.layout_problems(fig) == [], key
        assert fig.get_size_inches()[0] == L.PAGE_WIDTH_IN, key  # every figure uses the page width
        titles = {ax.get_title() for ax in fig.axes if ax.get_visible()} - {""}
        assert all(len(t) <= L.MAX_LABEL_CHARS for t in titles), (key, titles)
    want = {"quickstart": {"cnn · digits", "mlp · digits"},
            "three-tasks": {"logreg · mnist1d", "mlp · mnist1d", "cnn1d · mnist1d"}}[name]
    assert set(L.task_labels(frame).values()) == want
    conv = {ax.get_title() for ax in drawn["convergence_steps"].axes if ax.get_visible()}
    assert conv == want
    if name == "quickstart":  # one step size per optimizer: said in words, not drawn as dots
        assert "single step size (adam 0.003, momentum 0.03, sgd 0.1)" in figs["sensitivity"]
    else:
        t2t = drawn["time_to_target"]
        words = [t.get_text() for ax in t2t.axes for t in ax.texts]
        assert "not reached in 200 steps (0/2 seeds)" in words
        assert not [p for ax in t2t.axes for p in ax.patches if p.get_width() > 0]  # no bars at all
        secs = drawn["convergence_seconds"]
        assert any(line.get_marker() == "|" for ax in secs.axes for line in ax.lines)  # seeds drop out


def test_one_task_with_six_optimizers_keeps_its_title_clear_of_a_two_row_legend(sweeps):
    """tuning.yaml's shape (one task, six optimizers + the target line): the task's label once sat
    in a suptitle that the two-row legend above the panels drew over ('mlp · mnist1d' overlaps
    'nesterov'); the label is now the legend's title."""
    import pandas as pd

    import reports
    from reports import figures as F
    from reports import layout as L

    frame = reports.load_frame("quickstart", tracking_uri=sweeps["uri"])
    one = frame[frame["model"] == "mlp"]
    copies = []
    for suffix in ("", "_b"):
        c = one.copy()
        for col in ("optimizer", "trial_id", "run_id", "config_id"):
            c[col] = c[col].astype(str) + suffix
        copies.append(c)
    six = pd.concat(copies, ignore_index=True)
    assert six["optimizer"].nunique() == 6 and six["task"].nunique() == 1
    for x in ("step", "seconds"):
        fig = F.convergence_figure(six, x)
        assert L.layout_problems(fig) == [], x
        legend = fig.legends[0]
        assert legend.get_title().get_text() == "mlp · digits" and not fig.get_suptitle()


def test_layout_checker_sees_overlaps_and_clipping():
    from reports import layout as L

    fig, axes = L.new_figure(1, 1, 2.0)
    axes[0, 0].text(0.5, 0.5, "first", transform=axes[0, 0].transAxes)
    axes[0, 0].text(0.5, 0.5, "second", transform=axes[0, 0].transAxes)
    fig.text(0.99, 0.5, "far too long to fit at the right edge")
    problems = L.layout_problems(fig)
    assert any("'first' overlaps 'second'" in p for p in problems)
    assert any("'far too long to fit at the right edge' leaves the figure" in p for p in problems)


def test_task_labels_are_short_unique_and_tabled():
    import pandas as pd

    from reports import layout as L

    frame = pd.DataFrame({
        "row": "summary",
        "task": ["mlp / digits (width=64)", "mlp / digits (width=256)", "cnn / digits (hidden=32, "
                 "kernel_size=3, width=8, conv_impl=auto, dropout=0.0)", "cnn / digits (hidden=64, "
                 "kernel_size=3, width=8, conv_impl=auto, dropout=0.0)"],
        "model": ["mlp", "mlp", "cnn", "cnn"], "dataset": "digits",
        "params.model.width": ["64", "256", "8", "8"],
    })
    assert L.task_labels(frame) == {
        "mlp / digits (width=64)": "mlp · digits · width=64",
        "mlp / digits (width=256)": "mlp · digits · width=256",
        frame["task"][2]: "cnn · digits #1",
        frame["task"][3]: "cnn · digits #2",
    }
    table = L.label_table(frame).set_index("label")
    assert table.loc["mlp · digits · width=256", "configuration"] == "model.width=256"


def test_report_page_inline_svg_downloads_interactive_and_tables(sweeps):
    from reports import figures as F
    from reports.interactive import compile_check

    text = sweeps["quickstart"].read_text(encoding="utf-8")
    size = len(text.encode("utf-8"))
    assert size < 5_000_000, size  # the budget for the quickstart report
    page = re.sub(r"<script>.*?</script>", "<script></script>", text, flags=re.S)  # markup only
    assert "<img" not in page  # vector figures only
    svgs = re.findall(r'<figure id="([a-z-]+)-static"><svg[^>]* class="fig"', text)
    skip = ("sensitivity", "scaling", "scaling_frontier")
    assert svgs == [s.key.replace("_", "-") for s in F.FIGURES if s.key not in skip]
    assert "single step size" in text
    for kind, mime in (("pdf", "application/pdf"), ("csv", "text/csv")):
        links = re.findall(rf'<a href="data:{mime}[^"]*;base64,[^"]+" download="quickstart-(\w+)\.{kind}"',
                           text)
        assert len(links) >= 5, kind
    assert text.count('class="dl-svg"') == len(svgs)
    # nothing loads from anywhere: no src/href leaves the file, the CSP forbids connections
    assert not re.search(r'\s(?:src|href)="(?!data:|#)', page)
    assert "default-src 'none'" in page and "connect-src" not in page
    specs = re.findall(r'<script type="application/json" id="([a-z-]+)-spec">(.*?)</script>', text, re.S)
    # quickstart: no step-size grid to tune, so no interactive sensitivity view
    assert [k for k, _ in specs] == ["convergence-steps", "tuning-curves"]
    for _, spec in specs:
        compile_check(json.loads(spec))  # a valid Vega-Lite spec
    # the interactive tuning curves hold the numbers of the static figure (reports.protocol)
    import reports
    from reports import protocol

    tc = protocol.tuning_curves(reports.load_frame("quickstart", tracking_uri=sweeps["uri"]))
    rows = json.loads(dict(specs)["tuning-curves"])["data"]["values"]
    valid = sorted((r["optimizer"], r["k"], r["value"]) for r in rows if r["curve"].startswith("valid"))
    assert valid == sorted(zip(tc["optimizer"], tc["k"].astype(int), tc["valid"], strict=True))
    assert {r["curve"] for r in rows} == {"validation (selects)", "test of the selected"}
    assert "window.vegaEmbed" in text
    assert 'id="leaderboard-table" class="sortable"' in text and 'id="trials-table" class="sortable"' in text
    assert text.count("<tr><td><b>") == 2  # the label → configuration table: one row per task
    assert "model.hidden=32" in text and "cnn · digits" in text
    three = sweeps["three-tasks"].read_text(encoding="utf-8")
    assert re.findall(r'<script type="application/json" id="([a-z-]+)-spec">', three) == [
        "convergence-steps", "tuning-curves", "sensitivity"]


def test_summary_table_fits_80_columns(sweeps):
    for name, text in sweeps["summaries"].items():
        # the table; the two commands after it are never wrapped (they are copied whole)
        lines = text.split("Open the MLflow UI:")[0].splitlines()
        # records are one line where the output is not a terminal (never wrapped): a trial's line, the
        # legend, the ties' line, a target claim, a task's equal-token line; the tables fit 80 columns
        records = ("trained ", "rank: ", "Ties: ", "target claim: ", "equal tokens, ")
        wide = [ln for ln in lines if len(ln) > 80 and not ln.startswith(records)]
        assert not wide, (name, wide)
        assert ("mlp · digits" if name == "quickstart" else "cnn1d · mnist1d") in text
        titles = [ln for ln in lines if re.match(r"^\S+ · \S+\s*$", ln)]
        body = [ln for ln in lines if re.match(r"^\d+=?\s{2,}\S", ln)]  # a rank, then the optimizer
        tasks = 2 if name == "quickstart" else 3
        assert len(titles) == tasks and len(body) == 6, (name, text)  # a table per task, a row per optimizer


def test_report_attaches_to_the_runs_it_describes_and_rerun_leaves_no_empty_parent(sweeps):
    from mlflow import MlflowClient
    from rich.console import Console

    import reports
    from harness.orchestrate.run import run_sweep

    client = MlflowClient(tracking_uri=sweeps["uri"])
    exp = client.get_experiment_by_name("quickstart")
    before = client.search_runs([exp.experiment_id], "tags.`harness.kind` = 'parent'")
    buf = io.StringIO()
    summary = run_sweep(ROOT / "experiments" / "quickstart.yaml", tracking_uri=sweeps["uri"],
                        console=Console(file=buf, width=80))
    after = client.search_runs([exp.experiment_id], "tags.`harness.kind` = 'parent'")
    assert len(after) == len(before) == 1 and summary.parent_run_id is None
    assert "24 trials already finished" in buf.getvalue()
    path = reports.make_report("quickstart", output=str(sweeps["root"] / "again.html"),
                               tracking_uri=sweeps["uri"])
    arts = {a.path for a in client.list_artifacts(before[0].info.run_id, "reports")}
    assert {"reports/quickstart.html", f"reports/{path.name}"} <= arts


# ---------------------------------------------------------------------------------------------
# Headless chromium
# ---------------------------------------------------------------------------------------------
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--hide-scrollbars"]


def chromium_binary() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def run_chromium(url: str, profile: Path, *extra: str, timeout: float = 60) -> str:
    """Headless chromium on ``url`` with a fresh profile and no network; its stdout."""
    cmd = [chromium_binary(), *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *extra, url]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    assert res.returncode == 0, res.stderr[-2000:]
    return res.stdout


def screenshot_dir(tmp_path: Path) -> Path:
    """Where screenshots go: ``$REPORT_SCREENSHOTS`` (kept, to look at) or the test's tmp dir."""
    d = Path(os.environ.get("REPORT_SCREENSHOTS") or tmp_path)
    d.mkdir(parents=True, exist_ok=True)
    return d


@pytest.fixture
def chromium():
    if chromium_binary() is None:
        pytest.skip("Debian's chromium is not installed (apt-get install -y chromium); .ci/run installs it")


_PROBE = """<script>
window.addEventListener('load', function () { setTimeout(function () {
  var out = {};
  out.svgs = Array.prototype.map.call(document.querySelectorAll('figure svg.fig'), function (s) {
    var r = s.getBoundingClientRect(); return {w: r.width, h: r.height}; });
  out.main = document.querySelector('main').getBoundingClientRect().width;
  out.tables = Array.prototype.map.call(document.querySelectorAll('main table'), function (t) {
    return {id: t.id || (t.closest('section') || {}).id, w: t.getBoundingClientRect().width}; });
  out.pageW = document.documentElement.scrollWidth; out.viewW = document.documentElement.clientWidth;
  out.vega = Array.prototype.map.call(document.querySelectorAll('.vl[data-spec]'), function (b) {
    return {state: b.dataset.state, marks: b.querySelectorAll('.vl-chart svg .mark-line path').length,
            legend: b.querySelector('.vl-chart svg') ? b.querySelector('.vl-chart svg').textContent : ''}; });
  var th = Array.prototype.filter.call(document.querySelectorAll('#trials-table th'),
    function (h) { return h.textContent.indexOf('Validation accuracy') === 0; })[0];
  var col = Array.prototype.indexOf.call(th.parentNode.children, th);
  th.click(); th.click();  // descending
  out.sorted = Array.prototype.map.call(document.querySelectorAll('#trials-table tbody tr'),
    function (r) { return r.cells[col].textContent; });
  var f = document.querySelector('input.filter[data-table=trials-table]');
  f.value = 'cnn adam'; f.dispatchEvent(new Event('input'));
  out.visible = document.querySelectorAll('#trials-table tbody tr:not(.hidden)').length;
  out.svgLink = document.querySelector('a.dl-svg').href.slice(0, 5);
  out.text = document.body.innerText;
  var pre = document.createElement('pre'); pre.id = 'probe'; pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
}, 500); });
</script>"""


@pytest.mark.browser
def test_report_in_headless_chromium(chromium, sweeps, tmp_path):
    page = sweeps["quickstart"]
    probe = tmp_path / "probe.html"
    text = page.read_text(encoding="utf-8")
    end = text.rindex("</body>")  # the last one: the inlined Vega JS holds the string too
    probe.write_text(text[:end] + _PROBE + text[end:], encoding="utf-8")
    dom = run_chromium(probe.as_uri(), tmp_path / "p1", "--window-size=1400,1000",
                       "--virtual-time-budget=20000", "--dump-dom")
    m = re.search(r'<pre id="probe">(.*?)</pre>', dom, re.S)
    assert m, dom[-3000:]
    out = json.loads(htmlmod.unescape(m.group(1)))
    n_figs = len(re.findall(r'<figure id="[a-z-]+-static"><svg', text))
    assert len(out["svgs"]) == n_figs >= 5  # every drawn figure is laid out in the page
    for box in out["svgs"]:  # vector figures fill the page's content width
        assert abs(box["w"] - (out["main"] - 64)) < 3 and box["h"] > 150, (box, out["main"])
    for t in out["tables"]:  # no table runs past the content width, the page never scrolls sideways
        assert t["w"] <= out["main"] - 64 + 1, (t, out["main"])
    assert out["pageW"] <= out["viewW"], (out["pageW"], out["viewW"])
    assert out["vega"] and all(v["state"] == "ok" and v["marks"] >= 6 for v in out["vega"]), out["vega"]
    assert "momentum" in out["vega"][0]["legend"] and "validation accuracy" in out["vega"][0]["legend"]
    acc = [float(v) for v in out["sorted"] if v]
    assert acc == sorted(acc, reverse=True) and len(acc) == 24
    assert out["visible"] == 4  # cnn × adam × 2 schedules × 2 seeds
    assert out["svgLink"] == "blob:"
    for needle in ("Leaderboard", "Tasks", "cnn · digits", "Convergence against steps", "single step size"):
        assert needle in out["text"], needle
    assert "failed:" not in out["text"] and "Error" not in out["text"]

    shots = screenshot_dir(tmp_path)
    for suffix, name in (("", "report-quickstart.png"),
                         ("#interactive", "report-quickstart-interactive.png")):
        shot = shots / name
        run_chromium(page.as_uri() + suffix, tmp_path / f"p-{name}", f"--screenshot={shot}",
                     "--window-size=1400,3200", "--virtual-time-budget=20000")
        assert shot.stat().st_size > 100_000


@pytest.mark.browser
def test_mlflow_ui_lands_on_training_runs_grouped_by_optimizer(chromium, sweeps, tmp_path):
    """``harness ui`` on the quickstart store; chromium opens the printed URL: MLflow 3.17 shows the
    runs in "Model training" mode (not GenAI) in chart mode, grouped by model and optimizer, parents
    filtered out, the validation curves' section first."""
    import signal
    import socket
    import sys
    import time
    import urllib.request

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "harness", "ui", "-e", "quickstart", "--port", str(port),
                             "--tracking-uri", sweeps["uri"]], cwd=sweeps["root"], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    try:
        url = proc.stdout.readline().split("MLflow UI: ", 1)[1].strip()
        deadline = time.monotonic() + 90
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1):
                    break
            except OSError:
                assert time.monotonic() < deadline, "mlflow ui did not answer /health in 90 s"
                time.sleep(0.5)
        shot = screenshot_dir(tmp_path) / "mlflow-ui-quickstart.png"
        dom = run_chromium(url, tmp_path / "ui", "--window-size=1600,2400", "--virtual-time-budget=25000",
                           f"--screenshot={shot}", timeout=90)
        assert shot.stat().st_size > 50_000
        dom = run_chromium(url, tmp_path / "ui2", "--window-size=1600,2400", "--virtual-time-budget=25000",
                           "--dump-dom", timeout=90)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    text = re.sub(r"\s+", " ", htmlmod.unescape(re.sub(r"<[^>]+>", " ", dom)))
    assert "tags.`harness.kind` = 'trial'" in htmlmod.unescape(dom)  # the search box: parents hidden
    # grouped by task and optimizer: the quickstart's MLP and CNN never averaged in one group
    for needle in ("Group by: model", "Group: model: mlp, optimizer: adam",
                   "Group: model: cnn, optimizer: adam", "Group: model: cnn, optimizer: momentum",
                   "Group: model: mlp, optimizer: sgd", "matching runs",
                   "Model registry"):  # the sidebar's "Model training" links
        assert needle in text, (needle, text[:3000])
    # not GenAI mode: its sidebar (Overview, Judges, Evaluation runs) and page title
    for genai in ("Judges", "Evaluation runs", "Training runs", "Overview"):
        assert genai not in text, (genai, text[:3000])
    # the chart sections: validation curves first, the single-valued metrics after the curves
    sections = [name for name, _ in re.findall(r"\b([a-z]+) \((\d+)\)", text)]
    assert sections[:2] == ["valid", "train"] and sections.index("final") > sections.index("train"), sections
    assert sections.index("convergence") > sections.index("test"), sections
    assert "No data" not in text and "does not exist" not in text
    # trials only: the parent is neither a run of the page nor a chart's series
    assert "24 matching runs" in text and "Additional runs" not in text and "Unassigned" not in text


def console_messages(stderr: str) -> list[str]:
    """The page's console messages in chromium's ``--enable-logging=stderr`` output."""
    return [m.group(1) for m in re.finditer(r':CONSOLE:\d+\] "(.*?)", source:', stderr)]


def _vega_views(dom: str) -> dict[str, dict]:
    """Per interactive view of a dumped page (by its spec id): the optimizer legend's entries as
    ``{label: symbol colour}``, the stroke colours of its line marks and its count of rule marks."""
    out = {}
    for chunk in dom.split('data-spec="')[1:]:
        key = chunk.split('"', 1)[0]
        chunk = chunk.split('data-spec="')[0]
        legend = dict((lab, col) for col, lab in re.findall(
            r'optimizer_legend_symbols"><path[^>]*? fill="(#[0-9a-f]{6})"[^>]*></path></g>'
            r'<g class="mark-text role-legend-label optimizer_legend_labels"><text[^>]*>([^<]+)</text>',
            chunk))
        lines = set(re.findall(r'<g class="mark-line role-mark[^"]*"[^>]*>(.*?)</g>', chunk, re.S))
        strokes = {c for block in lines for c in re.findall(r'stroke="(#[0-9a-f]{6})"', block)}
        rules = re.findall(r'<g class="mark-rule role-mark[^"]*"[^>]*>(.*?)</g>', chunk, re.S)
        out[key] = {"legend": legend, "strokes": strokes, "rules": sum(b.count("<line") for b in rules),
                    "axis_titles": re.findall(r'role-axis-title"[^>]*><text[^>]*>([^<]+)</text>', chunk)}
    return out


@pytest.mark.browser
@pytest.mark.parametrize("name", ["quickstart", "three-tasks"])
def test_interactive_views_match_the_static_colours_in_chromium(chromium, sweeps, name, tmp_path):
    """In the browser: every interactive view has an optimizer legend naming every
    optimizer, each in the static figures' colour (:func:`reports.style.palette`); the tuning curves'
    x axis is integer budgets; the convergence view opens on the task's selection metric with a
    rule at the target in every panel; the page logs no warning, also after the log switch."""
    from matplotlib.colors import to_hex

    import reports
    from reports.style import palette

    frame = reports.load_frame(name, tracking_uri=sweeps["uri"])
    pal = {o: to_hex(c) for o, c in palette(frame).items()}  # what the static figures draw with
    page = sweeps[name]
    text = page.read_text(encoding="utf-8")
    # the static figures draw in the same colours
    static = text.split('id="convergence-steps-static"')[1].split("</svg>")[0]
    assert all(c in static for c in pal.values()), pal
    # after load, switch every view to a log y axis (re-embeds it) to catch its warnings too
    switch = ("<script>window.addEventListener('load', function () { setTimeout(function () {"
              "document.querySelectorAll('.vl input[type=radio][value=log]').forEach(function (r) {"
              "r.checked = true; r.dispatchEvent(new Event('change')); }); }, 3000); });</script>")
    end = text.rindex("</body>")
    logged = tmp_path / "log.html"
    logged.write_text(text[:end] + switch + text[end:], encoding="utf-8")
    cmd = [chromium_binary(), *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'prof'}",
           "--enable-logging=stderr",
           "--v=0", "--window-size=1400,2000", "--virtual-time-budget=20000", "--dump-dom"]
    first = subprocess.run([*cmd, page.as_uri()], capture_output=True, text=True, timeout=90)
    views = _vega_views(first.stdout)
    assert set(views) >= {"convergence-steps-spec", "tuning-curves-spec"}, set(views)
    for key, v in views.items():
        assert v["legend"] == pal, (key, v["legend"], pal)  # every optimizer, the static colour
        assert v["strokes"] and v["strokes"] <= set(pal.values()), (key, v["strokes"])
    # the tuning curves: integer budgets on x (no "1, 2, 2")
    tc = first.stdout.split('data-spec="tuning-curves-spec"')[1].split('data-spec="')[0]
    ticks = re.findall(r'role-axis-label"[^>]*>(.*?)</g>', tc, re.S)
    x_labels = re.findall(r">([^<]+)</text>", ticks[0])
    assert x_labels == [str(k) for k in range(1, len(x_labels) + 1)], x_labels
    conv = views["convergence-steps-spec"]
    assert conv["axis_titles"].count("validation accuracy") == frame["task"].nunique()
    assert conv["rules"] == frame["task"].nunique()  # the 0.9 / 0.5 target, once per panel
    second = subprocess.run([*cmd, logged.as_uri()], capture_output=True, text=True, timeout=90)
    assert 'data-state="ok"' in second.stdout
    for res in (first, second):
        msgs = console_messages(res.stderr)
        assert not [m for m in msgs if "WARN" in m or "Conflicting" in m or "rror" in m], msgs


@pytest.mark.browser
def test_convergence_view_opens_on_each_tasks_own_selection_metric(chromium, sweeps, tmp_path):
    """The convergence view opened on validation accuracy for every task: with a loss
    target beside accuracy targets it opens on each task's own selection metric (named in the panel
    titles) with a rule at each task's target, and renders so in chromium without a warning."""
    import reports
    from reports.interactive import convergence_spec, vega_bundle

    each_tasks_own = "each task's selection metric"

    frame = reports.load_frame("three-tasks", tracking_uri=sweeps["uri"])
    assert convergence_spec(frame)["params"][0]["value"] == "validation accuracy"  # one shared target
    mixed = frame.copy()
    loss_task = sorted(mixed["task"].unique())[0]
    on = mixed["task"] == loss_task
    mixed.loc[on, "target_metric"], mixed.loc[on, "target_value"], mixed.loc[on, "target_mode"] = \
        "valid/loss", 0.7, "min"
    spec = convergence_spec(mixed)
    metric = spec["params"][0]
    assert metric["value"] == each_tasks_own and metric["bind"]["options"][0] == each_tasks_own
    from reports.layout import task_labels

    label = task_labels(mixed)[loss_task]
    rows = spec["data"]["values"]
    own = {(r["task"], r["metric"]) for r in rows if r.get("selects") and not r.get("target")}
    assert {m for t, m in own if t == label} == {"validation loss"}
    assert {m for t, m in own if t != label} == {"validation accuracy"}
    targets = sorted((r["task"], r["metric"], r["value"]) for r in rows if r.get("target"))
    assert len(targets) == 3 and (label, "validation loss", 0.7) in targets
    assert {(m, v) for t, m, v in targets if t != label} == {("validation accuracy", 0.5)}
    page = tmp_path / "mixed.html"
    page.write_text(f"<html><body><div id=v></div><script>{vega_bundle()}</script><script>"
                    f"vegaEmbed('#v', {json.dumps(spec)}, {{renderer: 'svg'}});</script></body></html>",
                    encoding="utf-8")
    cmd = [chromium_binary(), *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'prof'}",
           "--enable-logging=stderr",
           "--v=0", "--window-size=1400,1200", "--virtual-time-budget=15000", "--dump-dom", page.as_uri()]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=90)
    headers = re.findall(r"aria-label=\"Title text '([^']+)'\"", res.stdout)  # the facets' titles
    assert f"{label} — validation loss" in headers, headers
    assert sum(h.endswith("— validation accuracy") for h in headers) == 2, headers
    rules = re.findall(r'<line aria-label="([^"]*)" role="graphics-symbol" aria-roledescription="rule mark"',
                       res.stdout)
    assert sorted(rules) == sorted(f"value: {v:g}; task: {t}; metric: {m}; target: {v:g}"
                                   for t, m, v in targets)
    assert not [m for m in console_messages(res.stderr) if "WARN" in m or "rror" in m], res.stderr[-2000:]
