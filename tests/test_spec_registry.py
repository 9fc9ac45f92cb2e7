"""TrialSpec identity/flattening and the registry helpers (hand-checked values)."""

import hashlib
import json

import pytest

from harness.core.builders import REQUIRED, did_you_mean, hyperparameters, lookup
from harness.core.spec import Target, TrialSpec


def _spec(**over):
    kw = dict(
        sweep="s", model="mlp", optimizer="adam", schedule="constant", dataset="digits", seed=0,
        steps=100, batch_size=32, eval_every=50,
        model_hparams={"width": 64, "depth": 2}, optimizer_hparams={"step_size": 1e-3, "b1": 0.9},
        target={"metric": "eval/accuracy", "value": 0.9, "mode": "max"},
    )
    kw.update(over)
    return TrialSpec.make(**kw)


def test_trial_id_is_sha256_of_canonical_json():
    s = _spec()

    def digest(d: dict) -> str:
        blob = json.dumps({**d, "protocol": "train/valid/test"}, sort_keys=True, separators=(",", ":"),
                          default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    # the target is not part of the id (it is read off the stored curves); the legacy id has it
    assert s.trial_id == digest({**s.to_dict(), "target": None})
    assert s.legacy_trial_id == digest(s.to_dict())
    assert len(s.trial_id) == 16


def test_trial_id_ignores_dict_order_but_not_values():
    a = _spec(model_hparams={"width": 64, "depth": 2})
    b = _spec(model_hparams={"depth": 2, "width": 64})
    assert a == b and a.trial_id == b.trial_id
    assert _spec(seed=1).trial_id != a.trial_id
    assert _spec(optimizer_hparams={"step_size": 2e-3, "b1": 0.9}).trial_id != a.trial_id


def test_round_trip_through_dict():
    s = _spec(model_hparams={"widths": [8, 16]})
    assert TrialSpec.from_dict(json.loads(json.dumps(s.to_dict()))) == s
    assert s.hparams("model") == {"widths": [8, 16]}


def test_flat_params_use_dots():
    p = _spec().flat_params()
    assert p["optimizer.step_size"] == "0.001"
    assert p["model.width"] == "64"
    assert p["train.batch_size"] == "32"
    assert p["target.metric"] == "valid/accuracy"  # eval/* is stored as valid/*


def test_batch_key_ignores_seed_and_step_size_only():
    a = _spec()
    assert a.batch_key() == _spec(seed=3, optimizer_hparams={"step_size": 0.1, "b1": 0.9}).batch_key()
    assert a.batch_key() != _spec(optimizer_hparams={"step_size": 1e-3, "b1": 0.5}).batch_key()
    assert a.perf_key() == _spec(seed=7).perf_key()
    assert a.perf_key() != _spec(batch_size=64).perf_key()
    # a search over float hyperparameters measures throughput once per optimizer
    assert a.perf_key() == _spec(optimizer_hparams={"step_size": 0.1, "b1": 0.5}).perf_key()
    assert a.perf_key() != _spec(optimizer="adamw").perf_key()


def test_target_names_eval_alias_and_protocol_in_the_id():
    assert Target("eval/accuracy", 0.9, "max") == Target("valid/accuracy", 0.9, "max")
    assert Target("eval/loss", 0.1, "min").metric == "valid/loss"
    assert Target().metric == "valid/accuracy"
    assert _spec(target={"metric": "eval/accuracy", "value": 0.9}).trial_id == \
        _spec(target={"metric": "valid/accuracy", "value": 0.9}).trial_id
    # the id hashes the protocol beside to_dict(): the same config's id before the three splits
    s = _spec()
    old = hashlib.sha256(json.dumps(s.to_dict(), sort_keys=True, separators=(",", ":"),
                                    default=str).encode()).hexdigest()[:16]
    assert s.trial_id != old and "protocol" not in s.to_dict()


def test_target_reached():
    assert Target("eval/accuracy", 0.9, "max").reached(0.95)
    assert not Target("eval/accuracy", 0.9, "max").reached(float("nan"))
    assert Target("eval/loss", 0.1, "min").reached(0.05)
    assert not Target("eval/loss", 0.1, "min").reached(0.2)


def test_hyperparameters_from_signature():
    def builder(step_size, *, input_shape, num_classes, width: int = 64, act="relu", **kw):
        return None

    hp = hyperparameters(builder)
    assert list(hp) == ["step_size", "width", "act"]
    assert hp["step_size"].default is REQUIRED and hp["step_size"].required
    assert hp["width"].default == 64 and hp["width"].annotation in (int, "int")


def test_lookup_names_choices_and_suggests():
    reg = {"adam": object, "adamw": object, "sgd": object}
    assert lookup(reg, "sgd", "optimizer") is object
    with pytest.raises(KeyError) as e:
        lookup(reg, "adma", "optimizer")
    assert e.value.args[0] == (
        "unknown optimizer 'adma'; valid choices: adam, adamw, sgd (did you mean 'adam'?)"
    )
    assert did_you_mean("zzz", reg) == ""
