"""The dry run's ladder table: one row per rung and data budget of a config's
``ladder:``, with the numbers :mod:`harness.config.ladder_parts` computed: parameters ``N``, tokens per
parameter, tokens ``D``, steps, passes over the training data, estimated training FLOPs and the
rung's trials. Display only."""

from __future__ import annotations

__all__ = ["print_ladder"]


def _si(x: float) -> str:
    for div, unit in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= div:
            return f"{x / div:.3g}{unit}"
    return f"{x:.3g}"


def print_ladder(console, trials) -> None:
    """Print the ladder table of ``trials`` (an :func:`harness.plan.expansion.expand` result);
    nothing when no trial is a ladder's."""
    from rich.markup import escape
    from rich.table import Table

    from harness.orchestrate.tables import print_table

    origins = getattr(trials, "origins", None) or {}
    rows: dict[tuple, list] = {}
    for s in trials:
        o = origins.get(s.trial_id)
        if o is None or o.ladder is None:
            continue
        r = o.ladder
        rows.setdefault((r.index, r.tokens_per_param, s.dtype), [r, 0])[1] += 1
    if not rows:
        return
    first = next(iter(rows.values()))[0]
    t = Table(title=f"ladder: {first.family} on {first.workload}, baseline {first.baseline}")
    for col in ("rung", "size", "params N", "tokens/param", "tokens D", "steps", "epochs", "est. FLOPs",
                "trials"):
        t.add_column(col, justify="left" if col == "size" else "right")
    for (_, _, dt), (r, n) in rows.items():
        size = r.size + (f" [{dt}]" if dt != "float32" else "")
        t.add_row(str(r.index), escape(size), f"{r.params:,}", f"{r.tokens_per_param:g}", f"{r.tokens:,}",
                  f"{r.steps:,}", f"{r.epochs:.2f}" if r.epochs else "?", _si(r.flops), str(n))
    print_table(console, t)
    console.print("est. FLOPs: 3 x the model's analytic forward FLOPs per example x examples "
                  "(backward ~ 2 x forward); N counts every parameter array; epochs > 1 repeat data")
    transfers = {(o, r) for o, r in first.transfer if r != "per_rung"}
    if transfers:
        console.print("transfer across rungs: " + "; ".join(f"{o}: {r}" for o, r in sorted(transfers))
                      + "; every other optimizer tuned at every rung")
