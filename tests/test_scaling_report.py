"""The report's scaling section (reports.scaling_report) on a hand-built ladder frame.

The frame holds what a ladder sweep's trials hold (summary rows with the ladder.* tag columns,
final validation losses, the gap to the loss floor): 4 sizes spanning 16x, 3 budgets (5, 20, 80
tokens per parameter), 2 seeds, adamw (the baseline) and muon, each with a good and a worse
configuration, final losses drawn from a known law (E = the Markov floor 1.8747, alpha 0.35,
beta 0.30, muon's rho_N 1.4 and rho_D 1.6), seeds 0.0005 apart.
"""

import math

import pandas as pd
import pytest

import harness  # noqa: F401  (XLA's pool pinned as in every test process)
from harness.core import ladder as lt
from harness.core.names import M_FINAL_ACC, M_FINAL_GAP, M_FINAL_LOSS, M_SECONDS_TO_TARGET, M_STEPS_TO_TARGET
from reports.layout import layout_problems
from reports.scaling_law import law_speedup
from reports.scaling_report import scaling_caption, scaling_figure, scaling_study, scaling_table

E, A, ALPHA, B, BETA = 1.8747, 6.0, 0.35, 12.0, 0.30
RHO = {"adamw": (1.0, 1.0), "muon": (1.4, 1.6)}
SIZES = (1e4, 2.5e4, 6.4e4, 1.6e5)
RATIOS = (5.0, 20.0, 80.0)


def law(opt, n, d):
    rn, rd = RHO[opt]
    return E + A * (rn * n) ** -ALPHA + B * (rd * d) ** -BETA


def frame(ratios=RATIOS):
    rows = []
    for i, n in enumerate(SIZES):
        for r in ratios:
            d = r * n
            for opt in RHO:
                for cfg, worse in (("good", 0.0), ("bad", 0.05)):
                    for seed in (0, 1):
                        loss = law(opt, n, d) + worse + (0.0005 if seed else -0.0005)
                        tid = f"{i}-{r}-{opt}-{cfg}-{seed}"
                        rows.append({
                            "row": "summary", "task": f"rung {i} at {r:g}", "optimizer": opt,
                            "config_id": f"{opt}-{cfg}", "config": f"{opt} {cfg}", "seed": seed,
                            "status": "finished", "trial_id": tid, "run_id": tid, "target_metric": None,
                            "target_mode": None, "target_value": math.nan, M_FINAL_LOSS: loss,
                            M_FINAL_ACC: math.nan, M_SECONDS_TO_TARGET: math.nan,
                            M_STEPS_TO_TARGET: math.nan, M_FINAL_GAP: loss - E, "train_steps": "100",
                            lt.TAG_RUNG: str(i), lt.TAG_SIZE: f"width={i}", lt.TAG_PARAMS: str(int(n)),
                            lt.TAG_RATIO: f"{r:g}", lt.TAG_TOKENS: str(int(d)), lt.TAG_BASELINE: "adamw",
                            lt.TAG_TRANSFER: "per_rung", lt.TAG_FLOPS: "1", "step": pd.NA})
    f = pd.DataFrame(rows)
    f.attrs["select_by"] = "final"
    return f


def test_speedups_fit_and_extrapolation():
    f = frame()
    st = scaling_study(f)
    assert st.baseline == "adamw" and st.curve_kind == "end-of-training" and st.floor == pytest.approx(E)
    # the tuned configuration only: the "bad" configurations are not among the points
    assert len(st.points) == 4 * 3 * 2 * 2 and st.points["loss"].lt(law("adamw", 1e4, 5e4) + 0.01).all()
    # muon at the smallest size and 20 tokens/param against adamw's end-of-training curve at that
    # size (5, 20, 80 tokens/param): by hand, linear in log-tokens between the bracketing budgets
    n = SIZES[0]
    lx = law("muon", n, 20 * n)
    curve = [law("adamw", n, r * n) for r in RATIOS]
    i = next(k for k, v in enumerate(curve) if v <= lx)
    frac = (curve[i - 1] - lx) / (curve[i - 1] - curve[i])
    want = math.exp(math.log(RATIOS[i - 1] * n) + frac * math.log(RATIOS[i] / RATIOS[i - 1])) / (20 * n)
    row = st.speedups[(st.speedups["rung"] == 0) & (st.speedups["ratio"] == 20)].iloc[0]
    assert row["speedup"] == pytest.approx(want, rel=1e-9) and row["bound"] == "="
    assert row["low"] <= row["speedup"] <= row["high"]
    # muon at the largest budget beats adamw's whole curve there: a lower bound, not extrapolated
    top = st.speedups[(st.speedups["rung"] == 0) & (st.speedups["ratio"] == 80)].iloc[0]
    assert top["bound"] == ">" and top["speedup"] == pytest.approx(1.0)
    # the law: its factors recovered (the seeds' +-0.0005 is the only noise)
    k = st.known
    assert abs(k.E - E) < 1e-12 and st.fitted.E_fitted
    assert k.alpha == pytest.approx(ALPHA, abs=0.02) and k.beta == pytest.approx(BETA, abs=0.01)
    assert k.rho_n["muon"] == pytest.approx(1.4, rel=0.1) and k.rho_d["muon"] == pytest.approx(1.6, rel=0.1)
    lo, hi = st.intervals["rho_D[muon]"]
    assert lo < k.rho_d["muon"] < hi
    assert st.fitted.condition > k.condition
    # extrapolation: the law's speed-up at 10x and 100x the largest rung, per budget
    ex = st.extrapolated
    assert sorted(ex["times_largest"].unique()) == [10.0, 100.0] and set(ex["optimizer"]) == {"muon"}
    got = ex[(ex["ratio"] == 20) & (ex["times_largest"] == 100)]["speedup"].iloc[0]
    assert got == pytest.approx(float(law_speedup(k, "muon", SIZES[-1] * 100, 20)))
    table = scaling_table(f)
    assert set(table["kind"]) == {"measured", "extrapolated (law, E known)"}
    cap = scaling_caption(f)
    assert "Extrapolated (law, not measured)" in cap and "exact loss floor 1.8747" in cap
    assert "end-of-training losses" in cap
    fig = scaling_figure(f)
    assert fig is not None and layout_problems(fig) == []
    texts = [t.get_text() for ax in fig.axes for t in ax.texts]
    assert "extrapolation" in texts


def test_one_budget_rescales_data_only_and_says_its_curve_is_within_run():
    f = frame(ratios=(20.0,))
    st = scaling_study(f)
    assert st.curve_kind == "within-run"
    assert st.known.rescale == ("D",) and st.known.rho_n["muon"] == 1.0
    assert st.speedups.empty  # the hand-built frame has no curve rows to read
    assert "within-run curve" in scaling_caption(f)


def test_no_ladder_no_section():
    f = frame().drop(columns=list(lt.TAGS))
    assert scaling_study(f) is None and scaling_figure(f) is None and scaling_table(f).empty
    assert scaling_caption(f) == ""


def _extreme_extrapolation(f):
    """The study of ``f`` with the law's extrapolated speed-ups made extreme, as the CPU study's
    were (lion 0.01×, the others ∞: their ρ_N > 1): the figure and caption read this cached study."""
    st = scaling_study(f)
    ex = st.extrapolated.copy()
    ex["speedup"] = [1e-4 if k == 100 else math.inf for k in ex["times_largest"]]
    st.extrapolated = ex
    return st


def test_speedup_axis_is_set_by_the_measured_points_not_by_an_extreme_extrapolation():
    """Chromium showed the study's measured speed-ups squashed against the top of the panel by a
    law line running to 0.01×: the axis reaches at most EXTRA_REACH past the measured values."""
    from reports.scaling_report import EXTRA_REACH

    f = frame()
    st = _extreme_extrapolation(f)
    fig = scaling_figure(f)
    ax = fig.axes[0]
    lo, hi = ax.get_ylim()
    meas = st.speedups[["low", "high", "speedup"]].to_numpy(float).ravel()
    m_lo, m_hi = min(meas.min(), 1.0), max(meas.max(), 1.0)
    assert lo <= m_lo and m_hi <= hi  # every measured point and bar inside the panel
    assert lo >= m_lo / (EXTRA_REACH * 1.5) * 0.999 and hi <= m_hi * EXTRA_REACH * 1.5 * 1.001
    # the measured points span a visible part of the panel's height, in pixels
    fig.canvas.draw()
    to_px = ax.transData.transform
    span = abs(to_px((1, m_hi))[1] - to_px((1, m_lo))[1])
    assert span >= 0.2 * ax.bbox.height, (span, ax.bbox.height)
    assert layout_problems(fig) == []


def test_caption_says_an_infinite_extrapolation_once_per_optimizer():
    """The study's caption listed "inf× at 10×N" twenty times: now one clause per optimizer, ∞
    explained once, no "inf"."""
    f = frame()
    _extreme_extrapolation(f)
    cap = scaling_caption(f)
    ext = cap[cap.index("Extrapolated (law, not measured)"):]
    assert "inf" not in cap and ext.count("muon:") == 1
    assert ext.count("∞: the law's baseline") == 1
    assert "muon: ∞, 0.0001× at 5; ∞, 0.0001× at 20; ∞, 0.0001× at 80." in ext  # not "0.00×"


def test_loss_panel_label_fits_its_panel():
    """The middle panel's y label ("final valid loss − E (nats), 3 budgets") was taller than the
    panel and ran into the legend: its drawn height is within the panel's."""
    fig = scaling_figure(frame())
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    for ax in fig.axes:
        assert ax.yaxis.label.get_window_extent(r).height <= ax.get_window_extent(r).height, \
            ax.yaxis.label.get_text()


def test_n_axes_label_more_than_the_decade_a_ladder_spans():
    """Sizes 1e4 to 1.6e5 span about one decade: the N axes showed one labelled tick ("10^4"); now
    1, 2 and 5 of each decade inside a narrow axis are labelled as counts (10k, 20k, 50k, 100k),
    decades on a wide one (no labels overlap: test_speedups_fit_and_extrapolation's layout check)."""
    from reports.style import count_text

    assert [count_text(x) for x in (800, 4000, 20000, 4352, 1.2e6, 3e9)] == \
        ["800", "4k", "20k", "4.35k", "1.2M", "3B"]
    fig = scaling_figure(frame())
    fig.canvas.draw()
    shown = []
    for ax in fig.axes:
        lo, hi = ax.get_xlim()
        shown.append([t.get_text() for t in ax.get_xticklabels()
                      if t.get_text() and lo <= t.get_position()[0] <= hi])
    assert all(len(s) >= 3 for s in shown), shown  # every N axis: at least 3 labelled sizes
    # the speed-up panel runs to the extrapolation (10M): decades; the measured panels 1, 2, 5
    assert shown[0] == ["10k", "100k", "1M", "10M"]
    assert any({"10k", "20k", "50k", "100k"} <= set(s) for s in shown[1:]), shown


def test_a_text_corpus_ladder_fits_E_with_intervals_draws_its_frontier_and_says_cpu_is_early():
    """No loss floor (a text corpus): E is fitted and the law's parameters get bootstrap intervals
    (before: printed without any); the loss-against-compute frontier marks the runs no cheaper run of
    the same optimizer matched; CPU rungs are said to be early training."""
    from reports.scaling_frontier import frontier_caption, frontier_figure, frontier_table

    f = frame().drop(columns=[M_FINAL_GAP])
    n, d = pd.to_numeric(f[lt.TAG_PARAMS]), pd.to_numeric(f[lt.TAG_TOKENS])
    f[lt.TAG_FLOPS] = (6.0 * n * d).astype(str)
    f["device_kind"] = "cpu:cpu"
    st = scaling_study(f)
    assert st.known is None and st.fitted is not None and st.fitted.E_fitted
    for k in ("alpha", "beta", "E", "rho_N[muon]", "rho_D[muon]"):
        lo, hi = st.intervals[k]
        assert lo <= hi, k
    cap = scaling_caption(f)
    assert f"α = {st.fitted.alpha:.3f} [" in cap and "No known floor (a text corpus)" in cap
    assert "These rungs ran on a CPU: at most 160,000 parameters and 12,800,000 tokens" in cap
    t = frontier_table(f)
    assert len(t) == 2 * len(SIZES) * len(RATIOS) and set(t["seeds"]) == {2}
    for _, g in t.groupby("optimizer"):  # on the frontier: lower than every cheaper run's mean loss
        for i, row in enumerate(g.itertuples()):
            assert row.frontier == all(row.loss < q.loss for q in list(g.itertuples())[:i]), row
    muon = t[(t["optimizer"] == "muon") & (t["N"] == SIZES[-1]) & (t["ratio"] == 80.0)].iloc[0]
    assert muon["loss"] == pytest.approx(law("muon", SIZES[-1], 80.0 * SIZES[-1]), abs=1e-9)
    assert muon["flops"] == pytest.approx(6.0 * SIZES[-1] * 80.0 * SIZES[-1])
    assert "Lowest: adamw" in frontier_caption(f) and "ran on a CPU" in frontier_caption(f)
    fig = frontier_figure(f)
    assert fig is not None and layout_problems(fig) == []
    assert "ran on a CPU" not in scaling_caption(f.assign(device_kind="gpu:NVIDIA H100"))


def test_the_law_line_is_drawn_at_a_budget_the_others_trained_on():
    """With a budget for the baseline alone (80 here), the caption said the law's speed-up lines
    were at 80 tokens/param, where no other optimizer has a measured speed-up; now at 20."""
    f = frame()
    f = f[~((f["optimizer"] == "muon") & (f[lt.TAG_RATIO] == "80"))]
    assert "Lines: the fitted law's speed-up at 20 tokens/param" in scaling_caption(f)
