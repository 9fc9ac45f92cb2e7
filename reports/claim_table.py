"""The report's target claims: each selected configuration with a loss target, its seeds' final
validation losses tested by :mod:`harness.core.significance` (the track's rule and a t-test), and the
claim rules the target asks for (:mod:`harness.core.claim_rules`)."""

from __future__ import annotations

from typing import Any

import pandas as pd

from harness.core.claim_rules import PARAM_MARGIN, PARAM_SINGLE_RUN, claim_rule_lines, rules_of_params
from harness.core.names import M_FINAL_LOSS
from harness.core.significance import TRACK_MARGIN, target_claim, verdict_words
from reports.frame import summaries, tuning_rows
from reports.selection import best_configs

__all__ = ["claim_rows"]


def claim_rows(frame: pd.DataFrame, labels: dict[str, str]) -> list[dict[str, Any]]:
    """One row per (task, optimizer) whose selected configuration has a loss target and finished
    seeds: ``task, optimizer, config, n, mean, target, statistic, margin, p_value, passes, verdict``,
    and ``rules``: the verdicts of the claim rules its runs carry (``claim.*`` params; ``[]``: none)."""
    s = tuning_rows(summaries(frame))
    if s.empty or "target_metric" not in s or M_FINAL_LOSS not in s:
        return []
    out = []
    for _, b in best_configs(frame).iterrows():
        same = (s["task"] == b["task"]) & (s["optimizer"] == b["optimizer"])
        g = s[same & (s["config_id"] == b["config_id"]) & (s["status"] == "finished")]
        g = g[g["target_metric"].astype(str).str.endswith("/loss") & g["target_value"].notna()]
        losses = g[M_FINAL_LOSS].dropna().tolist()
        if not losses:
            continue
        rules = _rules(g)
        c = target_claim(losses, float(g["target_value"].iloc[0]),
                         margin=TRACK_MARGIN if rules is None else rules.margin)
        out.append({"task": labels.get(b["task"], b["task"]), "optimizer": b["optimizer"],
                    "config": b["config"], "n": c.n, "mean": c.mean, "target": c.target,
                    "statistic": c.track_statistic, "margin": c.margin, "p_value": c.p_value,
                    "passes": c.passes, "verdict": verdict_words(c),
                    "rules": [] if rules is None else claim_rule_lines(
                        _runs(g), c.target, rules)})
    return out


def _runs(g: pd.DataFrame) -> list[tuple[int, float]]:
    """``(seed, final validation loss)`` of the finished runs of ``g`` that logged one."""
    done = g[g[M_FINAL_LOSS].notna()]
    return [(int(s) if pd.notna(s) else -1, float(x)) for s, x in zip(done["seed"], done[M_FINAL_LOSS],
                                                                       strict=True)]


def _rules(g: pd.DataFrame) -> Any:
    """The claim rules the first run of ``g`` that carries them holds (None: none does)."""
    cols = [f"params.{k}" for k in (PARAM_MARGIN, PARAM_SINGLE_RUN)]
    if cols[0] not in g:
        return None
    for _, row in g.iterrows():
        rules = rules_of_params({k[len("params."):]: row.get(k) for k in cols})
        if rules is not None:
            return rules
    return None
