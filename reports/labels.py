"""Labels of a sweep's trials: the task a trial trains and the optimizer configuration it uses.

From a trial's MLflow params: ``task`` (model / dataset plus the task-defining params that vary:
:func:`harness.core.names.is_task_param`, the rule the sweep's summary splits its tables by too),
``config`` (optimizer, schedule when it varies, plus the configuration params that vary) and
``config_id`` (a stable hash of every configuration param, :func:`harness.core.names.config_id`, the
identity the sweep's summary groups by too), the columns :mod:`reports.frame` adds.
"""

from __future__ import annotations

import pandas as pd

from harness.core.names import (
    TUNING_NONE,
    config_id,
    is_config_param,
    is_task_param,
    with_params,
)

#: Appended to the ``config`` label of a ``tuning: none`` entry's configuration.
SELF_TUNING = "(self-tuning)"


def is_self_tuning(tuning) -> bool:
    """Whether a trial's ``harness.tuning`` tag value (``"none"``, ``"none,tuned"``, absent) makes
    it a configuration of a self-tuning (``tuning: none``) optimizer entry."""
    return isinstance(tuning, str) and TUNING_NONE in tuning.split(",")


def is_tuned(tuning) -> bool:
    """Whether an entry that tunes yields the trial (absent tag, or ``"none,tuned"``)."""
    return not is_self_tuning(tuning) or "tuned" in tuning.split(",")


def _varying(params: pd.DataFrame, cols: list[str]) -> list[str]:
    return [c for c in cols if params[c].astype("string").fillna("<absent>").nunique() > 1]


def add_labels(summary: pd.DataFrame) -> pd.DataFrame:
    """Add ``task``, ``config_id`` and ``config`` (human-readable) to one-row-per-trial ``summary``
    (columns ``model``, ``dataset``, ``optimizer``, ``schedule`` and ``params.<name>``; a trial
    whose ``tuning`` column says self-tuning gets :data:`SELF_TUNING` after its ``config``)."""
    pcols = sorted(c for c in summary.columns if c.startswith("params."))
    names = {c: c[len("params.") :] for c in pcols}
    task_cols = [c for c in pcols if is_task_param(names[c])]
    conf_cols = [c for c in pcols if is_config_param(names[c])]

    def label(df: pd.DataFrame, cols: list[str], head: pd.Series) -> pd.Series:
        var = _varying(df, cols)
        if not var:
            return head.copy()
        columns = [(names[c].split(".", 1)[1], df[c].tolist()) for c in var]  # lists: 1,000 rows in ms
        out = []
        for j, h in enumerate(head.tolist()):
            bits = [f"{n}={vals[j]}" for n, vals in columns if pd.notna(vals[j])]
            out.append(with_params(h, bits))
        return pd.Series(out, index=head.index, dtype=head.dtype)

    summary = summary.copy()
    summary["task"] = label(summary, task_cols, summary["model"] + " / " + summary["dataset"])
    summary["config"] = summary["optimizer"]
    summary["config_id"] = ""
    for _opt, idx in summary.groupby("optimizer", sort=False).groups.items():
        df = summary.loc[idx]
        head = df["optimizer"].copy()
        if df["schedule"].nunique() > 1:
            head = head + " · " + df["schedule"]
        summary.loc[idx, "config"] = label(df, conf_cols, head)
    if "tuning" in summary:
        own = summary["tuning"].map(is_self_tuning).astype(bool)
        summary.loc[own, "config"] = summary.loc[own, "config"] + f" {SELF_TUNING}"
    conf = [(names[c], summary[c].tolist()) for c in conf_cols]
    ids = []
    for j, (opt, sched) in enumerate(zip(summary["optimizer"].tolist(), summary["schedule"].tolist(),
                                         strict=True)):
        ids.append(config_id(opt, sched, {n: vals[j] for n, vals in conf if pd.notna(vals[j])}))
    summary["config_id"] = pd.Series(ids, index=summary.index, dtype=summary["config_id"].dtype)
    return summary
