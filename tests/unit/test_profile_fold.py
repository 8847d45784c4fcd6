"""The coordinator folds shard profiles in as shards commit, in any order of arrival, into
exactly the profile the store's shard-order merge gives (a resumed job's included)."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from thresher.coordinator.profile_fold import ProfileFold
from thresher.profiles.profile import Profile
from thresher.profiles.profiler import ShardProfiler
from thresher.spec import JobSpec
from thresher.store import Store, open_store

SHARDS = 5
ATTEMPTS = itertools.count()


@pytest.fixture
def store(tmp_path: Path, job_spec: Callable[..., JobSpec]) -> Store:
    store = open_store(f"sqlite:///{tmp_path / 'store.db'}")
    store.create_job("j", "j", job_spec(job={"name": "j"}), {"shards": [{}] * SHARDS})
    return store


def shard_profile(index: int) -> str:
    """A shard's profile as a worker sends it: moments that a merge in another order would
    round differently, and a category whose counts add up."""
    rng = np.random.default_rng(index)
    table = pa.table(
        {
            "x": rng.normal(1e6 * index, 1.0 + index, 1_000),
            "c": pa.array(rng.choice(["a", "b", f"s{index}"], 1_000)),
        }
    )
    profiler = ShardProfiler(1.0, index)
    profiler.update(table, pa.table({}))
    return json.dumps(profiler.profile().to_json())


def commit(store: Store, index: int, text: str | None) -> None:
    attempt = f"a{next(ATTEMPTS)}"
    store.attempt_started("j", index, attempt, 1)
    store.shard_done("j", index, attempt, (1_000, 1_000, 0), 0.1, profile=text)


def described(profile: Profile | None) -> dict[str, Any]:
    """Everything but the KLL sketches' figures, which draw random bits as they merge."""
    assert profile is not None
    out = profile.describe()
    for column in out["columns"].values():
        for key in [k for k in column if k.startswith("quantile")]:
            del column[key]
    return out


def test_shards_arriving_out_of_order_fold_into_the_store_merge(store: Store) -> None:
    fold = ProfileFold(store, "j", range(SHARDS))
    for index in (3, 0, 4, 1, 2):
        text = shard_profile(index)
        commit(store, index, text)
        fold.add(index, text)
    want = described(store.profiles.merge_shards("j"))
    assert want["rows"] == SHARDS * 1_000
    assert described(fold.profile()) == want


def test_a_resumed_job_reads_its_earlier_shards_back_and_a_gap_does_not_stop_it(
    store: Store,
) -> None:
    for index in (0, 2):  # committed before a crash
        commit(store, index, shard_profile(index))
    fold = ProfileFold(store, "j", range(SHARDS))
    for index in (4, 1):  # shard 3 never commits
        text = shard_profile(index)
        commit(store, index, text)
        fold.add(index, text)
    want = described(store.profiles.merge_shards("j"))
    assert want["rows"] == 4 * 1_000
    assert described(fold.profile()) == want


def test_a_shard_committed_twice_counts_once(store: Store) -> None:
    fold = ProfileFold(store, "j", range(SHARDS))
    for index in range(SHARDS):
        text = shard_profile(index)
        commit(store, index, text)
        fold.add(index, text)
    commit(store, 1, shard_profile(1))  # a second attempt's, replacing the first
    fold.add(1, shard_profile(1))
    assert described(fold.profile())["rows"] == SHARDS * 1_000


def test_no_shard_with_a_profile_gives_none(store: Store) -> None:
    fold = ProfileFold(store, "j", range(SHARDS))
    commit(store, 0, None)
    fold.add(0, None)
    assert fold.profile() is None
