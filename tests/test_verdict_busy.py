"""A verdict that a busy machine cannot flip.

A race of six optimizers of very different step cost (muon's Newton–Schulz iterations make its step
about 4x an sgd step on these MLPs) on two tasks, two step sizes for two of them (so that selection
has something to choose), two seeds, is run twice into fresh stores by the command a user types,
each a new process: once as the machine is, once beside ``2 × nproc`` CPU-burning processes that the
test starts and kills. The leaderboards must be the same (ranks, rows, their order), the same
configurations selected, and the summary must name no task as ranked on measured seconds (before:
one flagged figure sent its whole task to wall-clock, and a busy machine moved rows).

The race is built to be moved by the old clock: on MNIST-1D muon reaches the target in 150 steps and
lion (step size 3e-4) in about 750, so muon is faster by 1.5x in CPU time per step × steps; beside the
burners the *wall-clock* step of muon slowed 5x and lion's 2x (longer dispatches are preempted more),
which is enough to reorder rows ranked on a wall-clock figure. On the code that ranked on wall-clock this test
failed: the mnist1d leaderboard read adam "1" first when quiet and momentum "1=" first beside the
burners.

Adafactor joined after a reviewer's race moved rows on the CPU-time clock itself: with XLA's default
CPU pool (a thread per core) the idle workers spin, spinning is CPU time, and beside burners they
spin less, by an amount that depends on the program (adafactor −29%, sgd −22% on an MLP of width
256). The harness now runs XLA's CPU pool on one thread (:mod:`harness.core.xla_threads`); the
sweeps here inherit that from ``import harness``, as every user's sweep does.

One thread was not enough: at load 16 (other work and 4 burners) every figure rose 20–60%, each by
its own amount, muon's against the elementwise class 3.45x → 3.73x, which turned MNIST-1D's
"momentum 2=, muon 2=" into "2, 3" with the same steps to the bit. Rounding figures to powers of 2
held the ranks but made them wrong (a review: adafactor ranked ahead of sgd, 5% slower). Now each
figure carries its 95% interval from its rounds and two optimizers are separated only when their
difference holds over it: the two leaderboards may differ, but only towards a tie ("="), never by
an order reversed.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import yaml
from subproc import burn_cpus

RACE = {
    "name": "race",
    "description": "six optimizers of different step cost on two MLP tasks",
    "models": [{"name": "mlp", "hparams": {"width": 64, "depth": 2}}],
    "optimizers": [
        {"name": "sgd", "hparams": {"step_size": 0.1}},
        {"name": "momentum", "hparams": {"step_size": 0.03, "mass": 0.9}},
        {"name": "adam", "hparams": {"step_size": [0.003, 0.01]}},
        {"name": "lion", "hparams": {"step_size": 0.0003}},
        {"name": "muon", "hparams": {"step_size": [0.02, 0.05]}},
        {"name": "adafactor", "hparams": {"step_size": 0.01}},
    ],
    "schedules": ["constant"],
    "datasets": ["digits", "mnist1d"],
    "seeds": 2,
    "batch_size": 64,
    "budget": {"steps": 1000},
    "eval_every": 50,
    "steps_per_dispatch": 50,
    "target": {"metric": "valid/accuracy", "value": 0.5},
    "measure_perf": True,
}


def _sweep(d, burners: int) -> tuple[str, str]:
    """The race into a fresh store under ``d``, beside ``burners`` CPU-burning processes; returns the
    store's URI and the command's output."""
    d.mkdir()
    cfg = d / "race.yaml"
    cfg.write_text(yaml.safe_dump(RACE, sort_keys=False))
    uri = f"sqlite:///{d / 'mlflow.db'}"
    env = {**os.environ, "HARNESS_CACHE_DIR": str(d / "cache"), "COLUMNS": "200"}
    procs = burn_cpus(burners)
    try:
        r = subprocess.run([sys.executable, "-m", "harness", "sweep", str(cfg), "--tracking-uri", uri],
                           cwd=d, env=env, capture_output=True, text=True, timeout=900)
    finally:
        for p in procs:
            p.kill()
            p.wait()
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return uri, r.stdout


def _verdict(uri: str):
    """``(ranks, selected, leaderboard)``: the leaderboard's rows in order as (task, optimizer, rank
    label), per (task, optimizer) the selected configuration, and the table itself."""
    from reports.frame import load_frame
    from reports.leaderboard import leaderboard
    from reports.ranks import shared_ranks
    from reports.report_clock import use_clock
    from reports.selection import best_configs

    frame = use_clock(load_frame("race", tracking_uri=uri))
    lb = leaderboard(frame)
    labels = {(r["task"], r["optimizer"]): r["label"] for _, r in shared_ranks(frame).iterrows()}
    ranks = [(t, o, labels[(t, o)]) for t, o in zip(lb["Task"], lb["Optimizer"], strict=True)]
    sel = {(r["task"], r["optimizer"]): r["config"] for _, r in best_configs(frame).iterrows()}
    return ranks, sel, lb


def _ahead(ranks: list[tuple[str, str, str]]) -> set[tuple[tuple[str, str], tuple[str, str]]]:
    """The strictly ordered pairs of a leaderboard: ((task, a), (task, b)) where a's shared rank is
    better than b's on the same task (a tie, "2=" beside "2=", orders nothing)."""
    def number(label: str) -> int:
        return int(label.rstrip("=")) if label.rstrip("=").isdigit() else 10 ** 6

    return {((t, a), (t, b)) for t, a, la in ranks for u, b, lb in ranks
            if t == u and number(la) < number(lb)}


@pytest.mark.slow
def test_a_busy_machine_gives_the_same_leaderboard(tmp_path):
    quiet_uri, quiet_out = _sweep(tmp_path / "quiet", 0)
    busy_uri, busy_out = _sweep(tmp_path / "busy", 2 * (os.cpu_count() or 1))
    quiet, busy = _verdict(quiet_uri), _verdict(busy_uri)
    shown = {"quiet": quiet[2].to_string(), "busy": busy[2].to_string()}
    assert len(quiet[0]) == 12 and len({t for t, _, _ in quiet[0]}) == 2, shown
    assert {(t, o) for t, o, _ in quiet[0]} == {(t, o) for t, o, _ in busy[0]}, shown
    ahead_q, ahead_b = _ahead(quiet[0]), _ahead(busy[0])
    assert not {(b, a) for a, b in ahead_q} & ahead_b, shown  # no order reversed; ties may differ
    assert quiet[1] == busy[1], shown  # the same configurations selected
    for out in (quiet_out, busy_out):
        said = " ".join(out.split())
        assert "Time to target: modeled" in said
        assert "on measured seconds" not in said and "rank on measured" not in said
