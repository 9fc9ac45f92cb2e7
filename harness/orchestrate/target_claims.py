"""The summary's target claims: for each selected configuration with a loss target, whether its seeds'
final validation losses support "it reaches the target" (:mod:`harness.core.significance`), and the
track's claim rules where the target asks for them (:mod:`harness.core.claim_rules`)."""

from __future__ import annotations

from typing import Any

from harness.core.claim_rules import claim_rule_lines, rules_of_params
from harness.core.outcome import TrialOutcome, config_key, last_rounds
from harness.core.significance import TRACK_MARGIN, claim_words, target_claim

__all__ = ["target_claim_lines"]


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
