"""Report figures a paper can take, checked on what is drawn: the SVG a page inlines,
laid out by Debian's headless chromium (legend boxes against the canvas for 1-12 optimizers), the
figures' drawn geometry, and the report page's DOM (identifiers as written, trial ids on one line,
the optimizer's source hash, the environment's two commits, the time budget's bars).

The store is synthetic and small (logged with MLflow's client into tmpfs, no training): one task,
up to twelve optimizers with long names (``schedule_free_adamw``, ``cautious_adamw``,
``adan_optax``), two step sizes x two seeds each, times to target that span more than a decade,
seeds that end at different times, a suspect step time, a user's optimizer with a source hash,
two invocations with a time budget and trials carried over from an earlier sweep id.
"""

from __future__ import annotations

import html as htmlmod
import json
import math
import os
import re
import shutil
import subprocess
import tempfile
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest

import reports
from harness.core import names as N
from harness.core.spec import TrialSpec

EXP = "figs"
SWEEP, OLD = "sweep-cur", "sweep-old"
#: Twelve optimizers, in the order the frames of 1..12 take them (the long names first: the
#: legend's widest columns).
OPTS = ("adamw", "cautious_adamw", "adan_optax", "schedule_free_adamw", "lion", "muon", "sgd",
        "momentum", "adam", "nadamw", "soap", "adafactor")
STEP_SIZES = (0.001, 0.01)
SEEDS = (0, 1)
STEPS, EVAL_EVERY, TARGET = 200, 10, 0.6
#: A user's optimizer (source:) and its source hash (tag optimizer.source_hash).
SOURCE_OPT, SOURCE_HASH = "cautious_adamw", "3f9c2a1b7d4e6f80"
#: One of lion's trials has a suspect step time (left out of its bar); every muon trial has one.
LEFT_OUT = ("lion", 0.01, 1)
ALL_SUSPECT = "muon"
#: adafactor never reaches the target.
NEVER = "adafactor"


def _spec(opt: str, lr: float, seed: int) -> TrialSpec:
    return TrialSpec.make(sweep=EXP, model="mlp", optimizer=opt, schedule="constant", dataset="mnist1d",
                          seed=seed, steps=STEPS, batch_size=128, eval_every=EVAL_EVERY,
                          model_hparams={"width": 32}, optimizer_hparams={"step_size": lr},
                          target={"metric": "valid/accuracy", "value": TARGET, "mode": "max"})


def _metrics(i: int, opt: str, lr: float, seed: int, t: int):
    """The trial's metrics: its accuracy crosses the target at step 10 (i+1) (3x later at the small
    step size) on a step of 5 x 1.3^i ms (x1.1 for seed 1): times to target of 0.05 s to ~3 s."""
    from mlflow.entities import Metric

    reach = EVAL_EVERY * (i + 1) * (1 if lr == 0.01 else 3)
    ms = 5.0 * 1.3 ** i * (1.1 if seed else 1.0)
    ev = np.arange(0, STEPS + 1, EVAL_EVERY)
    top = 0.55 if opt == NEVER else 0.1 + 0.55 * (1 - math.exp(-STEPS / (reach / 2.45)))
    acc = np.minimum(0.1 + 0.55 * (1 - np.exp(-ev / (reach / 2.45))), top) + 0.002 * seed
    loss = 2.3 * np.exp(-ev / reach) + 0.3
    wall = ev * ms / 1000.0
    out = [Metric(k, float(v), t, int(s)) for k, vals in ((N.M_VALID_ACC, acc), (N.M_VALID_LOSS, loss),
                                                          (N.M_TRAIN_LOSS, loss * 0.95), (N.M_WALL_S, wall))
           for s, v in zip(ev, vals, strict=True)]
    summary = {N.M_FINAL_ACC: acc[-1], N.M_FINAL_LOSS: loss[-1], N.M_TEST_ACC: acc[-1] - 0.01,
               N.M_TEST_LOSS: loss[-1] + 0.02, N.M_STEP_MS: ms, N.M_STEP_MS_P10: 0.95 * ms,
               N.M_STEP_MS_P90: 1.1 * ms, N.M_EXAMPLES_PER_S: 128 / ms * 1000, N.M_COMPILE_S: 0.4 + 0.05 * i,
               N.M_UTIL: 0.1, N.M_MODELED_STEP_MS: ms,
               **{N.M_TIME[p]: v for p, v in (("compile", 0.4), ("train", float(wall[-1])), ("eval", 0.05),
                                              ("throughput", 0.1), ("tracking", 0.02), ("other", 0.03))}}
    hit = np.nonzero(acc >= TARGET)[0]
    if len(hit):
        summary[N.M_STEPS_TO_TARGET] = float(ev[hit[0]])
        summary[N.M_SECONDS_TO_TARGET] = float(wall[hit[0]])
        summary[N.M_MODELED_SECONDS_TO_TARGET] = float(ev[hit[0]] * ms / 1000)
    return out + [Metric(k, float(v), t, 0) for k, v in summary.items()], summary


def _log_trial(client, exp_id: str, sweep_id: str, parent: str, i: int, opt: str, lr: float, seed: int,
               t: int) -> dict:
    from mlflow.entities import Param

    spec = _spec(opt, lr, seed)
    tags = {N.TAG_TRIAL_ID: spec.trial_id, N.TAG_SWEEP: EXP, N.TAG_SWEEP_ID: sweep_id,
            N.TAG_KIND: N.KIND_TRIAL, N.TAG_PARENT_RUN: parent, "model": "mlp", "optimizer": opt,
            "schedule": "constant", "dataset": "mnist1d", "seed": str(seed), N.TAG_STATUS: "finished"}
    if opt == SOURCE_OPT:
        tags.update({N.TAG_OPTIMIZER_SOURCE: "my_opts.py:cautious_adamw",
                     N.TAG_OPTIMIZER_SOURCE_HASH: SOURCE_HASH})
    if opt == ALL_SUSPECT or (opt, lr, seed) == LEFT_OUT:
        tags[N.TAG_PERF_SUSPECT] = "the step time disagreed 3.1x with the trial's training clock"
    run = client.create_run(exp_id, start_time=t, tags=tags, run_name=f"mlp-{opt}-{lr}-{seed}")
    metrics, summary = _metrics(i, opt, lr, seed, t)
    params = [Param(k, v) for k, v in spec.flat_params().items()]
    client.log_batch(run.info.run_id, metrics=metrics, params=params)
    client.set_terminated(run.info.run_id, "FINISHED", end_time=t + 500)
    return {"trial_id": spec.trial_id, "summary": summary}


@pytest.fixture(scope="module")
def store():
    """The synthetic store: sweep ``sweep-cur`` (two invocations, every optimizer) and four adamw
    trials of an earlier sweep ``sweep-old`` that ``sweep-cur`` carries over (its trials.json)."""
    from mlflow import MlflowClient

    shm = Path("/dev/shm")
    root = Path(tempfile.mkdtemp(prefix="test_report_figures_", dir=shm if os.access(shm, os.W_OK) else None))
    uri = f"sqlite:///{root / 'mlflow.db'}"
    client = MlflowClient(tracking_uri=uri)
    exp_id = client.create_experiment(EXP, artifact_location=str(root / "artifacts"))
    t = 1_700_000_000_000
    old = client.create_run(exp_id, start_time=t, tags={N.TAG_SWEEP_ID: OLD, N.TAG_KIND: N.KIND_PARENT,
                                                          N.TAG_SWEEP: EXP}).info.run_id
    carried = [_log_trial(client, exp_id, OLD, old, 0, "adamw", lr, seed + 2, t + 100 + k)
               for k, (lr, seed) in enumerate((lr, s) for lr in STEP_SIZES for s in SEEDS)]
    client.set_terminated(old, end_time=t + 5000)
    parents = [client.create_run(exp_id, start_time=t + 10_000 * (k + 1),
                                 tags={N.TAG_SWEEP_ID: SWEEP, N.TAG_KIND: N.KIND_PARENT, N.TAG_SWEEP: EXP,
                                       N.TAG_HARNESS_COMMIT: "a" * 40 + "+dirty",
                                       N.TAG_CONFIG_COMMIT: "b" * 40}).info.run_id for k in range(2)]
    trials = []
    tt = t + 30_000
    for i, opt in enumerate(OPTS):
        for lr in STEP_SIZES:
            for seed in SEEDS:
                parent = parents[0] if i < 6 else parents[1]
                trials.append(_log_trial(client, exp_id, SWEEP, parent, i, opt, lr, seed, tt))
                tt += 1000
    from mlflow.entities import Metric

    per_opt = len(STEP_SIZES) * len(SEEDS)
    for k, p in enumerate(parents):  # each invocation's time budget: more than its trials spent
        mine = [tr["summary"] for j, tr in enumerate(trials) if (j // per_opt < 6) == (k == 0)]
        spent = {part: sum(m[N.M_TIME[part]] for m in mine)
                 for part in ("compile", "train", "eval", "throughput", "tracking", "other")}
        spent.update(startup=1.5, preflight=0.5, batching=0.2)
        client.log_batch(p, metrics=[Metric(N.M_TIME[part], v, t, 0) for part, v in spent.items()])
        client.log_text(p, json.dumps([{"trial_id": tr["trial_id"]} for tr in trials + carried]),
                        N.ARTIFACT_TRIALS)
        client.set_terminated(p, end_time=t + 10_000 * (k + 1) + 9000)
    client.log_text(parents[-1], f"name: {EXP}\n", N.ARTIFACT_CONFIG)
    yield {"uri": uri, "root": root, "trials": trials, "carried": carried, "parents": parents}
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def frame(store):
    return reports.load_frame(EXP, SWEEP, tracking_uri=store["uri"])


def first(frame, n: int):
    """The frame of the first ``n`` optimizers of :data:`OPTS` (its attrs kept)."""
    out = frame[frame["optimizer"].isin(OPTS[:n])].reset_index(drop=True)
    out.attrs = dict(frame.attrs)
    return out


def test_the_synthetic_sweep_is_what_the_figures_are_checked_on(store, frame):
    s = frame[frame["row"] == "summary"]
    assert sorted(s["optimizer"].unique()) == sorted(OPTS)
    assert len(s) == len(OPTS) * 4 + 4  # the carried-over trials are the sweep's
    assert (s["source_hash"] == SOURCE_HASH).sum() == 4 and s.loc[s["optimizer"] != SOURCE_OPT,
                                                                     "source_hash"].isna().all()


# ---------------------------------------------------------------------------------------------
# Chromium: the SVGs as a page lays them out
# ---------------------------------------------------------------------------------------------
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--hide-scrollbars"]


def chromium_binary() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture
def chromium():
    if chromium_binary() is None:
        pytest.skip("Debian's chromium is not installed (apt-get install -y chromium); .ci/run installs it")


def dump_dom(page: Path, profile: Path, width: int = 1400, height: int = 1000) -> str:
    res = subprocess.run([chromium_binary(), *CHROMIUM_FLAGS, f"--user-data-dir={profile}",
                          f"--window-size={width},{height}", "--virtual-time-budget=15000", "--dump-dom",
                          page.as_uri()], capture_output=True, text=True, timeout=180)
    assert res.returncode == 0, res.stderr[-2000:]
    return res.stdout


def probe_result(dom: str) -> dict:
    m = re.search(r'<pre id="probe">(.*?)</pre>', dom, re.S)
    assert m, dom[-3000:]
    return json.loads(htmlmod.unescape(m.group(1)))


_LEGEND_PROBE = """<script>
window.addEventListener('load', function () {
  var out = [];
  document.querySelectorAll('div.fig').forEach(function (d) {
    var svg = d.querySelector('svg'), s = svg.getBoundingClientRect();
    var leg = svg.querySelector('g[id$="legend_1"]');
    var l = leg ? leg.getBoundingClientRect() : null;
    out.push({key: d.id, svg: [s.left, s.top, s.right, s.bottom],
              legend: l ? [l.left, l.top, l.right, l.bottom] : null});
  });
  var pre = document.createElement('pre'); pre.id = 'probe'; pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
</script>"""


@pytest.mark.browser
def test_legends_stay_inside_the_figure_for_1_to_12_optimizers(chromium, frame, tmp_path):
    """With 7 optimizers plus the target and seed-end keys the legend of "Convergence
    against wall-clock time" was wider than the figure and cut at both edges ("damw", "dan_optax",
    no swatches). Every figure with an optimizer legend, for 1 to 12 optimizers, inlined as the
    report inlines it and laid out by chromium at the page's width: the legend's box lies inside
    the SVG's."""
    from reports import figures as F
    from reports.layout import layout_problems, svg_markup

    builders = {"convergence-steps": lambda f: F.convergence_figure(f, "step"),
                "convergence-seconds": lambda f: F.convergence_figure(f, "seconds"),
                "tuning-curves": F.tuning_figure, "sensitivity": F.sensitivity_figure}
    parts = []
    for n in range(1, len(OPTS) + 1):
        f = first(frame, n)
        for key, build in builders.items():
            fig = build(f)
            assert fig is not None and not isinstance(fig, str), (key, n)
            if n in (1, 7, 12):  # matplotlib's own text boxes: no overlap, nothing outside
                assert layout_problems(fig) == [], (key, n)
            parts.append(f'<div class="fig" id="{key}-{n}">{svg_markup(fig, f"{key}-{n}")}</div>')
            fig.clear()
    page = tmp_path / "legends.html"
    page.write_text("<!DOCTYPE html><html><head><meta charset='utf-8'><style>body{margin:0;width:1216px}"
                    "svg.fig{display:block;width:100%;height:auto}</style></head><body>"
                    + "".join(parts) + _LEGEND_PROBE + "</body></html>", encoding="utf-8")
    boxes = probe_result(dump_dom(page, tmp_path / "prof"))
    assert len(boxes) == len(builders) * len(OPTS)
    outside = []
    for b in boxes:
        assert b["legend"] is not None, b["key"]
        (sl, st, sr, sb), (ll, lt, lr, lb) = b["svg"], b["legend"]
        if ll < sl - 1 or lr > sr + 1 or lt < st - 1 or lb > sb + 1:
            outside.append((b["key"], round(ll - sl), round(sr - lr)))
    assert not outside, outside  # (figure, px inside on the left, px inside on the right)


# ---------------------------------------------------------------------------------------------
# The figures' drawn geometry
# ---------------------------------------------------------------------------------------------
def _marker_fractions(fig) -> dict[str, float]:
    """Per optimizer row of a time panel: the x of its marker as a fraction of the axes' width, in
    the drawn figure (display coordinates after a draw)."""
    fig.canvas.draw()
    ax = fig.axes[0]
    rows = [t.get_text() for t in ax.get_yticklabels()]
    box = ax.get_window_extent()
    out = {}
    for line in ax.lines:
        xs, ys = line.get_xdata(), line.get_ydata()
        if len(xs) != 1 or line.get_marker() in (None, "", "None", "|", "_"):  # not the whiskers' caps
            continue
        px = ax.transData.transform((float(xs[0]), float(ys[0])))[0]
        out[rows[round(float(ys[0]))]] = (px - box.x0) / box.width
    return out


def test_time_axes_run_over_the_plotted_times_not_the_slowest_training(frame):
    """The "Time to target" and "Tuned time-to-result" figures ran their x axis to the slowest
    trial's whole training while the times sat in its first tenth. Three optimizers 0.05-0.25 s to
    target, trained 1-1.7 s: a linear axis from 0 whose fastest and slowest markers lie more than
    half the axis apart; seven optimizers, 0.05 s to 1.7 s (more than a decade): a log axis that
    says so, the markers again spread over the axis."""
    from reports import figures as F

    three, seven = first(frame, 3), first(frame, 7)
    for build in (F.time_to_target_figure, F.tuned_time_figure):
        fig = build(three)
        ax = fig.axes[0]
        assert ax.get_xscale() == "linear" and "log" not in ax.get_xlabel()
        x = _marker_fractions(fig)
        assert set(x) == set(OPTS[:3]), x
        assert max(x.values()) > 0.75 and max(x.values()) - min(x.values()) > 0.5, x
        fig = build(seven)
        ax = fig.axes[0]
        assert ax.get_xscale() == "log" and ax.get_xlabel().endswith("log scale"), ax.get_xlabel()
        x = _marker_fractions(fig)
        assert max(x.values()) - min(x.values()) > 0.6, x


def test_tuning_curves_of_many_optimizers_draw_lines_the_legend_explains(frame):
    """Seven overlapping translucent bands and faint unexplained horizontal lines.
    Up to 4 optimizers a panel has its bands (fills, no edge lines); from 5 none; for 1-12
    optimizers every line drawn is an optimizer's validation (solid) or test (dashed) curve: its
    colour and marker those of a legend key, its style that of "validation (selects)" or "test of
    the selected", both in the legend."""
    from matplotlib.collections import PolyCollection
    from matplotlib.colors import to_hex

    from reports import figures as F
    from reports.style import markers, palette

    for n in range(1, len(OPTS) + 1):
        f = first(frame, n)
        fig = F.tuning_figure(f)
        legend = fig.legends[0]
        keys = {t.get_text(): h for t, h in zip(legend.get_texts(), legend.legend_handles, strict=True)}
        assert {"validation (selects)", "test of the selected"} <= set(keys)
        assert set(OPTS[:n]) <= set(keys)
        pal, marks = palette(f), markers(f)
        key_of = {(to_hex(pal[o]), marks[o]): o for o in pal}
        assert len(key_of) == n  # colours repeat after 8: colour and marker tell each apart
        lines = [ln for ax in fig.axes for ln in ax.lines]
        assert len(lines) == 2 * n
        for ln in lines:
            opt = key_of[(to_hex(ln.get_color()), ln.get_marker())]
            assert (to_hex(keys[opt].get_color()), keys[opt].get_marker()) == (to_hex(ln.get_color()),
                                                                               ln.get_marker())
            style = {"-": "validation (selects)", "--": "test of the selected"}[ln.get_linestyle()]
            assert keys[style].get_linestyle() == ln.get_linestyle()
        fills = [c for ax in fig.axes for c in ax.collections if isinstance(c, PolyCollection)]
        assert len(fills) == (n if n <= 4 else 0), n
        fig.clear()


# ---------------------------------------------------------------------------------------------
# Colours
# ---------------------------------------------------------------------------------------------
#: Machado, Oliveira and Fernandes (2009), severity 1: linear-RGB matrices of the three dichromacies.
CVD = {
    "normal": np.eye(3),
    "protanopia": np.array([[0.152286, 1.052583, -0.204868], [0.114503, 0.786281, 0.099216],
                            [-0.003882, -0.048116, 1.051998]]),
    "deuteranopia": np.array([[0.367322, 0.860646, -0.227968], [0.280085, 0.672501, 0.047413],
                              [-0.011820, 0.042940, 0.968881]]),
    "tritanopia": np.array([[1.255528, -0.076749, -0.178779], [-0.078411, 0.930809, 0.147602],
                            [0.004733, 0.691367, 0.303900]]),
}


def _lab(hex_colour: str, vision: str) -> np.ndarray:
    """CIELAB (D65) of a colour as seen with ``vision`` (:data:`CVD`)."""
    from matplotlib.colors import to_rgb

    srgb = np.array(to_rgb(hex_colour))
    lin = np.where(srgb <= 0.04045, srgb / 12.92, ((srgb + 0.055) / 1.055) ** 2.4)
    lin = np.clip(CVD[vision] @ lin, 0, 1)
    xyz = np.array([[0.4124, 0.3576, 0.1805], [0.2126, 0.7152, 0.0722], [0.0193, 0.1192, 0.9505]]) @ lin
    xyz = xyz / np.array([0.95047, 1.0, 1.08883])
    f = np.where(xyz > (6 / 29) ** 3, np.cbrt(xyz), xyz / (3 * (6 / 29) ** 2) + 4 / 29)
    return np.array([116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])])


def _closest_pair(colours: list[str], vision: str) -> float:
    labs = [_lab(c, vision) for c in colours]
    return min(float(np.linalg.norm(a - b)) for i, a in enumerate(labs) for b in labs[i + 1:])


#: Smallest CIELAB distance (ΔE*ab) between two of 8 optimizers' colours, in each vision. Okabe-Ito
#: in the order of reports.style: 26.4 normal, 20.7 protanopia, 17.0 deuteranopia, 16.1 tritanopia;
#: seaborn's "colorblind" palette (the old one): 20.7, 12.8, 10.8 and 11.7.
MIN_DELTA_E = 15.0


def test_colours_tell_ten_or_more_optimizers_apart_with_and_without_colour_blindness(frame):
    """7 optimizers got three near-identical oranges/browns and two pinks. The first
    8 optimizers' colours stay at least :data:`MIN_DELTA_E` apart for normal vision and each
    dichromacy (Machado et al.'s simulation); 12 optimizers get 12 different (colour, marker)
    pairs; and an optimizer has one colour in every figure: the strokes and fills the report's
    inline SVGs draw are the palette's, the same set in the convergence, tuning and time figures,
    and the interactive views' colour scale is the same mapping."""
    from matplotlib.colors import to_hex

    from reports import figures as F
    from reports import interactive
    from reports.layout import svg_markup
    from reports.style import markers, palette

    f8, f12 = first(frame, 8), frame
    pal8 = palette(f8)
    for vision in CVD:
        assert _closest_pair(list(pal8.values()), vision) >= MIN_DELTA_E, vision
    pal12, marks12 = palette(f12), markers(f12)
    assert len({(to_hex(pal12[o]), marks12[o]) for o in OPTS}) == len(OPTS)
    seven = first(frame, 7)
    pal = {o: to_hex(c) for o, c in palette(seven).items()}
    drawn = {}
    for key, build in (("convergence", lambda f: F.convergence_figure(f, "step")),
                       ("tuning", F.tuning_figure), ("time", F.time_to_target_figure)):
        svg = svg_markup(build(seven), key).lower()
        drawn[key] = {c for c in re.findall(r"(?:stroke|fill):\s*(#[0-9a-f]{6})", svg) if c in pal.values()}
    assert drawn["convergence"] == drawn["tuning"] == drawn["time"] == set(pal.values()), drawn
    colour = interactive.optimizer_color(seven)["scale"]
    assert dict(zip(colour["domain"], colour["range"], strict=True)) == pal


# ---------------------------------------------------------------------------------------------
# Throughput's suspect step times, the time budget
# ---------------------------------------------------------------------------------------------
def test_throughput_caption_and_figure_agree_and_name_the_suspect_trials(frame):
    """The caption promised "red cross-hatched" bars that no bar showed while the
    leaderboard flagged a suspect step time. Where a group is all suspect (muon) the figure draws
    the hatched bar and the caption says so; where suspect trials were left out of a bar (one of
    lion's) the figure puts a † after it and the caption says so; the caption names each suspect
    trial by id; without a suspect trial it promises no mark at all."""
    from matplotlib.colors import to_hex

    from reports import figures as F
    from reports.fig_throughput import suspect_caption

    spec = next(s for s in F.FIGURES if s.key == "throughput")
    s = frame[frame["row"] == "summary"]
    suspect_ids = set(s.loc[s["perf_suspect"].notna(), "trial_id"])
    assert len(suspect_ids) == 5
    caption = spec.caption(frame)
    assert all(tid in caption for tid in suspect_ids), caption
    fig = F.throughput_figure(frame)
    hatched = [p for ax in fig.axes for p in ax.patches if p.get_hatch() == "xxxx"]
    rows = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert "Red cross-hatched" in caption and len(hatched) == 3  # muon's bar in each of 3 panels
    assert all(to_hex(p.get_edgecolor()) == to_hex("tab:red") for p in hatched)
    assert {rows[round(p.get_y() + p.get_height() / 2)] for p in hatched} == {ALL_SUSPECT}
    daggers = [t for ax in fig.axes for t in ax.texts if t.get_text().strip() == "†"]
    assert "† after a bar" in caption and len(daggers) == 3
    assert {rows[round(t.get_position()[1])] for t in daggers} == {LEFT_OUT[0]}
    clean = frame.copy()
    clean["perf_suspect"] = None
    assert suspect_caption(clean) == ""
    assert "hatched" not in spec.caption(clean) and "†" not in spec.caption(clean)
    fig = F.throughput_figure(clean)
    assert not [p for ax in fig.axes for p in ax.patches if p.get_hatch() == "xxxx"]


def test_time_budget_bars_describe_the_same_invocations(frame):
    """Once "whole sweep 95.8 s" beside a task bar of 378 s: the task's bar summed trials
    of earlier invocations that the sweep's bar did not hold. The whole sweep's bar says how many
    invocations it sums; the task's bar holds the trials those invocations trained (and is shorter
    than the sweep's); the four trials carried over from the earlier sweep are a bar of their own,
    labelled so."""
    from reports import figures as F

    fig = F.budget_figure(frame)
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels == ["whole sweep: 2 invocations", f"mlp · mnist1d: {len(OPTS) * 4} trials",
                      "mlp · mnist1d: 4 trials of other invocations"], labels
    totals = [sum(b.get_width() for b in ax.patches if round(b.get_y() + b.get_height() / 2) == i)
              for i in range(3)]
    s = frame[frame["row"] == "summary"]
    parts = [N.M_TIME[p] for p in ("compile", "train", "eval", "throughput", "tracking", "other")]
    own = s[s["sweep_id"] == SWEEP]
    assert totals[1] == pytest.approx(own[parts].sum().sum()) and totals[1] < totals[0]
    assert totals[2] == pytest.approx(s[s["sweep_id"] == OLD][parts].sum().sum())


# ---------------------------------------------------------------------------------------------
# The report page: identifiers, the trials table, the environment
# ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def page(store, tmp_path_factory):
    out = tmp_path_factory.mktemp("page") / "figs.html"
    return reports.make_report(EXP, SWEEP, str(out), baseline=OLD, tracking_uri=store["uri"])


_PAGE_PROBE = """<script>
window.addEventListener('load', function () {
  var out = {};
  out.cards = Array.prototype.map.call(document.querySelectorAll('.card'),
    function (c) { return c.innerText; });
  out.transformed = [];
  document.querySelectorAll('body *').forEach(function (el) {
    var t = getComputedStyle(el).textTransform;
    if (t !== 'none') out.transformed.push(el.tagName + '.' + el.className + ': ' + t);
  });
  var table = document.getElementById('trials-table');
  var heads = Array.prototype.map.call(table.tHead.rows[0].cells,
    function (c) { return c.textContent.trim(); });
  out.heads = heads;
  var tcol = heads.indexOf('Trial ↕') >= 0 ? heads.indexOf('Trial ↕') : heads.indexOf('Trial');
  var scol = heads.findIndex(function (h) { return h.indexOf('Optimizer source') === 0; });
  out.ids = Array.prototype.map.call(table.tBodies[0].rows, function (r) {
    var code = r.cells[tcol].querySelector('code');
    var st = getComputedStyle(code);
    var lh = parseFloat(st.lineHeight) || parseFloat(st.fontSize) * 1.2;
    return {id: code.textContent, lines: code.getClientRects().length,
            height: code.getBoundingClientRect().height, lh: lh,
            optimizer: r.cells[1].textContent, source: scol >= 0 ? r.cells[scol].textContent.trim() : null};
  });
  out.tableW = table.getBoundingClientRect().width;
  out.mainW = document.querySelector('main').clientWidth - 64;
  out.env = {};
  document.querySelectorAll('#environment dt').forEach(function (dt) {
    out.env[dt.textContent] = dt.nextElementSibling.textContent; });
  out.throughputCaption = document.querySelector('#throughput figcaption').textContent;
  out.throughputHatched = document.querySelectorAll('#throughput svg pattern').length;
  var pre = document.createElement('pre'); pre.id = 'probe'; pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
</script>"""


@pytest.mark.browser
def test_page_shows_identifiers_as_written_ids_on_one_line_and_the_source_hash(chromium, page, store,
                                                                               tmp_path):
    """In chromium: the header card read "0 REGRESSIONS VS C04306E1069C" (CSS
    upper-cased the sweep id, which then could not be pasted back): the card's rendered text holds
    the baseline id as written and no element of the page transforms its text; each 16-hex trial
    id sat on 3 lines: every id of the trials table is one line, the table within the page; and a
    column gives the optimizer's source hash (a user's optimizer's trials: its hash; built-ins:
    none). The throughput caption's "red cross-hatched" comes with hatched bars in the SVG."""
    text = page.read_text(encoding="utf-8")
    end = text.rindex("</body>")
    probe = tmp_path / "probe.html"
    probe.write_text(text[:end] + _PAGE_PROBE + text[end:], encoding="utf-8")
    out = probe_result(dump_dom(probe, tmp_path / "prof"))
    assert any(f"regressions vs {OLD}" in c for c in out["cards"]), out["cards"]
    assert not out["transformed"], out["transformed"]
    ids = out["ids"]
    assert len(ids) == len(store["trials"]) + len(store["carried"])
    assert all(len(r["id"]) == 16 and r["lines"] == 1 and r["height"] < 1.5 * r["lh"] for r in ids), ids[:3]
    assert out["tableW"] <= out["mainW"] + 1, (out["tableW"], out["mainW"])
    assert {r["source"] for r in ids if r["optimizer"] == SOURCE_OPT} == {SOURCE_HASH}
    assert {r["source"] for r in ids if r["optimizer"] != SOURCE_OPT} == {""}
    assert "Red cross-hatched" in out["throughputCaption"] and out["throughputHatched"] > 0


_FIT_PROBE = """<script>
window.addEventListener('load', function () {
  document.querySelectorAll('.figbar button[data-view=interactive]').forEach(function (b) { b.click(); });
  setTimeout(function () {
    var out = [];
    document.querySelectorAll('.vl[data-spec]').forEach(function (box) {
      var el = box.querySelector('.vl-chart'), svg = el.querySelector('svg');
      var b = box.getBoundingClientRect(), st = getComputedStyle(box);
      out.push({id: box.id, state: box.dataset.state || '',
                boxRight: b.right - parseFloat(st.paddingRight) - parseFloat(st.borderRightWidth),
                svgRight: svg ? svg.getBoundingClientRect().right : null,
                overflow: box.scrollWidth - box.clientWidth});
    });
    var pre = document.createElement('pre'); pre.id = 'probe'; pre.textContent = JSON.stringify(out);
    document.body.appendChild(pre);
  }, 8000);
});
</script>"""


@pytest.mark.browser
@pytest.mark.parametrize("width", [1100, 1400])
def test_interactive_views_stay_inside_their_box_in_a_narrower_window(chromium, page, tmp_path, width):
    """Each interactive view (convergence, tuning curves, sensitivity), switched on as a reader does
    (its Interactive button), lies inside its box: in a 1,100 px window the views were drawn at the
    1,280 px page's width, their right end (the tuning curves' k = 2 and its points) cut off behind
    a scroll bar (the SVG's right edge 60-70 px past the box). Measured by chromium on the report
    page."""
    text = Path(page).read_text(encoding="utf-8")
    i = text.rfind("</body>")
    probe_page = tmp_path / "fit.html"
    probe_page.write_text(text[:i] + _FIT_PROBE + text[i:], encoding="utf-8")
    out = probe_result(dump_dom(probe_page, tmp_path / "prof", width=width, height=900))
    assert {o["id"] for o in out} >= {"tuning-curves-interactive", "convergence-steps-interactive"}, out
    for o in out:
        assert o["state"] == "ok", o
        assert o["svgRight"] is not None and o["svgRight"] <= o["boxRight"] + 0.5, o
        assert o["overflow"] <= 0, o


class _Env(HTMLParser):
    """The report's environment section as {label: value}."""

    def __init__(self):
        super().__init__()
        self.env, self._in, self._tag, self._key = {}, False, None, None

    def handle_starttag(self, tag, attrs):
        if tag == "section" and dict(attrs).get("id") == "environment":
            self._in = True
        self._tag = tag

    def handle_endtag(self, tag):
        if tag == "section":
            self._in = False

    def handle_data(self, data):
        if not self._in or not data.strip():
            return
        if self._tag == "dt":
            self._key = data.strip()
        elif self._tag == "dd" and self._key:
            self.env[self._key] = data.strip()
            self._key = None


def environment_of(page: Path) -> dict[str, str]:
    p = _Env()
    p.feed(page.read_text(encoding="utf-8"))
    return p.env


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True).stdout.strip()


def test_environment_records_the_harness_and_config_commits_from_outside_the_clone(tmp_path, monkeypatch):
    """A sweep run outside the clone recorded "git commit unknown" although the
    harness is an editable install of a git checkout. A real sweep (fake trainer), run from a
    folder outside any repository with its config in a repository of its own: every trial run and
    the parent record the harness checkout's commit (with +dirty as ``git status`` says) and the
    config folder's commit, and the report's environment shows both."""
    from conftest import fake_result
    from mlflow import MlflowClient

    import harness
    import harness.train.loop as trainer
    from harness.orchestrate.run import run_sweep
    from harness.tracking import provenance

    clone = Path(harness.__file__).resolve().parents[1]
    if subprocess.run(["git", "rev-parse", "HEAD"], cwd=clone, capture_output=True).returncode:
        pytest.skip("the harness does not run from a git checkout here")
    want = _git(clone, "rev-parse", "HEAD") + ("+dirty" if _git(clone, "status", "--porcelain",
                                                                "--untracked-files=no") else "")
    cfg_repo = tmp_path / "experiments"
    cfg_repo.mkdir()
    cfg = cfg_repo / "tiny.yaml"
    cfg.write_text("name: envtest\nmodels: [logreg]\noptimizers: [{name: sgd, hparams: {step_size: 0.1}}]\n"
                   "datasets: [digits]\nseeds: 1\nbatch_size: 32\nbudget: {steps: 20}\neval_every: 10\n"
                   "steps_per_dispatch: 10\nmeasure_perf: false\n")
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}
    for args in (["init", "-q"], ["add", "tiny.yaml"], ["commit", "-q", "-m", "config"]):
        subprocess.run(["git", *args], cwd=cfg_repo, check=True, env={**os.environ, **env})
    cfg_commit = _git(cfg_repo, "rev-parse", "HEAD")
    outside = tmp_path / "work"
    outside.mkdir()
    monkeypatch.chdir(outside)
    assert subprocess.run(["git", "rev-parse", "HEAD"], cwd=outside, capture_output=True).returncode != 0
    provenance.harness_commit.cache_clear()
    monkeypatch.setattr(trainer, "run_trial", lambda spec, **kw: fake_result(spec))
    monkeypatch.setattr(trainer, "run_trials_batched", lambda specs, **kw: [fake_result(s) for s in specs])
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    run_sweep(cfg, tracking_uri=uri)
    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name("envtest")
    runs = client.search_runs([exp.experiment_id])
    assert len(runs) == 2  # the parent and the trial
    for r in runs:
        assert r.data.tags[N.TAG_HARNESS_COMMIT] == want, r.data.tags
        assert r.data.tags[N.TAG_CONFIG_COMMIT] == cfg_commit
    page = reports.make_report("envtest", output=str(tmp_path / "env.html"), tracking_uri=uri)
    env = environment_of(page)
    assert env["harness git commit (its installed checkout)"] == want, env
    assert env["config folder's git commit"] == cfg_commit
    assert "git commit unknown" not in " ".join(f"{k} {v}" for k, v in env.items())


_HOVER_PROBE = """
.then(function () { setTimeout(function () {
  var out = {};
  var layers = document.querySelectorAll('g.mark-symbol.role-mark');
  var pts = layers[layers.length - 1].querySelectorAll('path');
  var r = pts[Math.floor(pts.length / 2)].getBoundingClientRect();
  var x = r.x + r.width / 2, y = r.y + r.height / 2;
  var t = document.elementFromPoint(x, y);  // what a pointer there hits (a Voronoi cell, or the point)
  ['pointerover', 'pointermove', 'mouseover', 'mousemove'].forEach(function (e) {
    t.dispatchEvent(new PointerEvent(e, {bubbles: true, clientX: x, clientY: y}));
  });
  setTimeout(function () {
    var tip = document.getElementById('vg-tooltip-element');
    out.tooltip = tip ? tip.innerText : '';
    var cells = document.querySelectorAll('g.role-mark[class*=voronoi] path');
    var c = cells[Math.floor(cells.length / 2)], q = c.getBoundingClientRect();
    c.dispatchEvent(new PointerEvent('pointerover', {bubbles: true, clientX: q.x + q.width / 2,
                                                     clientY: q.y + q.height / 2}));
    setTimeout(function () {
      out.areas = Array.prototype.map.call(document.querySelectorAll('.mark-area path'),
        function (p) { return p.getAttribute('opacity') || ''; });
      var pre = document.createElement('pre'); pre.id = 'probe'; pre.textContent = JSON.stringify(out);
      document.body.appendChild(pre);
    }, 300);
  }, 500);
}, 300); })"""


@pytest.mark.browser
@pytest.mark.parametrize("view", ["tuning_curves_spec", "convergence_spec"])
def test_interactive_hover_shows_values_and_the_band(chromium, frame, view, tmp_path):
    """Hover in the interactive views: a point's tooltip names its task, optimizer and the rest
    (Vega-Lite 6.4's nearest layer gave every string field as "undefined"); in the tuning curves
    the optimizer nearest the pointer shows its band (the band only on hover), the
    others' stay hidden."""
    from reports import interactive

    seven = first(frame, 7)
    spec = getattr(interactive, view)(seven)
    page = tmp_path / "hover.html"
    page.write_text(f"<html><body><div id=v></div><script>{interactive.vega_bundle()}</script><script>"
                    f"vegaEmbed('#v', {json.dumps(spec)}, {{renderer: 'svg'}}){_HOVER_PROBE};</script>"
                    "</body></html>", encoding="utf-8")
    out = probe_result(dump_dom(page, tmp_path / "prof"))
    tip = out["tooltip"]
    assert "undefined" not in tip and "mlp · mnist1d" in tip, tip
    assert any(o in tip for o in OPTS[:7]), tip
    if view == "tuning_curves_spec":
        assert sorted(out["areas"]) == ["0"] * 6 + ["0.2"], out["areas"]  # seven bands, one shown


def test_an_interactive_views_note_promises_controls_only_where_it_has_them(page):
    """Each interactive view's note says "the controls below the chart choose what is drawn" only
    where its Vega-Lite spec binds an input (a select or radio buttons): the tuning curves' view has
    none and promised them (a reviewer's finding)."""
    import json
    import re

    text = Path(page).read_text(encoding="utf-8")
    views = re.findall(r'<div id="([a-z-]+)-interactive"[^>]*data-spec="([a-z-]+-spec)">'
                       r'<p class="note">(.*?)</p>', text, re.S)
    assert {v[0] for v in views} >= {"tuning-curves", "convergence-steps"}, [v[0] for v in views]
    for fid, spec_id, note in views:
        spec = re.search(rf'<script type="application/json" id="{spec_id}">(.*?)</script>', text, re.S)
        inputs = '"input"' in json.dumps(json.loads(spec.group(1)))
        assert ("controls below the chart" in note) == inputs, (fid, inputs, note)
    assert dict((v[0], "controls below" in v[2]) for v in views)["tuning-curves"] is False


def test_tuning_against_compute_has_one_legend_above_the_panels(frame):
    """Each panel of "Tuning against compute" also drew its own legend at ``loc="best"``, which sat on
    the curves (the quickstart's mlp panel: over sgd's line) and repeated the figure's: the figure's
    one legend names every optimizer and method drawn, and no panel has one."""
    from reports import fig_tuning

    fig = fig_tuning.compute_figure(frame)
    assert fig is not None
    assert all(ax.get_legend() is None for ax in fig.axes)
    (legend,) = fig.legends
    texts = {t.get_text() for t in legend.get_texts()}
    drawn = {ln.get_label().split(" (")[0] for ax in fig.axes for ln in ax.get_lines()
             if not ln.get_label().startswith("_")}
    assert drawn and drawn <= texts
