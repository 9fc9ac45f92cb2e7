"""What a sweep prints while it runs: the dry-run plan table and search points, the progress bar
(:class:`ProgressDisplay`) with one line per finished trial. Display only: what runs is
:mod:`harness.orchestrate.execution`'s.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from harness.core.outcome import TrialOutcome, config_label, run_name
from harness.core.redact import mask_uri
from harness.orchestrate.tables import print_table
from harness.tracking import spool
from harness.tracking.health import HEALTH

if TYPE_CHECKING:
    from collections.abc import Mapping

    from harness.config.load import SweepConfig
    from harness.orchestrate.resume import Plan


#: Reasons (:func:`harness.orchestrate.resume.why_to_run`) of a trial that ran before in this version.
_AGAIN = ("failed before", "killed before", "unfinished before")


def state_of(trial_id: str, plan: Plan, why: dict[str, str]) -> str:
    """A trial's state in the dry run's table: ``done``, ``re-run (failed before)`` (killed,
    unfinished), or ``to run (new)`` / ``to run (source changed (...))`` / ``to run (config
    changed (...))``."""
    if trial_id in plan.done:
        return "done"
    reason = why.get(trial_id, "new")
    return f"re-run ({reason})" if reason.startswith(_AGAIN) else f"to run ({reason})"


def why_line(plan: Plan, why: dict[str, str]) -> str:
    """One line counting the reasons of the trials to run: ``to run: 2 new, 1 source changed
    (opts.py:f), 1 failed before``; ``""`` when none is to run."""
    counts: dict[str, int] = {}
    for s in plan.todo:
        reason = why.get(s.trial_id, "new")
        kind = reason.split(" (", 1)[0]
        if kind in ("source changed", "source and config changed") and s.optimizer_source:
            kind += f" ({s.optimizer_source})"
        counts[kind] = counts.get(kind, 0) + 1
    return ("to run: " + ", ".join(f"{n} {k}" for k, n in counts.items())) if counts else ""


#: The most rows the dry run lists per table (its trials, a cell's search points); the counts cover
#: every trial. Listing 10,000 trials whole would be most of a dry run's time and output;
#: ``harness.sweep(..., dry_run=True).trial_ids`` has them all.
DRY_RUN_ROWS = 1000


def _listed(console, n: int, what: str) -> None:
    """The line under a table cut at :data:`DRY_RUN_ROWS` rows of ``n`` (``what``: ``"trials"``,
    listed those to run first, or ``"points"``)."""
    if n > DRY_RUN_ROWS:
        which = ", those to run first" if what == "trials" else ""
        console.print(f"({DRY_RUN_ROWS:,} of {n:,} {what} are listed{which}; the counts cover all; "
                      f"--only AXIS=VALUE lists part of the config, and harness.sweep(CONFIG, "
                      f"dry_run=True).trial_ids every trial id)", soft_wrap=True)


def print_plan(console, cfg: SweepConfig, plan: Plan, sweep_id: str, uri: str,
               param_shapes: Mapping[tuple, Any] | None = None) -> None:
    """The dry run's table: every trial with its run name, configuration and state (done, or why it
    is to run: :func:`state_of`), a line counting the reasons, the search points, where it would
    log, and each program's step cost (``param_shapes``: the pre-flight's, :func:`cost_lines`)."""
    from rich.markup import escape
    from rich.table import Table

    from harness.orchestrate.ladder_plan import print_ladder
    from harness.orchestrate.resume import why_to_run

    why = why_to_run(plan)
    t = Table(title=f"sweep {cfg.name!r} ({sweep_id}): {len(plan.specs)} trials, {len(plan.done)} done "
                    f"(skipped), {len(plan.todo)} to run", show_lines=False)
    for col in ("#", "trial_id", "run name", "dataset", "config", "steps", "state"):
        t.add_column(col)
    rows = list(enumerate(plan.specs))
    if len(rows) > DRY_RUN_ROWS:  # cut: the trials to run first (a resumed sweep's first rows are done)
        done = set(plan.done)
        rows = sorted(rows, key=lambda r: r[1].trial_id in done)[:DRY_RUN_ROWS]
        rows.sort(key=lambda r: r[0])
    for i, s in rows:
        t.add_row(str(i + 1), s.trial_id, escape(run_name(s)), escape(s.dataset), escape(config_label(s)),
                  str(s.steps), escape(state_of(s.trial_id, plan, why)))
    print_table(console, t)
    _listed(console, len(plan.specs), "trials")
    if line := why_line(plan, why):
        console.print(escape(line))
    print_search(console, plan.specs)
    print_ladder(console, plan.specs)
    console.print(f"tracking: {mask_uri(uri)}; batching: {cfg.batching}; executor: {cfg.executor} "
                  f"(jobs={cfg.jobs})")
    from harness.plan.units import plan_lines

    for line in plan_lines(list(plan.todo), cfg.batching):
        console.print(escape(line), soft_wrap=True)
    from harness.orchestrate.step_cost import cost_lines

    for line in cost_lines(list(plan.specs), param_shapes):  # prose, not a record: wrapped to the width
        console.print(escape(line))


def _val(v: object) -> str:
    return f"{v:.6g}" if isinstance(v, float) else str(v)


def print_search(console, trials) -> None:
    """The dry run's search part: per cell with sampled hyperparameters, its points (index ``k`` in
    the sequence and the sampled values, once per configuration); then the tuning budget of every
    optimizer per task (a ``tuning: none`` entry's as ``1 (tuning: none)``), and a warning line for
    each task whose optimizers that tune get unequal budgets.
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
        for (idx, _), values in sorted(pts.items(), key=lambda kv: kv[0][0])[:DRY_RUN_ROWS]:
            t.add_row(str(idx), *(_val(v) for v in values))
        print_table(console, t)
        _listed(console, len(pts), "points")
    b, own = budgets(trials), budgets(trials, self_tuning=True)
    console.print("tuning budget: configurations per optimizer and task (each runs with every seed):")
    t = Table()
    for col in ("task", "optimizer", "configurations"):
        t.add_column(col, justify="right" if col == "configurations" else "left")
    for task in dict.fromkeys([*b, *own]):
        for opt, n in b.get(task, {}).items():
            t.add_row(escape(task), opt, str(n))
        for opt, n in own.get(task, {}).items():
            t.add_row(escape(task), opt, escape(f"{n} (tuning: none)"))
    print_table(console, t)
    for line in unequal_budgets(trials):
        console.print(escape(line), soft_wrap=True)


class ProgressDisplay:
    """The progress bar of a running sweep (a context manager; nothing shows when ``quiet``).

    ``total`` trials to run; ``n_done`` already finished (said once at the start). :meth:`trial`
    prints one line per finished trial and counts it; :meth:`unit_done` advances the bar. While the
    store fails, the bar's description says so and how many results are in the local spool of
    ``uri``, and a line says when it fails and when it answers again.
    """

    def __init__(self, console, total: int, n_done: int, uri: str, quiet: bool) -> None:
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            SpinnerColumn,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self.uri, self.quiet, self.n_done = uri, quiet, n_done
        self.counts = {"finished": 0, "diverged": 0, "failed": 0, "stopped": 0}
        self.was_down = False
        self.progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                                 MofNCompleteColumn(), TimeElapsedColumn(), TextColumn("ETA"),
                                 TimeRemainingColumn(), console=console, disable=quiet, transient=False)
        self.total = total
        self.pipe_stages: StageLine | None = None
        self.said: set[str] = set()  # the notes printed

    def __enter__(self) -> ProgressDisplay:
        self.progress.__enter__()
        self.task = self.progress.add_task(self._desc(), total=self.total)
        if self.n_done:
            self.note(f"{self.n_done} trials already finished: skipped")
        return self

    def __exit__(self, *exc) -> None:
        if self.pipe_stages is not None:
            self.pipe_stages.stop()
        self.progress.__exit__(*exc)

    def _desc(self) -> str:
        c = self.counts
        d = f"[green]{c['finished']} ok[/] [yellow]{c['diverged']} diverged[/] [red]{c['failed']} failed[/]"
        if c["stopped"]:  # early stopping
            d += f" [cyan]{c['stopped']} stopped[/]"
        h = HEALTH
        if h.down:
            from rich.markup import escape

            n = len(spool.entries(self.uri))
            d += f" [red]· store unreachable ({escape(h.error[:60])}); {n} results spooled[/]"
        return d

    def stage(self, name: str, text: str) -> None:
        """Say what the sweep does before the bar's first trial (the throughput measurement): on a
        terminal as the bar's description, until the next unit is done; on a pipe as a
        :class:`StageLine` (one line on stderr per stage name that lasts)."""
        if self.quiet:
            return
        if not self.progress.console.is_terminal:
            if self.pipe_stages is None:
                self.pipe_stages = StageLine(self.progress.console, self.quiet)
            self.pipe_stages.stage(name, text)
            return
        from rich.markup import escape

        self.progress.update(self.task, description=escape(text))

    def stage_done(self) -> None:
        """The stage :meth:`stage` said is over: the bar says its counts again."""
        if self.pipe_stages is not None:
            self.pipe_stages.stop()
        if not self.quiet:
            self.progress.update(self.task, description=self._desc())

    def note(self, line: str) -> None:
        """Print ``line`` above the bar (unless ``quiet``); on a pipe or a file, whole on one line
        (never wrapped at the console's width: one record per line for what reads it)."""
        if not self.quiet:
            self.progress.console.print(line, soft_wrap=not self.progress.console.is_terminal)

    def trial(self, o: TrialOutcome) -> None:
        """One finished (or skipped) trial: counted, and its line printed; then each of its notes
        (:attr:`TrialOutcome.notes`) that no earlier trial printed, as one line."""
        if not o.skipped:
            self.counts[o.status] = self.counts.get(o.status, 0) + 1
        self.note(outcome_line(o))
        from rich.markup import escape

        for line in o.notes:
            if line not in self.said:
                self.said.add(line)
                self.note(f"[yellow]{escape(line)}[/]")

    def grow(self, n: int) -> None:
        """``n`` more trials to run (an adaptive sweep's next round): the bar's total grows."""
        self.total += n
        self.progress.update(self.task, total=self.total)

    def _store_news(self) -> None:
        from rich.markup import escape

        h = HEALTH
        if h.down and not self.was_down:
            msg = (f"the store is unreachable ({h.error}); finished results go to the local spool "
                   f"{spool.spool_dir(self.uri)}; training goes on")
            if not self.quiet:
                self.progress.console.print(f"[red]{escape(msg)}[/]", soft_wrap=True)
        elif self.was_down and not h.down:
            self.note("[green]the store answers again; spooled results are written[/]")
        self.was_down = h.down

    def unit_done(self, n: int) -> None:
        """A unit ended with ``n`` trials reported: say what changed about the store, advance the bar."""
        self._store_news()
        self.progress.update(self.task, advance=n, description=self._desc())


def _fmt(x: float | None, spec: str = ".4f") -> str:
    return "—" if x is None else format(x, spec)


def outcome_line(o: TrialOutcome) -> str:
    """The progress line of one trial (rich markup): status, run name, trial id, and its validation
    accuracy and loss, or why it failed or diverged."""
    color = {"finished": "green", "diverged": "yellow", "failed": "red",
             "stopped": "cyan"}.get(o.status, "white")
    extra = f"valid acc {_fmt(o.final_valid_accuracy)} loss {_fmt(o.final_valid_loss)}"
    if o.status == "failed":
        extra = o.reason
    elif o.status in ("diverged", "stopped"):
        extra = o.reason or o.status
    from rich.markup import escape

    skipped = " (already done)" if o.skipped else ""
    if o.spooled:
        skipped += " (spooled: the store did not answer)" if not o.skipped else " (in the local spool)"
    status = o.status
    if o.run_id is None and not o.spooled and not o.skipped:
        # trained here, its run still queued on the background writer: not yet FINISHED in the store
        # (a kill now loses the result and the next sweep trains it again), so not called finished
        status, skipped = ("trained" if o.status == "finished" else o.status), skipped + " (being written)"
    return f"[{color}]{status:8}[/] {escape(f'{o.run_name} [{o.trial_id}]{skipped} {extra}')}"


def _elide(path: str, tail: int) -> str:
    """``path`` with the folders between its first and its last ``tail`` parts replaced by
    ``...`` (``/work/.../experiments/quickstart.yaml``); ``tail`` 0: ``.../quickstart.yaml``."""
    parts = path.split("/")
    if tail == 0:
        return f".../{parts[-1]}" if len(parts) > 1 else path
    first = next((i for i, p in enumerate(parts) if p and not p.endswith(":")), 0)
    if len(parts) - (first + 1) <= tail:
        return path
    return "/".join([*parts[:first + 1], "...", *parts[-tail:]])


def fit_line(text: str, width: int) -> str:
    """``text`` at most ``width`` characters where shortening it can do it, in this order: each
    path (a word with a ``/``) under the working directory made relative to it; a trailing remark
    in parentheses that holds no number (``(nothing is trained or written yet)``) left out; the
    longest paths elided in the middle (:func:`_elide`), keeping the file's name (:func:`_paths`
    says what a path is). Counts and names are never cut (a line that still does not fit wraps)."""
    import os
    import re

    if len(text) <= width:
        return text
    paths = sorted(set(_paths(text)), key=len, reverse=True)
    try:
        here = os.getcwd()
    except OSError:
        here = ""
    for p in paths:
        if here and os.path.isabs(p) and p.startswith(here.rstrip("/") + "/"):
            text = text.replace(p, os.path.relpath(p, here))
    remark = re.search(r" \([^()0-9]*\)$", text)
    if remark and len(text) > width:
        text = text[:remark.start()]
    for tail in (2, 1, 0):
        for p in sorted(_paths(text), key=len, reverse=True):
            if len(text) <= width:
                return text
            text = text.replace(p, _elide(p, tail))
    return text


def _paths(text: str) -> list[str]:
    """The words of ``text`` that are paths or URIs: a word with a ``/`` that starts with ``/``,
    ``~/``, ``./`` or ``../``, holds ``://``, or whose last part has a suffix (``configs/a.yaml``);
    not ``model/optimizer`` or ``valid/accuracy``."""
    import re

    out = []
    for m in re.finditer(r"\S*/\S*", text):
        w = m.group(0).rstrip(":;,.)'\"")
        if w.startswith(("/", "~/", "./", "../")) or "://" in w or "." in w.rsplit("/", 1)[-1]:
            out.append(w)
    return out


#: What starts a stage's line on a pipe (``grep -v '^sweep: '`` leaves the rest of stderr).
PIPE_PREFIX = "sweep: "
#: On a pipe a stage is said once it has lasted this long (s): a config that fails at once prints
#: its error alone, as before; one that takes a while says where it is.
PIPE_AFTER_S = 0.5


class StageLine:
    """What a sweep does before its progress bar (reading the config, loading datasets, pre-flight
    k/N, building N programs), said within a second of the start: on a terminal one transient
    spinner line that each :meth:`stage` rewrites (at once when the stage changes, at most every
    0.1 s within one); on a pipe one plain line on stderr per stage name (:data:`PIPE_PREFIX` and
    its latest text) once the stage has lasted :data:`PIPE_AFTER_S` (a log holds each slow stage
    once, not every k/N); nothing when ``quiet``. :meth:`stop` (idempotent) ends it before the plan
    or the bar prints. ``since`` (``time.perf_counter()`` at the process start, when known): the
    first stage's line on a pipe is said :data:`PIPE_AFTER_S` after the process started rather than
    after the stage did, so the first line comes within a second of the start while
    a config that fails at once still prints its error alone. A line longer than the width
    (:func:`harness.orchestrate.tables.output_width`; the console's on a terminal) has its paths
    shortened (:func:`fit_line`)."""

    def __init__(self, console, quiet: bool, since: float | None = None) -> None:
        import threading

        self.console, self.quiet, self.since = console, quiet, since
        self.live = self.spinner = self.timer = None
        self.name, self.text, self.shown_at = "", "", 0.0
        self.lock = threading.Lock()

    def stage(self, name: str, text: str) -> None:
        """Now at stage ``name`` (the key a pipe says once), described by ``text``."""
        if self.quiet:
            return
        from harness.orchestrate.tables import output_width

        if not self.console.is_terminal:
            self._pipe(name, fit_line(text, output_width("stderr") - len(PIPE_PREFIX)))
            return
        import time

        from rich.live import Live
        from rich.spinner import Spinner
        from rich.text import Text

        text = fit_line(text, self.console.width - 2)  # the spinner and a space before it

        if self.live is None:
            self.spinner = Spinner("dots", Text(text))
            self.live = Live(self.spinner, console=self.console, transient=True, refresh_per_second=12.5)
            self.live.start()
        now = time.monotonic()
        self.spinner.update(text=Text(text))
        if name != self.name or now - self.shown_at >= 0.1:
            self.live.refresh()
            self.name, self.shown_at = name, now

    def _pipe(self, name: str, text: str) -> None:
        import threading

        with self.lock:
            same = name == self.name
            self.name, self.text = name, text
            if same:
                return
            delay = PIPE_AFTER_S
            if self.since is not None:  # the first stage: counted from the process start
                import time

                delay = max(0.0, self.since + PIPE_AFTER_S - time.perf_counter())
                self.since = None
            if self.timer is not None:
                self.timer.cancel()
            self.timer = threading.Timer(delay, self._say, (name,))
            self.timer.daemon = True
            self.timer.start()

    def _say(self, name: str) -> None:
        import sys

        with self.lock:
            if name == self.name:  # still there: say its latest text
                print(f"{PIPE_PREFIX}{self.text}", file=sys.stderr, flush=True)

    def stop(self) -> None:
        with self.lock:
            if self.timer is not None:
                self.timer.cancel()
            self.timer, self.name = None, ""
        if self.live is not None:
            self.live.stop()
            self.live = self.spinner = None
