"""Every push merged exactly once through the ops, with the faults injected:
an answer dropped after the shards merged, a step one shard refuses, a
flush whose answer is lost, a gradient whose update overflows. The oracle is
the data: with SGD each row ends at its initial row (tests.reference, apart
from the ops) minus the learning rate times the sum of the gradients it was
trained with, its clock at their number (docs/consistency.md, "Exactly
once")."""
import itertools
import os

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import het_tf
from het_tf import _op_library
from het_tf.runtime.cache import push_without_cache
from tests.reference import initial_row, shard_of

LR = 0.5
DIM = 2
SEED = 5
OPS = _op_library.load()


class Oracle:
    def __init__(self):
        self.sums, self.counts = {}, {}

    def trained(self, keys, grads):
        for k, g in zip(np.asarray(keys).tolist(), np.asarray(grads, np.float64)):
            self.sums[k] = self.sums.get(k, 0.0) + g
            self.counts[k] = self.counts.get(k, 0) + 1

    def copy(self):
        other = Oracle()
        other.sums, other.counts = dict(self.sums), dict(self.counts)
        return other

    def check(self, table):
        """Every row the shards hold is what the data says."""
        for s in range(table.num_shards):
            keys, values, _slots, clocks, _steps = table.export_shard(s, 0, 1 << 30)
            for k, v, c in zip(keys.numpy().tolist(), values.numpy(), clocks.numpy()):
                expected = initial_row(k, DIM, SEED) - LR * self.sums.get(k, 0.0)
                np.testing.assert_allclose(v, expected, atol=1e-5, err_msg=f"row {k}")
                assert c == self.counts.get(k, 0), f"row {k}: clock {c}"


def sgd_table(unique_name, shards=2, **kwargs):
    config = het_tf.TableConfig(unique_name(), DIM, seed=SEED,
                                optimizer=het_tf.OptimizerConfig("sgd"), **kwargs)
    return het_tf.ShardedTable(config, [None] * shards)


def keys_on(shard, count, shards=2):
    return [k for k in range(10_000) if shard_of(k, shards) == shard][:count]


def train(cache, oracle, ids, grads=None):
    _rows, unique, _inverse = cache.lookup(tf.constant(ids, tf.int64), training=True)
    grads = np.ones([len(unique), DIM], np.float32) if grads is None else grads
    cache.apply_gradients(unique, tf.constant(grads), LR)
    oracle.trained(unique.numpy(), grads)


def test_a_step_one_shard_refuses_moves_the_other_shards_rows_once(unique_name):
    """Two shards of 16 rows, write bound 0: one update to two rows of shard
    0; then a step whose 40 new rows shard 1 refuses after shard 0 merged
    the update; then a zero update and a flush. Each of the two rows moved
    by one update (before, by two)."""
    table = sgd_table(unique_name, max_rows=32)
    cache = het_tf.WorkerCache(table, het_tf.CacheConfig(64, "lru", 0, 0))
    oracle = Oracle()
    train(cache, oracle, keys_on(0, 2))
    many = keys_on(1, 40)
    with pytest.raises(tf.errors.ResourceExhaustedError, match="nothing was changed"):
        cache.lookup(tf.constant(many, tf.int64), training=True)
    train(cache, oracle, many[:1], np.zeros([1, DIM], np.float32))
    cache.flush(LR)
    oracle.check(table)
    assert table.stats()["repeats"] >= 1


def test_an_exchange_whose_answers_are_lost_is_merged_once(unique_name):
    table = sgd_table(unique_name)
    cache = het_tf.WorkerCache(table, het_tf.CacheConfig(16, "lru", 0, 0))
    oracle = Oracle()
    ids = list(range(8))
    train(cache, oracle, ids, np.arange(16, dtype=np.float32).reshape(8, DIM))
    for _ in range(2):  # merged by both shards, the answers dropped, twice
        _unique, _inverse, requests = OPS.het_cache_begin_exchange(
            cache.handle(), tf.constant(ids, tf.int64), num_shards=2)
        table.exchange(requests)
    train(cache, oracle, ids)
    cache.flush(LR)
    oracle.check(table)
    assert cache.stats()["rounds_resent"] == 2


@pytest.mark.parametrize("sync", ["check", "refresh"])
def test_a_push_or_flush_whose_answer_is_lost_is_merged_once(unique_name, sync):
    """By check, a step's push is merged and its acknowledgement lost; by
    either sync, a flush is. The next step or flush sends the same round
    again, which the shards answer without merging."""
    table = sgd_table(unique_name)
    cache = het_tf.WorkerCache(table, het_tf.CacheConfig(16, "lru", 0, 0, sync=sync))
    oracle = Oracle()
    ids = tf.constant(list(range(6)), tf.int64)
    if sync == "check":
        _rows, unique, _ = cache.lookup(ids, training=True)
        grads = np.full([6, DIM], 2.0, np.float32)
        pushes = OPS.het_cache_accumulate(cache.handle(), unique, grads, LR, dim=DIM)
        keys, deltas, counts, bases, evicted, senders = pushes
        table.push_deltas(keys, deltas, counts, bases, LR, senders=senders, unanswered=evicted)
        oracle.trained(unique.numpy(), grads)
    train(cache, oracle, list(range(4, 10)))
    keys, deltas, counts, bases, evicted, senders = OPS.het_cache_flush(cache.handle(), dim=DIM)
    assert len(keys) > 0
    table.push_deltas(keys, deltas, counts, bases, LR, senders=senders, unanswered=evicted)
    cache.flush(LR)
    oracle.check(table)


def test_an_update_that_would_overflow_is_refused_and_training_goes_on(unique_name):
    """|g| > 1.8e19 overflows Adagrad's squared-gradient sum though g is
    finite: refused naming the table and the id, on the cached and the
    no-cache path, before anything changes; the next step trains."""
    config = het_tf.TableConfig(unique_name("emb"), DIM, optimizer=het_tf.OptimizerConfig("adagrad"))
    table = het_tf.ShardedTable(config, [None, None])
    cache = het_tf.WorkerCache(table, het_tf.CacheConfig(16, "lru", 0, 0))
    ids = tf.constant([3, 4], tf.int64)
    huge = tf.constant([[1.0, 1.0], [2e19, 1.0]])
    _rows, unique, _ = cache.lookup(ids, training=True)
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=rf"table '{config.name}': the update of id 4 would make"):
        cache.apply_gradients(unique, huge, 0.1)
    _rows, unique, _ = cache.lookup(ids, training=True)
    cache.apply_gradients(unique, tf.ones([2, DIM]), 0.1)
    cache.flush(0.1)
    before = table.read_rows(ids)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"the update of id\W+4\W.*would make"):
        push_without_cache(table, ids, huge, 0.1)
    after = table.read_rows(ids)
    for a, b in zip(before, after):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert np.isfinite(after[0].numpy()).all() and (after[2].numpy() == 1).all()


# Any run, with the faults: a step's answer dropped (once or many times in a
# row), a step one shard refuses, an old incarnation's round replayed, and a
# shard restarted from a snapshot. After a flush every row is what the data
# says: the gradients trained since the last snapshot that was not undone.
EXAMPLES = int(os.environ.get("HET_TF_FUZZ_EXAMPLES", "40")) // 4
ACTIONS = st.one_of(
    st.tuples(st.just("train"), st.integers(0, 1),
              st.lists(st.integers(0, 23), min_size=1, max_size=8, unique=True),
              st.integers(-4, 4)),
    st.tuples(st.just("drop_answer"), st.integers(0, 1),
              st.lists(st.integers(0, 23), min_size=1, max_size=8, unique=True),
              st.integers(-4, 4)),
    st.tuples(st.just("refuse"), st.integers(0, 1)),
    st.tuples(st.just("replay"), st.integers(0, 1)),
    st.tuples(st.just("snapshot")),
    st.tuples(st.just("restart")),
)
_runs = itertools.count()


def _gradients(count, scale):
    """Exact in float32 whatever they sum to here."""
    return np.outer(np.arange(1, count + 1) % 3 - 1, [1.0, -0.5]).astype(np.float32) * scale / 2


def _send_unanswered(cache, table, ids, oracle, grads):
    """A step whose shards merge and whose answer never comes back."""
    if cache.config.op_sync == "refresh":
        _unique, _inverse, requests = OPS.het_cache_begin_exchange(
            cache.handle(), tf.constant(ids, tf.int64), num_shards=2)
        table.exchange(requests)
        return requests
    _rows, unique, _ = cache.lookup(tf.constant(ids, tf.int64), training=True)
    grads = grads[:len(unique)]
    pushes = OPS.het_cache_accumulate(cache.handle(), unique, grads, LR, dim=DIM)
    oracle.trained(unique.numpy(), grads)
    keys, deltas, counts, bases, evicted, senders = pushes
    table.push_deltas(keys, deltas, counts, bases, LR, senders=senders, unanswered=evicted)
    return pushes


def _replay(table, sent):
    if isinstance(sent, tuple):
        keys, deltas, counts, bases, evicted, senders = sent
        table.push_deltas(keys, deltas, counts, bases, LR, senders=senders, unanswered=evicted)
    else:
        table.exchange(sent)


@settings(max_examples=max(EXAMPLES, 5), deadline=None, derandomize=EXAMPLES <= 25,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(sync=st.sampled_from(["refresh", "check"]), staleness=st.sampled_from([0, 1, 3]),
       actions=st.lists(ACTIONS, min_size=1, max_size=24))
def test_any_run_with_faults_ends_at_the_data(sync, staleness, actions):
    name = f"soak_{os.getpid()}_{next(_runs)}"
    config = het_tf.TableConfig(name, DIM, seed=SEED, optimizer=het_tf.OptimizerConfig("sgd"),
                                max_rows=64)
    table = het_tf.ShardedTable(config, [None, None])
    caches = [het_tf.WorkerCache(table, het_tf.CacheConfig(8, "lru", staleness, staleness,
                                                           sync=sync),
                                 shared_name=f"{name}_worker{w}") for w in range(2)]
    oracle = Oracle()
    snapshot = ([t.numpy() for t in table.export_all()], oracle.copy())  # the empty table
    unanswered = [None, None]  # each worker's last round sent without an answer
    answered = [False, False]  # each worker's cache has had an exchange answered
    too_many = keys_on(1, 40)  # more new rows than shard 1 may hold
    for action, *args in actions:
        if action == "train":
            worker, ids, scale = args
            train(caches[worker], oracle, ids, _gradients(len(ids), scale))
            answered[worker] = True
        elif action == "drop_answer":
            worker, ids, scale = args
            unanswered[worker] = _send_unanswered(caches[worker], table, ids, oracle,
                                                  _gradients(len(ids), scale))
        elif action == "refuse":
            with pytest.raises(tf.errors.ResourceExhaustedError):
                caches[args[0]].lookup(tf.constant(too_many, tf.int64), training=True)
        elif action == "replay" and unanswered[args[0]] is not None:
            # The worker restarts: its rounds are flushed, then it is a new
            # incarnation, which trains once; the old round comes again.
            worker = args[0]
            caches[worker].flush(LR)
            caches[worker].clear()
            train(caches[worker], oracle, [0, 1])
            answered[worker] = True
            try:
                _replay(table, unanswered[worker])
            except tf.errors.FailedPreconditionError as e:
                assert "generation" in str(e), e
            unanswered[worker] = None
        elif action == "snapshot":
            for cache in caches:
                cache.flush(LR)
            snapshot = ([t.numpy() for t in table.export_all()], oracle.copy())
            unanswered = [None, None]
        elif action == "restart":
            rows, oracle = snapshot[0], snapshot[1].copy()
            table.clear()
            table.import_rows(*rows)
            for cache, known in zip(caches, answered):
                if sync == "refresh" and known:
                    # The epoch is checked before anything merges.
                    with pytest.raises(tf.errors.AbortedError):
                        train(cache, Oracle(), [0])
                cache.clear()  # as a restore does
            unanswered, answered = [None, None], [False, False]
    for cache in caches:
        cache.flush(LR)
    oracle.check(table)
