"""The report's scaling section: does an optimizer's gain over the baseline survive scale?

Reads a ladder sweep's trials (the run tags ``ladder.*`` of :mod:`harness.core.ladder`, columns of
the frame :func:`reports.frame.build_frame` builds) and computes, from the tidy frame only:

* **The tuned configuration** of every optimizer at every rung and data budget: the report's own
  selection (:func:`reports.selection.best_configs`, each (rung, budget) being a task of its own);
  a ladder's config selects by the final validation loss (``selection: {by: final}``), as Wen et
  al. insist.
* **Speed-up over the baseline** per rung (:mod:`reports.speedup`): X's final validation loss per
  seed against the baseline's loss-vs-tokens curve at the same size: with two or more data budgets,
  the baseline's *end-of-training* losses at each budget (Wen et al.'s curve); with one budget, the
  baseline's evaluations during its one run (a within-run curve: exact for a constant schedule
  only, as the caption then says). Interval: bootstrap over both optimizers' seeds.
* **The joint law** (:mod:`reports.scaling_law`) over every seed of every tuned configuration,
  ``E`` known (the Markov source's exact loss floor: final validation loss − the logged gap to it,
  ``final/valid_nats_above_entropy``) and fitted, factors with bootstrap intervals; the factors
  are ``ρ_N`` and ``ρ_D`` with two or more budgets, ``ρ_D`` alone with one (``N`` and ``D`` are
  then proportional and the two factors cannot be told apart).
* **Extrapolated speed-up** from the law (``E`` known) at 10× and 100× the largest rung's
  parameters, at each budget's tokens per parameter: *extrapolation*, drawn and labelled so.

:func:`scaling_figure` draws three panels (speed-up against parameters with the law's line,
measured loss above the floor with the law's curves, residuals); :func:`scaling_caption` gives the
fit's numbers; :func:`scaling_table` is the figure's CSV.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from harness.core import ladder as lt
from harness.core.names import M_FINAL_GAP, M_FINAL_LOSS, M_VALID_LOSS
from reports.frame import curves, summaries
from reports.scaling_law import LawFit, LawPoints, bootstrap_law, fit_law, law_speedup
from reports.selection import best_configs
from reports.speedup import SpeedUpInterval, speedup_interval

__all__ = ["LADDER_COLUMNS", "ScalingStudy", "add_ladder_columns", "early_training_note", "scaling_caption",
           "scaling_figure", "scaling_study", "scaling_table"]

#: The frame's columns of the ladder tags (named as the tags).
LADDER_COLUMNS = lt.TAGS
#: How far past the largest rung the law is read (the report marks these as extrapolation).
EXTRAPOLATE = (10.0, 100.0)
N_BOOT_LAW = 100
NEUTRAL = "0.45"
_MARKS = ("o", "s", "D", "P", "X", "*", "h", "p")


def add_ladder_columns(frame: pd.DataFrame, runs) -> pd.DataFrame:
    """``frame`` with a column per ladder tag (:data:`LADDER_COLUMNS`) from the trial ``runs``
    (``mlflow.entities.Run``); ``frame`` unchanged when no run has them, or when it has them
    already (:func:`reports.frame.build_frame` puts them on every frame it builds; this is for a
    frame built without them)."""
    by_id = {r.info.run_id: r.data.tags for r in runs if r.data.tags.get(lt.TAG_RUNG) is not None}
    if not by_id or "run_id" not in frame or lt.TAG_RUNG in frame:
        return frame
    out = frame.copy()
    for t in LADDER_COLUMNS:
        out[t] = out["run_id"].map(lambda rid, t=t: by_id.get(rid, {}).get(t))
    out.attrs.update(frame.attrs)
    return out


@dataclass
class ScalingStudy:
    """What :func:`scaling_study` computed (every table one row per item, ready to draw)."""

    baseline: str
    points: pd.DataFrame  # one row per seed of a tuned configuration: optimizer, seed, N, D, ratio, loss
    speedups: pd.DataFrame  # per (rung, ratio, optimizer): N, speed-up, low, high, bound, censored
    curve_kind: str  # "end-of-training" or "within-run"
    floor: float | None
    known: LawFit | None = None
    fitted: LawFit | None = None
    intervals: dict[str, tuple[float, float]] = field(default_factory=dict)
    extrapolated: pd.DataFrame = field(default_factory=pd.DataFrame)
    problem: str | None = None  # why there is no fit (too few points), or None


def _num(s: pd.Series) -> pd.Series:
    return pd.to_numeric(s, errors="coerce")


def _tuned_rows(frame: pd.DataFrame) -> pd.DataFrame:
    """Summary rows of the tuned configuration of each optimizer at each rung and budget."""
    s = summaries(frame)
    s = s[s[lt.TAG_RUNG].notna()]
    best = best_configs(frame)
    keep = set(zip(best["task"], best["optimizer"], best["config_id"], strict=True))
    rows = s[[(t, o, c) in keep for t, o, c in zip(s["task"], s["optimizer"], s["config_id"], strict=True)]]
    rows = rows.assign(N=_num(rows[lt.TAG_PARAMS]), D=_num(rows[lt.TAG_TOKENS]),
                       ratio=_num(rows[lt.TAG_RATIO]), rung=_num(rows[lt.TAG_RUNG]).astype(int),
                       loss=_num(rows[M_FINAL_LOSS]), flops=_num(rows[lt.TAG_FLOPS]))
    return rows[(rows["status"] == "finished") & np.isfinite(rows["loss"])]


def _within_run(frame: pd.DataFrame, rows: pd.DataFrame) -> tuple[np.ndarray, np.ndarray] | None:
    """The baseline's within-run curve at one rung: tokens and ``float (seeds, evals)`` losses."""
    c = curves(frame)
    if c.empty or M_VALID_LOSS not in c:
        return None
    c = c[c["trial_id"].isin(rows["trial_id"]) & c[M_VALID_LOSS].notna()]
    if c.empty:
        return None
    tokens_per_step = float(rows["D"].iloc[0]) / float(_num(rows["train_steps"]).iloc[0]) \
        if "train_steps" in rows and _num(rows["train_steps"]).notna().all() else None
    if tokens_per_step is None:
        return None
    wide = c.pivot_table(index="seed", columns="step", values=M_VALID_LOSS).dropna(axis=1)
    if wide.empty:
        return None
    steps = wide.columns.to_numpy(float)
    ok = steps > 0
    return steps[ok] * tokens_per_step, wide.to_numpy()[:, ok]


def _speedups(frame: pd.DataFrame, rows: pd.DataFrame, baseline: str) -> tuple[pd.DataFrame, str]:
    ratios = sorted(rows["ratio"].unique())
    kind = "end-of-training" if len(ratios) > 1 else "within-run"
    out = []
    for rung, g in rows.groupby("rung"):
        base = g[g["optimizer"] == baseline]
        if base.empty:
            continue
        if kind == "end-of-training":
            wide = base.pivot_table(index="seed", columns="D", values="loss").dropna(axis=0)
            if wide.shape[1] < 2 or wide.empty:
                continue
            tokens, base_losses = wide.columns.to_numpy(float), wide.to_numpy()
        for (ratio, opt), x in g[g["optimizer"] != baseline].groupby(["ratio", "optimizer"]):
            if kind == "within-run":
                cur = _within_run(frame, base[base["ratio"] == ratio])
                if cur is None:
                    continue
                tokens, base_losses = cur
            iv: SpeedUpInterval = speedup_interval(tokens, base_losses, float(x["D"].iloc[0]),
                                                   x["loss"].to_numpy(float))
            out.append({"rung": rung, "size": x[lt.TAG_SIZE].iloc[0], "N": float(x["N"].iloc[0]),
                        "ratio": ratio, "optimizer": opt, "speedup": iv.estimate.value,
                        "bound": iv.estimate.bound, "low": iv.low, "high": iv.high,
                        "censored": iv.censored, "text": iv.text(), "seeds": iv.n_seeds,
                        "baseline_seeds": iv.n_base_seeds, "transfer": x[lt.TAG_TRANSFER].iloc[0]})
    return pd.DataFrame(out), kind


_CACHE: dict[int, tuple[weakref.ref, ScalingStudy | None]] = {}


def scaling_study(frame: pd.DataFrame) -> ScalingStudy | None:
    """The scaling analysis of ``frame`` (module docstring), or ``None`` for a sweep without a
    ladder; computed once per frame."""
    hit = _CACHE.get(id(frame))
    if hit is not None and hit[0]() is frame:
        return hit[1]
    study = _study(frame)
    _CACHE[id(frame)] = (weakref.ref(frame), study)
    return study


def _study(frame: pd.DataFrame) -> ScalingStudy | None:
    if lt.TAG_RUNG not in frame or frame[lt.TAG_RUNG].isna().all():
        return None
    rows = _tuned_rows(frame)
    baselines = frame[lt.TAG_BASELINE].dropna().unique()
    baseline = str(baselines[0]) if len(baselines) else ""
    gaps = _num(rows[M_FINAL_GAP]) if M_FINAL_GAP in rows else pd.Series(dtype=float)
    floors = (rows["loss"] - gaps).dropna()
    floor = float(floors.median()) if len(floors) else None
    speed, kind = _speedups(frame, rows, baseline)
    pts = rows[["optimizer", "seed", "rung", "N", "D", "ratio", "loss", "flops"]].reset_index(drop=True)
    study = ScalingStudy(baseline, pts, speed, kind, floor)
    if rows.empty or baseline not in set(rows["optimizer"]) or rows["N"].nunique() < 2:
        study.problem = "the law needs finished runs of the baseline at two sizes or more"
        return study
    rescale = ("N", "D") if rows["ratio"].nunique() > 1 else ("D",)
    lp = LawPoints.make(list(rows["optimizer"]), rows["N"], rows["D"], rows["loss"])
    n_free = 4 + len(rescale) * (rows["optimizer"].nunique() - 1)
    if len(rows) <= n_free + 1:
        study.problem = f"{len(rows)} points are too few for the law's {n_free + 1} parameters"
        return study
    try:
        if floor is not None and floor < rows["loss"].min():
            study.known = fit_law(lp, baseline, E=floor, rescale=rescale)
            study.intervals = bootstrap_law(lp, study.known, n_resamples=N_BOOT_LAW)
        study.fitted = fit_law(lp, baseline, rescale=rescale)
        if study.known is None:  # no known floor (a text corpus): the fitted law's own intervals
            study.intervals = bootstrap_law(lp, study.fitted, n_resamples=N_BOOT_LAW)
    except (ValueError, RuntimeError) as e:
        study.problem = f"the fit failed: {e}"
        return study
    law = study.known or study.fitted
    n_max = float(rows["N"].max())
    ext = [{"optimizer": o, "ratio": r, "N": n_max * k, "times_largest": k,
            "speedup": float(law_speedup(law, o, n_max * k, r))}
           for o in sorted(set(rows["optimizer"]) - {baseline})
           for r in sorted(rows.loc[rows["optimizer"] != baseline, "ratio"].unique())
           for k in EXTRAPOLATE]
    study.extrapolated = pd.DataFrame(ext)
    return study


def scaling_table(frame: pd.DataFrame) -> pd.DataFrame:
    """The section's CSV: measured speed-ups per rung (``kind = measured``) and the law's
    extrapolated ones (``kind = extrapolated (law, E known)``)."""
    st = scaling_study(frame)
    if st is None:
        return pd.DataFrame()
    parts = []
    if not st.speedups.empty:
        parts.append(st.speedups.assign(kind="measured", curve=st.curve_kind))
    if not st.extrapolated.empty:
        what = "E known" if st.known else "E fitted"
        parts.append(st.extrapolated.assign(kind=f"extrapolated (law, {what})"))
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()


def _fmt_iv(iv: tuple[float, float] | None) -> str:
    return "" if iv is None else f" [{iv[0]:.3g}, {iv[1]:.3g}]"


def _line_ratio(st: ScalingStudy) -> float:
    """The budget the law's speed-up lines are drawn at: the largest the other optimizers trained
    on (a ``baseline_tokens_per_param`` budget has no speed-up of its own)."""
    others = st.points.loc[st.points["optimizer"] != st.baseline, "ratio"]
    return float(others.max() if len(others) else st.points["ratio"].max())


def scaling_caption(frame: pd.DataFrame) -> str:
    """The section's caption: what is drawn, how it was computed, the fit's numbers."""
    st = scaling_study(frame)
    if st is None:
        return ""
    curve = ("the baseline's end-of-training losses at each data budget of the same size (Wen et al.'s "
             "curve)" if st.curve_kind == "end-of-training" else
             "the baseline's evaluations during its one run at the same size and budget (a within-run "
             "curve: exact for a constant schedule only; give the ladder two or more tokens_per_param "
             "for Wen et al.'s end-of-training curve)")
    text = (f"Left: speed-up over the tuned baseline {st.baseline} (Wen et al. 2025's data efficiency: "
            f"the tokens the baseline needs to reach the optimizer's final validation loss, divided by "
            f"the tokens it used; interpolated linearly in log-tokens on {curve}; bars: 90% percentile "
            f"bootstrap over both optimizers' seeds; ▲/▼: beyond the baseline's curve, a lower/upper "
            f"bound, never extrapolated). Lines: the fitted law's speed-up at {_line_ratio(st):g} "
            f"tokens/param; dashed and shaded past the "
            f"largest rung: extrapolation, hollow markers at 10× and 100× its parameters. Middle: final "
            f"validation loss above the floor E per tuned configuration and seed, and the law's curves "
            f"(one per optimizer and tokens per parameter). Right: residuals log L̂ − log L. ")
    if st.problem:
        return text + f"No law: {st.problem}."
    for name, fit in (("E known", st.known), ("E fitted", st.fitted)):
        if fit is None:
            continue
        iv = st.intervals if fit is (st.known or st.fitted) else {}
        facs = "; ".join(
            f"{o}: ρ_N {fit.rho_n[o]:.3g}{_fmt_iv(iv.get(f'rho_N[{o}]'))}, "
            f"ρ_D {fit.rho_d[o]:.3g}{_fmt_iv(iv.get(f'rho_D[{o}]'))}"
            for o in sorted(fit.rho_n) if o != st.baseline)
        text += (f"Law with {name}: E = {fit.E:.4f}, α = {fit.alpha:.3f}{_fmt_iv(iv.get('alpha'))}, "
                 f"β = {fit.beta:.3f}{_fmt_iv(iv.get('beta'))}, rescaling {'+'.join(fit.rescale)} "
                 f"({facs}); RMS residual {np.sqrt(np.mean(fit.residuals ** 2)):.2e}; condition number "
                 f"of the Jacobian {fit.condition:.3g}, largest parameter correlation "
                 f"{fit.max_correlation:.3f}. ")
    if st.known is not None:
        text += (f"E known is the Markov source's exact loss floor {st.floor:.4f} nats; intervals: 90% "
                 f"bootstrap over runs within each optimizer ({N_BOOT_LAW} refits). ")
    elif st.fitted is not None:
        text += (f"No known floor (a text corpus): E is fitted with the rest; intervals: 90% bootstrap over "
                 f"runs within each optimizer ({N_BOOT_LAW} refits). ")
    if not st.extrapolated.empty:
        text += _extrapolated_text(st)
    return text + early_training_note(frame)


def early_training_note(frame: pd.DataFrame) -> str:
    """A sentence for a ladder trained on a CPU: its rungs are early training (``""`` otherwise)."""
    st = scaling_study(frame)
    kinds = frame["device_kind"].dropna().astype(str) if "device_kind" in frame else pd.Series(dtype=str)
    if st is None or st.points.empty or not kinds.str.lower().str.startswith("cpu").any():
        return ""
    return (f" These rungs ran on a CPU: at most {st.points['N'].max():,.0f} parameters and "
            f"{st.points['D'].max():,.0f} tokens per run, early training, orders of magnitude below the "
            f"models and budgets scaling laws are fitted on; the trend and its extrapolation describe "
            f"this regime only, not what the optimizers do at scale.")


#: How far (a factor) the speed-up axis reaches past the measured values for the law's
#: extrapolated values; past it a law's line is clipped and its value is in the caption only.
EXTRA_REACH = 10.0


def _speedup_limits(st: ScalingStudy) -> tuple[float, float]:
    """The speed-up axis (log): the measured values and intervals, widened to include 1, then to
    the finite extrapolated values but at most :data:`EXTRA_REACH` × past the measured ones (a law
    whose extrapolation runs to 0.01× or ∞ would otherwise squash every measured point into a
    sliver of the panel), capped to two decades around 1."""
    meas = [1.0]
    if not st.speedups.empty:
        meas += list(st.speedups[["low", "high", "speedup"]].to_numpy(float).ravel())
    m = np.array([x for x in meas if np.isfinite(x) and x > 0])
    lo, hi = float(m.min()), float(m.max())
    if not st.extrapolated.empty:
        e = st.extrapolated["speedup"].to_numpy(float)
        e = e[np.isfinite(e) & (e > 0)]
        if e.size:
            lo = min(lo, max(float(e.min()), lo / EXTRA_REACH))
            hi = max(hi, min(float(e.max()), hi * EXTRA_REACH))
    return max(lo / 1.5, 1e-2), min(hi * 1.5, 1e2)


def _extrapolated_text(st: ScalingStudy) -> str:
    """The law's extrapolated speed-ups, one clause per optimizer: ``"muon: 1.3×, 1.3× at
    10; ∞, ∞ at 20"`` (at 10× and 100× the largest rung's N; two significant digits: a speed-up
    of 0.0031× is not "0.00×"); ``∞`` where no amount
    of data brings the baseline at that size to the optimizer's loss (said once)."""
    parts, inf = [], False
    for o, g in st.extrapolated.groupby("optimizer", sort=True):
        per = []
        for r, h in g.groupby("ratio", sort=True):
            vals = [("∞" if not np.isfinite(v) else f"{v:.2g}×")  # 0.0031×, not 0.00×
                    for v in h.sort_values("times_largest")["speedup"]]
            inf = inf or "∞" in vals
            per.append(f"{', '.join(vals)} at {r:g}")
        parts.append(f"{o}: " + "; ".join(per))
    ks = " and ".join(f"{k:g}×" for k in EXTRAPOLATE)
    text = (f"Extrapolated (law, not measured), at {ks} the largest rung's parameters, per tokens/param: "
            + " · ".join(parts) + ".")
    if inf:
        text += (" ∞: the law's baseline at that size reaches the optimizer's loss with no amount of data "
                 "(its parameter term alone is above it: ρ_N > 1 makes any size look larger).")
    return text


def scaling_figure(frame: pd.DataFrame):
    """The section's figure (module docstring), ``None`` without a ladder."""
    from reports.layout import new_figure
    from reports.style import palette

    st = scaling_study(frame)
    if st is None or st.points.empty:
        return None
    colours = palette(frame)
    marks = {o: _MARKS[i % len(_MARKS)] for i, o in enumerate(sorted(colours))}
    fig, axes = new_figure(1, 3, 3.4)
    ax_s, ax_l, ax_r = axes.ravel()
    law = st.known or st.fitted
    n_lo, n_hi = st.points["N"].min(), st.points["N"].max()
    grid = np.geomspace(n_lo, n_hi * max(EXTRAPOLATE), 200)
    ratios = sorted(st.points["ratio"].unique())
    for o in sorted(st.points["optimizer"].unique()):
        c, m = colours.get(o, NEUTRAL), marks.get(o, "o")
        _draw_speedups(ax_s, st, o, (c, m), law, grid, _line_ratio(st))
        p = st.points[st.points["optimizer"] == o]
        floor = law.E if law is not None else (st.floor or 0.0)
        ax_l.scatter(p["N"], p["loss"] - floor, color=c, marker=m, s=14, label=o)
        if law is not None:
            for j, r in enumerate(ratios):
                ng = np.geomspace(n_lo, n_hi, 60)
                ax_l.plot(ng, law.predict(o, ng, r * ng) - law.E, color=c, lw=1, ls=_STYLES[j % 4])
            lp = LawPoints.make(list(p["optimizer"]), p["N"], p["D"], p["loss"])
            res = np.log(law.predict(o, lp.N, lp.D)) - np.log(lp.loss)
            ax_r.scatter(p["N"], res, color=c, marker=m, s=14)
    _finish_axes(fig, axes, st, grid[-1], ratios, colours)
    return fig


#: Line styles of the law's curves, one per tokens-per-parameter ratio.
_STYLES = ["-", "--", ":", "-."]


def _draw_speedups(ax, st, o: str, look: tuple, law, grid: np.ndarray, r: float) -> None:
    """Optimizer ``o``'s measured speed-ups (bounds as triangles) and, with a law, its speed-up at
    ratio ``r`` over ``grid`` (dashed past the largest rung, open markers at :data:`EXTRAPOLATE`);
    ``look`` is ``(colour, marker)``."""
    c, m = look
    n_hi = st.points["N"].max()
    sp = st.speedups[st.speedups["optimizer"] == o] if not st.speedups.empty else st.speedups
    for b, mk in (("=", m), (">", "^"), ("<", "v")):
        q = sp[sp["bound"] == b] if len(sp) else sp
        if len(q):
            ax.errorbar(q["N"], q["speedup"], yerr=[q["speedup"] - q["low"], q["high"] - q["speedup"]],
                        fmt=mk, color=c, ms=5, capsize=2, lw=1, label=o if b == "=" else None)
    if law is not None and o != st.baseline:
        inside, beyond = grid[grid <= n_hi], grid[grid >= n_hi]
        ax.plot(inside, law_speedup(law, o, inside, r), color=c, lw=1)
        ax.plot(beyond, law_speedup(law, o, beyond, r), color=c, lw=1, ls="--")
        ks = np.array(EXTRAPOLATE) * n_hi
        ax.plot(ks, law_speedup(law, o, ks, r), ls="none", marker=m, mfc="none", color=c, ms=6)


def _finish_axes(fig, axes, st, n_end: float, ratios: list, colours: dict) -> None:
    """The three panels' scales, shading, labels and the figure's legend."""
    from matplotlib.lines import Line2D

    from reports.style import legend, log_count_x

    ax_s, ax_l, ax_r = axes.ravel()
    n_hi = st.points["N"].max()
    ax_s.set_yscale("log")
    ax_s.set_ylim(*_speedup_limits(st))
    ax_s.axvspan(n_hi, n_end, color="0.92", zorder=0)
    ax_s.text(n_hi * 1.15, 0.98, "extrapolation", transform=ax_s.get_xaxis_transform(), va="top",
              fontsize=7, color=NEUTRAL)
    ax_s.axhline(1.0, color=NEUTRAL, lw=0.8)
    ax_r.axhline(0.0, color=NEUTRAL, lw=0.8)
    for ax in axes.ravel():
        log_count_x(ax)  # 10k / 20k / 50k: a ladder spanning about a decade showed one tick, 10^4
        ax.set_xlabel("parameters N")
    ax_l.set_yscale("log")
    ax_s.set_ylabel(f"speed-up over {st.baseline}")
    ax_l.set_ylabel("valid loss − E (nats)")  # longer labels overran the panel's height
    ax_r.set_ylabel("residual log L̂ − log L")
    extra = [Line2D([], [], color=NEUTRAL, ls=_STYLES[j % 4], label=f"law, {r:g} tokens/param")
             for j, r in enumerate(ratios)]
    extra.append(Line2D([], [], color=NEUTRAL, ls="--", marker="o", mfc="none",
                        label="law past the largest rung (extrapolation)"))
    legend(fig, {o: c for o, c in colours.items() if o in set(st.points["optimizer"])}, extra=extra)

