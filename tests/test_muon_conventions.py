"""``muon``'s conventions as hyperparameters: the named settings ``list optimizers muon`` shows,
per-iteration Newton-Schulz coefficients by hand, stored trial ids of existing muon configs
unchanged, and every bad value refused by the config layer with one line naming its key path,
exit 2 and no store written."""

from __future__ import annotations

from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest
from typer.testing import CliRunner

from harness.cli import app
from harness.config.load import load_config
from harness.plan.expansion import expand
from optimizers.modern import MUON_CONVENTIONS, MUON_NS_COEFFS, newton_schulz

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[1]


def test_list_shows_the_named_conventions():
    r = runner.invoke(app, ["list", "optimizers", "muon"])
    assert r.exit_code == 0, r.output
    flat = " ".join(r.output.split())
    assert "convention='optax'" in flat and "ns_coeffs=None" in flat and "adam_nesterov=None" in flat
    assert "named conventions: optax, jordan, modded_nanogpt" in flat
    assert "modded_nanogpt (its optimization track's train_gpt_simple.py): 12 iterations of (2, -1.5, 0.5) " \
           "in bfloat16, ns_eps 1e-7, lerp momentum, plain AdamW, adam_eps 1e-10" in flat
    assert MUON_CONVENTIONS["optax"]["ns_coeffs"] == MUON_NS_COEFFS == (3.4445, -4.7750, 2.0315)


def test_newton_schulz_takes_one_triple_per_iteration():
    """``diag(3, 4)`` scaled to unit Frobenius norm is ``diag(0.6, 0.8)``; each iteration maps a
    singular value ``s`` to ``a s + b s^3 + c s^5`` with its own row, in order."""
    rows = ((2.0, -1.5, 0.5), (1.5, -0.5, 0.0), (3.0, -2.0, 0.25))
    s = np.array([0.6, 0.8])
    for a, b, c in rows:
        s = a * s + b * s**3 + c * s**5
    got = newton_schulz(jnp.diag(jnp.array([3.0, 4.0])), 3, rows, eps=0.0)
    np.testing.assert_allclose(np.diag(np.asarray(got)), s, rtol=1e-6)
    assert float(jnp.abs(got[0, 1])) == 0.0
    # one triple repeated is the same as that triple written per iteration; bfloat16 on request
    x = jnp.diag(jnp.array([3.0, 4.0]))
    np.testing.assert_array_equal(newton_schulz(x, 3, rows[0], eps=0.0),
                                  newton_schulz(x, 3, rows[:1] * 3, eps=0.0))
    assert newton_schulz(jnp.eye(2), 1, rows[0], dtype=jnp.bfloat16).dtype == jnp.bfloat16
    with pytest.raises(ValueError, match=r"ns_coeffs: 3 \(a, b, c\) triples, one per iteration, but 5 "):
        newton_schulz(jnp.eye(2), 5, rows)


def test_existing_muon_trial_ids_unchanged():
    """Computed with the code before these hyperparameters existed (branch point feb6997): the
    muon trial ids of experiments/recipe.yaml. That code kept the target in the id, so they are
    compared with :attr:`TrialSpec.legacy_trial_id` (the target's own change of the id is pinned in
    tests/test_trial_ids_pinned.py)."""
    cfg = load_config(ROOT / "experiments" / "recipe.yaml")
    specs = expand(cfg, n_train=lambda n, h: 4000)
    muon = [s.legacy_trial_id for s in specs if s.optimizer == "muon"]
    assert muon[:2] == ["951044e403df4f64", "cbe352594a64a29a"]


@pytest.mark.parametrize("bad, where, message", [
    ("{value: [2, -1.5]}", "ns_coeffs", "expected tuple[float, float, float] | tuple[tuple[float, float, "
                                        "float], ...] | None, got [2, -1.5]"),
    # a bare list is a grid axis: its first value failed with "got 1" and no word of why
    ("[1, 2]", "ns_coeffs", "got 1 (a list is a grid axis, so 1 was read as one value of it; one list "
                            "value is written {value: [...]})"),
    ("{value: [[2, -1.5, 0.5], [2, -1.5, 0.5]]}, ns_steps: 5", "ns_coeffs",
     "ns_coeffs: 2 (a, b, c) triples, one per iteration, but 5 Newton-Schulz iterations"),
    ("{value: [2, -1.5, .nan]}", "ns_coeffs", "ns_coeffs must be one (a, b, c) triple of finite numbers"),
    ("float64", "ns_dtype", "expected one of float32, bfloat16, float16, null, got 'float64'"),
    ("nesterov", "momentum_form", "expected one of bias_corrected, lerp, null, got 'nesterov'"),
    ("keller", "convention", "expected one of optax, jordan, modded_nanogpt, got 'keller'"),
    ("0", "ns_steps", "ns_steps must be an integer >= 1, got 0"),
    ("-1.0", "adam_eps", "adam_eps must be >= 0, got -1.0"),
])
def test_bad_muon_conventions_are_refused_before_any_store(tmp_path, bad, where, message):
    p = tmp_path / "bad.yaml"
    p.write_text(f"name: t3bad\nmodels: [{{name: mlp, hparams: {{width: 8, depth: 1}}}}]\n"
                 f"optimizers: [{{name: muon, hparams: {{step_size: 0.02, {where}: {bad}}}}}]\n"
                 f"datasets: [digits]\nseeds: 1\nbatch_size: 16\nbudget: {{steps: 4}}\n")
    r = runner.invoke(app, ["sweep", str(p), "--tracking-uri", f"sqlite:///{tmp_path}/m.db"])
    assert r.exit_code == 2, r.output
    lines = [ln for ln in r.output.splitlines() if ln.startswith(f"{p}: ")]
    assert len(lines) == 1 and lines[0].startswith(f"{p}: optimizers[0].hparams.{where}: "), r.output
    assert message in lines[0]
    assert not (tmp_path / "m.db").exists()


@pytest.mark.parametrize("group, message", [
    ("{b9: 0.8}", "param_groups[0].hparams.b9: not a hyperparameter of optimizer 'adamw' (optimizers[0]); "
                  "valid: b1, b2, eps, weight_decay (did you mean 'b1'?)"),
    ("{b1: fast}", "param_groups[0].hparams.b1: expected a number, got 'fast'"),
])
def test_bad_group_hparams_are_refused_before_any_store(tmp_path, group, message):
    p = tmp_path / "bad.yaml"
    p.write_text("name: t3groups\nmodels: [{name: mlp, hparams: {width: 8, depth: 1}}]\n"
                 "optimizers: [{name: adamw, hparams: {step_size: 0.01}}]\n"
                 f"param_groups: [{{rules: norms_and_biases, hparams: {group}}}]\n"
                 "datasets: [digits]\nseeds: 1\nbatch_size: 16\nbudget: {steps: 4}\n")
    r = runner.invoke(app, ["sweep", str(p), "--tracking-uri", f"sqlite:///{tmp_path}/m.db"])
    assert r.exit_code == 2, r.output
    lines = [ln for ln in r.output.splitlines() if ln.startswith(f"{p}: ")]
    assert lines == [f"{p}: {message}"], r.output
    assert not (tmp_path / "m.db").exists()


def test_group_hparams_join_the_trial_id_only_when_given(tmp_path):
    text = ("name: t3groups\nmodels: [{name: mlp, hparams: {width: 8, depth: 1}}]\n"
            "optimizers: [{name: adamw, hparams: {step_size: 0.01}}]\n"
            "param_groups: [{rules: norms_and_biases, step_size_scale: 2.0GROUP}]\n"
            "datasets: [digits]\nseeds: 1\nbatch_size: 16\nbudget: {steps: 4}\n")
    ids = []
    for extra in ("", ", hparams: {}", ", hparams: {b1: 0.8}"):
        p = tmp_path / "g.yaml"
        p.write_text(text.replace("GROUP", extra))
        spec = expand(load_config(p), n_train=lambda n, h: 4000)[0]
        ids.append(spec.trial_id)
        if extra.endswith("0.8}"):
            assert dict(spec.recipe)["param_groups"] == ((("norms_and_biases",), 2.0, None, (("b1", 0.8),)),)
    assert ids[0] == ids[1] != ids[2]


def test_the_store_holds_the_values_a_convention_trained_with(tmp_path):
    """A convention fills the hyperparameters left ``None``; the run's params said ``None`` for
    them (``optimizer.ns_coeffs: None`` under modded_nanogpt), not the values trained with; so
    did the built-in muon reached through ``source:``."""
    from mlflow.tracking import MlflowClient

    import harness

    hp = {"step_size": 0.02, "convention": "modded_nanogpt", "adam_eps": 1e-9}
    cfg = {"name": "t3stored", "models": [{"name": "mlp", "hparams": {"width": 8, "depth": 1}}],
           "optimizers": [{"name": "muon", "hparams": hp},
                          {"name": "viasource", "source": "optimizers.modern:muon", "hparams": hp}],
           "datasets": ["digits"], "seeds": 1, "batch_size": 16, "budget": {"steps": 2}, "eval_every": 2,
           "measure_perf": False}
    uri = f"sqlite:///{tmp_path}/m.db"
    harness.sweep(cfg, tracking_uri=uri, quiet=True)
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("t3stored")
    runs = client.search_runs([exp.experiment_id], "tags.`harness.trial_id` != ''")
    assert sorted((r.data.params["optimizer"], r.info.status) for r in runs) == [
        ("muon", "FINISHED"), ("viasource", "FINISHED")]
    for r in runs:
        p = r.data.params
        keys = ("ns_coeffs", "ns_steps", "ns_eps", "ns_dtype", "momentum_form", "adam_nesterov")
        assert tuple(p[f"optimizer.{k}"] for k in keys) == (
            "[2.0, -1.5, 0.5]", "12", "1e-07", "bfloat16", "lerp", "False")
        assert p["optimizer.adam_eps"] == "1e-09"  # given: the config's own value, not the convention's
        assert p["optimizer.convention"] == "modded_nanogpt"
