"""Equal-token comparison beside time to target: each optimizer's final validation loss at its budget.

The published comparisons of language-model optimizers report the final validation loss at equal
tokens (the same training budget for every optimizer), across budgets. :func:`equal_token_table`
gives it per task (a task is one model, dataset and budget: ``train.steps`` is part of it, and a
ladder's rung and tokens-per-parameter budget too) and optimizer, for the configuration the
leaderboard selected (:func:`reports.selection.best_configs`):

- ``steps`` (the budget) and, for a language model, ``tokens`` = steps × tokens per step
  (:func:`reports.frame.tokens_per_step`);
- ``valid_loss_{mean,lo,hi}`` over its finished seeds (interval: min–max under 5 seeds, else a 95%
  bootstrap of the mean, :func:`reports.protocol.seed_interval`); for a language model
  ``valid_perplexity_*`` (exp of each seed's loss) and, where bytes per token are known,
  ``valid_bits_per_byte_*``;
- ``baseline`` (:func:`reports.stats.baseline_optimizer`) and ``diff_{mean,lo,hi}``, ``n_pairs``:
  the paired difference of final validation loss to the baseline's selected configuration, seed by
  seed (this − baseline: negative is lower loss), with the same kind of interval.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from harness.core.names import M_FINAL_LOSS, PARAM_STEPS
from reports.frame import FINAL_BPB, summaries, tokens_per_step, tuning_rows
from reports.leaderboard import column_digits, count_text, format_interval
from reports.protocol import seed_interval
from reports.selection import best_configs
from reports.stats import baseline_optimizer

__all__ = ["EQUAL_TOKEN_COLUMNS", "equal_token_rows", "equal_token_table"]

#: :func:`equal_token_table`'s columns.
EQUAL_TOKEN_COLUMNS = (
    "task", "optimizer", "config", "steps", "tokens", "n", "valid_loss_mean", "valid_loss_lo",
    "valid_loss_hi", "valid_perplexity_mean", "valid_perplexity_lo", "valid_perplexity_hi",
    "valid_bits_per_byte_mean", "valid_bits_per_byte_lo", "valid_bits_per_byte_hi", "interval",
    "baseline", "diff_mean", "diff_lo", "diff_hi", "n_pairs",
)
def equal_token_table(frame: pd.DataFrame) -> pd.DataFrame:
    """The final validation loss of each optimizer's selected configuration at its budget (module
    docstring), one row per (task, optimizer) in the leaderboard's order.

    Args:
      frame: a sweep's tidy frame (:mod:`reports.frame`).
    Returns:
      a DataFrame with :data:`EQUAL_TOKEN_COLUMNS` (``NaN`` where a number does not apply: no
      tokens, perplexity or bits per byte for a classifier; no difference for the baseline itself).
    """
    best = best_configs(frame)
    s = tuning_rows(summaries(frame))
    if best.empty or s.empty:
        return pd.DataFrame(columns=list(EQUAL_TOKEN_COLUMNS))
    s = s.assign(_tokens_per_step=s["tokens_per_step"] if "tokens_per_step" in s else tokens_per_step(s))
    fin = s[s["status"] == "finished"]
    base = baseline_optimizer(frame)
    chosen = {(b.task, b.optimizer): b.config_id for b in best.itertuples()}
    rows = []
    for b in best.itertuples():
        g = fin[(fin["task"] == b.task) & (fin["optimizer"] == b.optimizer)
                & (fin["config_id"] == b.config_id)]
        loss = g.set_index("seed")[M_FINAL_LOSS].astype("float64")
        lm = bool(g["language_model"].fillna(False).astype(bool).any()) if "language_model" in g else False
        row = {"task": b.task, "optimizer": b.optimizer, "config": b.config,
               "steps": _first(pd.to_numeric(g.get(f"params.{PARAM_STEPS}"), errors="coerce")),
               "tokens": math.nan}
        row["tokens"] = row["steps"] * _first(g["_tokens_per_step"]) if lm else math.nan
        mean, lo, hi, n, how = seed_interval(loss.tolist())
        row.update(n=n, valid_loss_mean=mean, valid_loss_lo=lo, valid_loss_hi=hi, interval=how)
        ppl = seed_interval(np.exp(np.minimum(loss.to_numpy(), 700.0)).tolist()) if lm else (math.nan,) * 3
        bpb = seed_interval(g[FINAL_BPB].astype("float64").tolist()) if lm and FINAL_BPB in g \
            else (math.nan,) * 3
        row.update(valid_perplexity_mean=ppl[0], valid_perplexity_lo=ppl[1], valid_perplexity_hi=ppl[2],
                   valid_bits_per_byte_mean=bpb[0], valid_bits_per_byte_lo=bpb[1],
                   valid_bits_per_byte_hi=bpb[2])
        row.update(_paired(fin, b.task, base, chosen.get((b.task, base)), loss, b.optimizer == base))
        rows.append(row)
    out = pd.DataFrame(rows, columns=list(EQUAL_TOKEN_COLUMNS))
    out["n"] = out["n"].astype("int64")
    out["n_pairs"] = out["n_pairs"].astype("int64")
    return out


def _paired(fin: pd.DataFrame, task: str, base: str | None, base_config: str | None, loss: pd.Series,
            is_base: bool) -> dict:
    """``baseline``, ``diff_{mean,lo,hi}``, ``n_pairs``: ``loss`` (per seed) less the baseline's
    selected configuration's final validation loss, over the seeds both finished."""
    out = {"baseline": base or "", "diff_mean": math.nan, "diff_lo": math.nan, "diff_hi": math.nan,
           "n_pairs": 0}
    if base is None or base_config is None or is_base:
        return out
    g = fin[(fin["task"] == task) & (fin["optimizer"] == base) & (fin["config_id"] == base_config)]
    b = g.set_index("seed")[M_FINAL_LOSS].astype("float64")
    both = pd.concat([loss.rename("a"), b.rename("b")], axis=1, join="inner").dropna()
    mean, lo, hi, n, _how = seed_interval((both["a"] - both["b"]).tolist())
    out.update(diff_mean=mean, diff_lo=lo, diff_hi=hi, n_pairs=n)
    return out


def _first(x) -> float:
    """The first finite value of ``x`` (a Series or ``None``), else ``NaN``."""
    if x is None:
        return math.nan
    v = pd.to_numeric(pd.Series(x), errors="coerce").dropna()
    return float(v.iloc[0]) if len(v) else math.nan


def equal_token_rows(frame: pd.DataFrame, labels: dict[str, str] | None = None) -> list[dict]:
    """:func:`equal_token_table` as the report's and the summary's cells (text).

    Args:
      frame: a sweep's tidy frame.
      labels: task → its short label (``None``: the task's name).
    Returns:
      one dict per row: ``task, optimizer, config, steps, tokens, loss, perplexity, bits_per_byte,
      diff`` (``loss`` as ``mean [lo, hi]``; ``diff`` as ``+0.0123 [lo, hi] vs adam``, ``baseline``
      on the baseline's own row, ``—`` without paired seeds).
    """
    t = equal_token_table(frame)
    labels = labels or {}
    rows = []
    cols = ("valid_loss", "valid_perplexity", "valid_bits_per_byte", "diff")
    digits = {}  # (task, column) -> one number of decimals for the task's rows (column_digits)
    for task, g in t.groupby("task", sort=False):
        for c in cols:
            n = g["n_pairs"] if c == "diff" else g["n"]
            digits[task, c] = column_digits([(m, lo, hi, int(k), "") for m, lo, hi, k in
                                             zip(g[f"{c}_mean"], g[f"{c}_lo"], g[f"{c}_hi"], n, strict=True)
                                             if math.isfinite(m)])
    for r in t.itertuples(index=False):
        n = int(r.n)

        def cell(c, k=n, r=r):
            return format_interval(getattr(r, f"{c}_mean"), getattr(r, f"{c}_lo"), getattr(r, f"{c}_hi"), k,
                                   say_how=False, digits=digits[r.task, c])

        diff = ("baseline" if r.optimizer == r.baseline else "—" if not r.n_pairs else
                f"{'+' if r.diff_mean > 0 else ''}{cell('diff', int(r.n_pairs))} vs {r.baseline}")
        rows.append({
            "task": labels.get(r.task, r.task), "optimizer": r.optimizer, "config": r.config,
            "steps": count_text(r.steps), "tokens": count_text(r.tokens, tokens=True),
            "loss": cell("valid_loss"), "perplexity": cell("valid_perplexity"),
            "bits_per_byte": cell("valid_bits_per_byte"),
            "diff": diff.replace(" (1 seed)", "") if r.n_pairs == 1 else diff,
        })
    return rows
