"""What a sweep prints while it runs: the dry-run plan table, the progress bar with one line per
finished trial.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from harness.tracking.dedupe import dedupe_finished_runs
from harness.tracking.health import HEALTH
from harness.execute.worker import TrialOutcome

if TYPE_CHECKING:
    from harness.config.schema import SweepConfig
    from harness.plan.units import Plan


def print_plan(console, cfg: SweepConfig, plan: Plan, sweep_id: str, uri: str) -> None:
    from rich.table import Table

    t = Table(title=f"sweep {cfg.name!r} ({sweep_id}): {len(plan.specs)} trials, {len(plan.done)} done "
                    f"(skipped), {len(plan.todo)} to run", show_lines=False)
    for col in ("#", "trial_id", "run name", "dataset", "config", "steps", "state"):
        t.add_column(col)
    from harness.execute.worker import config_label, run_name

    for i, s in enumerate(plan.specs):
        state = "done" if s.trial_id in plan.done else (
            "re-run (failed before)" if s.trial_id in plan.failed_before else "to run")
        t.add_row(str(i + 1), s.trial_id, run_name(s), s.dataset, config_label(s), str(s.steps), state)
    console.print(t)
    print_search(console, plan.specs)
    console.print(f"tracking: {uri}; batching: {cfg.batching}; executor: {cfg.executor} (jobs={cfg.jobs})")


def _val(v: object) -> str:
    return f"{v:.6g}" if isinstance(v, float) else str(v)


def print_search(console, trials) -> None:
    """The dry run's search part: per cell with sampled hyperparameters, its points (index ``k`` in
    the sequence and the sampled values, once per configuration); then the tuning budget of every
    optimizer per task, and a warning line for each task whose optimizers get unequal budgets.
    ``trials`` is an :func:`harness.plan.expansion.expand` result (plain lists print nothing)."""
    from rich.markup import escape
    from rich.table import Table

    from harness.plan.expansion import budgets, unequal_budgets

    origins = getattr(trials, "origins", None)
    if not origins:
        return
    cells: dict[tuple, dict[tuple, tuple]] = {}
    for s in trials:
        o = origins[s.trial_id]
        if o.index is None:
            continue
        key = (o.task, s.optimizer, o.paths["optimizers"], s.schedule, o.paths["schedules"], o.method,
               o.sampled)
        values = tuple(s.hparams(k.split(".", 1)[0])[k.split(".", 1)[1]] for k in o.sampled)
        cells.setdefault(key, {}).setdefault((o.index, values), values)
    for (task, opt, opath, sched, _, method, sampled), pts in cells.items():
        console.print(escape(f"{method} points of {opt} ({opath}) · {sched} on {task}:"), soft_wrap=True)
        t = Table()
        t.add_column("k", justify="right")
        for k in sampled:
            t.add_column(k, justify="right")
        for (idx, _), values in sorted(pts.items(), key=lambda kv: kv[0][0]):
            t.add_row(str(idx), *(_val(v) for v in values))
        console.print(t)
    b = budgets(trials)
    console.print("tuning budget: configurations per optimizer and task (each runs with every seed):")
    t = Table()
    for col in ("task", "optimizer", "configurations"):
        t.add_column(col, justify="right" if col == "configurations" else "left")
    for task, opts in b.items():
        for opt, n in opts.items():
            t.add_row(escape(task), opt, str(n))
    console.print(t)
    for line in unequal_budgets(trials):
        console.print(escape(line), soft_wrap=True)



def execute_with_progress(console, ex, units, ctx, outcomes: list[TrialOutcome], plan: Plan,
                          quiet: bool) -> None:
    """Run ``units`` on executor ``ex`` under a progress bar (one line per finished trial unless
    ``quiet``), appending every outcome to ``outcomes``; then keep one FINISHED run per trial.

    Trials ``deferred`` because another invocation on this machine holds their claim are run again
    at the end, each waiting for its claim (they are then found done, or trained here). While the
    store fails, the bar's description says so and how many results are in the local spool; a
    result a worker on another machine could not write arrives in its outcome and is spooled here.
    """
    import dataclasses

    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        SpinnerColumn,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    from harness.tracking import spool

    n_todo = sum(len(u) for u in units)
    counts = {"finished": 0, "diverged": 0, "failed": 0}
    deferred: list = []

    def desc() -> str:
        d = (f"[green]{counts['finished']} ok[/] [yellow]{counts['diverged']} diverged[/] "
             f"[red]{counts['failed']} failed[/]")
        h = HEALTH
        if h.down:
            from rich.markup import escape

            n = len(spool.entries(ctx.tracking_uri))
            d += f" [red]· store unreachable ({escape(h.error[:60])}); {n} results spooled[/]"
        return d

    with Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(), console=console,
                  disable=quiet, transient=False) as progress:
        task = progress.add_task(desc(), total=n_todo)
        if plan.done and not quiet:
            progress.console.print(f"{len(plan.done)} trials already finished: skipped")

        was_down = [False]

        def store_news() -> None:
            from rich.markup import escape

            h = HEALTH
            if h.down and not was_down[0] and not quiet:
                msg = (f"the store is unreachable ({h.error}); finished results go to the local spool "
                       f"{spool.spool_dir(ctx.tracking_uri)}; training goes on")
                progress.console.print(f"[red]{escape(msg)}[/]", soft_wrap=True)
            elif was_down[0] and not h.down and not quiet:
                progress.console.print("[green]the store answers again; spooled results are written[/]")
            was_down[0] = h.down

        def on_done(batch: list[TrialOutcome]) -> None:
            n = 0
            for o in batch:
                if o.deferred:
                    deferred.append(o.trial_id)
                    continue
                entry = o.extra.pop("spool_entry", None)
                if entry is not None:  # a worker's result the store did not take
                    import os

                    HEALTH.failed(RuntimeError(entry.get("error", "write failed")))
                    if not os.path.exists(entry.get("path", "")):  # written on another machine
                        entry.pop("path", None)
                        spool.put(ctx.tracking_uri, entry)
                outcomes.append(o)
                n += 1
                if not o.skipped:
                    counts[o.status] = counts.get(o.status, 0) + 1
                if not quiet:
                    progress.console.print(_outcome_line(o))
            store_news()
            progress.update(task, advance=n, description=desc())

        ex.run(units, ctx, on_done)
        if deferred:
            if not quiet:
                progress.console.print(f"{len(deferred)} trials are being trained by another invocation "
                                       f"on this machine: waiting for them")
            by_id = {s.trial_id: s for u in units for s in u}
            again = [[by_id[t]] for t in deferred]
            deferred.clear()
            from harness.execute.worker import CLAIM_WAIT_S

            ex.run(again, dataclasses.replace(ctx, claim_wait_s=CLAIM_WAIT_S), on_done)
        # an invocation on another machine (or a retried Ray task) may have finished a trial too:
        # keep one FINISHED run per trial
        dedupe_finished_runs(ctx.tracking_uri, ctx.experiment_id,
                             {s.trial_id for unit in units for s in unit})


def _fmt(x: float | None, spec: str = ".4f") -> str:
    return "—" if x is None else format(x, spec)


def _outcome_line(o: TrialOutcome) -> str:
    color = {"finished": "green", "diverged": "yellow", "failed": "red"}.get(o.status, "white")
    extra = f"valid acc {_fmt(o.final_valid_accuracy)} loss {_fmt(o.final_valid_loss)}"
    if o.status == "failed":
        extra = o.reason
    elif o.status == "diverged":
        extra = o.reason or "diverged"
    from rich.markup import escape

    skipped = " (already done)" if o.skipped else ""
    if o.spooled:
        skipped += " (spooled: the store did not answer)" if not o.skipped else " (in the local spool)"
    return f"[{color}]{o.status:8}[/] {escape(f'{o.run_name} [{o.trial_id}]{skipped} {extra}')}"
