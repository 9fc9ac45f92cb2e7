"""The leaderboard: each optimizer's best configuration per task, selected on validation and
headlined by its test metric with an honest interval across seeds (a table, not a figure)."""

from __future__ import annotations

import functools
import math
import typing

import numpy as np
import pandas as pd

from harness.core.names import (
    M_FINAL_ACC,
    M_FINAL_GAP,
    M_FINAL_LOSS,
    M_SECONDS_TO_TARGET,
    M_STEP_MS,
    M_STEPS_TO_TARGET,
)
from reports import protocol, scoring
from reports.frame import FINAL_BPB, PROTOCOL_ONE_SPLIT, summaries, tuning_rows
from reports.labels import is_self_tuning
from reports.objectives import objective, objectives_differ
from reports.protocol import MIN_SEEDS
from reports.ranks import TIE_MARK, shared_ranks
from reports.selection import best_configs, select_by

#: Columns the report states once in the caption when every row holds the same text.
SAID_ONCE = ("Interval", "Beats (paired bootstrap, 95%)", "Tuned by")
#: The column of AlgoPerf's score (only when the frame's rule is ``algoperf``).
SCORE_COL = "AlgoPerf score (all tasks, τ ∈ [1, 4])"


#: After a time to target whose program's figure is flagged (tag ``perf.suspect``,
#: :func:`reports.report_clock.clock_note` names it and says why).
FLAG_MARK = " †"


def _flagged(rows: pd.DataFrame) -> bool:
    """Whether any of these summary rows carries a flagged figure (tag ``perf.suspect``)."""
    if "perf_suspect" not in rows:
        return False
    return bool(rows["perf_suspect"].map(lambda v: isinstance(v, str) and v != "").any())


def interval_words(how: str, n: int) -> str:
    """What an interval across ``n`` seeds is: ``min–max of 2 seeds (< 5)``, ``95% bootstrap, 6 seeds``."""
    return f"min–max of {n} seeds (< {MIN_SEEDS})" if how == "min–max" else f"95% bootstrap, {n} seeds"


def interval_digits(mean: float, lo: float, hi: float) -> int | None:
    """Decimals that give two significant digits of the interval's width (of ``mean`` itself, four
    significant digits, when the interval has no width); ``None`` without a finite value."""
    if not math.isfinite(mean):
        return None
    if math.isfinite(hi - lo) and hi > lo:
        return max(0, 1 - math.floor(math.log10(hi - lo)))
    return max(0, 3 - math.floor(math.log10(abs(mean)))) if mean else 0


def column_digits(cells: list[tuple]) -> int | None:
    """One number of decimals for a whole column of ``(mean, lo, hi, n, how)`` cells: the most any
    of its cells with two seeds or more needs (:func:`interval_digits`; a column of one-seed cells
    uses theirs), capped at 6; ``None`` for a column without values."""
    with_width = [c for c in cells if c[3] > 1 and c[2] > c[1]]
    pool = with_width or [c for c in cells if c[3] >= 1]
    ds = [d for c in pool if (d := interval_digits(*c[:3])) is not None]
    return min(max(ds), 6) if ds else None


def format_interval(mean: float, lo: float, hi: float, n: int, how: str = "", unit: str = "",
                    say_how: bool = True, digits: int | None = None) -> str:
    """``mean [lo, hi] · how`` (:func:`interval_words`; left out with ``say_how=False``, for a
    table that says it once), with ``digits`` decimals (default :func:`interval_digits`: two
    significant digits of the interval's width; a table passes its column's
    :func:`column_digits`); ``mean (1 seed)``; ``—`` without values."""
    if n == 0 or not math.isfinite(mean):
        return "—"
    d = interval_digits(mean, lo, hi) if digits is None else digits
    if n == 1:
        return f"{mean:.{d}f}{unit} (1 seed)"
    what = f" · {interval_words(how, n)}" if say_how else ""
    return f"{mean:.{d}f} [{lo:.{d}f}, {hi:.{d}f}]{unit}{what}"


def leaderboard(frame: pd.DataFrame) -> pd.DataFrame:
    """Best configuration per optimizer on each task, **selected on validation** (``best_configs``),
    headlined by its **test** metric across seeds (:func:`reports.protocol.headline`).

    Intervals across seeds are :func:`reports.protocol.seed_interval`: min–max with fewer than
    ``MIN_SEEDS`` seeds (the row's "Interval" column says so, once; a cell whose interval is of
    another kind, e.g. time to target over fewer seeds, says its own), else a 95% bootstrap
    percentile interval of the mean; both stay inside the metric's range. "Beats" lists the
    optimizers whose test metric this one's exceeds by a paired bootstrap across seeds at 95%
    (needs ``MIN_SEEDS`` paired seeds; :func:`reports.protocol.pairwise_comparisons`). Runs from
    before the three-split protocol show "— (selected and reported on one split)" as their test
    number. Each task is selected and
    headlined by its own objective (:func:`reports.objectives.objective` of the task); when the tasks'
    metrics differ the headline column is "Test metric (selected on validation)" and each cell
    names its metric ("loss 1.927 …"). "Rank" is :func:`reports.ranks.shared_ranks`' label: ``"2="``
    for optimizers whose ranking numbers are not distinguishable; the rows of such a tie are in the
    order of the column the reader sees (time to target, fastest first, when all reached it; else
    the validation value that ranks them), and a row below a tied neighbour adds the seeds that would
    separate the two (``"1= · 7 seeds would separate"``: :func:`harness.core.ties.separation`, the
    power 0.8 of the rank rule's paired test, two-sided, nominal α = 0.05). Rows are in that order
    (``_order``); ``_rank`` keeps the strict one. When the frame's tuned-time rule
    is ``algoperf`` (:func:`reports.protocol.scoring`) and the sweep has a target and more than one
    task (:func:`reports.scoring.shows_score`; one task: :func:`reports.scoring.score_note`),
    :data:`SCORE_COL` holds each optimizer's AlgoPerf score over all tasks
    (:func:`reports.scoring.algoperf_scores`; the same in each of its rows).
    Returns display strings plus numeric ``_``-prefixed columns.
    """
    best = best_configs(frame)
    if best.empty:
        return pd.DataFrame()
    board = _board(frame)
    rows = [_row(board, b) for b in best.itertuples()]
    _format_cells(rows)
    return pd.DataFrame(rows).sort_values(["Task", "_order"], kind="stable").reset_index(drop=True)


class _Board(typing.NamedTuple):
    """What every row of :func:`leaderboard` reads, computed once per frame."""

    frame: pd.DataFrame
    s: pd.DataFrame  # the summaries of the selected configurations' seeds (no audit trial)
    head: pd.DataFrame  # protocol.headline, indexed by (task, optimizer)
    ranked: pd.DataFrame  # shared_ranks, indexed by (task, optimizer)
    comps: pd.DataFrame  # protocol.pairwise_comparisons
    mixed: bool  # the tasks' test metrics differ
    test_col: str
    scores: pd.Series | None  # AlgoPerf's score per optimizer, when shown
    has_target: bool


def _board(frame: pd.DataFrame) -> _Board:
    s = tuning_rows(summaries(frame))  # seeds of the selected configuration: no audit trial
    obj = objective(frame)
    head = protocol.headline(frame).set_index(["task", "optimizer"])
    ranked = shared_ranks(frame).set_index(["task", "optimizer"])
    comps = protocol.pairwise_comparisons(frame)
    mixed = objectives_differ(frame)  # e.g. a loss-target task beside an accuracy-target one
    test_col = "Test metric (selected on validation)" if mixed else \
        f"Test {obj.test.split('/', 1)[1]} (selected on validation)"
    scores = scoring.algoperf_scores(frame) if scoring.shows_score(frame) else None
    return _Board(frame, s, head, ranked, comps, mixed, test_col, scores, obj.target_metric is not None)


def _cell(row_how, mean, lo, hi, n, how, prefix="", suffix=""):
    # formatted by _format_cells, once the column's digits are known
    return _Cell((mean, lo, hi, n, how), (how, n) != row_how and n > 1, prefix, suffix)


def _test_and_beats(h: pd.Series, c: pd.DataFrame, won: pd.DataFrame, cell, prefix: str) -> tuple:
    """The test cell and the "Beats" cell of one row."""
    if h["protocol"] == PROTOCOL_ONE_SPLIT:
        return f"— ({PROTOCOL_ONE_SPLIT})", "—"
    test_cell = cell(h["test"], h["test_lo"], h["test_hi"], int(h["test_n"]), h["interval"], prefix=prefix)
    if len(won):
        return test_cell, ", ".join(f"{r.b} ({r.diff:+.3g})" for r in won.itertuples())
    if len(c) and int(c["n"].max()) < MIN_SEEDS:
        return test_cell, f"not tested (< {MIN_SEEDS} paired seeds)"
    return test_cell, "—"


def _row(board: _Board, b) -> dict:
    """One optimizer's leaderboard row on one task (``b``: a row of ``best_configs``)."""
    frame, s = board.frame, board.s
    task_test = objective(frame, b.task).test.split("/", 1)[1]
    prefix = f"{task_test} " if board.mixed else ""
    g = s[(s["task"] == b.task) & (s["optimizer"] == b.optimizer) & (s["config_id"] == b.config_id)]
    fin = g[g["status"] == "finished"]
    h = board.head.loc[(b.task, b.optimizer)]
    acc = protocol.seed_interval(fin[M_FINAL_ACC])
    loss = protocol.seed_interval(fin[M_FINAL_LOSS])
    ttt = protocol.median_interval(fin[M_SECONDS_TO_TARGET])
    bad = g["status"].value_counts().drop("finished", errors="ignore")
    c = board.comps[(board.comps["task"] == b.task) & (board.comps["a"] == b.optimizer)]
    won = c[c["a_better"]]
    row_how = (acc[4], acc[3]) if h["protocol"] == PROTOCOL_ONE_SPLIT else (h["interval"], int(h["test_n"]))
    cell = functools.partial(_cell, row_how)
    test_cell, beats = _test_and_beats(h, c, won, cell, prefix)
    row = {
        "Task": b.task,
        "Rank": rank_cell(board.ranked.loc[(b.task, b.optimizer)]),
        "Optimizer": b.optimizer,
        "Best configuration": b.config,
        "Tuned by": tuned_by(g),
        "Seeds finished": f"{b.n_finished}/{b.n_seeds}"
        + (" (" + ", ".join(f"{n} {k}" for k, n in bad.items()) + ")" if len(bad) else ""),
        "Interval": interval_words(*row_how) if row_how[1] > 1 else "—",
        board.test_col: test_cell,
        "Beats (paired bootstrap, 95%)": beats,
        "Validation accuracy": cell(*acc),
        "Validation loss": cell(*loss),
    }
    if select_by(frame) == "best":  # what selected it: each seed's best evaluation in training
        row["Best validation value during training (selects)"] = cell(
            *protocol.seed_interval(fin[objective(frame, b.task).best]), prefix=prefix)
    if M_FINAL_GAP in s and s[M_FINAL_GAP].notna().any():  # a dataset with a known optimum
        row["Gap to entropy rate (nats)"] = cell(*protocol.seed_interval(fin[M_FINAL_GAP]))
    lm = _lm_numbers(fin)
    if lm:  # a language model: perplexity, bits per byte where known
        row["Validation perplexity"] = cell(*lm["ppl"])
        if lm["bpb"][3]:
            row["Validation bits per byte"] = cell(*lm["bpb"])
    if board.has_target:
        row.update(_target_cells(b, fin, ttt, lm, cell))
    if board.scores is not None and len(board.scores):
        row[SCORE_COL] = f"{board.scores.get(b.optimizer, 0.0):.3f}"
    row["Step time (ms, median)"] = g[M_STEP_MS].median()  # formatted by _format_cells
    row.update(_numbers(board, b, h, (acc, loss, ttt), row_how, g, won))
    row.update(_lm_sort_keys(lm, fin))
    return row


def _target_cells(b, fin: pd.DataFrame, ttt: tuple, lm: dict | None, cell) -> dict:
    """The time-to-target cell of row ``b`` (``fin``: its finished seeds) and, for a language model
    (``lm``: :func:`_lm_numbers`), the steps and tokens seen to the target beside it."""
    flag = FLAG_MARK if _flagged(fin) else ""  # perf.suspect: the clock sentence says why
    cells = {TTT_COL: (cell(*ttt, suffix=f" ({b.n_reached}/{b.n_seeds} reached){flag}")
                       if ttt[3] else f"not reached (0/{b.n_seeds})")}
    if lm:
        cells[STEPS_COL] = count_text(lm["steps"])
        cells[TOKENS_COL] = count_text(lm["tokens"], tokens=True)
    return cells


def _lm_sort_keys(lm: dict | None, fin: pd.DataFrame) -> dict:
    """The row's hidden language-model numbers (perplexity, bits per byte, steps and tokens to the
    target; ``NaN`` where not a language model)."""
    nan4 = (math.nan, math.nan, math.nan, 0)
    ppl, bpb = (lm["ppl"], lm["bpb"]) if lm else (nan4, nan4)
    return {"_ppl_mean": ppl[0], "_ppl_lo": ppl[1], "_ppl_hi": ppl[2], "_bpb_mean": bpb[0],
            "_bpb_lo": bpb[1], "_bpb_hi": bpb[2],
            "_steps_median": lm["steps"] if lm else _median(fin[M_STEPS_TO_TARGET]),
            "_tokens_median": lm["tokens"] if lm else math.nan}


def _median(x: pd.Series) -> float:
    """The median of the finite values of ``x`` (``NaN`` without any)."""
    v = pd.to_numeric(x, errors="coerce").astype("float64")
    v = v[np.isfinite(v)]
    return float(v.median()) if len(v) else math.nan


def _lm_numbers(fin: pd.DataFrame) -> dict | None:
    """A language model's numbers over the finished seeds ``fin`` of one configuration: ``ppl`` and
    ``bpb`` (:func:`reports.protocol.seed_interval` of exp(final loss) and of the final bits per
    byte), ``steps`` and ``tokens`` (the medians to the target over the seeds that reached it, the
    statistic of time to target); ``None`` for any other task."""
    if "language_model" not in fin or not fin["language_model"].fillna(False).astype(bool).any():
        return None
    loss = pd.to_numeric(fin[M_FINAL_LOSS], errors="coerce").astype("float64").to_numpy()
    steps = pd.to_numeric(fin[M_STEPS_TO_TARGET], errors="coerce").astype("float64")
    per = fin["tokens_per_step"].astype("float64") if "tokens_per_step" in fin else steps * math.nan
    return {"ppl": protocol.seed_interval(np.exp(np.minimum(loss, 700.0)).tolist()),
            "bpb": protocol.seed_interval(fin[FINAL_BPB].astype("float64").tolist())
            if FINAL_BPB in fin else (math.nan, math.nan, math.nan, 0, ""),
            "steps": _median(steps), "tokens": _median(steps * per)}


def count_text(v: float, tokens: bool = False) -> str:
    """A median count as text (``1.2M`` tokens, ``125`` steps; ``—`` when not reached)."""
    if not math.isfinite(v):
        return "—"
    if tokens and v >= 1e4:
        for div, unit in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
            if v >= div:
                return f"{v / div:.3g}{unit}"
    return f"{v:g}"


def _numbers(board: _Board, b, h: pd.Series, intervals: tuple, row_how: tuple, g: pd.DataFrame,
             won: pd.DataFrame) -> dict:
    """The numeric ``_``-prefixed columns of one row (the numbers behind its cells)."""
    acc, loss, ttt = intervals
    rk = board.ranked.loc[(b.task, b.optimizer)]
    return {
        "_test_mean": h["test"],
        "_test_lo": h["test_lo"],
        "_test_hi": h["test_hi"],
        "_acc_mean": acc[0],
        "_acc_lo": acc[1],
        "_acc_hi": acc[2],
        "_loss_mean": loss[0],
        "_loss_lo": loss[1],
        "_loss_hi": loss[2],
        "_ttt_median": ttt[0],
        "_n": acc[3],
        "_rank": b.rank,
        "_order": int(rk["order"]),
        "_shared_rank": rk["label"],
        "_separation_seeds": rk["separation_seeds"],
        "_separation": rk["separation"],
        "_protocol": h["protocol"],
        # the rest of the numbers behind the cells (leaderboard_numbers)
        "_shared_rank_n": _rank_number(rk["shared_rank"]),
        "_config_id": b.config_id,
        "_n_seeds": int(b.n_seeds),
        "_n_finished": int(b.n_finished),
        "_n_reached": int(b.n_reached),
        "_test_metric": objective(board.frame, b.task).test,
        "_test_n": int(h["test_n"]),
        "_interval": row_how[0] if row_how[1] > 1 else "",
        "_acc_n": acc[3],
        "_loss_n": loss[3],
        "_ttt_lo": ttt[1],
        "_ttt_hi": ttt[2],
        "_ttt_n": ttt[3],
        "_step_ms": float(g[M_STEP_MS].median()),
        "_beats": ", ".join(str(r.b) for r in won.itertuples()),
    }


def _format_cells(rows: list[dict]) -> None:
    """Turn each row's interval cells into text (one number format per column) and the step times
    into three significant digits of the fastest, the same decimals in every row; in place."""
    for col in {k for r in rows for k, v in r.items() if isinstance(v, _Cell)}:
        digits = column_digits([r[col].values for r in rows if isinstance(r[col], _Cell)])
        for r in rows:
            if isinstance(r[col], _Cell):
                r[col] = r[col].text(digits)
    ms = [r["Step time (ms, median)"] for r in rows if math.isfinite(r["Step time (ms, median)"])]
    d = min(max(0, 2 - math.floor(math.log10(min(ms)))), 4) if ms and min(ms) > 0 else 2
    for r in rows:
        v = r["Step time (ms, median)"]
        r["Step time (ms, median)"] = f"{v:.{d}f}" if math.isfinite(v) else "—"


#: The leaderboard's time-to-target column: the median over the seeds that reached the target
#: (:data:`reports.protocol.TTT_STAT`, the summary's statistic), with its interval.
TTT_COL = "Time to target (s, median)"
#: A language model's steps and tokens seen to the target, beside the time (medians, as the time).
STEPS_COL = "Steps to target (median)"
TOKENS_COL = "Tokens to target (median)"
#: :func:`leaderboard_numbers`' columns: each one's name → the :func:`leaderboard` column it reads
#: (the numbers behind the formatted cells).
NUMBER_COLUMNS = {
    "task": "Task", "rank": "_shared_rank_n", "rank_label": "_shared_rank", "strict_rank": "_rank",
    "order": "_order", "separation_seeds": "_separation_seeds", "separation": "_separation",
    "optimizer": "Optimizer", "config": "Best configuration", "tuned_by": "Tuned by",
    "config_id": "_config_id",
    "n_seeds": "_n_seeds", "n_finished": "_n_finished", "n_reached": "_n_reached",
    "test_metric": "_test_metric", "test_mean": "_test_mean", "test_lo": "_test_lo", "test_hi": "_test_hi",
    "test_n": "_test_n", "interval": "_interval",
    "valid_accuracy_mean": "_acc_mean", "valid_accuracy_lo": "_acc_lo", "valid_accuracy_hi": "_acc_hi",
    "valid_loss_mean": "_loss_mean", "valid_loss_lo": "_loss_lo", "valid_loss_hi": "_loss_hi",
    "seconds_to_target_median": "_ttt_median", "seconds_to_target_lo": "_ttt_lo",
    "seconds_to_target_hi": "_ttt_hi", "seconds_to_target_n": "_ttt_n",
    "step_time_ms": "_step_ms", "beats": "_beats", "protocol": "_protocol",
    "steps_to_target_median": "_steps_median", "tokens_to_target_median": "_tokens_median",
    "valid_perplexity_mean": "_ppl_mean", "valid_perplexity_lo": "_ppl_lo", "valid_perplexity_hi": "_ppl_hi",
    "valid_bits_per_byte_mean": "_bpb_mean", "valid_bits_per_byte_lo": "_bpb_lo",
    "valid_bits_per_byte_hi": "_bpb_hi",
}
#: Integer columns of :func:`leaderboard_numbers` (``Int64``: missing is ``<NA>``).
INT_COLUMNS = ("rank", "strict_rank", "order", "separation_seeds", "n_seeds", "n_finished", "n_reached",
               "test_n", "seconds_to_target_n")
#: Text columns of :func:`leaderboard_numbers`; every other column is ``float64``, but ``tied``.
TEXT_COLUMNS = ("task", "rank_label", "separation", "optimizer", "config", "tuned_by", "config_id",
                "test_metric", "interval", "beats", "protocol")


def tuned_by(trials: pd.DataFrame) -> str:
    """The "Tuned by" cell: the search method(s) that proposed a selected configuration's trials (the
    tag ``harness.search``: ``grid``, ``quasirandom``, ``random``, ``asha``, ``coordinate_descent``,
    ``optuna``, ...), ``"none (self-tuning)"`` for a ``tuning: none`` entry's."""
    if "tuning" in trials and trials["tuning"].map(is_self_tuning).all() and len(trials):
        return "none (self-tuning)"
    methods = trials["search"].dropna() if "search" in trials else pd.Series(dtype=object)
    return ", ".join(sorted(set(methods))) or "grid"


def leaderboard_numbers(frame: pd.DataFrame, table: pd.DataFrame | None = None) -> pd.DataFrame:
    """The numbers of :func:`leaderboard` (``table``, computed from ``frame`` when not given) as
    numbers, one row per (task, optimizer) in the leaderboard's order, columns
    :data:`NUMBER_COLUMNS` plus ``tied``:

    - ``rank`` (``Int64``): the shared competition rank (1, 1, 3), ``rank_label`` its text
      (``"1="``), ``tied`` (``bool``) whether the row shares it, ``strict_rank`` the strict order,
      ``order`` the row's position; ``separation_seeds`` (``Int64``, ``<NA>`` when there is no
      number) and ``separation`` (text) the paired seeds that would separate the row from the tied
      row above it (:func:`reports.ranks.shared_ranks`);
    - ``test_mean``, ``test_lo``, ``test_hi`` (``float64``, the task's test metric
      ``test_metric`` of the validation-selected configuration across seeds, the interval
      ``interval``: ``"min–max"`` with fewer than 5 seeds, else ``"bootstrap"``, a 95% percentile
      interval of the mean), ``test_n`` seeds; ``valid_accuracy_*``, ``valid_loss_*`` (final
      validation values, same rule); ``seconds_to_target_median``, ``_lo``, ``_hi``, ``_n`` (on the
      frame's clock, the median over the seeds that reached the target, ``n_reached`` of
      ``n_seeds``, its interval min–max under 5 seeds, else a bootstrap of the median);
      ``step_time_ms`` (median wall-clock milliseconds per step); ``beats`` (the optimizers this
      one beats by a paired bootstrap, comma-separated); ``protocol``. Missing numbers are ``NaN``.

    The rows are the formatted table's, number for number: a cell ``0.655 [0.650, 0.660]`` is
    ``test_mean`` 0.655, ``test_lo`` 0.650, ``test_hi`` 0.660 before rounding.
    """
    lb = leaderboard(frame) if table is None else table
    cols = [*NUMBER_COLUMNS, "tied"]
    if lb.empty:
        return pd.DataFrame({c: pd.Series(dtype="Int64" if c in INT_COLUMNS else "bool" if c == "tied"
                                          else "str" if c in TEXT_COLUMNS else "float64") for c in cols})
    out = pd.DataFrame({name: lb[src].to_numpy() for name, src in NUMBER_COLUMNS.items()})
    for c in INT_COLUMNS:
        out[c] = pd.array([None if v is None or (isinstance(v, float) and not math.isfinite(v)) else int(v)
                           for v in out[c]], dtype="Int64")
    for c in out.columns:
        if c in TEXT_COLUMNS:
            out[c] = out[c].fillna("").astype(str)
        elif c not in INT_COLUMNS:
            out[c] = out[c].astype("float64")
    out["tied"] = out["rank_label"].str.endswith(TIE_MARK)
    return out[cols]


def _rank_number(shared_rank) -> int | None:
    """A row's shared rank as an int; ``None`` for an unranked optimizer (every trial failed)."""
    return None if shared_rank is None or pd.isna(shared_rank) else int(shared_rank)


def rank_cell(r: pd.Series) -> str:
    """The "Rank" cell of one row of :func:`reports.ranks.shared_ranks`: its label, and below a tied
    neighbour the seeds that would separate the two (``"1= · 7 seeds would separate"``; ``"... (on
    the validation value)"`` where the rows show time to target but the two reached the target at
    the same median steps, so that their validation values are what the rule compares)."""
    if not r["separation"]:
        return str(r["label"])
    on = " (on the validation value)" if r["separation_on"] != r["tie_on"] else ""
    return f"{r['label']} · {r['separation']}{on}"


class _Cell(typing.NamedTuple):
    """An interval cell before its column's digits are known."""

    values: tuple  # (mean, lo, hi, n, how): reports.protocol.seed_interval
    say_how: bool
    prefix: str = ""
    suffix: str = ""

    def text(self, digits: int | None) -> str:
        body = format_interval(*self.values, say_how=self.say_how, digits=digits)
        return f"{self.prefix}{body}{self.suffix}" if body != "—" else body


def shared_columns(lb: pd.DataFrame) -> dict[str, str]:
    """The leaderboard's columns that hold one text in every row (with fewer than ``MIN_SEEDS``
    seeds: "Interval" and "Beats" say the same everywhere), each with that text: the report says it
    once, in the table's caption, and leaves the column out."""
    out = {}
    for col in SAID_ONCE:
        if col in lb and len(lb) > 1 and lb[col].nunique() == 1:
            out[col] = str(lb[col].iloc[0])
    return out
