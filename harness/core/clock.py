"""Which clock a time to target is counted on: the one rule for the modeled, cost and measured clocks.

* **modeled** (the default): ``convergence/modeled_seconds_to_target`` = ``steps_to_target`` × the
  program's per-step figure ``perf/modeled_step_ms``, taken before training with the sweep's
  programs timed in turn, round by round (:mod:`harness.train.perf`): on a CPU device the step's
  **CPU time** (the work of a step, summed over the threads doing it; waiting for a core is not CPU
  time, and XLA's CPU pool is one thread (:mod:`harness.core.xla_threads`), whose CPU time is
  the step's work, not idle workers spinning: :mod:`harness.train.timing` item 7), on an
  accelerator its device wall-clock. A busy machine still moves a CPU figure against another's
  (by 8–28% beside 2 × nproc CPU-burning processes, depending on the programs: :data:`CPU_GRID`;
  more where a library's thread pool spins, which :mod:`harness.core.xla_threads` prevents),
  so figures within :data:`RESOLUTION` of each other are one cost class, and on a CPU each class
  is charged its figure rounded to a power of 2 of the task's cheapest class's
  (:func:`cost_classes`): steps, which no load moves, decide between programs of one charge. Two
  trials of one program that reach the target at the same evaluation get the same time. A figure
  that disagreed with its trial's own training clock was
  measured again beside its task's programs and still counts, flagged (tag ``perf.suspect``): the
  modeled clock never gives way to wall-clock.
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
#: The modeled clock's resolution: per-step figures of one task within this factor of the next one
#: up (sorted) are one cost class, charged one common figure (:func:`cost_classes`).
RESOLUTION = 1.25
#: On a CPU a cost class is charged its figure rounded to a power of this factor of the task's cheapest class
#: (:func:`cost_classes` with ``grid``): a CPU-time figure moves against another's when the machine is busy,
#: by an amount that depends on the two programs. Beside 2 × nproc CPU-burning processes: a digits MLP's lion
#: to sgd 1.22x → 1.06x (−13%); an MNIST-1D MLP's momentum to sgd 0.91x → 1.16x (+28%) and muon to the
#: elementwise optimizers' class 3.45x → 3.73x (+8%), which alone turned "2=, 2=" into "2, 3" (same steps to
#: the bit); a CNN of width 64's momentum to adam 0.80x → 1.00x (+25%). (A reviewer's race with soap read sgd
#: to nesterov 0.89x → 1.71x and soap 2.7x: OpenBLAS's spinning pool under ``eigh`` charged to whichever
#: program was timed next; with it at one thread, :data:`harness.core.xla_threads.BLAS_ENVS`, the same race
#: moved by ≤ 1%: sgd/nesterov 1.016x → 1.008x, soap 6.94x → 7.01x.) Compared as measured, any such drift
#: across a pair's tipping point reorders rows, and a race has many pairs; rounded to powers of 2 the ranks
#: change only where a class's ratio crosses a midpoint (2^k·√2), a few classes per task, and steps, which
#: carry no load, decide the rest. On an accelerator the figure is device time, which host load barely moves:
#: figures are charged as measured (classes only).
CPU_GRID = 2.0


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


def cost_grid(device_kind: str | None) -> float | None:
    """The grid :func:`cost_classes` rounds to for figures measured on ``device_kind`` (the run tag,
    e.g. ``"cpu:cpu"``): :data:`CPU_GRID` on a CPU and where the kind is unknown (runs from before
    the tag, all on CPUs), ``None`` (as measured) on an accelerator."""
    return CPU_GRID if not device_kind or str(device_kind).startswith("cpu") else None


def cost_classes(figures: Iterable[float | None], grid: float | None = None) -> dict[float, float]:
    """``{figure: its class's common figure}`` for the distinct positive per-step figures (ms) of one
    task's programs: sorted, a figure within :data:`RESOLUTION` × the one below it joins that one's
    class (single linkage, so a class is a chain of close figures); a class's common figure is the
    median of its distinct figures. Example: ``cost_classes([0.056, 0.0565, 0.061, 0.068, 0.24])``
    puts the first four in one class (common figure 0.05875) and 0.24 alone. Classes depend on the
    task's whole set of figures: a figure between two classes chains them (adding an optimizer can
    change another's common figure, never its steps); a fixed grid would not, but would split two
    figures 1% apart at each grid line, which load can move across.

    With ``grid`` (:func:`cost_grid`; a CPU's figures) each class is then charged the cheapest
    class's common figure × ``grid ** k``, ``k`` the nearest whole number to log base ``grid`` of
    its ratio to it (classes that round alike share the figure). Example: ``cost_classes([0.1,
    0.102, 0.1755, 0.345], grid=2.0)`` charges 0.101 to the first two, 0.202 to 0.1755 (1.74x) and
    0.404 to 0.345 (3.42x)."""
    xs = sorted({float(f) for f in figures if _finite_positive(f)})
    classes: list[list[float]] = []
    for x in xs:
        if classes and x <= classes[-1][-1] * RESOLUTION:
            classes[-1].append(x)
        else:
            classes.append([x])
    out: dict[float, float] = {}
    base = None
    for c in classes:
        mid = len(c) // 2
        common = c[mid] if len(c) % 2 else (c[mid - 1] + c[mid]) / 2
        if grid is not None:
            base = common if base is None else base
            common = base * grid ** math.floor(math.log(common / base, grid) + 0.5)
        out.update(dict.fromkeys(c, common))
    return out


def cost_class_of(clock: str, figure_ms: float | None, cost_s: float | None,
                  steps_to_target: float | None, common: dict[float, float]) -> float | None:
    """The per-step cost class a trial ranks in on its task's ``clock`` (what a tie on time means:
    :attr:`harness.core.ties.Standing.cost_class`): on ``modeled`` its figure's common figure
    (``common``: :func:`cost_classes` of the task); on ``cost`` its cost per step in ms (9
    significant digits: one per batch size); on ``measured`` ``None`` (wall-clock has no classes)."""
    if clock == "modeled" and _finite_positive(figure_ms):
        return common.get(float(figure_ms))  # type: ignore[arg-type]
    if clock == COST_CLOCK and _finite_positive(cost_s, steps_to_target):
        return float(f"{float(cost_s) / float(steps_to_target) * 1e3:.9g}")  # type: ignore[arg-type]
    return None


def classed_seconds(trials: Sequence[tuple[float | None, float | None, float | None]],
                    grid: float | None = None) -> list[float | None]:
    """The modeled seconds to target each trial of one task ranks on, given its ``(steps_to_target,
    modeled_step_ms, logged modeled seconds)``: ``steps × its cost class's common figure / 1000``
    (:func:`cost_classes` over the task's figures, rounded to ``grid``), so that programs whose
    figures the clock cannot tell apart differ only by their steps; the logged seconds for a trial
    without a figure (a run from before ``perf/modeled_step_ms``)."""
    common = cost_classes((ms for _, ms, _ in trials), grid)
    return [modeled_seconds(steps, common[float(ms)]) if steps is not None and _finite_positive(ms)
            else logged for steps, ms, logged in trials]


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
            "turn; figures within 1.25x are one cost class and, on a CPU, where load moves one "
            "program's figure against another's, a class is charged in powers of 2 of "
            "the cheapest class's figure, so steps decide within a charge (the seconds shown are "
            "those charges; MLflow's convergence/modeled_seconds_to_target keeps steps × the "
            "program's own figure); `--time measured` ranks on wall-clock).")
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
