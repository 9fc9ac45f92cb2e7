"""Trial identity is a contract: the shipped configs' trial ids, pinned before the subpackage move.

A changed id makes every FINISHED trial of a user's store train again (and the old runs are never
matched), so any change to how a spec is hashed must be deliberate. The ids were computed with the
flat-module code of commit f8f90da and must not change with the move into subpackages.
"""

import hashlib
from pathlib import Path

import pytest

from harness.config.load import load_config
from harness.orchestrate.run import expand

EXPERIMENTS = Path(__file__).resolve().parents[1] / "experiments"

QUICKSTART = [
    "7a5529a520b26a44", "3cd2de805e623722", "4460301ff33964b0", "935d56c0f31a4fa7",
    "7d543b4848b5b754", "0b4d14e2b525dc54", "d02e8f27a6c7c28a", "fb8b4c4d93087aeb",
    "b2e9fce3bba2aaf6", "8282582f6d3e0841", "5100b0188139486e", "9e93c9fc98c8c283",
    "132af722ef257d27", "4a651de25c470732", "13cb2ce61bb9dcd0", "a41fcccf0f3b4588",
    "355e1c2d9a44b9fa", "3772a9effb37c699", "a7a29c7ad45d858a", "2cfd998e3359d509",
    "21c7769ef8edfd38", "7856e42c73c5f711", "9d197ce7bfe469d7", "6bcfa95161b93be9",
]


def _ids(name: str) -> list[str]:
    return [t.trial_id for t in expand(load_config(EXPERIMENTS / f"{name}.yaml"))]


def test_quickstart_trial_ids_are_pinned():
    assert _ids("quickstart") == QUICKSTART


@pytest.mark.parametrize(("name", "count", "digest"), [
    ("workloads", 30, "2a76b63de2bfcc2a"),
    ("tuning", 192, "668d5a405a572e5c"),
])
def test_other_shipped_configs_keep_their_trial_ids(name, count, digest):
    ids = _ids(name)
    assert len(ids) == count
    assert hashlib.sha256(",".join(ids).encode()).hexdigest()[:16] == digest
