"""Every push merged exactly once through the ops, with the faults injected:
an answer dropped after the shards merged, a step one shard refuses, a
flush whose answer is lost, a gradient whose update overflows. The oracle is
the data: with SGD each row ends at its initial row (tests.reference, apart
from the ops) minus the learning rate times the sum of the gradients it was
trained with, its clock at their number (docs/consistency.md, "Exactly
once")."""
import io
import itertools
import json
import os
import sys
import zipfile

import h5py
import numpy as np
import pytest
import tensorflow as tf
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import het_tf
from het_tf.apps.launch import LocalCluster
from het_tf.runtime.cache import push_without_cache
from tests import sum_of_rows_train as data
from tests.fault_runs import (
    DIM,
    LR,
    OPS,
    SEED,
    FaultyWorker,
    Oracle,
    gradients,
    keys_on,
    push_unanswered,
    train,
)
from tests.serving import rows_without_het_tf
from tests.test_cluster import Log, assert_all_gone
from tests.test_hybrid import run_ranks


def sgd_table(unique_name, shards=2, **kwargs):
    config = het_tf.TableConfig(unique_name(), DIM, seed=SEED,
                                optimizer=het_tf.OptimizerConfig("sgd"), **kwargs)
    return het_tf.ShardedTable(config, [None] * shards)


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
        push_unanswered(table, OPS.het_cache_accumulate(cache.handle(), unique, grads, LR,
                                                        dim=DIM)[:6])
        oracle.trained(unique.numpy(), grads)
    train(cache, oracle, list(range(4, 10)))
    flushed = OPS.het_cache_flush(cache.handle(), dim=DIM)
    assert len(flushed[0]) > 0
    push_unanswered(table, flushed)
    cache.flush(LR)
    oracle.check(table)


@pytest.mark.parametrize("sync", ["check", "refresh"])
def test_a_read_sees_the_updates_of_a_round_that_never_reached_the_shards(unique_name, sync):
    """Rows evicted with pending updates go in a round whose requests never
    reach the shards. An evaluation read of them sees them (a round in
    flight that its shard has not merged is merged into the read), and so
    does every read after the round is sent again; the flush leaves
    nothing pending."""
    table = sgd_table(unique_name)
    cache = het_tf.WorkerCache(table, het_tf.CacheConfig(2, "lru", 100, 100, sync=sync))
    oracle = Oracle()
    train(cache, oracle, [0, 1], gradients(2, 4))
    if sync == "check":  # 0 and 1 evicted, then the step's round is lost on the way
        _rows, unique, _ = cache.lookup(tf.constant([2, 3], tf.int64), training=True)
        grads = np.full([2, DIM], 0.5, np.float32)
        OPS.het_cache_accumulate(cache.handle(), unique, grads, LR, dim=DIM)
        oracle.trained(unique.numpy(), grads)
    else:  # 0 and 1 evicted, then the exchange carrying them is lost on the way
        train(cache, oracle, [2, 3], gradients(2, 2))
        OPS.het_cache_begin_exchange(cache.handle(), tf.constant([2, 3], tf.int64),
                                     num_shards=2)
    keys = [0, 1, 2, 3, 4]
    rows, _, _ = cache.lookup(tf.constant(keys, tf.int64), training=False)
    np.testing.assert_allclose(rows.numpy(), oracle.rows(keys), atol=1e-6)
    assert table.stats()["updates_applied"] == 0  # nothing was sent
    # 0 and 1 fetched again for training before the round is sent again
    # (by check; by refresh the exchange sends it first): the copies take
    # the round's rows, and keep them once it is acknowledged.
    rows, unique, _ = cache.lookup(tf.constant([0, 1], tf.int64), training=True)
    np.testing.assert_allclose(rows.numpy(), oracle.rows([0, 1]), atol=1e-6)
    grads = gradients(2, 6)
    cache.apply_gradients(unique, tf.constant(grads), LR)
    oracle.trained(unique.numpy(), grads)
    rows, _, _ = cache.lookup(tf.constant(keys, tf.int64), training=False)
    np.testing.assert_allclose(rows.numpy(), oracle.rows(keys), atol=1e-6)
    cache.flush(LR)
    rows, _, _ = cache.lookup(tf.constant(keys, tf.int64), training=False)
    np.testing.assert_allclose(rows.numpy(), oracle.rows(keys), atol=1e-6)
    oracle.check(table)


def test_rows_passing_through_while_a_round_is_lost_read_their_updates_and_flush_once(
        unique_name):
    """By check, a one-row cache: id 1 passes through every step, each
    step's update of it joins the outbox, and each step's round is lost on
    the way. Every training read of id 1 sees the updates before it (the
    round in flight and the outbox rows, none merged), and one flush pushes
    them all, a round for each row of the key."""
    table = sgd_table(unique_name)
    cache = het_tf.WorkerCache(table, het_tf.CacheConfig(1, "lru", 100, 100, sync="check"))
    oracle = Oracle()
    for step in range(4):
        rows, unique, _ = cache.lookup(tf.constant([0, 1], tf.int64), training=True)
        np.testing.assert_allclose(rows.numpy(), oracle.rows([0, 1]), atol=1e-6,
                                   err_msg=f"step {step}")
        grads = gradients(2, step + 1)
        OPS.het_cache_accumulate(cache.handle(), unique, grads, LR, dim=DIM)  # never sent
        oracle.trained(unique.numpy(), grads)
    assert cache.stats()["passed_through"] == 4
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


@pytest.mark.parametrize("sync", ["check", "refresh"])
def test_a_flush_a_shard_refuses_in_part_ends_and_the_worker_trains_on(unique_name, sync):
    """Two caches of one Adagrad table each train id 1 with 1.5e19: each
    cache's own accumulator (2.25e38) is finite, so both take the step, but
    the second flush would overflow the shard's. The shard refuses that
    update alone and merges the rest (id 2); the flush fails once, naming the
    id; the next flush, the reads and the training go on (before, every
    later flush of that cache failed the same way)."""
    config = het_tf.TableConfig(unique_name("emb"), DIM, seed=SEED,
                                optimizer=het_tf.OptimizerConfig("adagrad"))
    table = het_tf.ShardedTable(config, [None, None])
    ids = tf.constant([1, 2], tf.int64)
    huge = tf.constant([[1.5e19, 1.0], [1.0, 1.0]])
    caches = [het_tf.WorkerCache(table, het_tf.CacheConfig(16, "lru", 0, 100, sync=sync))
              for _ in range(2)]
    for cache in caches:
        _rows, unique, _ = cache.lookup(ids, training=True)
        assert unique.numpy().tolist() == [1, 2]
        cache.apply_gradients(unique, huge, 0.1)
    caches[0].flush(0.1)
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=rf"table '{config.name}': the updates of ids \[1\] were refused"):
        caches[1].flush(0.1)
    caches[1].flush(0.1)
    values, slots, clocks, _steps = (t.numpy() for t in table.read_rows(ids))
    assert clocks.tolist() == [1, 2]  # id 1: the first cache's update alone
    assert np.isfinite(values).all() and np.isfinite(slots).all()
    # The second cache reads the shard's row, not the update it refused.
    rows, unique, _ = caches[1].lookup(tf.constant([1], tf.int64), training=True)
    np.testing.assert_allclose(rows.numpy()[0], values[0], rtol=1e-6)
    caches[1].apply_gradients(unique, tf.ones([1, DIM]), 0.1)
    caches[1].flush(0.1)
    assert table.read_rows(ids)[2].numpy().tolist() == [2, 2]
    assert table.stats()["updates_refused_non_finite"] == 1
    assert caches[1].stats()["rows_refused"] == 1


@pytest.mark.parametrize("sync, training", [("check", True), ("check", False), ("refresh", False)])
def test_a_cache_a_restore_skipped_reads_the_restored_rows(unique_name, sync, training):
    """A restore empties every worker's cache, but skips one it cannot
    reach. That cache's copies are of the old table: its next pull (a
    training read by check, or any evaluation read) fails with Aborted, as
    an exchange does, and the read after gives the restored rows. Before,
    pulls carried no epoch, and the cache read its old copies (here, three
    updates ahead of the restored rows) until its next push."""
    config = het_tf.TableConfig(unique_name("emb"), DIM, seed=SEED,
                                optimizer=het_tf.OptimizerConfig("sgd"))
    table = het_tf.ShardedTable(config, [None, None])
    cache = het_tf.WorkerCache(table, het_tf.CacheConfig(16, "lru", 100, 0, sync=sync))
    ids = tf.constant([1, 2], tf.int64)
    saved = table.read_rows(ids)
    for _ in range(3):
        _rows, unique, _ = cache.lookup(ids, training=True)
        cache.apply_gradients(unique, tf.ones([2, DIM]), 0.5)
    cache.flush(0.5)
    table.clear()  # the restore, which this cache's worker missed
    table.import_rows(ids, *saved)
    with pytest.raises(tf.errors.AbortedError, match="restarted or restored"):
        cache.lookup(ids, training=training)
    rows, _, _ = cache.lookup(ids, training=training)
    np.testing.assert_allclose(rows.numpy(), saved[0].numpy())


@pytest.mark.xfail(strict=True, reason="a plain push (the cache off, Herald's kept gradients, "
                   "gradients of keys not cached) carries no round: each shard merges its part "
                   "of every attempt (docs/reliability.md, 'What a fault does')")
def test_a_plain_push_one_shard_refuses_merges_no_part_of_it(unique_name):
    """A gradient pushed without a cache to two shards, shard 1 full
    (max_rows, refusing): the push fails, and the step is tried again. The
    data says nothing was trained, so no row may move; shard 0 merges its
    part on each attempt."""
    table = sgd_table(unique_name, max_rows=4)
    full = keys_on(1, 2)
    push_without_cache(table, tf.constant(full, tf.int64), tf.zeros([2, DIM]), LR)
    keys = tf.constant(keys_on(0, 1) + [keys_on(1, 3)[2]], tf.int64)
    for _ in range(2):
        with pytest.raises(tf.errors.ResourceExhaustedError):
            push_without_cache(table, keys, tf.ones([2, DIM]), LR)
    assert table.read_rows(keys[:1])[2].numpy().tolist() == [0]


# Any run, with the faults: a step's answer dropped (once or many times in a
# row), a step one shard refuses, an old incarnation's round replayed, and a
# shard restarted from a snapshot. After a flush every row is what the data
# says: the gradients trained since the last snapshot that was not undone.
EXAMPLES = int(os.environ.get("HET_TF_FUZZ_EXAMPLES", "40")) // 4
IDS = st.lists(st.integers(0, 23), min_size=1, max_size=8, unique=True)
ACTIONS = st.one_of(
    st.tuples(st.sampled_from(["train", "drop_answer"]), st.integers(0, 1), IDS,
              st.integers(-4, 4)),
    st.tuples(st.just("train_twice"), st.integers(0, 1), IDS, st.integers(-4, 4), IDS),
    st.tuples(st.sampled_from(["refuse", "replay"]), st.integers(0, 1)),
    st.tuples(st.sampled_from(["snapshot", "restart"])),
)
_runs = itertools.count()


@settings(max_examples=max(EXAMPLES, 5), deadline=None, derandomize=EXAMPLES <= 25,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(sync=st.sampled_from(["refresh", "check"]), staleness=st.sampled_from([0, 1, 3]),
       actions=st.lists(ACTIONS, min_size=1, max_size=24))
# A cache that checks its keys, restarted with updates pending: by its
# step's push, and by its flush's.
@example(sync="check", staleness=0, actions=[("train", 0, [0], 1), ("restart",)])
@example(sync="check", staleness=1,
         actions=[("train", 0, [0], 1), ("snapshot",), ("train", 0, [0, 1], 1), ("restart",)])
# Restarted again after the first restart's Aborted emptied the cache, with
# no push answered since: it knows no epoch then.
@example(sync="check", staleness=1,
         actions=[("train", 0, [0], 0), ("train", 0, [0], 0), ("restart",), ("restart",)])
# A step that reads 10 rows through the 8-row cache, then the 2 passing
# through again: they pass again, and its update pushes them in its round.
@example(sync="refresh", staleness=3,
         actions=[("train_twice", 0, list(range(10)), 1, [8, 9]), ("train", 1, [8], 1)])
# An exchange that carried no push, its answer lost: the flush's first
# round sends that empty round again, and the next pushes the pending row.
@example(sync="refresh", staleness=1, actions=[("train", 0, [0], 0), ("drop_answer", 0, [0], 0)])
def test_any_run_with_faults_ends_at_the_data(sync, staleness, actions):
    name = f"faults_{os.getpid()}_{next(_runs)}"
    config = het_tf.TableConfig(name, DIM, seed=SEED, optimizer=het_tf.OptimizerConfig("sgd"),
                                max_rows=64)
    table = het_tf.ShardedTable(config, [None, None])
    oracle = Oracle()
    workers = [FaultyWorker(table, het_tf.WorkerCache(
        table, het_tf.CacheConfig(8, "lru", staleness, staleness, sync=sync),
        shared_name=f"{name}_worker{w}"), oracle) for w in range(2)]
    snapshot = ([t.numpy() for t in table.export_all()], oracle.copy())  # the empty table
    for action, *args in actions:
        if action in ("train", "train_twice", "drop_answer", "refuse", "replay"):
            getattr(workers[args[0]], action)(*args[1:])
        elif action == "snapshot":
            for worker in workers:
                worker.cache.flush(LR)
                worker.unanswered = None  # flushed: sent again and answered
            snapshot = ([t.numpy() for t in table.export_all()], oracle.copy())
        else:  # restart
            rows, restored = snapshot[0], snapshot[1].copy()
            oracle.sums, oracle.counts = restored.sums, restored.counts
            table.clear()
            table.import_rows(*rows)
            for worker in workers:
                if not worker.knows_epochs():
                    worker.clear()  # as a restore does: the cache could not tell
                    continue
                # The epoch is checked before anything merges: by refresh at
                # the next exchange, by check at the next pull (or push: the
                # flush pushes at least the row trained here).
                with pytest.raises(tf.errors.AbortedError):
                    train(worker.cache, Oracle(), [0])
                    worker.cache.flush(LR)
                worker.forget_epochs()
                worker.train([1], 1)  # from an empty cache, in the restored table
    for worker in workers:
        worker.cache.flush(LR)
    oracle.check(table)


# Whole clusters: every row after training and a flush is what the data
# says (tests/sum_of_rows_train.py), with 2 workers sharing the rows.
SUM_OF_ROWS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sum_of_rows_train.py")


def assert_rows_follow_the_data(result, batches):
    occurrences, steps = data.trained_counts([data.batch(i) for i in batches])
    keys = np.array(result["keys"])
    assert sorted(keys.tolist()) == np.flatnonzero(steps).tolist()  # rows made: those trained
    expected = -data.LR / data.BATCH * occurrences[keys]
    values = np.array(result["values"])
    np.testing.assert_array_equal(values, np.repeat(expected[:, None], values.shape[1], axis=1))
    np.testing.assert_array_equal(result["clocks"], steps[keys])


def assert_versions_follow_the_data(folder, steps, batches_at):
    """Each SavedModel version exported while training, read in a process
    without het_tf, is a consistent cut at its number n of steps: every row
    what the data of `batches_at(n)` (the batches of the first n steps)
    makes of it, nothing missing, nothing from a later step."""
    held = sorted(int(name) for name in os.listdir(folder) if name.isdigit())
    assert held == list(range(data.EXPORT_EVERY, steps + 1, data.EXPORT_EVERY)), held
    rows = rows_without_het_tf([folder / str(n) for n in held], range(data.VOCABULARY))
    for n in held:
        occurrences, _ = data.trained_counts([data.batch(i) for i in batches_at(n)])
        got = rows[str(folder / str(n))]
        np.testing.assert_array_equal(got, np.repeat(
            (-data.LR / data.BATCH * occurrences)[:, None], got.shape[1], axis=1), err_msg=f"version {n}")


def keras_file_rows(path):
    """keys, values and clocks of the one table in a .keras file, read with
    h5py apart from het_tf."""
    with zipfile.ZipFile(path) as archive:
        weights = h5py.File(io.BytesIO(archive.read("model.weights.h5")), "r")
    tables = []
    weights.visititems(lambda name, item: tables.append(item) if name.endswith("vars")
                       and "keys" in item else None)
    (table,) = tables
    rows = {field: table[field][()].tolist() for field in ("keys", "values", "clocks")}
    rows["iterations"] = int(weights["optimizer/vars/0"][()])  # the model's optimizer's steps
    return rows


def run_ps_chief(tmp_path, mode):
    """Runs sum_of_rows_train.py `mode` as the chief of 1 PS task and 2
    workers; checks that the rows after its flush are what the data says,
    and returns its result."""
    result_path, log = tmp_path / "result.json", Log()
    with LocalCluster(1, 2, out=log) as cluster:
        chief = cluster.start_chief([sys.executable, SUM_OF_ROWS, mode, str(result_path)])
        code = chief.wait(timeout=300)
    assert_all_gone(cluster)
    assert code == 0, log.text()[-5000:]
    result = json.loads(result_path.read_text())
    assert_rows_follow_the_data(result, result["batches"])
    return result


def test_a_parameter_server_strategy_cluster_ends_at_the_data(tmp_path):
    """Two workers train the rows; after a flush they are what the data
    says, and each epoch's validation and evaluate right after fit already
    read them (they missed the updates still pending in the workers'
    caches)."""
    result = run_ps_chief(tmp_path, "ps")
    # Each epoch's validation, and evaluate right after fit, read every
    # worker's updates of the steps before: the loss is the batch's mean sum
    # of the rows the data gives, over both calls.
    def loss_after(steps):
        occurrences, _ = data.trained_counts([data.batch(0)] * steps)
        rows = -data.LR / data.BATCH * occurrences * data.DIM  # each row's sum over its dims
        ids = data.batch(0)
        return (rows[ids].sum(axis=1) + rows[ids[:, 0]]).mean()

    losses = result["validation_losses"] + [result["evaluated_loss"]]
    expected = [loss_after(data.STEPS), loss_after(2 * data.STEPS), loss_after(2 * data.STEPS)]
    np.testing.assert_allclose(losses, expected, rtol=1e-6)
    # model.save from the chief right after fit holds every worker's updates,
    # and load_model on the chief writes them back to the cluster's table.
    assert_rows_follow_the_data(keras_file_rows(f"{tmp_path / 'result.json'}.keras"),
                                result["batches"])
    assert_rows_follow_the_data(result["loaded"], result["batches"])


def saved_table(prefix):
    """keys, values and clocks of the one table in a checkpoint, from its
    chunks' tensors (read apart from het_tf)."""
    reader = tf.train.load_checkpoint(prefix)
    names = reader.get_variable_to_shape_map()

    def field(name):
        chunks = sorted(n for n in names if "/chunk_" in n and n.endswith(f"/{name}"))
        return np.concatenate([reader.get_tensor(n) for n in chunks])

    return field("keys"), field("values"), field("clocks")


def test_checkpoints_saved_while_the_workers_train_are_consistent_cuts(tmp_path):
    """A ModelCheckpoint every 2 steps (a TensorFlow checkpoint and a .keras
    file) and get_weights() after every step, from the chief's callbacks,
    while two workers train the same batch: each checkpoint and file holds
    n whole steps' updates, every row moved by n steps and its clock at n, with n at least the steps finished before the save began
    (none lost) and at most those finished when it ended, plus one running
    on each worker (none counted twice); so does each matrix get_weights()
    read. After the run every row is what the data says."""
    result = run_ps_chief(tmp_path, "ps-saving")
    occurrences, _ = data.trained_counts([data.batch(0)])
    one_step = -data.LR / data.BATCH * occurrences  # each row's move in each dimension
    kept = [s for s in result["saves"] if ".ckpt-" in s["path"]]
    assert len(kept) == len(result["batches"]) // data.SAVE_EVERY  # ModelCheckpoint's
    for save in result["saves"]:
        keras_file = keras_file_rows(f"{save['path']}.keras")
        # The whole file is one cut: its optimizer's steps are its rows'.
        assert keras_file["iterations"] == keras_file["clocks"][0], keras_file
        for keys, values, clocks in (saved_table(save["path"]),
                                     [np.array(keras_file[f]) for f in ("keys", "values",
                                                                        "clocks")]):
            steps = int(clocks[0])
            assert (clocks == steps).all(), (save, clocks)
            assert save["before"] <= steps <= save["after"] + 2, (save, steps)
            np.testing.assert_array_equal(
                values, np.repeat(steps * one_step[keys][:, None], values.shape[1], axis=1))
    assert len(result["reads"]) == len(result["batches"])
    for read in result["reads"]:
        rows = np.array(read["rows"])  # get_weights' matrix, first dimension
        steps = int(round(rows[0] / one_step[0]))
        assert read["before"] <= steps <= read["after"] + 2, (read, steps)
        np.testing.assert_array_equal(rows, steps * one_step)
    # A version every 8 of the 48 steps, named by its step: exactly that
    # many steps' updates in each.
    assert_versions_follow_the_data(tmp_path / "result.json.versions", 2 * data.STEPS,
                                    lambda n: [0] * n)


# dim 8 repeats dim 1's bookkeeping with wider rows, and fresh ids are the
# easier half of repeated ones (each id's first push): `make soak` runs them.
@pytest.mark.parametrize("dim, order", [pytest.param(1, "fresh", marks=pytest.mark.long),
                                        (1, "repeated"),
                                        pytest.param(8, "fresh", marks=pytest.mark.long),
                                        pytest.param(8, "repeated", marks=pytest.mark.long)])
def test_hybrid_ranks_end_at_the_data(tmp_path, dim, order):
    """Two Horovod ranks on 2 PS tasks, each training its own batches
    through a layer called twice: the step's update waits for its lookups'
    rows (it failed with an id 'not cached' when the gradient, built from
    shapes alone, ran first). Then set_weights, called on every rank,
    writes rank 0's matrix, and every rank reads it through its cache."""
    result_path = tmp_path / "result.json"
    run_ranks(tmp_path, 2, 2, [sys.executable, SUM_OF_ROWS, "hybrid", str(result_path),
                               str(dim), order])
    ranks = [json.loads((tmp_path / f"result.json.rank{r}").read_text()) for r in range(2)]
    assert ranks[0]["values"] == ranks[1]["values"]  # both read the shards after the barrier
    assert_rows_follow_the_data(ranks[0], ranks[0]["batches"] + ranks[1]["batches"])
    # set_weights on every rank: each reads rank 0's matrix through its
    # cache, which held the trained rows (rank 1 wrote last before, and
    # both read its matrix).
    written = data.set_matrix(0, dim)[:data.CACHE].tolist()
    assert [r["read_after_set"] for r in ranks] == [written, written]
    # model.save on one rank is refused; het_tf.hybrid.save on every rank
    # right after fit holds both ranks' updates, and load_weights on every
    # rank writes them back over set_weights' matrix.
    for r in ranks:
        assert "het_tf.hybrid.save(model, 'model.keras') on every rank" in r["refused"]
    # A save that fails on rank 0 raises on every rank, and training goes on.
    assert [r["failed_save"] for r in ranks] == ["FileExistsError", "RuntimeError"]
    assert not list(tmp_path.glob("result.json.rank*.keras"))
    saved = keras_file_rows(tmp_path / "result.json.keras")
    assert_rows_follow_the_data(saved, ranks[0]["batches"] + ranks[1]["batches"])
    trained = dict(zip(saved["keys"], saved["values"]))
    expected = [trained.get(k, [0.0] * dim) for k in range(data.CACHE)]
    assert [r["read_after_load"] for r in ranks] == [expected, expected]
    # Versions exported every 8 steps: each holds both ranks' first n
    # steps, whichever rank's cache still held them at the cut.
    assert_versions_follow_the_data(tmp_path / "result.json.versions", data.STEPS, lambda n: (
        ranks[0]["batches"][:n] + ranks[1]["batches"][:n]))
