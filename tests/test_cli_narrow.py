"""Every command's output on an 80-column terminal keeps every cell's content: a
table that does not fit is printed as one block per row (``column: value``), wrapped, never cut
with "…"; and the summary's "best config" of an optimizer that ran one configuration (§17)."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from harness.cli import app

runner = CliRunner()

LONG = "a_rather_long_sweep_name_mnist1d_all_optimizers"


@pytest.fixture(autouse=True)
def _narrow(monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")


def _uncut(out: str) -> None:
    assert "…" not in out, out
    # a table fits the terminal (a long plain line may be soft-wrapped: the terminal wraps it)
    assert all(len(ln) <= 80 for ln in out.splitlines() if set(ln) & set("│┃─━")), out


def test_status_at_80_columns_keeps_the_last_runs_state(tmp_path, write_sweep, tracking_uri, fake_trainer,
                                                        monkeypatch):
    """``status`` squeezed "last run" to zero width at 80 columns: KILLED was lost."""
    from mlflow import MlflowClient

    monkeypatch.chdir(tmp_path)
    cfg = write_sweep(name=LONG, optimizers=[{"name": "sgd", "hparams": {"step_size": 0.1}},
                                             {"name": "adam", "hparams": {"step_size": 0.003}}])
    assert runner.invoke(app, ["sweep", str(cfg), "--tracking-uri", tracking_uri]).exit_code == 0
    c = MlflowClient(tracking_uri)
    exp = c.get_experiment_by_name(LONG)
    parent = c.search_runs([exp.experiment_id], "tags.`harness.kind` = 'parent'")[0]
    c.set_terminated(parent.info.run_id, "KILLED")
    sid = parent.data.tags["harness.sweep_id"]
    for args in (["status"], ["status", str(cfg)]):
        r = runner.invoke(app, [*args, "--tracking-uri", tracking_uri])
        assert r.exit_code == 0, r.output
        _uncut(r.output)
        lines = [ln.rstrip() for ln in r.output.splitlines()]
        i = lines.index(LONG)
        assert lines[i + 1:i + 9] == [f"  sweep_id: {sid}", "  trials: 4", "  finished: 4", "  diverged: 0",
                                      "  failed: 0", "  pending: 0",
                                      f"  last run: {parent.info.run_name} (KILLED)"][:8], r.output
    r = runner.invoke(app, ["status", "--tracking-uri", tracking_uri], env={"COLUMNS": "250"})
    assert f"{parent.info.run_name} (KILLED)" in r.output and "│" in r.output  # wide: still a table
    # report: its lines are plain text, each path whole (a terminal wraps them, nothing cuts them)
    out = tmp_path / "a_report_with_a_rather_long_name_to_see_that_nothing_cuts_it.html"
    r = runner.invoke(app, ["report", "-e", LONG, "-o", str(out), "--tracking-uri", tracking_uri])
    assert r.exit_code == 0, r.output
    _uncut(r.output)
    lines = r.output.splitlines()
    assert lines[0].startswith(f"report: {out} (") and lines[0].endswith(" MB, one self-contained HTML file)")
    assert lines[1:] == [f"data:   {out.with_suffix('.csv.gz')} (the tidy table behind every figure, "
                         f"gzip CSV)",
                         "The HTML is also logged to the sweep's parent run(s) in MLflow, under reports/."]


def test_sweep_summary_and_dry_run_at_80_columns(tmp_path, write_sweep, tracking_uri, fake_trainer,
                                                 monkeypatch):
    """The summary dropped "best config" (the winning step size) at 80 columns and cut "seeds" to
    "see…"; the dry run's plan cut trial ids and configurations."""
    monkeypatch.chdir(tmp_path)
    cfg = write_sweep(optimizers=[{"name": "sgd", "hparams": {"step_size": [0.1, 0.3]}},
                                  {"name": "adam", "hparams": {"step_size": 0.003}}])
    r = runner.invoke(app, ["sweep", str(cfg), "--dry-run", "--tracking-uri", tracking_uri])
    assert r.exit_code == 0, r.output
    _uncut(r.output)
    from harness.config.load import load_config
    from harness.core.outcome import config_label, run_name
    from harness.orchestrate.run import expand

    specs = expand(load_config(cfg))
    for s in specs:
        assert f"  trial_id: {s.trial_id}" in r.output and f"  run name: {run_name(s)}" in r.output
        assert f"  config: {config_label(s)}" in r.output
    r = runner.invoke(app, ["sweep", str(cfg), "--tracking-uri", tracking_uri])
    assert r.exit_code == 0, r.output
    _uncut(r.output)
    # the table fits 80 columns with its headers over two lines; every cell whole (fake_result:
    # every configuration reaches the target at the same step and accuracy, so the name decides)
    # one ranked table per task: rank, optimizer, ...; equal results share rank 1
    rows = {ln.split()[1]: ln.split()[2:] for ln in r.output.splitlines() if re.match(r"\s*1=\s", ln)}
    assert rows == {"adam": ["lr=0.003", "0.9000", "0.8900", "0.02", "s", "—", "2"],  # its one config (§17)
                    # sgd's two configurations tie exactly: the one whose smallest trial id is
                    # smallest (4f95c073..., lr=0.1; 22cdf79f..., lr=0.3, while the target was part
                    # of the ids), as the report breaks the tie
                    "sgd": ["lr=0.1", "0.9000", "0.8900", "0.02", "s", "—", "2"]}, r.output
    sgd = sorted((s.trial_id, s.hparams("optimizer")["step_size"]) for s in specs if s.optimizer == "sgd")
    assert sgd[0][1] == 0.1, sgd  # the rule, not the number: the smallest id is lr=0.1's
    head = next(i for i, ln in enumerate(r.output.splitlines()) if ln.split()[:2] == ["rank", "optimizer"])
    assert r.output.splitlines()[head].split()[-3:] == ["(median)", "ex/s", "seeds"], r.output
    # the time budget: one line within the 80 columns, after the table
    budget = [ln for ln in r.output.splitlines() if ln.startswith("time ")]
    assert len(budget) == 1 and len(budget[0]) <= 80, r.output
    assert re.fullmatch(r"time \d+\.\d s: [a-z]+ \d+%(, [a-z]+ \d+%)*(, \.\.\.)?", budget[0]), budget


def test_best_config_of_an_optimizer_that_ran_one_configuration():
    """It showed "—" (§17): the one configuration's values are what the reader wants to know."""
    from harness.orchestrate.summary import config_cell

    adam = "constant step_size=0.003 width=16 depth=1 bs=32"
    sgd = ["constant step_size=0.1 width=16 depth=1 bs=32", "constant step_size=0.3 width=16 depth=1 bs=32"]
    assert config_cell(adam, [adam, adam], [adam, adam, *sgd]) == "lr=0.003"
    assert config_cell(sgd[1], sgd, [adam, *sgd]) == "lr=0.3"
    assert config_cell(adam, [adam], [adam]) == "constant lr=0.003 width=16 depth=1 bs=32"


def test_print_table_keeps_every_cell_on_a_narrow_console():
    from rich.console import Console
    from rich.table import Table

    from harness.orchestrate.tables import print_table

    t = Table(title="t")
    for col in ("name", "value", "note"):
        t.add_column(col, no_wrap=True)
    t.add_row("x" * 30, "y" * 40, "z" * 100)
    buf = io.StringIO()
    print_table(Console(file=buf, width=80), t)
    out = buf.getvalue()
    _uncut(out)
    assert all(len(ln) <= 80 for ln in out.splitlines()) and out.count("z") == 100  # folded, all there
    assert "  value: " + "y" * 40 in out
    buf = io.StringIO()
    print_table(Console(file=buf, width=250), t)
    assert "│ " + "x" * 30 in buf.getvalue()  # fits: a table


def table_rows(output: str) -> dict[str, list[str]]:
    """A boxed table's rows, first cell → every cell, a cell's wrapped lines joined with spaces."""
    rows: dict[str, list[list[str]]] = {}
    cur = None
    for ln in output.splitlines():
        if not ln.startswith("│"):
            continue
        cells = [c.strip() for c in ln.strip("│").split("│")]
        if cells[0]:
            cur = rows.setdefault(cells[0], [[] for _ in cells])
        for part, c in zip(cur, cells, strict=True):
            if c:
                part.append(c)
    return {k: [" ".join(p) for p in v] for k, v in rows.items()}


def test_list_at_80_columns_is_short_and_keeps_every_default():
    """``list`` cut defaults (``positional='learne…``) and wrapped each description into 10-20 lines:
    300 lines with no argument. Now: one line per entry (names), each default and description
    whole under ``list KIND``, one entry in full under ``list KIND NAME``."""
    from test_cli import list_blocks

    from harness.config.optimizer_sources import optax_optimizers
    from harness.config.registries import builder_hparams, default_registries
    from harness.config.workloads import WORKLOADS

    reg = default_registries()
    r = runner.invoke(app, ["list"])
    assert r.exit_code == 0, r.output
    _uncut(r.output)
    kinds = {"models": ("model", reg.models), "optimizers": ("optimizer", reg.optimizers),
             "schedules": ("schedule", reg.schedules), "datasets": ("dataset", reg.datasets)}
    n_entries = sum(len(r_) for _, r_ in kinds.values()) + len(WORKLOADS)
    assert len(r.output.splitlines()) < n_entries + 45, r.output  # was 300 lines
    starts = {ln.split()[0] for ln in r.output.splitlines() if ln.strip()}
    assert all(n in starts for _, reg_ in kinds.values() for n in reg_) and set(WORKLOADS) <= starts

    from harness.cli.list_cmd import default_text

    def defaults(single, builder):  # a number as its repr, a function or class readably
        return [h.name if h.required else f"{h.name}={default_text(h.default)}"
                for h in builder_hparams(single, builder).values()]

    for kind, (single, registry) in kinds.items():
        r = runner.invoke(app, ["list", kind])
        assert r.exit_code == 0, r.output
        _uncut(r.output)
        blocks = list_blocks(r.output)
        for name, b in registry.items():
            for d in defaults(single, b):  # e.g. positional='learned', whole
                assert d in blocks[name], (name, d, blocks[name])
    r = runner.invoke(app, ["list", "optimizers", "--optax"])
    assert r.exit_code == 0
    _uncut(r.output)
    blocks = list_blocks(r.output)
    for source, b in optax_optimizers().items():
        flat = blocks[source].replace(" ", "")  # a long default (a function's repr) is folded
        assert all(d.replace(" ", "") in flat for d in defaults("optimizer", b)), source
    r = runner.invoke(app, ["list", "workloads"])
    _uncut(r.output)
    rows = table_rows(r.output)
    for name, w in WORKLOADS.items():
        assert rows[name][2] == f"{w.metric} {'>=' if w.target_mode == 'max' else '<='} {w.target:g}"
        assert rows[name][3] == f"{w.steps} x {w.batch_size}", rows[name]


def test_list_one_entry_in_full():
    r = runner.invoke(app, ["list", "models", "transformer_lm"])
    assert r.exit_code == 0, r.output
    _uncut(r.output)
    lines = [ln.rstrip() for ln in r.output.splitlines()]
    assert lines[:2] == ["transformer_lm", "  hyperparameters (default):"]
    assert "    positional='learned'" in lines
    r = runner.invoke(app, ["list", "optimizers", "adam"])
    assert "Source: jax.example_libraries.optimizers.adam." in r.output  # the whole docstring
    # each Args entry wraps as one paragraph under its own indent, not source line by source line
    lines = [ln.rstrip() for ln in r.output.splitlines()]
    assert "    b1, b2: decay rates of the first and second moment estimates, in [0, 1)." in lines
    assert "  Returns:" in lines
    assert "    An Optimizer (init_fn, update_fn, params_fn)." in lines
    lone = [ln for ln in lines[6:] if ln.strip() and " " not in ln.strip() and not ln.endswith(":")]
    assert not lone, lone  # a word left alone on its line ("outside") by wrapping each source line
    r = runner.invoke(app, ["list", "optimizers", "adma"])
    assert r.exit_code == 2 and r.output.rstrip().endswith("(did you mean 'adam'?)"), r.output
    r = runner.invoke(app, ["list", "optimizers", "--optax", "adamw"])
    assert r.exit_code == 0 and r.output.splitlines()[0] == "optax:adamw", r.output


def test_summary_table_names_the_one_configuration_an_optimizer_ran():
    """§17 on a wide terminal: adam ran one configuration; its "best config" cell said "—"."""
    from rich.console import Console

    from harness.core.outcome import TrialOutcome
    from harness.orchestrate.summary import SweepSummary, print_summary

    def o(opt, lr, seed):
        return TrialOutcome(trial_id=f"{opt}{lr}{seed}", status="finished", model="mlp", optimizer=opt,
                            dataset="digits", seed=seed, config=f"constant step_size={lr} width=16 bs=32",
                            final_valid_accuracy=0.9, final_valid_loss=0.3)

    outcomes = [o("adam", 0.003, s) for s in (0, 1)] + [o("sgd", lr, 0) for lr in (0.1, 0.3)]
    buf = io.StringIO()
    print_summary(Console(file=buf, width=250), SweepSummary("x", "sid", None, None, "sqlite:///x.db",
                                                             outcomes, 1.0))
    rows = {ln.split()[1]: ln.split()[2] for ln in buf.getvalue().splitlines()
            if re.match(r"\d+=?\s+\S+\s+lr=", ln)}  # rank, optimizer, best config
    assert rows == {"adam": "lr=0.003", "sgd": "lr=0.1"}, buf.getvalue()


@pytest.mark.parametrize("command", [[], ["sweep"], ["report"], ["status"], ["list"], ["ui"]])
def test_help_fits_80_columns(command, monkeypatch):
    """``report --help`` printed its examples in lines of 93 and 96 characters at 80 columns (a
    fresh user's attack): every command's help, epilog included, fits."""
    monkeypatch.setenv("COLUMNS", "80")
    r = subprocess.run([sys.executable, "-m", "harness", *command, "--help"], capture_output=True,
                       text=True, timeout=120, env={**os.environ, "COLUMNS": "80"})
    assert r.returncode == 0, r.stderr
    long = [ln for ln in r.stdout.splitlines() if len(ln) > 80]
    assert long == []
