"""The end of a sweep: :class:`SweepSummary` (what :func:`harness.orchestrate.run.run_sweep` returns), the
best configuration per task and optimizer and the summary tables with the commands to look further. A task
is the report's: model, dataset and the task-defining params that vary (:mod:`harness.orchestrate.tasks`).
"""

from __future__ import annotations

import shlex
import statistics
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from harness.core import ties
from harness.core.boundary import edge, edge_warning, grid_edge, grid_warning
from harness.core.budget import budget_line, eval_note
from harness.core.clock import DEFAULT_CLOCK, ranked_seconds
from harness.core.outcome import TrialOutcome, config_key, config_labels, last_rounds, task_key
from harness.core.processes import python_command
from harness.core.redact import mask_uri
from harness.core.selection_rule import (
    DEFAULT_SELECT_BY,
    ranking_metric,
    selection_key,
    selection_words,
    value_kind,
)
from harness.orchestrate.legend import legend, tie_line
from harness.orchestrate.target_claims import equal_token_lines, target_claim_lines
from harness.orchestrate.tasks import classed_modeled, task_clocks, task_order, task_titles
from harness.tracking.uris import default_tracking_uri


@dataclass
class SweepSummary:
    """What :func:`run_sweep` returns: the outcomes of every trial of the sweep (skipped included)."""

    name: str
    sweep_id: str
    experiment_id: str | None
    parent_run_id: str | None
    tracking_uri: str
    outcomes: list[TrialOutcome]
    wall_s: float
    dry_run: bool = False
    #: Results still in the local spool at the end (the store did not answer), its folder: written next time.
    spooled_left: int = 0
    spool_dir: str = ""
    #: Results that went through the spool during this invocation (written later, or still left).
    spooled_during: int = 0
    #: The store's last error while it was unreachable (one line), if any.
    store_error: str = ""
    #: Trial ids whose results are still only in the local spool when the sweep ended.
    in_spool: frozenset[str] = frozenset()
    config_path: str = ""  # the config file, for the command that writes the spooled results
    #: Boundary warnings of the selected configurations (:func:`boundary_warnings`).
    boundary: list[str] = field(default_factory=list)
    #: The selection objective (the config's ``selection.by``, :mod:`harness.core.selection_rule`).
    select_by: str = DEFAULT_SELECT_BY
    #: The clock time to target ranks on (the config's ``time:``, :mod:`harness.core.clock`).
    time_clock: str = DEFAULT_CLOCK
    #: The parent run's time budget (``part -> s``, :mod:`harness.orchestrate.sweep_clock`) and the wall-clock
    #: its parts add up to; ``None`` when this invocation trained nothing.
    budget: dict[str, float] | None = None
    budget_wall_s: float = 0.0
    timing: str = ""  # the throughput timing's rounds when its cost bound cut them (the time line)
    #: Every trial this invocation was given, in the config's order (with ``only``, that part):
    #: done, to do and, in a dry run, planned.
    trial_ids: list[str] = field(default_factory=list)
    #: An adaptive sweep's searches, each cell's ``describe`` (``search.json``).
    search: list[dict[str, Any]] = field(default_factory=list)
    #: A smoke run's line (``sweep --max-steps``, :func:`harness.orchestrate.smoke.smoke_line`); ``""``.
    smoke: str = ""

    def budget_line(self, width: int = 80) -> str:
        """``"time 41.8 s: compile 37%, ..."`` (<= ``width`` chars), its eval_note; "" without a budget."""
        if self.budget is None:
            return ""
        timing = f"; {self.timing}" if self.timing else ""
        line = f"time {budget_line(self.budget_wall_s, self.budget, width - 5 - len(timing))}{timing}"
        return line + (f"\n{note}" if (note := eval_note(self.budget_wall_s, self.budget)) else "")

    def spool_account(self) -> str:
        """One line about results the store did not take at once ("" when there were none)."""
        if self.spooled_left:
            why = f" (the store: {self.store_error})" if self.store_error else ""
            return (f"{self.spooled_left} results spooled at {self.spool_dir}; they will be written on "
                    f"the next run{why}")
        if self.spooled_during:
            return (f"{self.spooled_during} results were kept in the local spool while the store was "
                    f"unreachable; all were written when it answered again")
        return ""

    def counts(self) -> dict[str, int]:
        """Trials per status (``finished`` counts the spooled ones too, see :meth:`spooled`) and
        ``skipped`` (from earlier runs)."""
        c = {"finished": 0, "diverged": 0, "failed": 0, "skipped": 0}
        for o in self.outcomes:
            c[o.status] = c.get(o.status, 0) + 1
            c["skipped"] += o.skipped
        return c

    def spooled(self) -> dict[str, int]:
        """Trained trials whose results are only in the local spool, not yet in the store, per
        status (``finished``, ``diverged``, ``stopped``: stopped at a rung)."""
        return {s: sum(o.status == s and o.trial_id in self.in_spool for o in self.outcomes)
                for s in ("finished", "diverged", "stopped")}

    def headline(self) -> str:
        """The counts under the summary's title: trials in the store, and apart from them those whose
        results are only in the local spool ("1 finished, 7 finished and spooled (not yet in the
        store), ...")."""
        c, spooled = self.counts(), self.spooled()
        parts = [f"{c['finished'] - spooled['finished']} finished"]
        if any(spooled.values()):
            parts.append(" and ".join(f"{n} {s}" for s, n in spooled.items() if n)
                         + " and spooled (not yet in the store)")
        parts.append(f"{c['diverged'] - spooled['diverged']} diverged")
        if c.get("stopped", 0) - spooled["stopped"]:  # early stopping: never selected
            parts.append(f"{c['stopped'] - spooled['stopped']} stopped early")
        # the time budget's wall-clock where there is one (from the process start, as the "time"
        # line says it), so the two lines of one summary never give two figures
        wall = self.budget_wall_s if self.budget is not None else self.wall_s
        return ", ".join(parts) + f", {c['failed']} failed, {c['skipped']} from earlier runs; " \
                                  f"{wall:.1f} s"

    def spool_hint(self, py: str = "python") -> str:
        """The command that writes the spooled results of this sweep ("" when none are left)."""
        n = sum(self.spooled().values())
        if not n:
            return ""
        cfg = shlex.quote(str(self.config_path or "CONFIG"))
        return (f"{n} spooled {'result is' if n == 1 else 'results are'} not yet in the store: run "
                f"`{py} -m harness sweep {cfg}{self.uri_option()}` when it "
                f"answers to write {'it' if n == 1 else 'them'}")

    def uri_option(self) -> str:
        """`` --tracking-uri URI`` unless the store is the default one (its password masked: the
        user types it, or sets it in the environment)."""
        if self.tracking_uri == default_tracking_uri():
            return ""
        return f" --tracking-uri {shlex.quote(mask_uri(self.tracking_uri))}"


def best_configs(outcomes: list[TrialOutcome], by: str = DEFAULT_SELECT_BY,
                 clock: str = DEFAULT_CLOCK, audits: bool = True) -> list[dict[str, Any]]:
    """Best configuration per task and optimizer, selected exactly like the HTML report's leaderboard
    (:func:`reports.selection.best_configs`) by the objective ``by``
    (:func:`harness.core.selection_rule.selection_key`, one rule for both; ties: the configuration's
    smallest trial id). A task: :func:`harness.core.outcome.task_key`, the report's ``task`` (rows'
    ``task``, ``task_title``: :func:`harness.orchestrate.tasks.task_titles`); a configuration: its exact
    values, the report's ``config_id`` (:func:`harness.core.outcome.config_key`; ``config`` the label
    printed, :func:`harness.core.outcome.config_labels`). Seconds to target are on ``clock``
    (:mod:`harness.core.clock`; a task where a trial has no timed step ranks on the cost clock,
    :func:`task_clocks`). Selection never reads the test split: ``value`` is the mean validation
    metric it was selected on (final; the best during training for ``by="best"``), ``test_value``
    the mean test metric over the seeds that have one (``None`` before the three-split protocol);
    ``seed_seconds`` and ``seed_values`` the same per seed, what :func:`ranked_rows` ties on."""
    kind = value_kind(by)
    # an audit trial stands for its stopped twin's seed (last_rounds: the one not stopped wins), so
    # a configuration it trained to the end competes; audits=False: early stopping's own selection
    outcomes = outcomes if audits else [o for o in outcomes if not o.audit_of]
    clocks = task_clocks(outcomes, clock)
    groups: dict[tuple, list[TrialOutcome]] = {}
    for o in outcomes:  # one configuration: the report's config_id (0.1000001 and 0.1000004 are two)
        groups.setdefault(config_key(o), []).append(o)
    groups = {k: last_rounds(os_) for k, os_ in groups.items()}  # one trial per seed, as the report
    # an optimizer whose every seed failed on a task (its last round, successive halving's earlier
    # stopped ones aside: reports.selection's rule) has no result to rank (ties.UNRANKED)
    with_results = {k[:4] for k, os_ in groups.items() if any(o.status != "failed" for o in os_)}
    sel = _Selection(by, kind, clocks, *classed_modeled(outcomes, clocks), config_labels(outcomes),
                     task_titles(outcomes), with_results)
    best: dict[tuple, dict[str, Any]] = {}
    for key, os_ in groups.items():
        row = _config_row(sel, key, os_)
        if key[:4] not in best or row["_rank"] < best[key[:4]]["_rank"]:
            best[key[:4]] = row
    return [{k: v for k, v in r.items() if k != "_rank"} for r in best.values()]


class _Selection(NamedTuple):
    """What :func:`best_configs` selects each configuration's row with."""

    by: str
    kind: str  # value_kind(by): "best" selects on the best value during training
    clocks: dict[tuple, str]  # task -> its clock (task_clocks)
    modeled: dict[str, float]  # trial id -> modeled seconds to target (classed_modeled)
    classes: dict[str, Any]
    ranges: dict[str, Any]
    labels: dict[tuple, str]  # config_key -> its label (config_labels)
    titles: dict[tuple, str]  # task -> its title (task_titles)
    with_results: set[tuple]  # (*task, optimizer) with a trial not failed


def _config_row(sel: _Selection, key: tuple, os_: list[TrialOutcome]) -> dict[str, Any]:
    """One configuration's row of :func:`best_configs` (``key``: its :func:`config_key`; ``os_``:
    one trial per seed), with ``_rank``, its :func:`harness.core.selection_rule.selection_key`."""
    task, (ds, model), (opt, conf_id, exact) = key[:3], key[:2], key[3:]
    ok = [o for o in os_ if o.status == "finished"]
    metric = ranking_metric(os_[0].target_metric if os_[0].has_target else None,
                            any(o.language_model for o in os_))
    is_loss = metric.endswith("/loss")
    if sel.kind == "best":
        vals = [(o.best_valid_loss if is_loss else o.best_valid_accuracy) for o in ok]
    else:
        vals = [(o.final_valid_loss if is_loss else o.final_valid_accuracy) for o in ok]
    seed_values = {_seed(o): v for o, v in zip(ok, vals, strict=True) if v is not None}
    vals = [v for v in vals if v is not None]
    # on the task's clock (task_clocks), per seed
    seed_seconds = {_seed(o): x for o in ok if (x := ranked_seconds(
        sel.modeled.get(o.trial_id), o.cost_seconds_to_target, o.seconds_to_target, sel.clocks[task]))
        is not None}
    tests = [(o.test_loss if is_loss else o.test_accuracy) for o in ok]
    tests = [v for v in tests if v is not None]
    row = {
        "flagged": any(o.perf_suspect for o in ok),
        "cost_class": next((c for o in ok if (c := sel.classes.get(o.trial_id)) is not None), None),
        "cost_range": next((c for o in ok if (c := sel.ranges.get(o.trial_id)) is not None), None),
        "dataset": ds, "model": model, "task": task, "task_title": sel.titles[task],
        "optimizer": opt, "metric": metric, "config_id": conf_id,
        "config": sel.labels[key], "config_exact": exact,
        "value": statistics.fmean(vals) if vals else None,
        "test_value": statistics.fmean(tests) if tests else None, "n": len(os_),
        "n_diverged": sum(o.status == "diverged" for o in os_),
        "n_failed": sum(o.status == "failed" for o in os_),
        "seconds_to_target": _median(list(seed_seconds.values())),
        "steps_to_target": _median([o.steps_to_target for o in ok]),
        "reached": sum(o.seconds_to_target is not None for o in ok),
        "finished": len(ok), "seed_seconds": seed_seconds, "seed_values": seed_values,
        "has_target": any(o.has_target for o in os_),
        "examples_per_sec": _median([o.examples_per_sec for o in os_]),
        "has_results": (*task, opt) in sel.with_results,
    }
    # an exact tie: the configuration's smallest trial id, as the report (the name here and
    # config_id's hash there named different configurations among thousands of trials)
    row["_rank"] = selection_key(row["reached"], row["steps_to_target"], len(ok), row["value"],
                                 not is_loss, row["seconds_to_target"], min(o.trial_id for o in os_), sel.by)
    return row


def _seed(o: TrialOutcome):
    return o.seed if o.seed is not None else o.trial_id


def ranked_rows(outcomes: list[TrialOutcome], by: str = DEFAULT_SELECT_BY,
                clock: str = DEFAULT_CLOCK) -> list[dict[str, Any]]:
    """:func:`best_configs`' rows ranked per task as the report's leaderboard ranks them
    (:mod:`harness.core.ties`, one rule for both): sorted by task, then ``order`` (groups in rank
    order, a tie's rows in the order of the "to target" column shown, else of the validation value
    that ranks them), each with ``rank`` (the strict position), ``label`` (``"1="`` for a shared
    rank, ``"—"`` unranked: every seed's last round failed), ``tie_on`` (what orders a tie's rows;
    ``""`` for a lone row) and ``separation`` (for a row below a tied neighbour,
    :func:`harness.core.ties.separation` of the two; else ``None``). A task is the report's
    (:mod:`harness.orchestrate.tasks`): two widths are two tasks, each ranked on its own."""
    tasks: dict[tuple, list[dict[str, Any]]] = {}
    for r in best_configs(outcomes, by, clock):
        tasks.setdefault(r["task"], []).append(r)
    out = []
    for key in sorted(tasks, key=task_order):
        rows = {r["optimizer"]: r for r in tasks[key]}
        ordered = ties.strict_order([ties.Standing(
            name=r["optimizer"], reached=r["reached"], finished=r["finished"],
            median_steps=r["steps_to_target"], seconds=r["seed_seconds"], values=r["seed_values"],
            higher_is_better=not r["metric"].endswith("/loss"), cost_class=r["cost_class"],
            cost_range=r["cost_range"], has_results=r["has_results"]) for r in tasks[key]], by)
        groups = ties.share_ranks(ordered, by)
        labels = ties.tie_labels(groups, ordered)
        for grp in groups:
            members = [ordered[i] for i in grp]
            on = ties.tie_column(members, by)
            shown = [rows[m.name]["seconds_to_target"] if on == ties.TIME else rows[m.name]["value"]
                     for m in members]
            prev = None
            for j in ties.order_within(shown, on == ties.TIME or not members[0].higher_is_better):
                i = grp[j]
                out.append({**rows[ordered[i].name], "rank": i + 1, "label": labels[i][1], "order": len(out),
                            "tie_on": on if len(grp) > 1 else "",
                            "separation": ties.separation(ordered[prev], ordered[i], by)
                            if prev is not None else None})
                prev = i
    return out


def boundary_warnings(outcomes: list[TrialOutcome], trials: list, by: str = DEFAULT_SELECT_BY) -> list[str]:
    """One line per sampled hyperparameter of a selected configuration (:func:`best_configs`) that
    lies in the outer 10% of its search range (:func:`harness.core.boundary.edge`; log scale for
    ``log_uniform``): ``"lion: best step_size 0.00082 is at the top of [1e-05, 0.001] (mlp ·
    digits): widen the range"`` (in brackets the task's title, :func:`harness.orchestrate.tasks.task_titles`),
    and per grid value that is the smallest or largest of three or more its optimizer's trials on the
    task took (:func:`harness.core.boundary.grid_edge`): ``"sgd: best step_size 0.3 is the largest of
    its grid [0.01, 0.1, 0.3] (mlp · digits): extend the grid"``.
    ``trials`` is the sweep's :class:`~harness.plan.expansion.TrialList`
    (its ``origins`` hold each sampled trial's ranges); grid and ``tuning: none`` trials have none.
    ``by``: the selection objective (:func:`best_configs`)."""
    origins = getattr(trials, "origins", {}) or {}
    specs = {s.trial_id: s for s in trials}
    first: dict[tuple, str] = {}
    grids: dict[tuple, dict[str, list]] = {}  # (task, optimizer) -> grid key -> the values it took
    for o in outcomes:
        first.setdefault(config_key(o), o.trial_id)
        if (g := _grid_values(specs.get(o.trial_id), origins.get(o.trial_id))) is not None:
            for key, v in g.items():
                grids.setdefault((task_key(o), o.optimizer), {}).setdefault(key, []).append(v)
    out = []
    for r in sorted(best_configs(outcomes, by), key=lambda r: (task_order(r["task"]), r["optimizer"])):
        tid = first.get((*r["task"], r["optimizer"], r["config_id"], r["config_exact"]))
        origin, spec = origins.get(tid), specs.get(tid)
        if origin is None or spec is None:
            continue
        for rng in origin.ranges:
            axis, name = rng.key.split(".", 1)
            value = spec.hparams(axis).get(name)
            side = edge(value, rng)
            if side:
                out.append(edge_warning(r["optimizer"], rng, value, side, r["task_title"]))
        values = grids.get((r["task"], r["optimizer"]), {})
        for key, value in (_grid_values(spec, origin) or {}).items():
            if side := grid_edge(value, values.get(key, [])):
                out.append(grid_warning(r["optimizer"], key, value, values[key], side, r["task_title"]))
    return out


def _grid_values(spec, origin) -> dict[str, Any] | None:
    """A trial's optimizer and schedule values that a grid set (``optimizer.step_size`` -> 0.1; the
    sampled ones left out), or ``None`` for a trial of no known origin or of ``tuning: none``."""
    if spec is None or origin is None or origin.tuning:
        return None
    return {f"{axis}.{k}": v for axis in ("optimizer", "schedule") for k, v in spec.hparams(axis).items()
            if f"{axis}.{k}" not in origin.sampled}


def _median(xs: list[float | None]) -> float | None:
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def _distinct_parts(configs: list[str]) -> dict[str, str]:
    """config string → the words of it that are not shared by every config in ``configs`` (what
    tells the configurations of one model and optimizer apart; ``""`` when there is one)."""
    words = [c.split() for c in configs]
    common = set.intersection(*map(set, words)) if words else set()
    return {c: " ".join(w for w in ws if w not in common).replace("step_size=", "lr=")
            for c, ws in zip(configs, words, strict=True)}


def config_cell(config: str, optimizer_configs: list[str], task_configs: list[str]) -> str:
    """The "best config" cell of ``config``: what tells it apart from the other configurations its
    optimizer ran (``optimizer_configs``); when the optimizer ran this one configuration, what
    tells it apart from the other optimizers' on the task (``task_configs``: its step size, ...);
    when that is nothing either, the whole configuration. Never empty: a configuration that ran
    shows its values. The step size is always shown (``lr=0.003 constant``): it is what a reader
    looks for, also where the optimizer's configurations differ only in their schedule."""
    lr = next((w.replace("step_size=", "lr=") for w in config.split() if w.startswith("step_size=")), "")
    for pool in (optimizer_configs, task_configs):
        if len(set(pool)) > 1 and (part := _distinct_parts(sorted(set(pool)))[config]):
            return part if not lr or lr in part.split() else f"{lr} {part}"
    return config.replace("step_size=", "lr=")


def _si(x: float) -> str:
    for div, unit in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= div:
            return f"{x / div:.3g}{unit}"
    return f"{x:.3g}"


def audit_changes(outcomes: list[TrialOutcome], by: str = DEFAULT_SELECT_BY,
                  clock: str = DEFAULT_CLOCK) -> list[str]:
    """One line per task and optimizer whose selected configuration an early-stopping search's
    audit changed (:func:`best_configs` with and without the audit trials), as
    :func:`reports.selection.audit_changes` says it; ``[]`` without audits."""
    if not any(o.audit_of for o in outcomes):
        return []
    before = {(r["task"], r["optimizer"]): r["config"]
              for r in best_configs(outcomes, by, clock, audits=False)}
    return [f"{r['optimizer']} ({r['task_title']}): {r['config']}, trained to the end by an audit, is "
            f"selected; early stopping alone picked {before[(r['task'], r['optimizer'])]}"
            for r in best_configs(outcomes, by, clock)
            if before.get((r["task"], r["optimizer"]), r["config"]) != r["config"]]


def print_summary(console, summary: SweepSummary, explain: bool = False) -> None:
    """The end-of-sweep summary: its title lines, one ranked table per task (:func:`ranked_rows`:
    rank, optimizer, best configuration, validation and test metric, time to target, examples/s,
    seeds; short labels, so that it fits an 80-column terminal, else a block per row; the full
    configurations are in the HTML report), what the columns mean and the clock (:func:`legend`;
    in full with ``explain``, ``sweep --explain``), the ties' line (:func:`tie_line`) and the
    commands to look further."""
    from rich.markup import escape

    rows = ranked_rows(summary.outcomes, summary.select_by, summary.time_clock)
    clocks = task_clocks(summary.outcomes, summary.time_clock)
    titles = task_titles(summary.outcomes)
    on_modeled = summary.time_clock != "measured"
    measured = [titles[k] for k in sorted(clocks, key=task_order) if on_modeled and clocks[k] == "measured"]
    cost = [titles[k] for k in sorted(clocks, key=task_order) if clocks[k] == "cost"]
    # One metric for every row: it names the columns. Mixed (workloads with loss and accuracy
    # targets): the columns are "valid"/"test" and each value carries its metric ("loss 1.9343").
    metrics = {_short_metric(r["metric"]) for r in rows} or {"acc"}
    shared = next(iter(metrics)) if len(metrics) == 1 else None
    chosen = selection_words(summary.select_by, "valid/" + ("metric" if shared is None else
                                                          {"acc": "accuracy"}.get(shared, shared)))
    caption = legend(summary, measured, cost, titles, explain)
    console.print(f"[bold]{escape(summary.name)}: best configuration per task and optimizer[/]",
                  soft_wrap=True)
    console.print(chosen, soft_wrap=True)
    console.print(summary.headline(), soft_wrap=True)
    if summary.smoke:
        console.print(escape(summary.smoke), soft_wrap=True)
    _print_task_tables(console, summary, rows, titles, shared)
    _print_notes(console, summary, rows, caption)


def _short_metric(metric: str) -> str:
    """``valid/accuracy`` -> ``acc``, ``valid/loss`` -> ``loss``: a column's or value's label."""
    return metric.split("/", 1)[-1].replace("accuracy", "acc")


def _print_task_tables(console, summary: SweepSummary, rows: list[dict[str, Any]], titles: dict,
                       shared: str | None) -> None:
    """One ranked table per task (its label the title), so that the rank, optimizer and numbers fit
    80 columns; the optimizer on one line, the rest may wrap at words (a header over two lines)
    (:func:`harness.orchestrate.tables.print_table`: else a block per row). ``shared``: the one metric of
    every row, in the headers; ``None``: each value carries its metric."""
    import itertools

    from rich import box
    from rich.markup import escape
    from rich.table import Table

    from harness.orchestrate.tables import print_table

    configs: dict[tuple, list[str]] = {}
    task_configs: dict[tuple, list[str]] = {}
    labels = config_labels(summary.outcomes)  # as best_configs labels its rows
    for o in summary.outcomes:  # per task (the report's: harness.orchestrate.tasks) and optimizer
        configs.setdefault((*task_key(o), o.optimizer), []).append(labels[config_key(o)])
        task_configs.setdefault(task_key(o), []).append(labels[config_key(o)])
    head = f" {shared}" if shared else ""
    for task, task_rows in itertools.groupby(rows, key=lambda r: r["task"]):
        t = Table(box=box.SIMPLE_HEAD, pad_edge=False, padding=(0, 1), collapse_padding=True,
                  show_edge=False, title=escape(titles[task]), title_justify="left", title_style="bold")
        t.add_column("rank", no_wrap=True)
        t.add_column("optimizer", no_wrap=True)
        t.add_column("best config")
        for col in (f"valid{head}", f"test{head}", "to target (median)", "ex/s", "seeds"):
            t.add_column(col, justify="right")
        for r in task_rows:
            best = config_cell(r["config"], configs[(*task, r["optimizer"])], task_configs[task])
            t.add_row(r["label"], r["optimizer"], escape(best), *_row_cells(r, shared))
        print_table(console, t)


def _row_cells(r: dict[str, Any], shared: str | None) -> tuple[str, ...]:
    """A summary row's valid, test, to target, ex/s and seeds cells."""
    label = "" if shared else f"{_short_metric(r['metric'])} "
    val = "—" if r["value"] is None else f"{label}{r['value']:.4f}"
    test = "—" if r.get("test_value") is None else f"{label}{r['test_value']:.4f}"
    ttt = ("no target" if not r.get("has_target", True) else "not reached"
           if r["seconds_to_target"] is None else f"{r['seconds_to_target']:.3g} s"
           + (f" ({r['reached']}/{r['n']})" if r["reached"] < r["n"] else "")
           + (" †" if r.get("flagged") else ""))  # perf.suspect: the caption says why
    eps = "—" if r["examples_per_sec"] is None else _si(r["examples_per_sec"])
    bad = ", ".join(f"{n} {k}" for k, n in (("div", r["n_diverged"]), ("fail", r["n_failed"])) if n)
    trials = f"{r['n']}" + (f" ({bad})" if bad else "")
    return val, test, ttt, eps, trials


def _print_notes(console, summary: SweepSummary, rows: list[dict[str, Any]], caption: str) -> None:
    """The lines under the tables: the legend, ties, target claims, equal tokens, budget, search
    ranges, the searches' certificates and stops, audits, the spool, then the commands to look."""
    from rich.markup import escape

    py = python_command()  # the commands at the end: to paste into a shell, quoted, markup escaped
    whole = not console.is_terminal  # a pipe or a file: each record on one line, never wrapped
    console.print(escape(caption), soft_wrap=whole)
    if line := tie_line(rows):
        console.print(escape(line), soft_wrap=whole)
    claims = [f"target claim: {line}" for line in target_claim_lines(summary.outcomes, rows)]
    for line in claims + equal_token_lines(summary.outcomes, rows):  # then the loss at equal tokens
        console.print(escape(line), soft_wrap=True)
    if line := summary.budget_line():
        console.print(line, soft_wrap=True)
    for line in summary.boundary:
        console.print(f"[yellow]search range[/]: {escape(line)}", soft_wrap=True)
    for d in summary.search:  # a coordinate descent's certificate, one line per optimizer and task
        if cert := d.get("certificate"):
            console.print(f"coordinate descent: {escape(d['optimizer'])} ({escape(d['task'])}): "
                          f"{escape(cert['words'])}", soft_wrap=True)
        elif d.get("words"):  # an early-stopping search: its stops, steps and audit
            console.print(f"{escape(str(d['method']))}: {escape(d['optimizer'])} ({escape(d['task'])}): "
                          f"{escape(d['words'])}", soft_wrap=True)
    for line in audit_changes(summary.outcomes, summary.select_by, summary.time_clock):
        console.print(f"audit changed the selection: {escape(line)}", soft_wrap=True)
    if hint := summary.spool_hint(py):
        console.print(escape(hint), soft_wrap=True)
    uri_opt, name = summary.uri_option(), shlex.quote(summary.name)
    console.print(escape(f"Open the MLflow UI: {py} -m harness ui --experiment {name}{uri_opt}"),
                  soft_wrap=True)
    console.print(escape(f"HTML report:        {py} -m harness report --experiment {name} "
                         f"--sweep {summary.sweep_id}{uri_opt}"), soft_wrap=True)
