"""``examples/quickstart.ipynb`` executed headless (nbclient, a real IPython kernel) on a fresh store:
its sweep trains six quickstart trials, and what its cells show is checked against the
same store read back here: the trials table's test accuracies, the LaTeX leaderboard (the very text
``harness.results(...).leaderboard.to_latex()`` gives), a figure drawn as a PNG, and the trial trained
again: identical. Nothing is written beside the notebook."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import pytest

import harness

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "examples" / "quickstart.ipynb"


def _text(cell) -> str:
    """Everything a cell printed or displayed as text."""
    out = []
    for o in cell.get("outputs", []):
        if o["output_type"] == "stream":
            out.append(o["text"])
        elif "data" in o:
            out.append(o["data"].get("text/plain", ""))
    return "".join(out)


def _cell(nb, start: str):
    return next(c for c in nb.cells if c.cell_type == "code" and c.source.startswith(start))


@pytest.mark.slow
def test_the_quickstart_notebook_runs_headless_and_shows_the_stores_values(tmp_path, monkeypatch):
    import nbformat
    from nbclient import NotebookClient

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)  # the kernel inherits it
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # and reproduce's scratch store goes there
    before = sorted(p.name for p in NOTEBOOK.parent.iterdir())
    nb = nbformat.read(NOTEBOOK, as_version=4)
    NotebookClient(nb, timeout=900, kernel_name="python3",
                   resources={"metadata": {"path": str(NOTEBOOK.parent)}}).execute()
    assert sorted(p.name for p in NOTEBOOK.parent.iterdir()) == before  # the store went to tmp_path

    res = harness.results("quickstart", tracking_uri=uri)
    assert len(res.trials) == 6 and set(res.trials["optimizer"]) == {"sgd", "momentum", "adam"}
    assert (res.trials["status"] == "finished").all()

    run_out = next(o["data"] for o in _cell(nb, "import harness")["outputs"] if "data" in o)
    assert "warning:" not in _text(_cell(nb, "import harness"))  # quiet=True: not tqdm's widget notice
    assert "6 trials, 6 finished, 0 diverged, 0 failed" in run_out["text/plain"]
    assert "<table" in run_out["text/html"]  # the leaderboard, rendered by _repr_html_

    shown = _text(_cell(nb, "res = run.results()"))
    for acc in res.trials["test/accuracy"]:
        assert f"{acc:.6f}" in shown, (acc, shown)

    board = _text(_cell(nb, "res.leaderboard["))
    for r in res.leaderboard.itertuples():
        assert re.search(rf"{r.rank_label}\s+{r.optimizer}\s+{r.test_mean:.6f}", board), (r, board)

    fig = _cell(nb, "%matplotlib inline")
    assert any("image/png" in o.get("data", {}) for o in fig["outputs"]), fig["outputs"]

    latex = _text(_cell(nb, "print(res.leaderboard.to_latex())"))
    assert latex.strip() == res.leaderboard.to_latex().strip()
    assert "\\begin{tabular}" in latex and "momentum" in latex

    check = _text(_cell(nb, "check = harness.reproduce"))
    first = res.trials["trial_id"].iloc[0]
    assert check.splitlines()[0].startswith(f"trial {first} (quickstart, run ")
    assert "): identical: " in check.splitlines()[0] and "equal bit for bit" in check, check
    assert f"into sqlite:///{tmp_path}/harness-reproduce-" in check


def test_tqdms_widget_notice_is_not_a_sweep_warning(capfd):
    """``import mlflow`` in a Jupyter kernel without ipywidgets raises tqdm's "IProgress not found"
    (MLflow imports ``tqdm.auto``); the harness draws no tqdm bar, so a sweep does not print it (the
    notebook's first cell showed ``warning: TqdmWarning: IProgress not found. ...`` under quiet=True).
    Other warnings stay one line each."""
    from tqdm import TqdmWarning

    from harness.core.conditions import one_line_warnings

    with warnings.catch_warnings(), one_line_warnings():
        warnings.simplefilter("always")
        warnings.warn("IProgress not found. Please update jupyter and ipywidgets. See https://ipywidgets."
                      "readthedocs.io/en/stable/user_install.html", TqdmWarning, stacklevel=1)
        warnings.warn("something else\nsecond line", UserWarning, stacklevel=1)
    assert capfd.readouterr().err == "warning: UserWarning: something else\n"
