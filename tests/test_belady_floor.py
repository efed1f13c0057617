"""The Belady floor's op against a brute force written apart from it, and
which runs the benchmark replays. (Its C++ core has the same check on more
traces: cc_ops/embedding/core/tests/belady_floor_test.cc; tests/test_bench.py
checks a real run's floor replays the ids its caches trained on.)"""
import functools
import itertools

import numpy as np
import pytest
import tensorflow as tf

from het_tf.apps.bench.floor import first_touches, not_replayed
from het_tf.runtime.belady_floor import belady_floor


def fewest_misses(trace, capacity):
    """Every allowed sequence of cache contents, searched: a step's rows are
    cached for it when they fit (with any others while there is room); a
    step with more rows than the capacity keeps any `capacity` rows."""
    @functools.lru_cache(maxsize=None)
    def best(t, cached):
        if t == len(trace):
            return 0
        step = frozenset(trace[t])
        misses = len(step - cached)
        if len(step) <= capacity:
            others = sorted(cached - step)
            keep = min(len(others), capacity - len(step))
            nexts = [step | frozenset(c) for c in itertools.combinations(others, keep)]
        else:
            nexts = [frozenset(c) for c in itertools.combinations(sorted(cached | step), capacity)]
        return misses + min(best(t + 1, n) for n in nexts)

    return best(0, frozenset())


def test_the_replay_misses_as_few_as_any_cache_allowed():
    rng = np.random.default_rng(3)
    for _ in range(60):
        capacity = int(rng.integers(1, 4))
        trace = [rng.integers(0, 6, size=rng.integers(1, 5)).tolist()
                 for _ in range(rng.integers(2, 7))]
        counts = belady_floor(trace, "t", capacity, 4)
        assert counts["misses"] == fewest_misses(trace, capacity), (trace, capacity)
        assert counts["unique_keys"] == sum(len(set(s)) for s in trace)
        # Every row fetched and kept goes back once: evicted or flushed.
        assert counts["pushes"] >= counts["misses"] - counts["passed_through"]


def test_bad_settings_name_the_table():
    with pytest.raises(tf.errors.InvalidArgumentError, match="table 'emb'.*capacity >= 1"):
        belady_floor([[1, 2]], "emb", 0, 4)
    with pytest.raises(tf.errors.InvalidArgumentError, match="table 'emb'.*refreshes"):
        belady_floor([[1, 2]], "emb", 2, 4, refreshes=-1)


def test_runs_whose_ids_the_data_does_not_give_are_not_replayed():
    table = {"route": "CachedRoute"}
    base = {"config": {"data": "synthetic"}, "cached_tables": [table]}
    assert not_replayed(base) is None
    assert not_replayed({**base, "failed": True}) == "no cache"
    assert "allocation" in not_replayed({**base, "config": {"data": "synthetic",
                                                            "allocate_every": 8}})
    assert "hot rows" in not_replayed({**base, "config": {"data": "synthetic", "hot_rows": 5}})
    assert "not synthetic" in not_replayed({**base, "config": {"data": "day_0.tsv"}})
    assert "HeraldRoute" in not_replayed({**base, "cached_tables": [{"route": "HeraldRoute"}]})


def test_each_key_is_made_for_the_worker_that_touches_it_first():
    traces = [[np.array([1, 2]), np.array([3])], [np.array([2, 3]), np.array([4, 1])]]
    made = first_touches(traces)
    # 2 at step 0 by both: the lower worker; 3 at step 0 by worker 1.
    assert [sorted(m.tolist()) for m in made] == [[1, 2], [3, 4]]
    assert [m.tolist() for m in first_touches([[], [np.array([5])]])] == [[], [5]]


def test_first_touches_made_by_the_shard_cost_no_row():
    trace = [[1, 2, 3], [1, 4]]
    whole = belady_floor(trace, "t", 8, 4)
    lean = belady_floor(trace, "t", 8, 4, made_keys=[1, 3])
    assert lean["made"] == 2 and whole["made"] == 0
    # Two states of 4 floats saved; a byte of bits, padded to 4, spent.
    assert whole["bytes_received"] - lean["bytes_received"] == 2 * 4 * 4 - 4
