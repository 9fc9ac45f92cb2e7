"""The summary's lines on each selected configuration's final validation loss: its target claim (with a
loss target, whether its seeds' final losses support "it reaches the target",
:mod:`harness.core.significance`, and the track's claim rules where the target asks for them,
:mod:`harness.core.claim_rules`) and the equal-token comparison (its final loss at the task's budget
and the paired difference to the baseline's, :func:`equal_token_lines`)."""

from __future__ import annotations

import math
import statistics
from typing import Any

from harness.core.claim_rules import claim_rule_lines, rules_of_params
from harness.core.outcome import TrialOutcome, config_key, last_rounds
from harness.core.selection_rule import baseline_of
from harness.core.significance import TRACK_MARGIN, claim_words, target_claim

__all__ = ["equal_token_lines", "target_claim_lines"]

#: Fewer seeds than this: the interval is the seeds' min–max (the report's rule), else none is given.
MIN_SEEDS = 5


def target_claim_lines(outcomes: list[TrialOutcome], rows: list[dict[str, Any]]) -> list[str]:
    """One line per row of :func:`harness.orchestrate.summary.best_configs` whose metric is a loss with a
    target: ``"<task> · <optimizer>: <claim_words>"`` over the configuration's finished seeds; then
    one line per claim rule the target asks for (``"<task> · <optimizer>: <rule's verdict>"``)."""
    seeds: dict[tuple, list[TrialOutcome]] = {}
    for o in outcomes:
        if not o.audit_of:
            seeds.setdefault(config_key(o), []).append(o)
    lines = []
    for r in rows:
        if not (r.get("has_target") and str(r.get("metric", "")).endswith("/loss")):
            continue
        key = (*r["task"], r["optimizer"], r["config_id"], r["config_exact"])
        group = last_rounds(seeds.get(key, []))
        losses = [o.final_valid_loss for o in group
                  if o.status == "finished" and o.final_valid_loss is not None]
        target = next((o.target_value for o in group if o.target_value is not None), None)
        if losses and target is not None:
            head = f"{r.get('task_title', r['task'])} · {r['optimizer']}: "
            rules = next((rules_of_params({f"claim.{k}": v for k, v in o.claim.items()})
                          for o in group if o.claim), None)
            margin = TRACK_MARGIN if rules is None else rules.margin  # the rule's margin judges both lines
            lines.append(head + claim_words(target_claim(losses, target, margin=margin)))
            if rules is not None:
                runs = [(o.seed, o.final_valid_loss) for o in group
                        if o.status == "finished" and o.final_valid_loss is not None]
                lines.extend(head + line for line in claim_rule_lines(runs, target, rules))
    return lines


def equal_token_lines(outcomes: list[TrialOutcome], rows: list[dict[str, Any]]) -> list[str]:
    """The equal-token comparison, one line per task with two optimizers or more:
    ``"equal tokens, <task> (<steps> steps[, <tokens> tokens]): final valid loss adam 3.67 [3.61,
    3.73] (ppl 39.3); sgd 4.42 [4.40, 4.45], +0.75 [0.67, 0.84] vs adam"``: each optimizer's
    selected configuration (``rows``, :func:`harness.orchestrate.summary.ranked_rows`) by its mean
    final validation loss over finished seeds with their min–max (under 5 seeds) and perplexity for
    a language model, and the paired difference to the baseline (:func:`baseline_of`) over the
    seeds both finished, as the report's "Equal tokens" table.

    Args:
      outcomes: the sweep's outcomes. rows: its ranked rows.
    Returns:
      the lines (none for a task with one optimizer, or without final losses).
    """
    seeds: dict[tuple, list[TrialOutcome]] = {}
    for o in outcomes:
        if not o.audit_of:
            seeds.setdefault(config_key(o), []).append(o)
    by_task: dict[tuple, dict[str, dict]] = {}
    for r in rows:
        key = (*r["task"], r["optimizer"], r["config_id"], r["config_exact"])
        done = [o for o in last_rounds(seeds.get(key, []))
                if o.status == "finished" and o.final_valid_loss is not None]
        if done:
            by_task.setdefault(tuple(r["task"]), {})[r["optimizer"]] = {
                "row": r, "loss": {o.seed: float(o.final_valid_loss) for o in done}, "seeds": done}
    lines = []
    for per in by_task.values():
        if len(per) < 2:
            continue
        base = baseline_of(per)
        first = next(iter(per.values()))
        o0 = first["seeds"][0]
        p = o0.task_params
        steps = p.get("train.steps")
        budget = f"{steps} steps" if steps else "its budget"
        if o0.language_model and steps and p.get("train.batch_size") and p.get("dataset.seq_len"):
            budget += f", {int(steps) * int(p['train.batch_size']) * int(p['dataset.seq_len']):,} tokens"
        diffs = {opt: [x - per[base]["loss"][s] for s, x in d["loss"].items() if s in per[base]["loss"]]
                 for opt, d in per.items() if opt != base}
        digits = (_decimals([statistics.fmean(d["loss"].values()) for d in per.values()]),
                  _decimals([statistics.fmean(v) for v in diffs.values() if v]))
        cells = [_cell(opt, d, diffs.get(opt, []), base, d["seeds"][0].language_model, digits)
                 for opt, d in per.items()]
        lines.append(f"equal tokens, {first['row'].get('task_title', first['row']['task'])} ({budget}): "
                     f"final valid loss {'; '.join(cells)}")
    return lines


def _cell(opt: str, d: dict, diffs: list[float], base: str, lm: bool, digits: tuple[int, int]) -> str:
    """``opt mean [lo, hi] (ppl p), +diff [lo, hi] vs base`` of one optimizer, losses and
    differences each with the line's one number of decimals (``digits``)."""
    v = list(d["loss"].values())
    ppl = statistics.fmean(math.exp(min(x, 700.0)) for x in v)  # the report's: each seed's, then the mean
    text = f"{opt} {_interval(v, digits[0])}" + (f" (ppl {ppl:.3g})" if lm else "")
    if opt == base:
        return text + " (baseline)"
    return text + (f", {_interval(diffs, digits[1], sign=True)} vs {base}" if diffs else "")


def _decimals(means: list[float]) -> int:
    """One number of decimals for a line's values: four significant digits of the smallest
    nonzero magnitude among ``means``, at most 6."""
    small = min((abs(m) for m in means if m and math.isfinite(m)), default=1.0)
    return max(0, min(6, 3 - math.floor(math.log10(small))))


def _interval(v: list[float], d: int, sign: bool = False) -> str:
    """``mean [min, max]`` under :data:`MIN_SEEDS` values, else ``mean``, with ``d`` decimals."""
    m = statistics.fmean(v)
    head = f"{m:+.{d}f}" if sign else f"{m:.{d}f}"
    return f"{head} [{min(v):.{d}f}, {max(v):.{d}f}]" if 1 < len(v) < MIN_SEEDS else head
