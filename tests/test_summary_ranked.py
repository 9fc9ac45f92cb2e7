"""The end-of-sweep summary at 80 columns is a ranked table per task: a rank column,
rows in rank order (a tie's rows in the order of the time shown), and one line on what would
separate the ties; printed in a pseudo-terminal of 80 columns, as a user sees it."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

from subproc import run_in_pty

ROOT = Path(__file__).resolve().parents[1]

#: Seven optimizers (long names among them) on two tasks, two seeds each, two configurations each;
#: seconds per seed (None: not reached); sgd diverged once on mnist1d.
SCRIPT = r'''
from harness.core.outcome import TrialOutcome
from harness.orchestrate.summary import SweepSummary, print_summary
from harness.orchestrate.tables import stdout_console

times = {
    "digits": {"adam": (0.30, 0.34), "momentum": (0.31, 0.36), "sgd": (0.90, 1.10), "lion": (0.52, 0.50),
               "schedule_free_adamw": (0.28, 0.40), "nadamw": (0.80, 0.54), "muon": (2.0, 2.1)},
    "mnist1d": {"adam": (1.2, 1.3), "momentum": (1.5, None), "sgd": (None, None), "lion": (0.9, 1.0),
                "schedule_free_adamw": (0.95, 1.05), "nadamw": (1.25, 1.22), "muon": (3.0, 3.2)},
}
outcomes = []
for ds, per in times.items():
    for opt, secs in per.items():
        for lr in (0.001, 0.003):
            for seed, t in enumerate(secs):
                diverged = ds == "mnist1d" and opt == "sgd" and seed == 1
                slow = 1.0 if lr == 0.003 else 1.5
                outcomes.append(TrialOutcome(
                    trial_id=f"{ds}{opt}{lr}{seed}", status="diverged" if diverged else "finished",
                    model="mlp", dataset=ds, optimizer=opt, seed=seed,
                    config=f"mlp width=64 {opt} warmup_cosine step_size={lr} b2=0.999",
                    final_valid_accuracy=0.95 + 0.001 * seed, test_accuracy=0.94,
                    seconds_to_target=None if t is None else t * slow,
                    modeled_seconds_to_target=None if t is None else t * slow,
                    steps_to_target=None if t is None else int(round(100 * t * slow)),
                    examples_per_sec=123456.0))
print_summary(stdout_console(), SweepSummary("a_race_of_seven_optimizers", "sid", "1", None,
                                             "sqlite:///x.db", outcomes, 12.3))
'''


def _run(columns: int) -> str:
    env = {**os.environ, "COLUMNS": str(columns), "TERM": "dumb", "PYTHONPATH": str(ROOT),
           "NO_COLOR": "1"}
    code, out = run_in_pty([sys.executable, "-c", SCRIPT], cwd=ROOT, env=env, timeout=120)
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", out.decode()).replace("\r", "")
    assert code == 0, text
    return text


def test_the_summary_at_80_columns_is_a_ranked_table_per_task():
    text = _run(80)
    lines = [ln.rstrip() for ln in text.splitlines()]
    assert all(len(ln) <= 80 for ln in lines if set(ln) & set("─━")), text
    # a table, not "column: value" records
    assert not [ln for ln in lines if re.match(r"\s+(optimizer|rank|seeds): ", ln)], text
    heads = [ln for ln in lines if ln.split()[:2] == ["rank", "optimizer"]]
    assert len(heads) == 2, text  # one table per task, each headed by the rank column
    above = lines[lines.index(heads[0]) - 1]  # a header of two lines: "to target" over "(median)"
    assert "config" in heads[0] and heads[0].split()[-1] == "seeds"
    assert "to target (median)" in heads[0] or ("to target" in above and "(median)" in heads[0])
    tables = {}
    for name in ("mlp · digits", "mlp · mnist1d"):
        i = lines.index(name)
        rows = []
        for ln in lines[i + 1:]:
            if not ln.strip() or ln.startswith(("mlp · ", "rank: ")):  # the next table, the caption
                break
            m = re.match(r"\s*(\d+=?)\s+(\S+)\s", ln)
            if m and ln.split()[:2] != ["rank", "optimizer"]:
                rows.append((m.group(1), m.group(2)))
        tables[name] = rows
    # ranked: the numbers never go down, 1 first; every optimizer once
    for rows in tables.values():
        ranks = [int(r.rstrip("=")) for r, _ in rows]
        assert ranks == sorted(ranks) and ranks[0] == 1 and len(rows) == 7, tables
    # digits: schedule_free_adamw, adam and momentum share 1 (overlapping seconds); within the tie
    # in the order of the median time shown: adam 0.32 s, momentum 0.335 s, schedule_free_adamw 0.34 s
    assert tables["mlp · digits"][:3] == [("1=", "adam"), ("1=", "momentum"), ("1=", "schedule_free_adamw")]
    assert tables["mlp · digits"][-1] == ("7", "muon")
    # mnist1d: sgd reached nothing (last), momentum one seed of two
    assert tables["mlp · mnist1d"][-2:] == [("6", "momentum"), ("7", "sgd")]
    assert "1.5 s (1/2)" in " ".join(text.split()) or "(1/2)" in text, text  # reached on one seed of two
    # the ties' line, once, with the test and α
    ties = [ln for ln in text.split("\n\n") if "Ties:" in ln]
    assert text.count("Ties:") == 1, text
    flat = " ".join(text.split())
    assert "adam and momentum (mlp · digits, 1=):" in flat and "seeds would separate" in flat
    assert "nominal α = 0.05" in flat and "probability 0.8" in flat, ties


def test_a_wide_terminal_shows_the_same_ranks():
    wide = " ".join(_run(200).split())
    narrow = " ".join(_run(80).split())
    for pattern in (r"1= adam ", r"1= momentum ", r"7 muon "):
        assert re.search(pattern, wide) and re.search(pattern, narrow)


def test_best_configs_counts_an_audit_trial_as_its_twins_seed():
    """Configuration A (0.5, finished), configuration B (stopped at 0.3) and B's audit (0.9, trained
    to the end): B is selected, its one seed the audit's; without audits (early stopping alone) A
    is, and B counts its stopped seed only."""
    from harness.core.outcome import TrialOutcome
    from harness.orchestrate.summary import audit_changes, best_configs

    def out(tid, config, status, acc, audit_of=""):
        return TrialOutcome(trial_id=tid, status=status, model="mlp", dataset="digits", optimizer="sgd",
                            seed=0, config=config, final_valid_accuracy=acc, audit_of=audit_of,
                            has_target=False)

    trials = [out("a", "A", "finished", 0.5), out("b", "B", "stopped", 0.3),
              out("b-audit", "B", "finished", 0.9, audit_of="b")]
    (row,) = best_configs(trials, "final")
    assert (row["config"], row["n"], row["finished"], row["value"]) == ("B", 1, 1, 0.9)
    (row,) = best_configs(trials, "final", audits=False)
    assert (row["config"], row["n"], row["finished"], row["value"]) == ("A", 1, 1, 0.5)
    assert audit_changes(trials, "final") == [
        "sgd (mlp · digits): B, trained to the end by an audit, is selected; early stopping alone picked A"]
    alone = best_configs(trials[1:2], "final")
    assert (alone[0]["n"], alone[0]["finished"], alone[0]["value"]) == (1, 0, None)
    assert audit_changes(trials[:2], "final") == []


def test_spooled_trials_stopped_at_a_rung_are_counted_as_spooled():
    """A helper's finding: with the store down, an ASHA sweep's summary said "14 spooled results" when
    57 were in the spool (43 stopped at a rung): ``spooled()`` counted only finished and diverged."""
    from harness.core.outcome import TrialOutcome
    from harness.orchestrate.summary import SweepSummary

    def outcome(tid: str, status: str) -> TrialOutcome:
        return TrialOutcome(trial_id=tid, status=status, model="mlp", dataset="digits", optimizer="sgd",
                            seed=0, config="mlp sgd")

    outcomes = [outcome("f1", "finished"), outcome("f2", "finished"), outcome("s1", "stopped"),
                outcome("s2", "stopped"), outcome("s3", "stopped")]
    summary = SweepSummary("asha", "sid", "1", None, "sqlite:///x.db", outcomes, 1.0,
                           spooled_left=4, in_spool=frozenset({"f2", "s1", "s2", "s3"}), config_path="a.yaml")
    assert summary.spooled() == {"finished": 1, "diverged": 0, "stopped": 3}
    assert summary.headline().startswith(
        "1 finished, 1 finished and 3 stopped and spooled (not yet in the store), 0 diverged, 0 failed")
    assert "stopped early" not in summary.headline()
    assert summary.spool_hint().startswith("4 spooled results are not yet in the store")
