"""What the command line prints, read as a user's pipe or terminal gets it.

- piped, every command lays out for ``COLUMNS``, else 80 columns (not 140), with no trailing spaces;
  the stage lines on stderr shorten long paths to fit;
- XLA's and the analytic FLOP counts disagreeing (muon's Newton-Schulz steps) is one line naming
  the optimizer and the task and a tag on its run, never a Python warning with a source line;
- the "building N programs" stage and the throughput measurement count what they do; the pre-flight
  says what its k of N counts, in the same words in a dry run and a real run;
- ``list workloads NAME`` shows the loss and the model's hyperparameters; ``list optimizers
  --optax`` shows defaults readably.

Real ``python -m harness`` subprocesses on pipes, real sweeps into a SQLite store in tmp_path.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import yaml
from mlflow.tracking import MlflowClient

ROOT = Path(__file__).resolve().parents[1]


def _harness(args: list[str], cwd: Path, columns: str | None = None, timeout: float = 300):
    """``python -m harness ARGS`` with stdout and stderr on pipes (``COLUMNS`` unset unless given)."""
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    env["PYTHONPATH"] = str(ROOT)
    if columns is not None:
        env["COLUMNS"] = columns
    r = subprocess.run([sys.executable, "-m", "harness", *args], cwd=cwd, env=env, capture_output=True,
                       text=True, timeout=timeout)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return r


def _widths_ok(text: str, width: int) -> None:
    """No line wider than ``width`` but a command to copy (``... -m harness ...``, kept whole on
    purpose), and none with trailing spaces."""
    lines = text.splitlines()
    assert lines
    too_wide = [ln for ln in lines if len(ln) > width and " -m harness " not in ln]
    assert not too_wide, too_wide
    trailing = [ln for ln in lines if ln != ln.rstrip()]
    assert not trailing, trailing


def _flat(text: str) -> str:
    return " ".join(text.split())


def test_list_is_80_columns_on_a_pipe_and_honours_columns(tmp_path):
    r = _harness(["list"], tmp_path)
    _widths_ok(r.stdout, 80)  # before: 140 columns and trailing spaces
    wide = _harness(["list"], tmp_path, columns="120")
    _widths_ok(wide.stdout, 120)
    assert max(map(len, wide.stdout.splitlines())) > 80  # COLUMNS is what it lays out for
    for args in (["list", "optimizers"], ["list", "models"], ["list", "workloads"]):
        _widths_ok(_harness(args, tmp_path).stdout, 80)


def test_list_optimizers_optax_prints_defaults_readably(tmp_path):
    out = _harness(["list", "optimizers", "--optax"], tmp_path).stdout
    _widths_ok(out, 80)
    assert " at 0x" not in out and "<function" not in out and "<class" not in out
    flat = _flat(out)
    assert "clip_value_fn=lambda x: x ** 0.25" in flat  # optax.contrib.adopt's default, its code
    assert "dtype_momentum=jax.numpy.float32" in flat  # optax.adafactor's, a class by its name
    assert "linesearch=GradientTransformationExtraArgs(...)" in flat  # optax.lbfgs's, by its type
    assert "b1=0.9, b2=0.999, eps=1e-08" in flat  # numbers as before


def test_list_workloads_name_shows_the_loss_and_the_models_hyperparameters(tmp_path):
    out = _harness(["list", "workloads", "mnist1d_mlp"], tmp_path).stdout
    _widths_ok(out, 80)
    flat = _flat(out)
    assert "loss: softmax_cross_entropy: softmax cross-entropy of the logits" in flat
    assert "model: mlp, hyperparameters: width=256 depth=2 activation='relu' (the model's default) " \
           "dropout=0.0 (the model's default)" in flat
    assert "dataset: mnist1d (validation_fraction=0.1)" in flat
    assert "target: valid/accuracy >= 0.6" in flat and "budget x batch: 2000 x 128" in flat
    lm = _flat(_harness(["list", "workloads", "markov_lm_transformer"], tmp_path).stdout)
    assert "loss: sequence_cross_entropy: next-token softmax cross-entropy" in lm and "num_heads=4" in lm


def test_a_piped_sweep_fits_80_columns_and_says_a_flops_mismatch_in_one_line(tmp_path):
    """muon's Newton-Schulz iterations make XLA count ~10x the model's analytic FLOPs: before, a
    ``perf.py:334: FlopsMismatchWarning: ...`` and its source line reached stderr. On the pipe the
    tables fit 80 columns and each record (a trial's line, the legend) is one line, never wrapped
    (before: ``... (being written) valid`` / ``acc 0.9652 loss 0.1462``, and a 17-line legend); the
    rules in full with ``--explain``."""
    deep = tmp_path / "a_folder_with_a_rather_long_name" / "and_another_one_below_it" / "configs"
    deep.mkdir(parents=True)
    cfg = deep / "flops_mismatch_sweep.yaml"
    cfg.write_text(yaml.safe_dump({
        "name": "fm", "models": [{"name": "mlp", "hparams": {"width": 64, "depth": 1}}],
        "optimizers": [{"name": "muon", "hparams": {"step_size": 0.01}},
                       {"name": "sgd", "hparams": {"step_size": 0.1}}],
        "datasets": ["digits"], "seeds": [0], "batch_size": 32, "budget": {"steps": 20},
        "eval_every": 10, "steps_per_dispatch": 10, "measure_perf": True}, sort_keys=False))
    work = tmp_path / "work"
    work.mkdir()
    uri = f"sqlite:///{work / 'mlflow.db'}"
    dry = _harness(["sweep", str(cfg), "--dry-run", "--tracking-uri", uri], work)
    _widths_ok(dry.stdout, 80)
    r = _harness(["sweep", str(cfg), "--tracking-uri", uri], work)
    records = [ln for ln in r.stdout.splitlines()
               if ln.startswith(("trained ", "finished ", "rank: ", "note: ", "equal tokens, "))]
    _widths_ok("\n".join(ln for ln in r.stdout.splitlines() if ln not in records), 80)
    trials = [ln for ln in records if ln.startswith(("trained ", "finished "))]
    assert len(trials) == 2 and all(re.search(r"valid acc \S+ loss \S+$", ln) for ln in trials), r.stdout
    equal = [ln for ln in records if ln.startswith("equal tokens, ")]  # a record: one line, as a claim's
    assert len(equal) == 1 and equal[0].endswith("(baseline)"), equal
    legend = [ln for ln in records if ln.startswith("rank: ")]
    assert len(legend) == 1 and legend[0].endswith("Rules in full: sweep --explain, or the HTML report.")
    assert len(legend[0]) < 250 and "paired bootstrap" not in r.stdout, legend
    full = _harness(["sweep", str(cfg), "--tracking-uri", uri, "--explain"], work)  # nothing to train
    rules = [ln for ln in full.stdout.splitlines() if ln.startswith("rank: ")]
    assert len(rules) == 1 and "paired bootstrap 95% interval containing 0" in rules[0], full.stdout
    assert "Time to target: modeled (steps to target × the program's step time" in rules[0]
    stages = [ln for ln in (dry.stderr + r.stderr).splitlines() if ln.startswith("sweep: ")]
    assert any("flops_mismatch_sweep.yaml" in ln for ln in stages), stages  # the file's name stays
    assert all(len(ln) <= 80 for ln in stages), stages  # before: 134 characters, the whole path
    both = r.stdout + r.stderr
    assert "FlopsMismatchWarning" not in both and "perf.py" not in both and "return [" not in both, both
    flat = _flat(both)
    note = "note: muon on digits · mlp: XLA's cost analysis counts"
    assert flat.count(note) == 1, both  # once for the optimizer and task
    assert "the analytic count" in flat and "(run tag perf.flops_mismatch)" in flat
    c = MlflowClient(uri)
    runs = c.search_runs([c.get_experiment_by_name("fm").experiment_id], "tags.`harness.kind` = 'trial'")
    tags = {run.data.tags["optimizer"]: run.data.tags for run in runs}
    assert re.fullmatch(r"XLA's cost analysis counts \S+ FLOPs/step, the analytic count \S+",
                        tags["muon"]["perf.flops_mismatch"])
    assert "perf.flops_mismatch" not in tags["sgd"]


def test_stages_count_what_they_do_the_same_in_a_dry_run_and_a_real_one(tmp_path, write_sweep,
                                                                         tracking_uri, monkeypatch):
    """``building N programs ... (batching auto)`` sat minutes without a count; the pre-flight's
    ``0/22`` did not say what it counted. Each stage's texts, as the sweep says them."""
    import io

    from rich.console import Console

    import harness.orchestrate.progress as progress
    from harness.orchestrate.run import run_sweep

    said: list[tuple[str, str]] = []
    real_stage, real_bar_stage = progress.StageLine.stage, progress.ProgressDisplay.stage

    def stage(self, name, text):
        said.append((name, text))
        return real_stage(self, name, text)

    def bar_stage(self, name, text):
        said.append((name, text))
        return real_bar_stage(self, name, text)

    monkeypatch.setattr(progress.StageLine, "stage", stage)
    monkeypatch.setattr(progress.ProgressDisplay, "stage", bar_stage)
    monkeypatch.chdir(tmp_path)
    cfg = write_sweep(optimizers=[{"name": "sgd", "hparams": {"step_size": 0.1}},
                                  {"name": "adam", "hparams": {"step_size": 0.003}}],
                      seeds=[0, 1], measure_perf=True, budget={"steps": 20})
    def terminal():  # what a user at a terminal sees: a live line, the bar's description
        return Console(file=io.StringIO(), force_terminal=True, width=200)

    run_sweep(cfg, tracking_uri=tracking_uri, dry_run=True, console=terminal())
    dry = [t for n, t in said if n == "pre-flight"]
    said.clear()
    run_sweep(cfg, tracking_uri=tracking_uri, batching="auto", console=terminal())
    real = [t for n, t in said if n == "pre-flight"]
    # what N counts is said (before: "0 of 3 distinct model/optimizer builds" with 2 optimizers)
    assert dry == real and dry[0] == ("pre-flight: tracing 3 builds (1 model; 2 optimizer+schedule pairs on "
                                      "it) for 4 trials: 0 done (nothing is trained or written yet)")
    assert dry[-1].startswith("pre-flight: tracing 3 builds (1 model; 2 optimizer+schedule pairs on it) "
                              "for 4 trials: 3 done")
    build = [t for n, t in said if n == "build"]
    head = "building 2 programs for 4 trials (batching auto"
    assert build == [f"{head})", f"{head}): measuring group 1 of 2 (where vmap pays)",
                     f"{head}): measuring group 2 of 2 (where vmap pays)"]
    throughput = [t for n, t in said if n == "throughput"]
    assert throughput[:2] == [
        "building program 1 of 2 for the throughput measurement (compiled once; training reuses it)",
        "building program 2 of 2 for the throughput measurement (compiled once; training reuses it)"]
    assert throughput[2] == "timing 2 programs, interleaved (one step time per program, under the same load)"


def test_a_stage_line_is_shortened_by_its_paths_and_remark_never_by_its_counts_or_words(monkeypatch,
                                                                                         tmp_path):
    from harness.orchestrate.progress import fit_line

    monkeypatch.chdir(tmp_path)
    head = ("pre-flight: tracing 13 builds (3 models; 10 optimizer+schedule pairs on them) for 32 trials: "
            "13 done")
    line = f"{head} (nothing is trained or written yet)"
    assert fit_line(line, 200) == line
    assert fit_line(line, 73) == head
    assert fit_line(line, 40) == head
    inside = tmp_path / "configs" / "sweep.yaml"
    assert fit_line(f"checking {inside}: reading it (nothing is trained or written yet)", 80) == \
        "checking configs/sweep.yaml: reading it (nothing is trained or written yet)"
    far = "/srv/a_long_folder/another_long_folder/and_a_third_one/configs/sweep.yaml"
    assert fit_line(f"checking {far}: reading it", 60) == "checking /srv/.../configs/sweep.yaml: reading it"
    assert fit_line(f"checking {far}: reading it", 40) == "checking /srv/.../sweep.yaml: reading it"
    assert fit_line(f"checking {far}: reading it", 36) == "checking .../sweep.yaml: reading it"
    build = "building 7 programs for 42 trials (batching auto): measuring group 3 of 7"
    assert fit_line(f"{build} (where vmap pays)", 72) == build


def test_a_config_with_workloads_names_the_part_each_pre_flight_count_is_of(tmp_path):
    from harness.config.load import load_config
    from harness.orchestrate.preflight import preflight

    cfg = tmp_path / "w.yaml"
    cfg.write_text(yaml.safe_dump({"name": "w", "workloads": ["digits_cnn", "mnist1d_mlp"],
                                   "optimizers": [{"name": "sgd", "hparams": {"step_size": 0.1}}],
                                   "seeds": [0], "budget": {"steps": 10}}, sort_keys=False))
    said: list[str] = []
    preflight(load_config(cfg), str(cfg), on_stage=lambda name, text: said.append(text))
    counts = [t for t in said if "pre-flight:" in t]
    assert counts[0] == ("digits_cnn (1 of 2): pre-flight: tracing 2 builds (1 model; 1 optimizer+schedule "
                         "pair on it) for 1 trial: 0 done (nothing is trained or written yet)")
    assert "mnist1d_mlp (2 of 2): pre-flight: tracing 2 builds (1 model; 1 optimizer+schedule pair on it) " \
           "for 1 trial: 0 done (nothing is trained or written yet)" in counts
