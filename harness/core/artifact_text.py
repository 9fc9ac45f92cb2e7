"""One artifact of an MLflow run read as text, with MLflow's download progress bar off meanwhile."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

__all__ = ["artifact_text"]

PROGRESS_BAR_ENV = "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"


def artifact_text(client, run_id: str, path: str, folder: str | Path | None = None) -> str | None:
    """The UTF-8 text of artifact ``path`` of run ``run_id``, downloaded into a temporary folder
    (inside ``folder`` when given).

    Args:
      client: an ``mlflow.MlflowClient`` or anything with its ``download_artifacts``.

    Returns:
      The text; ``None`` when the artifact is absent or the store cannot be read.
    """
    before = os.environ.get(PROGRESS_BAR_ENV)
    os.environ[PROGRESS_BAR_ENV] = "false"
    try:
        with tempfile.TemporaryDirectory(dir=folder) as d:
            return Path(client.download_artifacts(run_id, path, d)).read_text(encoding="utf-8")
    except Exception:  # absent artifact, unreachable store
        return None
    finally:
        if before is None:
            os.environ.pop(PROGRESS_BAR_ENV, None)
        else:
            os.environ[PROGRESS_BAR_ENV] = before
