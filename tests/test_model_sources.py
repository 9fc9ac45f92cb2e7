"""Models by ``source:``: a file's factory returning a stax pair or a Flax module trains as a zoo
model does, its digest joins the trial id, its provenance is tagged, and a bad source or factory
is refused before any write with its key path."""

from __future__ import annotations

import sqlite3
import textwrap

import yaml
from typer.testing import CliRunner

from harness.cli import app
from harness.config.load import load_config
from harness.plan.expansion import expand

NETS = textwrap.dedent('''
    from models import stax


    def small_mlp(*, num_classes, width: int = 16):
        """A stax pair."""
        return stax.serial(stax.Flatten, stax.Dense(width), stax.Relu, stax.Dense(num_classes))


    def flax_mlp(*, num_classes, width: int = 8):
        import flax.linen as nn

        class Net(nn.Module):
            @nn.compact
            def __call__(self, x):
                return nn.Dense(num_classes)(nn.relu(nn.Dense(width)(x.reshape(x.shape[0], -1))))

        return Net()


    def not_a_model(*, num_classes):
        return 42
''')


def _write(tmp_path, models, nets=NETS):
    (tmp_path / "nets.py").write_text(nets)
    cfg = {"name": "src", "models": models, "optimizers": [{"name": "sgd", "hparams": {"step_size": 0.1}}],
           "schedules": ["constant"], "datasets": ["digits"], "seeds": [0], "batch_size": 32,
           "budget": {"steps": 20}, "eval_every": 20, "steps_per_dispatch": 20, "measure_perf": False,
           "target": {"metric": "valid/accuracy", "value": 0.3}}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def test_a_flax_model_by_source_trains_and_is_tagged(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    cfg = _write(tmp_path, [{"name": "my_flax", "source": "nets.py:flax_mlp", "hparams": {"width": 4}}])
    r = CliRunner().invoke(app, ["sweep", str(cfg)])
    assert r.exit_code == 0, r.output
    db = sqlite3.connect(tmp_path / "mlflow.db")
    tags = dict(db.execute("select t.key, t.value from tags t join runs r on r.run_uuid = t.run_uuid "
                           "where t.key like 'model%' and r.status = 'FINISHED'").fetchall())
    params = dict(db.execute("select key, value from params where key like 'model%'").fetchall())
    spec = expand(load_config(str(cfg)))[0]
    assert tags["model"] == "my_flax" and tags["model.source"] == "nets.py:flax_mlp"
    assert tags["model.source_hash"] == spec.model_source_hash and len(spec.model_source_hash) == 16
    assert len(tags["model.source_file_hash"]) == 16
    assert params == {"model": "my_flax", "model.width": "4", "model.source": "nets.py:flax_mlp"}
    # the run kept the file (source/model/nets.py): the trial trains again from that copy alone
    import harness

    (tmp_path / "nets.py").unlink()
    again = harness.reproduce(spec.trial_id, tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}",
                              scratch=tmp_path / "again", threads="here")
    assert again.identical, str(again)
    assert (tmp_path / "again" / "source" / "model" / "nets.py").read_text() == NETS


def test_the_factorys_code_is_the_trials_identity(tmp_path):
    models = [{"name": "mine", "source": "nets.py:small_mlp"}]
    first = expand(load_config(str(_write(tmp_path, models))))[0]
    commented = expand(load_config(str(_write(tmp_path, models, NETS.replace('"""A stax pair."""',
                                                                              "# a comment")))))[0]
    changed = expand(load_config(str(_write(tmp_path, models, NETS.replace("stax.Relu", "stax.Tanh")))))[0]
    other = expand(load_config(str(_write(tmp_path, models, NETS.replace("return 42", "return 43")))))[0]
    assert first.model_source_ref[2] == "small_mlp" and "def small_mlp" in first.model_source_ref[4]
    assert first.trial_id == commented.trial_id == other.trial_id  # what small_mlp runs is unchanged
    assert changed.trial_id != first.trial_id and changed.model_source_hash != first.model_source_hash


def test_bad_model_sources_are_refused_before_any_write(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    cfg = _write(tmp_path, [{"name": "mlp", "source": "nets.py:small_mlp"},
                            {"name": "typo", "source": "nets.py:smal_mlp"},
                            {"name": "opt", "source": "optax:adam"}])
    r = CliRunner().invoke(app, ["sweep", str(cfg)])
    assert r.exit_code == 2, r.output
    lines = [ln for ln in r.output.splitlines() if ln.startswith(f"{cfg}: ")]
    assert lines == [
        f"{cfg}: models[0].source: 'mlp' is a zoo model; give your source entry a name of its own "
        "(e.g. 'my_mlp')",
        f"{cfg}: models[1].source: source 'nets.py:smal_mlp': nets.py has no 'smal_mlp' (did you mean "
        "'small_mlp'?)",
        f"{cfg}: models[2].source: source 'optax:adam': a model's source is PATH.py:FUNCTION or "
        "package.module:FUNCTION"], r.output
    cfg = _write(tmp_path, [{"name": "bad", "source": "nets.py:not_a_model"},
                            {"name": "mine", "source": "nets.py:small_mlp", "hparams": {"widht": 3}}])
    r = CliRunner().invoke(app, ["sweep", str(cfg)])
    assert r.exit_code == 2, r.output
    lines = [ln for ln in r.output.splitlines() if ln.startswith(f"{cfg}: ")]
    assert lines[0].startswith(f"{cfg}: models[1].hparams.widht: unknown hyperparameter of model 'mine'")
    assert len(lines) == 1, r.output  # names first; the factory runs once they pass
    cfg = _write(tmp_path, [{"name": "bad", "source": "nets.py:not_a_model"}])
    r = CliRunner().invoke(app, ["sweep", str(cfg)])
    assert r.exit_code == 2, r.output
    assert f"{cfg}: models[0].source: model 'bad' (defaults) on dataset 'digits' with input shape " \
           "(8, 8, 1): not_a_model (source 'nets.py:not_a_model'): got int; expected a stax " \
           "(init_fun, apply_fun) pair" in r.output
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "mlruns").exists()
