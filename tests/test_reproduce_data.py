"""``reproduce`` checks the trial's data before it trains: token shards that are gone or that changed
since the trial ran are one line (exit 2), not a retrained trial compared as if the data were the same."""

from __future__ import annotations

import numpy as np
import pytest

from harness.core.spec import TrialSpec
from harness.data.kinds import dataset_digest
from harness.data.shards import write_shard
from harness.orchestrate.reproduce_checks import ReproduceError, check_data


def _spec(name: str, digest: str) -> TrialSpec:
    return TrialSpec.make(sweep="s", model="transformer_lm", optimizer="adam", schedule="constant",
                          dataset=name, seed=0, steps=1, batch_size=2, eval_every=1,
                          dataset_hparams={"seq_len": 8}, dataset_digest=digest)


def test_reproduce_refuses_token_shards_that_are_gone_or_changed(tmp_path):
    d = tmp_path / "c"
    d.mkdir()
    toks = np.arange(3000) % 256
    write_shard(d / "x_train.bin", toks)
    write_shard(d / "x_val.bin", toks[:500])
    name = f"tokens:{d}"
    spec = _spec(name, dataset_digest(name, {}))
    check_data(spec)  # the same data: nothing to say
    check_data(_spec("digits", ""))  # a registry dataset has no digest
    toks2 = toks.copy()
    toks2[5] += 1
    write_shard(d / "x_train.bin", toks2)
    now = dataset_digest(name, {})
    with pytest.raises(ReproduceError) as e:
        check_data(spec)
    assert str(e.value) == (f"dataset {name!r} is not the data trial {spec.trial_id} trained on (content "
                            f"digest {spec.dataset_digest}, now {now}); restore that data to reproduce it")
    (d / "x_train.bin").unlink()
    (d / "x_val.bin").unlink()
    with pytest.raises(ReproduceError) as e:
        check_data(spec)
    assert str(e.value) == f"dataset {name!r} of trial {spec.trial_id} cannot be read here: {d}: empty " \
                           f"folder, no token shards"
