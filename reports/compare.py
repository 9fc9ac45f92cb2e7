"""``--baseline``: compare two sweeps of the same config and flag regressions beyond run-to-run spread.

Both sweeps are tidy frames (:mod:`reports.frame`). Configurations are matched by ``config_id``
(a hash of the optimizer, schedule and their hyperparameters) within a task; seeds are the
run-to-run repetitions. Rules (a flag is ``regression``, ``improvement``, ``ok`` or ``n/a``):

* **throughput** per (task, optimizer): the interval [p10, p90] of step time (widened to the
  min/max of the per-trial medians when trials were timed separately) of the current sweep lies
  entirely above the baseline's → regression (entirely below → improvement).
* **final metric** per configuration: Welch's t-test at 95% on the objective's final **validation**
  metric (``final/valid_*``) across finished seeds (needs ≥ 2 seeds on both sides); worse beyond the
  interval → regression. Like every selection and ranking, the comparison never reads the test
  split.
* **time to target** per configuration: the same test on ``convergence/seconds_to_target`` over the
  seeds that reached it; also a regression when the fraction of seeds that reached the target falls
  below one half while the baseline's was at least one half.
* **stability** per configuration: seeds diverged or failed now where the baseline had none.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from harness.core.names import (
    M_SECONDS_TO_TARGET,
    M_STEP_MS,
    M_STEP_MS_P10,
    M_STEP_MS_P90,
    M_STEPS_TO_TARGET,
)
from reports.frame import summaries, trusted
from reports.objectives import objective

COLUMNS = ["check", "task", "optimizer", "config", "metric", "baseline", "current", "change", "flag", "rule"]
#: Two-sided confidence level of the seed-spread tests.
LEVEL = 0.95


def _welch(cur: np.ndarray, base: np.ndarray) -> tuple[float, float]:
    """(difference of means current − baseline, half-width of its Welch CI at LEVEL)."""
    from scipy import stats

    nc, nb = len(cur), len(base)
    vc, vb = cur.var(ddof=1) / nc, base.var(ddof=1) / nb
    diff = float(cur.mean() - base.mean())
    se2 = vc + vb
    if se2 == 0.0:
        return diff, 0.0
    df = se2**2 / ((vc**2 / (nc - 1) if nc > 1 else 0) + (vb**2 / (nb - 1) if nb > 1 else 0))
    return diff, float(stats.t.ppf(0.5 + LEVEL / 2, df) * math.sqrt(se2))


def _fmt(x: np.ndarray, unit: str = "") -> str:
    if len(x) == 0:
        return "—"
    if len(x) == 1:
        return f"{x[0]:.4g}{unit} (n=1)"
    return f"{x.mean():.4g}{unit} (sd {x.std(ddof=1):.2g}, n={len(x)})"


def _seed_test(check: str, metric: str, mode: str, cur: np.ndarray, base: np.ndarray, unit: str = "") -> dict:
    row = {
        "check": check,
        "metric": metric,
        "baseline": _fmt(base, unit),
        "current": _fmt(cur, unit),
        "rule": f"Welch t-test, {LEVEL:.0%}, across seeds",
    }
    if len(cur) < 2 or len(base) < 2:
        row.update(change="—", flag="n/a", rule="needs ≥ 2 seeds on both sides")
        return row
    diff, half = _welch(cur, base)
    rel = diff / abs(base.mean()) if base.mean() != 0 else math.nan
    row["change"] = f"{diff:+.3g}{unit}" + (f" ({rel:+.1%})" if math.isfinite(rel) else "") + f" ± {half:.2g}"
    worse = diff < 0 if mode == "max" else diff > 0
    beyond = abs(diff) > half
    row["flag"] = ("regression" if worse else "improvement") if beyond else "ok"
    return row


def compare(current: pd.DataFrame, baseline: pd.DataFrame) -> pd.DataFrame:
    """Rows of checks (columns :data:`COLUMNS`), regressions first; see the module docstring."""
    cur_s, base_s = summaries(current), summaries(baseline)
    obj = objective(current)
    rows = _throughput_rows(cur_s, base_s)
    keys = ["task", "optimizer", "config_id"]  # convergence, per configuration
    cg = dict(tuple(cur_s.groupby(keys)))
    bg = dict(tuple(base_s.groupby(keys)))
    for key in sorted(set(cg) | set(bg)):
        rows += _config_rows(key, cg.get(key), bg.get(key), obj)
    out = pd.DataFrame(rows, columns=COLUMNS)
    order = {"regression": 0, "improvement": 1, "ok": 2, "n/a": 3}
    return out.sort_values(
        ["flag", "check", "task", "optimizer", "config"],
        key=lambda s: s.map(order) if s.name == "flag" else s,
        kind="stable",
    ).reset_index(drop=True)


def _perf(s: pd.DataFrame) -> pd.DataFrame:
    """Step time per (task, optimizer): median ``p50`` and the interval ``lo``-``hi`` (the median
    p10 and p90, widened to the per-trial medians' min and max); suspect step times left out."""
    s = s[s[M_STEP_MS].notna() & trusted(s)]  # a suspect step time compares nothing
    g = s.groupby(["task", "optimizer"])
    return pd.DataFrame(
        {
            "p50": g[M_STEP_MS].median(),
            "lo": np.minimum(g[M_STEP_MS_P10].median().fillna(np.inf), g[M_STEP_MS].min()),
            "hi": np.maximum(g[M_STEP_MS_P90].median().fillna(-np.inf), g[M_STEP_MS].max()),
        }
    )


def _throughput_rows(cur_s: pd.DataFrame, base_s: pd.DataFrame) -> list[dict]:
    """The throughput checks, one per (task, optimizer) of either sweep."""
    pc, pb = _perf(cur_s), _perf(base_s)
    rows = []
    for key in sorted(set(pc.index) | set(pb.index)):
        row = {
            "check": "throughput",
            "task": key[0],
            "optimizer": key[1],
            "config": "(all)",
            "metric": "step time (ms)",
            "rule": "[p10, p90] intervals do not overlap",
        }
        if key not in pc.index or key not in pb.index:
            row.update(
                baseline="—" if key not in pb.index else f"{pb.loc[key, 'p50']:.4g} ms",
                current="—" if key not in pc.index else f"{pc.loc[key, 'p50']:.4g} ms",
                change="—",
                flag="n/a",
                rule="measured in one sweep only",
            )
        else:
            c, b = pc.loc[key], pb.loc[key]
            row["baseline"] = f"{b.p50:.4g} ms [{b.lo:.4g}, {b.hi:.4g}]"
            row["current"] = f"{c.p50:.4g} ms [{c.lo:.4g}, {c.hi:.4g}]"
            row["change"] = f"{c.p50 / b.p50 - 1:+.1%}"
            row["flag"] = "regression" if c.lo > b.hi else "improvement" if c.hi < b.lo else "ok"
        rows.append(row)
    return rows


def _config_rows(key: tuple, c: pd.DataFrame | None, b: pd.DataFrame | None, obj) -> list[dict]:
    """The checks of one configuration ``key = (task, optimizer, config_id)``: its trials now
    (``c``) and in the baseline (``b``), either ``None`` when absent there."""
    ident = {"task": key[0], "optimizer": key[1], "config": (c if c is not None else b)["config"].iloc[0]}
    if c is None or b is None:
        return [{**ident, "check": "configuration", "metric": "—",
                 "baseline": "absent" if b is None else "present",
                 "current": "absent" if c is None else "present",
                 "change": "—", "flag": "n/a", "rule": "configuration in one sweep only"}]
    cf, bf = c[c["status"] == "finished"], b[b["status"] == "finished"]
    rows = [{**ident, **_seed_test("final metric", obj.label, obj.mode,
                                   cf[obj.final].dropna().to_numpy(float),
                                   bf[obj.final].dropna().to_numpy(float))}]
    if obj.target_metric is not None:
        rows.append({**ident, **_time_to_target(c, b, cf, bf)})
    nbad_c = int((c["status"] != "finished").sum())
    nbad_b = int((b["status"] != "finished").sum())
    flag = ("regression" if nbad_c > 0 and nbad_b == 0
            else "improvement" if nbad_b > 0 and nbad_c == 0 else "ok")
    rows.append({**ident, "check": "stability", "metric": "diverged or failed seeds",
                 "baseline": f"{nbad_b}/{len(b)}", "current": f"{nbad_c}/{len(c)}",
                 "change": f"{nbad_c - nbad_b:+d}", "flag": flag,
                 "rule": "diverged/failed now, none in the baseline"})
    return rows


def _time_to_target(c: pd.DataFrame, b: pd.DataFrame, cf: pd.DataFrame, bf: pd.DataFrame) -> dict:
    """The time-to-target check of one configuration (``cf``, ``bf``: its finished trials)."""
    ct = cf[M_SECONDS_TO_TARGET].dropna().to_numpy(float)
    bt = bf[M_SECONDS_TO_TARGET].dropna().to_numpy(float)
    row = _seed_test("time to target", "seconds to target", "min", ct, bt, " s")
    rc = int((cf[M_SECONDS_TO_TARGET].notna() | cf[M_STEPS_TO_TARGET].notna()).sum())
    rb = int((bf[M_SECONDS_TO_TARGET].notna() | bf[M_STEPS_TO_TARGET].notna()).sum())
    row["baseline"] += f"; reached {rb}/{len(b)}"
    row["current"] += f"; reached {rc}/{len(c)}"
    if rb >= 0.5 * len(b) and rb > 0 and rc < 0.5 * len(c):
        row.update(flag="regression", rule="target reached by fewer than half of the seeds")
    elif row["flag"] == "n/a" and (rc, rb) == (0, 0):
        row["rule"] = "no seed reached the target in either sweep"
    return row
