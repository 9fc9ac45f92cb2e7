"""Interleaved timing and paired ratios: the one helper every benchmark under tests/benchmarks uses.

This VM's speed swings by ±30% within a minute, so variants timed one after another (each its own
block of rounds) can disagree by more than the effect they measure: the same MLP code read 0.84x and
1.10x of the classic loop in two runs. Here the variants take turns **round by round** (the order
rotated each round, so no variant always runs first or right after the same neighbour), and each
comparison is the **median of per-round ratios** (variant round *i* / baseline round *i*: both saw
the same moment of the machine), reported with its spread (interquartile range and min–max).

* :func:`interleave` → ``{name: [seconds per round]}`` (wall; CPU seconds too on request);
* :func:`paired` → :class:`Paired` (median, q1, q3, min, max of the per-round ratios);
* :func:`table` → the printed table of every variant against a baseline and a floor;
* :func:`record` → pytest-benchmark's own table and ``--benchmark-save`` JSON get the harness
  variant's seconds of those same interleaved rounds (not a ``lambda: None``), so
  ``--benchmark-compare`` between two commits compares real figures.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from time import perf_counter, process_time
from typing import Any

import numpy as np


def interleave(fns: Mapping[str, Callable[[], Any]], rounds: int, *, warmup: int = 1,
               cpu: dict[str, list[float]] | None = None) -> dict[str, list[float]]:
    """Seconds of each call of ``fns[name]()``, the variants taking turns round by round.

    ``warmup`` untimed rounds first (compile, first touch). Each ``fn`` must itself wait for its
    results (``jax.block_until_ready``). Round ``r`` starts at variant ``r mod len(fns)``. With
    ``cpu`` (a dict), ``cpu[name]`` gets each of those calls' CPU seconds (``time.process_time``:
    every thread of this process; waiting for a core is not in it), so wall and CPU figures
    come from the same rounds.
    """
    names = list(fns)
    for _ in range(warmup):
        for k in names:
            fns[k]()
    times: dict[str, list[float]] = {k: [] for k in names}
    if cpu is not None:
        cpu.update({k: [] for k in names})
    for r in range(rounds):
        for j in range(len(names)):
            k = names[(r + j) % len(names)]
            t0, c0 = perf_counter(), process_time()
            fns[k]()
            t1, c1 = perf_counter(), process_time()
            times[k].append(t1 - t0)
            if cpu is not None:
                cpu[k].append(c1 - c0)
    return times


def medians(times: Mapping[str, Sequence[float]]) -> dict[str, float]:
    """Median seconds per variant."""
    return {k: statistics.median(v) for k, v in times.items()}


def record(benchmark: Any, seconds: Sequence[float], per: int = 1) -> None:
    """Hand pytest-benchmark the per-round ``seconds`` of the variant a benchmark is about (the
    harness's, measured by :func:`interleave` here or in a subprocess), divided by ``per`` (calls
    per round), as the fixture's rounds: its min/median/IQR columns, ``--benchmark-save`` and
    ``--benchmark-compare`` then describe that variant. The paired ratios stay in ``extra_info``.

    pytest-benchmark times only what it calls itself; the variants here must take turns round by
    round, so the rounds are timed by :func:`interleave` and given to the fixture's statistics
    (``_make_stats``: the one call its ``pedantic`` makes per run, pytest-benchmark 5.x).
    """
    if not seconds:
        raise ValueError("no rounds to record")
    if getattr(benchmark, "disabled", False):
        return
    stats = benchmark._make_stats(1)
    for s in seconds:
        stats.update(s / per)


@dataclass(frozen=True)
class Paired:
    """Summary of per-round ratios ``a[i] / b[i]``."""

    median: float
    q1: float
    q3: float
    lo: float
    hi: float
    n: int

    def __str__(self) -> str:
        return f"{self.median:.2f}x [IQR {self.q1:.2f}-{self.q3:.2f}, min-max {self.lo:.2f}-{self.hi:.2f}]"


def paired(a: Sequence[float], b: Sequence[float]) -> Paired:
    """Median and spread of the per-round ratios ``a[i] / b[i]`` (rounds of one :func:`interleave`)."""
    r = np.asarray(a, float) / np.asarray(b, float)
    q1, med, q3 = np.percentile(r, [25, 50, 75])
    return Paired(float(med), float(q1), float(q3), float(r.min()), float(r.max()), len(r))


def table(times: Mapping[str, Sequence[float]], *, baseline: str, floor: str | None = None,
          steps_per_round: int = 1, title: str = "") -> tuple[str, dict[str, dict[str, float]]]:
    """A printable table and its figures: per variant the median ms/step, the paired ratio to
    ``baseline`` (median [IQR, min–max]) and, with ``floor``, the paired ``floor / variant`` as a
    percentage ("x% of the floor": 100% is as fast as the floor). Rows sorted by median time."""
    rows = {}
    for k, v in times.items():
        rb = paired(v, times[baseline])
        row = {"ms_per_step": statistics.median(v) * 1e3 / steps_per_round, "ratio": rb.median,
               "ratio_q1": rb.q1, "ratio_q3": rb.q3, "ratio_min": rb.lo, "ratio_max": rb.hi}
        if floor is not None:
            pf = paired(times[floor], v)
            row.update(pct_of_floor=100 * pf.median, pct_of_floor_q1=100 * pf.q1,
                       pct_of_floor_q3=100 * pf.q3)
        rows[k] = row
    n = len(next(iter(times.values())))
    head = f"{title} ({n} interleaved rounds of {steps_per_round} steps; ratio = variant / {baseline})"
    lines = [head, f"  {'variant':>22} {'ms/step':>9}  {'ratio to ' + baseline:<44}"
                   + ("  % of floor [IQR]" if floor else "")]
    for k, row in sorted(rows.items(), key=lambda kv: kv[1]["ms_per_step"]):
        s = (f"{row['ratio']:.2f}x [IQR {row['ratio_q1']:.2f}-{row['ratio_q3']:.2f}, "
             f"min-max {row['ratio_min']:.2f}-{row['ratio_max']:.2f}]")
        line = f"  {k:>22} {row['ms_per_step']:9.3f}  {s:<44}"
        if floor:
            q1, q3 = row["pct_of_floor_q1"], row["pct_of_floor_q3"]
            line += f"  {row['pct_of_floor']:5.1f}% [{q1:.0f}-{q3:.0f}]"
        lines.append(line)
    return "\n".join(lines), rows
