"""The report's frame as tidy tables, one kind of row each, numbers as numbers
(:class:`reports.results.Results` serves them; ``docs/python-api.md`` lists every column).

- :func:`trials_table`: one row per trial: identity, hyperparameters (numeric where every value
  is a number), every summary metric under its MLflow name (``float64``), time to target on the
  report's clock, the run's environment.
- :func:`curves_table`: long format, one row per logged value: ``trial_id, task, optimizer,
  config, seed, split, metric, step, seconds, value``.
- :func:`leaderboard_table`: :func:`reports.leaderboard.leaderboard_numbers` as a
  :class:`Leaderboard`, whose ``to_latex()`` / ``to_markdown()`` write the table a paper prints.
- :func:`split_versions`: an optimizer with trials of several source versions becomes one
  optimizer per version (``my_adam@1a2b3c4d``), never averaged together.

Every table names a task by the report's short label (``task``: ``mlp · digits``) and keeps the
full name beside it (``task_name``: ``mlp / digits (width=64)``).
"""

from __future__ import annotations

import hashlib
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from harness.core import ladder as lt
from harness.core.names import (
    ENV_TAGS,
    M_SECONDS_TO_TARGET,
    M_STEPS_TO_TARGET,
    M_TEST_ACC,
    M_TEST_LOSS,
    M_TRAIN_LOSS,
    M_VALID_ACC,
    M_VALID_LOSS,
    M_WALL_S,
    SUMMARY_METRICS,
)
from reports.layout import task_labels
from reports.leaderboard import (
    STEPS_COL,
    TOKENS_COL,
    TTT_COL,
    count_text,
    format_interval,
    interval_words,
    leaderboard_numbers,
)

__all__ = ["CURVE_COLUMNS", "Leaderboard", "curves_table", "leaderboard_table", "split_versions",
           "trials_table", "with_task_labels"]

#: Identity columns of :func:`trials_table`, in order: (name, the frame column it copies, dtype).
TRIAL_ID_COLUMNS = (
    ("trial_id", "trial_id", "str"), ("run_id", "run_id", "str"), ("sweep_id", "sweep_id", "str"),
    ("parent_run_id", "parent_run_id", "str"), ("status", "status", "str"),
    ("run_status", "run_status", "str"), ("reason", "reason", "str"), ("task", "task", "str"),
    ("task_name", "task_name", "str"), ("model", "model", "str"), ("dataset", "dataset", "str"),
    ("optimizer", "optimizer", "str"), ("source_version", "source_hash", "str"),
    ("schedule", "schedule", "str"), ("seed", "seed", "Int64"), ("config", "config", "str"),
    ("config_id", "config_id", "str"), ("tuning", "tuning", "str"), ("batch_size", "batch_size", "Int64"),
    ("train_steps", "train_steps", "Int64"), ("target_metric", "target_metric", "str"),
    ("target_value", "target_value", "float64"), ("target_mode", "target_mode", "str"),
    ("protocol", "protocol", "str"), ("attempts", "attempts", "Int64"),
)
#: A ladder's columns (:data:`harness.core.ladder.TAGS`, as the frame holds them) and
#: their dtypes; only in a table with a ladder's trial.
LADDER_COLUMNS = ((lt.TAG_RUNG, "Int64"), (lt.TAG_SIZE, "str"), (lt.TAG_PARAMS, "Int64"),
                  (lt.TAG_RATIO, "float64"), (lt.TAG_TOKENS, "Int64"), (lt.TAG_FLOPS, "float64"),
                  (lt.TAG_BASELINE, "str"), (lt.TAG_TRANSFER, "str"))
#: Hyperparameter columns come from these params (``optimizer.step_size``, ``model.width``, ...).
HPARAM_PREFIXES = ("model.", "optimizer.", "schedule.", "dataset.", "augment.")
#: :func:`curves_table`'s columns.
CURVE_COLUMNS = ["trial_id", "task", "optimizer", "config", "seed", "split", "metric", "step", "seconds",
                 "value"]
#: (split, metric, frame column) of the curves; the test split is one value per trial.
CURVES = (("train", "loss", M_TRAIN_LOSS), ("valid", "loss", M_VALID_LOSS),
          ("valid", "accuracy", M_VALID_ACC))
TESTS = (("test", "loss", M_TEST_LOSS), ("test", "accuracy", M_TEST_ACC))


def with_task_labels(frame: pd.DataFrame, table: pd.DataFrame) -> pd.DataFrame:
    """``table`` (with the frame's full ``task`` names) with ``task`` the report's short label
    (:func:`reports.layout.task_labels` of ``frame``) and ``task_name`` the full name after it."""
    labels = task_labels(frame) if len(frame) else {}
    out = table.copy()
    out.insert(out.columns.get_loc("task") + 1, "task_name", out["task"].astype(str))
    out["task"] = out["task_name"].map(labels).fillna(out["task_name"]).astype(str)
    return out


def split_versions(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` where each optimizer whose trials ran more than one version of its source
    (``source_hash``: a user's optimizer whose code changed) is one optimizer per version:
    ``optimizer`` ``NAME@HASH8``, its ``config`` label likewise and its ``config_id`` made apart,
    so that no selection, interval or rank mixes two versions. Other rows are unchanged."""
    if "source_hash" not in frame or frame.empty:
        return frame
    s = frame[frame["row"] == "summary"] if "row" in frame else frame
    versions = s.assign(v=s["source_hash"].fillna("")).groupby("optimizer")["v"].nunique()
    several = set(versions[versions > 1].index)
    if not several:
        return frame
    out = frame.copy()
    out.attrs = dict(frame.attrs)
    rows = out.index[out["optimizer"].isin(several)]
    opts, hashes = out.loc[rows, "optimizer"].tolist(), out.loc[rows, "source_hash"].tolist()
    confs, ids = out.loc[rows, "config"].astype(str).tolist(), out.loc[rows, "config_id"].tolist()
    names = [f"{o}@{h[:8] if isinstance(h, str) and h else 'builtin'}"
             for o, h in zip(opts, hashes, strict=True)]
    out.loc[rows, "optimizer"] = names
    out.loc[rows, "config"] = [n + c[len(o):] if c.startswith(o) else f"{n} {c}"
                               for n, o, c in zip(names, opts, confs, strict=True)]
    out.loc[rows, "config_id"] = [hashlib.sha256(f"{i}|{h}".encode()).hexdigest()[:12]
                                  for i, h in zip(ids, hashes, strict=True)]
    return out


def _as(series: pd.Series, dtype: str) -> pd.Series:
    if dtype == "str":
        return series.astype(object).where(series.notna(), None).astype("str")
    if dtype == "Int64":
        return pd.array([None if pd.isna(v) else int(v) for v in series], dtype="Int64")
    return pd.to_numeric(series, errors="coerce").astype(dtype)


def _hparam(series: pd.Series) -> pd.Series:
    """A param column (text, as MLflow holds it) as ``Int64`` when every value given is an integer
    (``"64"``), ``float64`` when every value is a number (``"0.1"``, ``"1e-3"``), else as text
    (``True``/``False``, names, lists)."""
    given = series.dropna().astype(str)
    if len(given) and given.str.fullmatch(r"[+-]?\d+").all():
        return _as(series, "Int64")
    nums = pd.to_numeric(given, errors="coerce")
    if len(given) and nums.notna().all() and not given.isin(["True", "False"]).any():
        return pd.to_numeric(series, errors="coerce").astype("float64")
    return _as(series, "str")


def trials_table(raw: pd.DataFrame, ranked: pd.DataFrame, clock: str) -> pd.DataFrame:
    """One row per trial of ``raw`` (the tidy frame as loaded: its ``summary`` rows), in its order;
    ``ranked`` is the same frame on the report's ``clock`` (:func:`reports.report_clock.use_clock`), whose
    ``convergence/seconds_to_target`` becomes the column ``seconds_to_target``.

    Columns: :data:`TRIAL_ID_COLUMNS` (``task`` the short label, ``task_name`` the full one,
    ``source_version`` the ``optimizer.source_hash`` of a user's optimizer); one column per
    hyperparameter param (``optimizer.step_size``: ``float64`` where every value is a number, else
    text); ``reached`` (``bool``); ``tokens_per_step`` and ``tokens_to_target`` (``float64``, a
    language model's; ``NaN`` otherwise); every metric of :data:`harness.core.names.SUMMARY_METRICS` under
    its MLflow name (``float64``, ``NaN`` when not logged: ``convergence/seconds_to_target`` the
    measured wall-clock, ``convergence/modeled_seconds_to_target`` and
    ``convergence/cost_seconds_to_target`` the other clocks); ``clock`` and ``seconds_to_target``
    (on that clock, what the leaderboard ranks); ``perf_suspect``; a ladder's columns
    (:data:`LADDER_COLUMNS`, only when the frame has them: ``ladder.rung``, ``ladder.params``,
    ``ladder.tokens``, ...); the environment tags; ``start_time``, ``end_time``
    (``datetime64[ms, UTC]``).
    """
    s = raw[raw["row"] == "summary"].reset_index(drop=True)
    r = ranked[ranked["row"] == "summary"].set_index("trial_id")
    s = with_task_labels(s, s)  # the summary rows hold every task
    out = pd.DataFrame(index=s.index)
    for name, col, dtype in TRIAL_ID_COLUMNS:
        out[name] = _as(s[col] if col in s else pd.Series([None] * len(s), index=s.index), dtype)
    for c in sorted(c for c in s.columns if c.startswith("params.")):
        name = c[len("params."):]
        if name.startswith(HPARAM_PREFIXES):
            out[name] = _hparam(s[c])
    out["reached"] = s[M_STEPS_TO_TARGET].notna().to_numpy() if M_STEPS_TO_TARGET in s else False
    # a language model's tokens per step and tokens seen to the target (NaN for any other task)
    per = s["tokens_per_step"].astype("float64") if "tokens_per_step" in s \
        else pd.Series(np.nan, index=s.index)
    out["tokens_per_step"] = per.to_numpy()
    out["tokens_to_target"] = (per * s[M_STEPS_TO_TARGET].astype("float64")).to_numpy() \
        if M_STEPS_TO_TARGET in s else np.nan
    for m in SUMMARY_METRICS:
        out[m] = _as(s[m], "float64") if m in s else np.nan
    out["clock"] = clock
    secs = r[M_SECONDS_TO_TARGET] if M_SECONDS_TO_TARGET in r else pd.Series(dtype="float64")
    out["seconds_to_target"] = s["trial_id"].map(secs).astype("float64").to_numpy()
    out["perf_suspect"] = _as(s["perf_suspect"], "str") if "perf_suspect" in s else None
    for t, dtype in LADDER_COLUMNS:  # a ladder's trials: its rung, N, D, ...
        if t in s:
            out[t] = _as(s[t], dtype)
    for t in ENV_TAGS:
        out[t] = _as(s[t], "str") if t in s else None
    for t in ("start_time", "end_time"):
        out[t] = pd.to_datetime(s[t], utc=True).astype("datetime64[ms, UTC]")
    return out


def curves_table(raw: pd.DataFrame) -> pd.DataFrame:
    """Every logged curve value of ``raw`` (the tidy frame as loaded), one row each
    (:data:`CURVE_COLUMNS`): ``split`` ``train`` / ``valid`` / ``test``, ``metric`` ``loss`` /
    ``accuracy``, ``step`` (``int64``), ``seconds`` (``float64``: the trial's ``time/wall_s``
    logged at that step, seconds since training started, compilation excluded; ``NaN`` at a train
    step between evaluations, where no clock is logged), ``value`` (``float64``, exactly as MLflow
    holds it). The test split is one value per trial, at its last evaluation's step. Rows are
    ordered by trial (the frame's order), split, metric, step."""
    keep = ["trial_id", "task", "optimizer", "config", "seed", "step",
            *(col for col in (M_WALL_S, *(k for _s, _m, k in CURVES)) if col in raw)]
    c = raw.loc[raw["row"] == "curve", keep]  # the columns first: the frame is 100 columns wide
    parts = []
    for split, metric, col in CURVES:
        if col not in c:
            continue
        g = c[c[col].notna()]
        parts.append(_curve_part(g, (split, metric, col), g["step"].to_numpy(dtype="int64"),
                                 g[M_WALL_S].to_numpy(dtype="float64") if M_WALL_S in g else np.nan))
    tests = [k for _s, _m, k in TESTS if k in raw]
    s = raw.loc[raw["row"] == "summary", [*keep[:5], "model", "dataset", *tests]]
    labels = task_labels(s) if len(s) else {}
    last = c[c[M_VALID_LOSS].notna()].groupby("trial_id")[["step", M_WALL_S]].last() \
        if len(c) and M_VALID_LOSS in c else pd.DataFrame(columns=["step", M_WALL_S])
    for split, metric, col in TESTS:
        if col not in s:
            continue
        g = s[s[col].notna() & s["trial_id"].isin(last.index)]
        at = last.reindex(g["trial_id"])
        parts.append(_curve_part(g, (split, metric, col), at["step"].to_numpy(dtype="int64"),
                                 at[M_WALL_S].to_numpy(dtype="float64")))
    if not parts:
        return _empty_curves()
    out = pd.concat(parts, ignore_index=True)
    first = {t: i for i, t in enumerate(dict.fromkeys(raw["trial_id"]))}
    split_rank = {"train": 0, "valid": 1, "test": 2}
    out = out.assign(_t=out["trial_id"].map(first), _s=out["split"].map(split_rank)).sort_values(
        ["_t", "_s", "metric", "step"], kind="stable").drop(columns=["_t", "_s", "_order"])
    out["task"] = out["task"].map(labels).fillna(out["task"])
    for col in ("trial_id", "task", "optimizer", "config", "split", "metric"):
        out[col] = out[col].astype("str")
    out["seed"] = pd.array(out["seed"], dtype="Int64")
    return out.reset_index(drop=True)[CURVE_COLUMNS]


def _curve_part(g: pd.DataFrame, what: tuple, step, seconds) -> pd.DataFrame:
    """:func:`curves_table`'s rows of one ``what = (split, metric, column)`` from the rows ``g``."""
    split, metric, col = what
    return pd.DataFrame({
        "trial_id": g["trial_id"].to_numpy(), "task": g["task"].to_numpy(),
        "optimizer": g["optimizer"].to_numpy(), "config": g["config"].to_numpy(),
        "seed": g["seed"].to_numpy(), "split": split, "metric": metric, "step": step, "seconds": seconds,
        "value": g[col].to_numpy(dtype="float64"), "_order": g.index.to_numpy()})


def _empty_curves() -> pd.DataFrame:
    dtypes = {"seed": "Int64", "step": "int64", "seconds": "float64", "value": "float64"}
    return pd.DataFrame({c: pd.Series(dtype=dtypes.get(c, "str")) for c in CURVE_COLUMNS})


class Leaderboard(pd.DataFrame):
    """The leaderboard's numbers (:func:`reports.leaderboard.leaderboard_numbers`'s columns, ``task``
    the report's short label and ``task_name`` the full one), one row per (task, optimizer) in the
    report's order. A pandas DataFrame in every way but two: :meth:`to_latex` and
    :meth:`to_markdown` write the formatted table of :meth:`table` (what a paper prints, through
    pandas' own writers); ``pd.DataFrame(board).to_latex()`` writes the raw numbers. Any operation
    that makes a new frame (a selection, a copy) gives a plain ``pandas.DataFrame``."""

    @property
    def _constructor(self):
        return pd.DataFrame

    def table(self) -> pd.DataFrame:
        """The formatted table: ``Task`` (with several tasks), ``Rank`` (``"1="`` for a shared
        rank), ``Optimizer``, ``Configuration`` (unless every row's is its optimizer's name),
        ``Test <metric>`` (``mean [lo, hi]`` with the digits
        of two significant digits of the widest interval, ``mean (1 seed)``; ``—`` without a value),
        ``Time to target (s, median)`` (when the sweep has a target: the median over the seeds that
        reached it, ``k/n reached``; ``not reached``), ``Seeds`` (finished / run). :meth:`caption`
        says what the intervals are."""
        df = pd.DataFrame(self)
        if df.empty:
            return pd.DataFrame(columns=["Rank", "Optimizer", "Configuration"])
        metrics = df["test_metric"].unique()
        test_col = f"Test {metrics[0].split('/', 1)[1]}" if len(metrics) == 1 else "Test metric"
        digits = _column_digits(df, "test")
        tdigits = _column_digits(df, "seconds_to_target", "median")
        lm = "valid_perplexity_mean" in df and df["valid_perplexity_mean"].notna().any()
        pdigits = _column_digits(df, "valid_perplexity", n_col="test_n") if lm else None
        rows = []
        for r in df.itertuples(index=False):
            row: dict[str, Any] = {}
            if df["task"].nunique() > 1:
                row["Task"] = r.task
            row["Rank"] = r.rank_label
            row["Optimizer"] = r.optimizer
            if (df["config"] != df["optimizer"]).any():  # else each row's configuration is its name
                row["Configuration"] = r.config
            body = format_interval(r.test_mean, r.test_lo, r.test_hi, _n(r.test_n), say_how=False,
                                   digits=digits)
            mixed = len(metrics) > 1 and body != "—"
            row[test_col] = f"{r.test_metric.split('/', 1)[1]} {body}" if mixed else body
            if self.attrs.get("has_target", False):
                n = _n(r.seconds_to_target_n)
                secs = format_interval(r.seconds_to_target_median, r.seconds_to_target_lo,
                                       r.seconds_to_target_hi, n, say_how=False, digits=tdigits)
                row[TTT_COL] = (f"{secs} ({_n(r.n_reached)}/{_n(r.n_seeds)} reached)" if n
                                else f"not reached (0/{_n(r.n_seeds)})")
                if lm:  # a language model: the steps and tokens seen to the target beside the time
                    row[STEPS_COL] = count_text(r.steps_to_target_median)
                    row[TOKENS_COL] = count_text(r.tokens_to_target_median, tokens=True)
            if lm:
                row["Validation perplexity"] = format_interval(
                    r.valid_perplexity_mean, r.valid_perplexity_lo, r.valid_perplexity_hi,
                    _n(r.test_n), say_how=False, digits=pdigits)
            row["Seeds"] = f"{_n(r.n_finished)}/{_n(r.n_seeds)}"
            rows.append(row)
        return pd.DataFrame(rows)

    def caption(self) -> str:
        """What the table's intervals are: ``mean [lo, hi] across seeds: min–max of 2 seeds (< 5)``
        (or ``95% bootstrap, 6 seeds``), the selection, and what a shared rank means."""
        df = pd.DataFrame(self)
        kinds = sorted({(i, _n(n)) for i, n in zip(df["interval"], df["test_n"], strict=True) if i})
        how = "; ".join(interval_words(i, n) for i, n in kinds) or "one seed"
        ttt = (" Time to target: the median over the seeds that reached it [lo, hi]."
               if self.attrs.get("has_target", False) else "")
        return (f"Each optimizer's best configuration, selected on validation, reported on test as "
                f"mean [lo, hi] across seeds; interval: {how}.{ttt} A rank followed by = is shared: the "
                f"rows are not told apart across seeds, or not at both ends of the step cost's 95% interval.")

    def to_latex(self, buf=None, *, caption: str | None = None, label: str | None = None, **kwargs):
        """:meth:`table` through ``pandas.DataFrame.to_latex`` (``index=False``, special characters
        escaped, ``caption`` default :meth:`caption`); ``kwargs`` go to pandas. ``<`` and ``>`` are
        written ``\\textless{}`` / ``\\textgreater{}`` (pandas leaves them, and pdflatex's default
        font encoding prints ``<`` as "¡"). Returns the text, or writes it to ``buf`` (a path or a
        file) and returns ``None``."""
        kwargs.setdefault("index", False)
        kwargs.setdefault("escape", True)
        text = self.table().to_latex(None, caption=self.caption() if caption is None else caption,
                                     label=label, **kwargs)
        text = text.replace("<", "\\textless{}").replace(">", "\\textgreater{}")
        if buf is None:
            return text
        if hasattr(buf, "write"):
            buf.write(text)
        else:
            Path(buf).write_text(text, encoding="utf-8")
        return None

    def to_markdown(self, buf=None, **kwargs):
        """:meth:`table` through ``pandas.DataFrame.to_markdown`` (``tabulate``; ``index=False``),
        every cell through :func:`reports.safe_cells.markdown_cell` (``|``, line breaks, HTML escaped),
        ``kwargs`` to pandas. Returns the text, or writes it to ``buf`` and returns ``None``."""
        from reports.safe_cells import markdown_table

        kwargs.setdefault("index", False)
        return markdown_table(self.table()).to_markdown(buf, **kwargs)


def _n(v) -> int:
    return 0 if v is None or pd.isna(v) else int(v)


def _column_digits(df: pd.DataFrame, prefix: str, center: str = "mean",
                   n_col: str | None = None) -> int | None:
    """One number of decimals for a column (:func:`reports.leaderboard.column_digits`'s rule);
    ``center``: the statistic's column suffix (``mean``; ``median`` for time to target); ``n_col``:
    the count of values behind each cell (default ``<prefix>_n``)."""
    from reports.leaderboard import column_digits

    n_col = n_col or f"{prefix}_n"
    cells = [(m, lo, hi, _n(n), "") for m, lo, hi, n in zip(df[f"{prefix}_{center}"], df[f"{prefix}_lo"],
                                                            df[f"{prefix}_hi"], df[n_col], strict=True)
             if isinstance(m, float) and math.isfinite(m)]
    return column_digits(cells)


def leaderboard_table(ranked: pd.DataFrame, has_target: bool) -> Leaderboard:
    """:func:`reports.leaderboard.leaderboard_numbers` of ``ranked`` (the frame on the report's clock)
    as a :class:`Leaderboard`, ``task`` the short label and ``task_name`` the full one."""
    numbers = with_task_labels(ranked, leaderboard_numbers(ranked))
    board = Leaderboard(numbers)
    board.attrs["has_target"] = has_target
    return board


def tuning_table(ranked: pd.DataFrame) -> pd.DataFrame:
    """:func:`reports.protocol.tuning_curves` of ``ranked`` with the report's task labels and stable
    dtypes (``k``, ``n_configs`` ``int64``; values ``float64``; ``self_tuning`` ``bool``)."""
    from reports.protocol import tuning_curves

    t = with_task_labels(ranked, tuning_curves(ranked))
    for c in ("n_configs", "k"):
        t[c] = t[c].astype("int64")
    for c in ("valid", "valid_lo", "valid_hi", "test", "test_lo", "test_hi"):
        t[c] = t[c].astype("float64")
    t["self_tuning"] = t["self_tuning"].astype(bool)
    for c in ("task", "task_name", "optimizer", "metric", "test_metric", "mode", "protocol", "label"):
        t[c] = t[c].astype("str")
    return t


def tuned_time_table(ranked: pd.DataFrame) -> pd.DataFrame:
    """:func:`reports.protocol.tuned_time_to_result` of ``ranked`` (seconds on the report's clock,
    ``inf``: not reached) with the report's task labels and stable dtypes."""
    from reports.protocol import tuned_time_to_result

    t = with_task_labels(ranked, tuned_time_to_result(ranked))
    t["n_configs"] = t["n_configs"].astype("int64")
    t["seconds"] = t["seconds"].astype("float64")
    for c in ("task", "task_name", "optimizer", "config_id", "config"):
        t[c] = t[c].astype("str")
    return t
