"""Which clock a time to target is counted on: the one rule for the modeled, cost and measured clocks.

* **modeled** (the default): ``convergence/modeled_seconds_to_target`` = ``steps_to_target`` × the
  program's per-step figure ``perf/modeled_step_ms``, taken before training with the sweep's
  programs timed in shuffled, interleaved rounds (:mod:`harness.train.perf`): on a CPU device the
  step's **CPU time** (XLA's CPU pool on one thread, :mod:`harness.core.xla_threads`), on an
  accelerator its device wall-clock. Each figure carries its 95% interval from its rounds
  (``perf/modeled_step_ms_lo`` / ``_hi``, :func:`harness.train.timing.round_figures`): load moves
  one program's figure against another's, and a busy machine scatters the rounds and widens the
  intervals. Figures are charged as measured; the rank rule (:mod:`harness.core.ties`) separates two
  programs only when their time difference holds over both the seeds and these intervals
  (:func:`cost_range`), so load can turn a separation into a tie but not flip an order. A figure
  that disagreed with its trial's own training clock was measured again beside its task's programs
  and still counts, flagged (tag ``perf.suspect``): the modeled clock never gives way to
  wall-clock.
* **cost** (a task where some trial reached the target with no figure: an AlgoPerf submission,
  whose per-step ``jit`` is its own and is not timed in the interleaved stage; a step that could not
  be timed): ``convergence/cost_seconds_to_target`` = ``steps_to_target`` × the program's FLOPs per
  step ÷ the device's measured peak FLOP/s. The count is XLA's cost analysis of the compiled step
  where the harness compiled it (so muon's Newton–Schulz products are charged to muon, not to every
  optimizer); for an AlgoPerf submission, whose ``update_params`` the harness does not compile, the
  model's analytic count (3 × forward FLOPs × batch: its update's own FLOPs are not charged).
  Deterministic: no load can move either count. The whole task ranks on it (one comparison, one
  clock).
* **measured** (``time: measured`` or ``report --time measured``): ``convergence/seconds_to_target``,
  the trial's own wall-clock of training dispatches up to that evaluation (compile and evaluation
  excluded): what happened on this machine this time, load included. On the modeled clock a task
  falls back to it only when a trial reached the target with neither a figure nor a FLOP count,
  and the sentence then says so and why.

The clock comes from the config's ``time:`` (recorded on the sweep's parent run as
:data:`harness.core.names.TAG_TIME`), ``report --time`` overrides it. :func:`task_clock` decides a
task's clock, :func:`ranked_seconds` a trial's seconds on it, :func:`clock_sentence` what a table
says about it. Standard library only.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

#: The clocks a user chooses, the default first (``time:``, ``report --time``).
CLOCKS = ("modeled", "measured")
DEFAULT_CLOCK = "modeled"
#: The clock a task ranks on when the modeled clock cannot cover all its trials (:func:`task_clock`).
COST_CLOCK = "cost"


def _finite_positive(*xs: float | None) -> bool:
    return all(x is not None and math.isfinite(float(x)) and float(x) > 0 for x in xs)


def modeled_seconds(steps_to_target: float | None, step_ms: float | None) -> float | None:
    """``steps_to_target × step_ms / 1000`` (``step_ms``: the program's ``modeled_step_ms``), or
    ``None`` when the target was not reached or the figure is unknown (not measured, not positive).
    A target met at the step-0 evaluation is 0 seconds."""
    if steps_to_target is None or not _finite_positive(step_ms):
        return None
    steps = float(steps_to_target)
    return steps * float(step_ms) / 1e3 if math.isfinite(steps) else None  # type: ignore[arg-type]


def cost_seconds(steps_to_target: float | None, flops_per_step: float | None,
                 peak_flops: float | None) -> float | None:
    """``steps_to_target × flops_per_step / peak_flops`` (FLOPs per step of the program; FLOP/s),
    or ``None`` when the target was not reached or either count is unknown. Example:
    ``cost_seconds(200, 3e6, 1.5e11) == 0.004``."""
    if steps_to_target is None or not _finite_positive(flops_per_step, peak_flops):
        return None
    steps = float(steps_to_target)
    return steps * float(flops_per_step) / float(peak_flops) if math.isfinite(steps) else None  # type: ignore[arg-type]


def cost_class_of(clock: str, figure_ms: float | None, cost_s: float | None,
                  steps_to_target: float | None) -> float | None:
    """The per-step cost a trial ranks at on its task's ``clock``
    (:attr:`harness.core.ties.Standing.cost_class`: equal steps at an equal cost are a tie on time):
    on ``modeled`` its program's figure (ms); on ``cost`` its cost per step in ms (9 significant
    digits: one per batch size); on ``measured`` ``None`` (wall-clock has no per-step cost)."""
    if clock == "modeled" and _finite_positive(figure_ms):
        return float(figure_ms)  # type: ignore[arg-type]
    if clock == COST_CLOCK and _finite_positive(cost_s, steps_to_target):
        return float(f"{float(cost_s) / float(steps_to_target) * 1e3:.9g}")  # type: ignore[arg-type]
    return None


def cost_range(clock: str, figure_ms: float | None, lo_ms: float | None,
               hi_ms: float | None) -> tuple[float, float] | None:
    """The interval of a trial's per-step figure relative to it, ``(lo / figure, hi / figure)``, on
    the ``modeled`` clock (:attr:`harness.core.ties.Standing.cost_range`); ``None`` (exact) on the
    deterministic cost clock, on the measured clock, and for a run without the interval (from before
    ``perf/modeled_step_ms_lo``). Example: ``cost_range("modeled", 2.0, 1.9, 2.2) == (0.95, 1.1)``."""
    if clock != "modeled" or not _finite_positive(figure_ms, lo_ms, hi_ms):
        return None
    f = float(figure_ms)  # type: ignore[arg-type]
    return min(1.0, float(lo_ms) / f), max(1.0, float(hi_ms) / f)  # type: ignore[arg-type]


def clock_seconds(steps_to_target: float | None, perf: object | None) -> tuple[float | None, float | None]:
    """``(modeled, cost)`` seconds to target of a trial whose throughput is ``perf`` (a
    :class:`harness.core.spec.PerfResult`, or ``None``): :func:`modeled_seconds` of its
    ``modeled_step_ms`` and :func:`cost_seconds` of its program's FLOPs per step (XLA's count of the
    compiled step, update included, where there is one; else the model's analytic count) and peak."""
    if perf is None:
        return None, None
    flops = getattr(perf, "flops_per_step", None) or getattr(perf, "flops_per_step_analytic", None)
    return (modeled_seconds(steps_to_target, getattr(perf, "modeled_step_ms", None)),
            cost_seconds(steps_to_target, flops, getattr(perf, "peak_flops", None)))


def check_clock(clock: str | None) -> str:
    """``clock`` when it is one of :data:`CLOCKS` (``None``: :data:`DEFAULT_CLOCK`).

    Raises:
      ValueError: any other value, naming the valid ones.
    """
    if clock is None:
        return DEFAULT_CLOCK
    if clock not in CLOCKS:
        raise ValueError(f"the time clock must be one of {', '.join(CLOCKS)}; got {clock!r}")
    return clock


def task_clock(trials: Iterable[tuple[float | None, float | None, float | None]], clock: str) -> str:
    """The clock one task ranks all its trials on, given each trial's ``(modeled, cost, measured)``
    seconds to target (``None`` where unknown; a trial reached the target when any is known):
    ``"measured"`` on the measured clock; else ``"modeled"`` when every trial that reached the target
    has a modeled time, else ``"cost"`` (:data:`COST_CLOCK`) when every one has a cost time, else
    ``"measured"`` (nothing deterministic covers them all)."""
    if check_clock(clock) == "measured":
        return clock
    reached = [t for t in trials if any(v is not None for v in t)]
    if all(m is not None for m, _, _ in reached):
        return "modeled"
    if all(c is not None for _, c, _ in reached):
        return COST_CLOCK
    return "measured"


def ranked_seconds(modeled: float | None, cost: float | None, measured: float | None,
                   clock: str) -> float | None:
    """The seconds to target of one trial on ``clock`` (a task's :func:`task_clock`)."""
    return {"modeled": modeled, COST_CLOCK: cost, "measured": measured}[clock]


def _names(tasks: Sequence[str]) -> str:
    names = list(tasks)
    return ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")


def clock_sentence(clock: str, measured_tasks: Sequence[str] = (), cost_tasks: Sequence[str] = (),
                   flagged: Sequence[str] = ()) -> str:
    """What a table or figure that ranks on time says about its clock, e.g. ``"Time to target:
    modeled (steps to target × the program's step time ...; `--time measured` ranks on
    wall-clock)."`` ``cost_tasks`` / ``measured_tasks``: the tasks :func:`task_clock` moved to the
    cost / measured clock; ``flagged``: the programs (e.g. ``"sgd · digits · mlp"``) whose figure
    disagreed with a trial's training clock and was measured again (tag ``perf.suspect``)."""
    if clock == "measured":
        return ("Time to target: measured (the trial's wall-clock of training, load included; "
                "`--time modeled` counts steps × the program's step time measured before training).")
    text = ("Time to target: modeled (steps to target × the program's step time — CPU time on a CPU, "
            "device time on an accelerator — measured before training with the task's programs in "
            "shuffled, interleaved rounds; two optimizers are told apart only when their difference "
            "holds over both the seeds and each step time's 95% interval from its rounds, so a busy "
            "machine, which widens the intervals, can tie an order but not reverse it; "
            "`--time measured` ranks on wall-clock).")
    if cost_tasks:
        one = len(cost_tasks) == 1
        text += (f" {_names(cost_tasks)} rank{'s' if one else ''} on cost (steps to target × the "
                 f"program's FLOPs per step ÷ the device's peak: XLA's count of the compiled step, "
                 f"update included; for an AlgoPerf submission the model's, its update uncounted): "
                 f"a trial there has no timed step (an AlgoPerf submission's own jit), and one "
                 f"comparison never mixes two clocks.")
    if measured_tasks:
        one = len(measured_tasks) == 1
        text += (f" {_names(measured_tasks)} rank{'s' if one else ''} on measured seconds: a trial "
                 f"there has neither a timed step nor a FLOP count.")
    if flagged:
        text += (f" Flagged (†): {_names(flagged)}: the step time disagreed with the trial's own "
                 f"training clock and was measured again beside the task's programs; it ranks on "
                 f"that figure (tag perf.suspect says why).")
    return text
