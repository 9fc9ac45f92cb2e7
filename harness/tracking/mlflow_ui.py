"""Where ``python -m harness ui`` lands in the MLflow UI (MLflow 3.17): the runs view of an
experiment, as model training, on the validation curves grouped by task and optimizer, with the final
values as bars and as the runs table's columns.

* **Model training, not GenAI.** MLflow 3.17's UI shows every page in one of two modes, the
  "GenAI" / "Model training" toggle in its sidebar. The URL parameter ``workflowType`` chooses it
  (``machine_learning``); without one the browser's remembered choice (``localStorage``
  ``mlflow.workflowType``, first ``genai``) does, whatever the experiment is. The experiment tag
  ``mlflow.experimentKind`` (``custom_model_development``, set by :func:`mark_training`) is what the
  experiment's own pages read for its kind. :func:`runs_view_url` puts ``workflowType`` in the URL;
  the sweep sets the tag when it creates an experiment, ``ui`` on experiments made before that.
* **The runs view's state** (search filter, grouping, chart sections and charts, table columns) is
  shared through an experiment tag ``mlflow.sharedViewState.<key>`` holding it as JSON and the URL
  parameter ``viewStateShareKey=<key>`` (what the UI's own "Share" button writes). :func:`view_state`
  builds one: only trial runs (parents hidden by the filter ``tags.`harness.kind` = 'trial'``,
  and never loaded back: MLflow 3.17's runs page fetches the parent of every nested run it shows,
  adding the sweep's parent runs to the page as "Additional runs" and to every chart as an
  "Unassigned" group, whenever the view is sorted by start time (its default)
  or has neither a sort nor a filter; so the view is sorted by run name, model and optimizer
  first), grouped by task and optimizer (:func:`task_groups`: the ``model`` and ``dataset`` tags and
  the task params that differ between the runs, then the ``optimizer`` tag; where the experiment
  holds two versions of one user's optimizer, its ``optimizer.source_hash`` too: never one average
  of two models or two versions) with the curves averaged per group (min-max band); the chart
  sections ``valid`` (the validation curves), ``train``, the other curves, then the single-valued
  metrics' sections as bar charts of the group means (``final``, ``test``, ``convergence`` open, the
  rest collapsed); the table's columns the trial's tags and its final, test and convergence values.
  MLflow itself orders sections by name and draws a line against the step for any metric last logged
  at a step >= 1, which would put ``convergence/steps_to_target`` (logged at the step the target was
  reached) first, as a line. Metrics not known when the view was written are added by MLflow at the
  end. (MLflow's "difference view" table renders empty cells for grouped runs: its column ids are the
  group ids, which contain dots; so no such table here.)

MLflow's client is passed in (``MlflowClient``); nothing here imports MLflow itself.
"""

from __future__ import annotations

import hashlib
import json

from harness.core.names import (
    KIND_TRIAL,
    TAG_DATASET,
    TAG_KIND,
    TAG_MODEL,
    TAG_OPTIMIZER,
    TAG_OPTIMIZER_SOURCE_HASH,
    TAG_SCHEDULE,
    TAG_SEED,
    is_curve_metric,
    is_task_param,
)

EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
TRAINING_KIND = "custom_model_development"
SHARED_VIEW_PREFIX = "mlflow.sharedViewState."
#: The longest experiment tag value MLflow 3.17 stores.
MAX_TAG_VALUE = 20_000
#: The URL parameter and value that select MLflow 3.17's "Model training" mode.
WORKFLOW_PARAM = ("workflowType", "machine_learning")
#: Curve sections first, in this order (then the other curve sections by name).
FIRST_SECTIONS = ("valid", "train")
#: Single-valued sections shown open and as the runs table's metric columns, in this order (the
#: other single-valued sections follow collapsed).
TABLE_SECTIONS = ("final", "test", "convergence")
#: The runs table's first columns (then the metrics of :data:`TABLE_SECTIONS`).
TABLE_TAGS = tuple(f"tags.`{t}`" for t in (TAG_MODEL, TAG_OPTIMIZER, TAG_SCHEDULE, TAG_DATASET, TAG_SEED))
#: Cards per row (MLflow's default 3): the curves two a row.
_LAYOUT = {"valid": {"columns": 2}, "train": {"columns": 2}}
#: The runs table's sort: the run name (``<model>-<optimizer>-<schedule>-...``), one of the UI's own
#: sort keys. MLflow 3.17 fetches missing parents when sorted by ``attributes.start_time``.
ORDER_BY = "tags.`mlflow.runName`"
#: Group by the optimizer; with :data:`VERSION_GROUP` too where one optimizer name has several
#: source versions.
OPTIMIZER_GROUP = {"mode": "tag", "groupByData": TAG_OPTIMIZER}
VERSION_GROUP = {"mode": "tag", "groupByData": TAG_OPTIMIZER_SOURCE_HASH}
#: The runs-view state every view shares (keys as MLflow 3.17's UI reads them).
BASE_VIEW = {
    "searchFilter": f"tags.`{TAG_KIND}` = '{KIND_TRIAL}'",
    # not attributes.start_time: sorted so, MLflow's page loads each shown run's parent (see above)
    "orderByKey": ORDER_BY,
    "orderByAsc": True,
    "groupBy": {"aggregateFunction": "average", "groupByKeys": [OPTIMIZER_GROUP]},
    "useGroupedValuesInCharts": True,
    "runsHiddenMode": "SHOW_ALL",
    "hideEmptyCharts": True,
    "groupsExpanded": {},
}


def mark_training(client, experiment_id: str) -> None:
    """Tag the experiment as model training for MLflow 3's UI (idempotent)."""
    exp = client.get_experiment(experiment_id)
    if exp.tags.get(EXPERIMENT_KIND_TAG) != TRAINING_KIND:
        client.set_experiment_tag(experiment_id, EXPERIMENT_KIND_TAG, TRAINING_KIND)


def section_of(metric: str) -> str:
    """The chart section MLflow puts ``metric`` in: its name up to the last ``/`` (``""`` for none)."""
    return metric.rsplit("/", 1)[0] if "/" in metric else ""


def view_state(metric_keys, bars: bool = True, versions: bool = False, tasks=()) -> dict:
    """The runs-view state for runs that logged ``metric_keys`` (see the module's docstring);
    without ``bars``, MLflow makes the single-valued metrics' charts; with ``versions``, the runs
    are grouped by optimizer and source version; ``tasks`` (:func:`task_groups`) go first among the
    group keys. Sections and charts get stable ids (``harness-section-<name>``,
    ``harness-chart-<metric>``): the same metrics, the same state."""
    keys = sorted({k for k in metric_keys if section_of(k)})  # no "/": MLflow's "Model metrics"
    curve = {section_of(k) for k in keys if is_curve_metric(k)}
    single = {section_of(k) for k in keys} - curve
    order = ([s for s in FIRST_SECTIONS if s in curve] + sorted(curve - set(FIRST_SECTIONS))
             + [s for s in TABLE_SECTIONS if s in single] + sorted(single - set(TABLE_SECTIONS)))
    sections = [{"uuid": f"harness-section-{name}", "name": name,
                 "display": name in curve or name in TABLE_SECTIONS, "isReordered": False,
                 "deleted": False, "isGenerated": False, **_LAYOUT.get(name, {})} for name in order]
    # single values as bars of the group means (MLflow would draw a line against the step of a value
    # logged at step >= 1); the curves' line charts are left to MLflow, one per metric in its section
    bars_ = [{"uuid": f"harness-chart-{k}", "type": "BAR", "runsCountToCompare": 10,
              "metricSectionId": f"harness-section-{section_of(k)}", "deleted": False, "isGenerated": False,
              "metricKey": k, "displayName": k}
             for k in keys if bars and not is_curve_metric(k)]  # also beside curves (time/compile_s)
    columns = [f"metrics.`{k}`" for s in TABLE_SECTIONS for k in keys
               if section_of(k) == s and not is_curve_metric(k)]
    return {**BASE_VIEW, **_grouping(versions, tasks), "compareRunSections": sections,
            "compareRunCharts": bars_,
            "isAccordionReordered": True,
            "selectedColumns": [*TABLE_TAGS, *([f"tags.`{TAG_OPTIMIZER_SOURCE_HASH}`"] if versions else []),
                                *columns]}


def _grouping(versions: bool, tasks=()) -> dict:
    keys = [*tasks, OPTIMIZER_GROUP, *([VERSION_GROUP] if versions else [])]
    return {"groupBy": {**BASE_VIEW["groupBy"], "groupByKeys": keys}}


def task_groups(runs) -> list[dict]:
    """The group keys that tell the tasks of ``runs`` apart: the ``model`` and ``dataset`` tags where
    two runs differ in them, then each task param (:func:`harness.core.names.is_task_param`:
    ``model.width``, ``train.batch_size``, ...) where two runs of one model and dataset differ in it
    (a param only one model has is told apart by the model already); ``[]`` for one task."""
    def tag(r, t):
        return r.data.tags.get(t, "")

    out = [{"mode": "tag", "groupByData": t} for t in (TAG_MODEL, TAG_DATASET)
           if len({tag(r, t) for r in runs}) > 1]
    seen: dict[tuple, str] = {}
    varying: set[str] = set()
    for r in runs:
        for k in {k for k in r.data.params if is_task_param(k)} - varying:
            first = seen.setdefault((tag(r, TAG_MODEL), tag(r, TAG_DATASET), k), r.data.params[k])
            if first != r.data.params[k]:
                varying.add(k)
    return out + [{"mode": "param", "groupByData": k} for k in sorted(varying)]


def trial_runs(client, experiment_id: str, max_runs: int = 200) -> list:
    """The experiment's latest ``max_runs`` trial runs (what the view shows; parents are not)."""
    return client.search_runs([experiment_id], BASE_VIEW["searchFilter"], max_results=max_runs,
                              order_by=["attributes.start_time DESC"])


def metric_keys(runs) -> set[str]:
    """The metric names of ``runs``."""
    return {k for r in runs for k in r.data.metrics}


def several_versions(runs) -> bool:
    """Whether one optimizer name of ``runs`` ran with two or more ``optimizer.source_hash``
    values (a user's optimizer whose code changed between sweeps)."""
    seen: dict[str, set] = {}
    for r in runs:
        tags = r.data.tags
        if tags.get(TAG_OPTIMIZER_SOURCE_HASH):
            seen.setdefault(tags.get(TAG_OPTIMIZER, ""), set()).add(tags[TAG_OPTIMIZER_SOURCE_HASH])
    return any(len(v) > 1 for v in seen.values())


def training_view(client, experiment_id: str) -> str:
    """Write :func:`view_state` for the experiment's trial runs' metrics (grouped by task,
    :func:`task_groups`, and by source version where :func:`several_versions`) as a shared view on
    the experiment (idempotent: the key is a hash of the state) and return its key."""
    runs = trial_runs(client, experiment_id)
    keys, versions, tasks = metric_keys(runs), several_versions(runs), task_groups(runs)
    value = json.dumps(view_state(keys, versions=versions, tasks=tasks), sort_keys=True,
                       separators=(",", ":"))
    if len(value) > MAX_TAG_VALUE:  # many metrics: leave their bar charts to MLflow
        value = json.dumps(view_state(keys, bars=False, versions=versions, tasks=tasks), sort_keys=True,
                           separators=(",", ":"))
    if len(value) > MAX_TAG_VALUE:  # and their sections and columns
        value = json.dumps({**BASE_VIEW, **_grouping(versions, tasks)}, sort_keys=True,
                           separators=(",", ":"))
    key = hashlib.sha256(value.encode()).hexdigest()[:32]
    exp = client.get_experiment(experiment_id)
    if exp.tags.get(SHARED_VIEW_PREFIX + key) != value:
        client.set_experiment_tag(experiment_id, SHARED_VIEW_PREFIX + key, value)
    return key


def runs_view_url(base: str, experiment_id: str, share_key: str | None = None) -> str:
    """``<base>/#/experiments/<id>/runs`` in "Model training" mode and chart mode, with the shared
    view when given."""
    name, value = WORKFLOW_PARAM
    url = f"{base.rstrip('/')}/#/experiments/{experiment_id}/runs?{name}={value}&compareRunsMode=CHART"
    return url + (f"&viewStateShareKey={share_key}" if share_key else "")


def prepare(client, experiment_id: str) -> str:
    """Mark the experiment as training and write its shared view; return the view's key."""
    mark_training(client, experiment_id)
    return training_view(client, experiment_id)
