"""The selection rule: which of one optimizer's configurations is its best on a task.

The one home of the rule that the reports (``reports.selection.best_configs``) and the end-of-sweep
table (:mod:`harness.orchestrate.summary`) both apply, so that both always select the same configuration.
The objective is the config's ``selection: {by: ...}`` (recorded on the sweep's parent run as
:data:`harness.core.names.TAG_SELECT_BY`; ``report --select-by`` overrides it), one of
:data:`SELECT_BY`:

- ``time_to_target`` (the default): most seeds reaching the validation target, then fewest median
  steps to it (:func:`selection_key` documents the rest of the order);
- ``final``: the best mean over seeds of the final validation metric of the task's objective
  (accuracy higher, loss lower; :func:`ranking_metric` says which);
- ``best``: the best mean over seeds of the best validation value seen during training (the
  curve's best evaluation, logged as ``best/valid_accuracy`` / ``best/valid_loss``).

Standard library only.
"""

from __future__ import annotations

import math

#: The selection objectives (``selection: {by: ...}``, ``report --select-by``).
SELECT_BY = ("time_to_target", "final", "best")
#: Today's rule, unchanged: a config without ``selection`` selects as before it existed.
DEFAULT_SELECT_BY = "time_to_target"
#: The baseline optimizer of comparisons across optimizers (the report's statistics, the equal-token
#: differences), when none is named: the first of these that ran, else the first by name.
BASELINES = ("adam", "adamw")


def baseline_of(optimizers) -> str | None:
    """The baseline among ``optimizers`` (names): the first of :data:`BASELINES` among them, else the
    first by name; ``None`` for none.

    Args:
      optimizers: the optimizers' names (any iterable).
    Returns:
      a name, or ``None``.
    """
    names = sorted(set(optimizers))
    return next((b for b in BASELINES if b in names), names[0] if names else None)


#: A run that logged this metric is a language model's (``valid/perplexity``, logged for every
#: sequence task; :func:`ranking_metric`).
LM_MARKER = "valid/perplexity"


def ranking_metric(target_metric: str | None, language_model: bool) -> str:
    """The validation metric a task ranks by: its target's; without a target, ``valid/loss`` for a
    language model (next-token accuracy is not what the field compares), else ``valid/accuracy``.

    Args:
      target_metric: the task's target metric (``None``: no target). language_model: a sequence task
        (its runs log :data:`LM_MARKER`).
    Returns:
      ``"valid/loss"`` or ``"valid/accuracy"`` (or the target's metric); lower is better for a loss.
    """
    if target_metric:
        return target_metric
    return "valid/loss" if language_model else "valid/accuracy"


def check_select_by(by: str | None) -> str:
    """``by`` when it is one of :data:`SELECT_BY` (``None``: :data:`DEFAULT_SELECT_BY`).

    Raises:
      ValueError: any other value, naming the valid ones.
    """
    if by is None:
        return DEFAULT_SELECT_BY
    if by not in SELECT_BY:
        raise ValueError(f"selection by must be one of {', '.join(SELECT_BY)}; got {by!r}")
    return by


def value_kind(by: str) -> str:
    """Which validation value of a seed selection reads: ``"best"`` (the best evaluation during
    training) for ``by == "best"``, else ``"final"`` (the last evaluation; ``time_to_target`` breaks
    its ties with it)."""
    return "best" if check_select_by(by) == "best" else "final"


def selection_key(reached: int, median_steps: float | None, finished: int, value: float | None,
                  higher_is_better: bool, median_seconds: float | None, config: str,
                  by: str = DEFAULT_SELECT_BY) -> tuple:
    """The order in which one optimizer's configurations are selected: the smallest key wins.

    ``value`` is the mean over finished seeds of the validation value that ``by`` reads
    (:func:`value_kind`: final, or best during training); higher is better when
    ``higher_is_better``. ``None`` (no seed reached / no value) sorts last. First difference
    decides:

    - ``time_to_target``: more seeds that ``reached`` the target; lower ``median_steps`` to
      target; more seeds ``finished``; better ``value``; lower ``median_seconds`` to target;
      ``config`` (the caller's tie-break: the sweep's summary and the report pass the
      configuration's smallest trial id).
    - ``final`` / ``best``: more seeds ``finished`` (a seed that diverged or failed has no value:
      it counts as the worst, so the mean over all seeds of a configuration with fewer finished
      seeds is never better); better ``value``; more seeds ``reached``; lower ``median_steps``;
      lower ``median_seconds``; ``config``. Wall-clock never comes before the metric.
    """
    inf = math.inf
    steps = inf if median_steps is None else float(median_steps)
    val = inf if value is None else (-1.0 if higher_is_better else 1.0) * float(value)
    secs = inf if median_seconds is None else float(median_seconds)
    if check_select_by(by) == "time_to_target":
        return (-int(reached), steps, -int(finished), val, secs, str(config))
    return (-int(finished), val, -int(reached), steps, secs, str(config))


def selection_words(by: str, metric: str) -> str:
    """How configurations were selected, in words, for a caption or a table title: ``metric`` is
    the task's target metric (``valid/accuracy``, ``valid/loss``). ``"selected on validation by
    final accuracy"``, ``"selected on validation by best accuracy during training"``, ``"selected
    on validation by time to target"`` (most seeds reaching it, then fewest steps: a caption states
    the order)."""
    name = metric.split("/", 1)[-1]
    by = check_select_by(by)
    if by == "final":
        return f"selected on validation by final {name}"
    if by == "best":
        return f"selected on validation by best {name} during training"
    return "selected on validation by time to target"


def selection_order(by: str, value_words: str = "the final validation metric") -> str:
    """The order :func:`selection_key` selects a configuration in, in words (the one text of the
    report's leaderboard and the sweep's summary): ``"by seeds reaching the validation target,
    then median steps to it, then seeds finished, then {value_words}"`` for ``time_to_target``
    (``value_words`` names the final value that breaks its ties), ``"by seeds finished, then the
    mean over seeds of the final validation value of each task's metric, ..."`` for ``final`` and
    ``best`` (best-during-training). The last keys (median seconds to target, the name) decide only
    exact ties and are left out."""
    by = check_select_by(by)
    if by == "time_to_target":
        return (f"by seeds reaching the validation target, then median steps to it, then seeds "
                f"finished, then {value_words}")
    value = "best-during-training" if by == "best" else "final"
    return (f"by seeds finished, then the mean over seeds of the {value} validation value of each "
            f"task's metric, then seeds reaching the target, then median steps to it")


def best_of(values: list[float] | tuple[float, ...], higher_is_better: bool) -> float | None:
    """The best finite value of one validation curve (max when ``higher_is_better``, else min);
    ``None`` when it has none. What ``best/valid_*`` logs and ``best`` selection reads."""
    finite = [float(v) for v in values if v is not None and math.isfinite(v)]
    if not finite:
        return None
    return max(finite) if higher_is_better else min(finite)
