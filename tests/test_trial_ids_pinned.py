"""Trial identity is a contract: the shipped configs' trial ids, pinned before the subpackage move.

A changed id makes every FINISHED trial of a user's store train again (and the old runs are never
matched), so any change to how a spec is hashed must be deliberate. The ids were computed with the
flat-module code of commit f8f90da and must not change with the move into subpackages.

The target then left the identity (a report reads it from the stored curves): those ids are now each
trial's ``legacy_trial_id``, which resume still accepts, and the ids without the target are pinned
beside them.
"""

import dataclasses
import hashlib
from pathlib import Path

import pytest

from harness.config.load import load_config
from harness.core.spec import Target
from harness.orchestrate.run import expand

EXPERIMENTS = Path(__file__).resolve().parents[1] / "experiments"

#: The ids with the target in them (stores written before it left the identity).
QUICKSTART_LEGACY = [
    "7a5529a520b26a44", "3cd2de805e623722", "4460301ff33964b0", "935d56c0f31a4fa7",
    "7d543b4848b5b754", "0b4d14e2b525dc54", "d02e8f27a6c7c28a", "fb8b4c4d93087aeb",
    "b2e9fce3bba2aaf6", "8282582f6d3e0841", "5100b0188139486e", "9e93c9fc98c8c283",
    "132af722ef257d27", "4a651de25c470732", "13cb2ce61bb9dcd0", "a41fcccf0f3b4588",
    "355e1c2d9a44b9fa", "3772a9effb37c699", "a7a29c7ad45d858a", "2cfd998e3359d509",
    "21c7769ef8edfd38", "7856e42c73c5f711", "9d197ce7bfe469d7", "6bcfa95161b93be9",
]

#: The ids without the target.
QUICKSTART = [
    "b316b3a5dac4ff4e", "e0e783a339c417e0", "6954f59dea9560c3", "9034b75b73f2c12f",
    "685bfa62467106ed", "ffaa9c32bf29cb65", "516cc51bcf18095b", "a71ffd6bc7cde89e",
    "a137d46bcf8e0293", "266e0d05f6433771", "4efa48b915e85a89", "f5aff85749f739b2",
    "b36c153d6055a96a", "f9b9db9979b573a3", "029bbe1bcdb9e3be", "42f8e7aae838b621",
    "e0fc08d4dfef3e8e", "6bc85d9d128a434e", "6ed80f5cea7508c8", "9d15c3f50e5f2d45",
    "ec1d0e016de0b50b", "24a5d297ac28e360", "47facf9f35890f23", "b48a416c533abba8",
]


def _specs(name: str):
    return expand(load_config(EXPERIMENTS / f"{name}.yaml"))


def test_quickstart_trial_ids_are_pinned():
    specs = _specs("quickstart")
    assert [t.legacy_trial_id for t in specs] == QUICKSTART_LEGACY
    assert [t.trial_id for t in specs] == QUICKSTART


def _digest(ids: list[str]) -> str:
    return hashlib.sha256(",".join(ids).encode()).hexdigest()[:16]


@pytest.mark.parametrize(("name", "count", "legacy", "digest"), [
    ("workloads", 30, "2a76b63de2bfcc2a", "7d3ddc15c0173a8d"),
    ("tuning", 192, "668d5a405a572e5c", "3785db2296ee72ed"),
])
def test_other_shipped_configs_keep_their_trial_ids(name, count, legacy, digest):
    specs = _specs(name)
    assert len(specs) == count
    assert _digest([t.legacy_trial_id for t in specs]) == legacy
    assert _digest([t.trial_id for t in specs]) == digest


def test_the_target_leaves_the_id_but_not_an_algoperf_submissions():
    spec = _specs("quickstart")[0]
    other = dataclasses.replace(spec, target=Target("valid/accuracy", 0.5, "max"))
    untargeted = dataclasses.replace(spec, target=None)
    assert other.trial_id == spec.trial_id == untargeted.trial_id == untargeted.legacy_trial_id
    assert other.legacy_trial_id != spec.legacy_trial_id
    algo = dataclasses.replace(spec, optimizer_source="algoperf:sub.py")
    moved = dataclasses.replace(algo, target=Target("valid/accuracy", 0.5, "max"))
    assert algo.trial_id == algo.legacy_trial_id != moved.trial_id
