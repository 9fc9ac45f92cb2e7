"""Where ``python -m harness ui`` lands in the MLflow UI (MLflow 3.17): the runs view of an
experiment, as model training, charts grouped by optimizer.

* MLflow 3 shows an experiment as GenAI (traces, an "Overview" of latency with "No data") unless the
  experiment tag ``mlflow.experimentKind`` says otherwise; :func:`mark_training` sets it to
  ``custom_model_development`` (the UI's "model training" kind). The sweep sets it when it creates
  an experiment; ``ui`` sets it on experiments made before that.
* The runs view's state (grouping, which runs the charts show, the search filter) can be shared
  through an experiment tag ``mlflow.sharedViewState.<key>`` holding the state as JSON and the URL
  parameter ``viewStateShareKey=<key>`` (what the UI's own "Share" button writes).
  :func:`training_view` writes one that shows only trial runs (parents hidden by the filter
  ``tags.`harness.kind` = 'trial'``), grouped by the ``optimizer`` tag with the curves averaged per
  group (min-max band), every run in the charts; :func:`runs_view_url` opens it in chart mode
  (``compareRunsMode=CHART``).

MLflow's client is passed in (``MlflowClient``); nothing here imports MLflow itself.
"""

from __future__ import annotations

import hashlib
import json

from harness.core.names import KIND_TRIAL, TAG_KIND

EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
TRAINING_KIND = "custom_model_development"
SHARED_VIEW_PREFIX = "mlflow.sharedViewState."
#: The runs-view state :func:`training_view` shares (keys as MLflow 3.17's UI reads them).
TRAINING_VIEW = {
    "searchFilter": f"tags.`{TAG_KIND}` = '{KIND_TRIAL}'",
    "orderByKey": "attributes.start_time",
    "orderByAsc": False,
    "groupBy": {"aggregateFunction": "average", "groupByKeys": [{"mode": "tag", "groupByData": "optimizer"}]},
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


def training_view(client, experiment_id: str) -> str:
    """Write the shared runs-view state :data:`TRAINING_VIEW` on the experiment (idempotent: the
    key is a hash of the state) and return its key."""
    value = json.dumps(TRAINING_VIEW, sort_keys=True, separators=(",", ":"))
    key = hashlib.sha256(value.encode()).hexdigest()[:32]
    exp = client.get_experiment(experiment_id)
    if exp.tags.get(SHARED_VIEW_PREFIX + key) != value:
        client.set_experiment_tag(experiment_id, SHARED_VIEW_PREFIX + key, value)
    return key


def runs_view_url(base: str, experiment_id: str, share_key: str | None = None) -> str:
    """``<base>/#/experiments/<id>/runs`` in chart mode, with the shared view when given."""
    url = f"{base.rstrip('/')}/#/experiments/{experiment_id}/runs?compareRunsMode=CHART"
    return url + (f"&viewStateShareKey={share_key}" if share_key else "")


def prepare(client, experiment_id: str) -> str:
    """Mark the experiment as training and write its shared view; return the view's key."""
    mark_training(client, experiment_id)
    return training_view(client, experiment_id)
