"""A table with a row limit that evicts (on_full="evict"): a stream whose
distinct ids grow far past the limit trains, in one process and on a
cluster of 2 PS tasks and 2 workers, the table never holding more than the
limit; the rows it holds are what the data trained them to. Rows unused
for longer than a ttl expire. Settings that cannot work are refused naming
the layer."""
import dataclasses
import json
import os
import sys
import time

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

import het_tf
from het_tf.apps.launch import LocalCluster
from het_tf.keras_layers import HetEmbedding
from het_tf.runtime.checkpoint import TableCheckpoint
from tests import stream_train as stream
from tests.test_cluster import Log, assert_all_gone

STREAM = os.path.join(os.path.dirname(os.path.abspath(__file__)), "stream_train.py")


def stream_model(**kwargs):
    layer = HetEmbedding(None, stream.DIM, embeddings_initializer="zeros",
                         optimizer=tf_keras.optimizers.SGD(stream.LR), name="stream", **kwargs)
    ids = tf_keras.Input((stream.IDS,), dtype="int64")
    model = tf_keras.Model(ids, tf.reduce_sum(layer(ids), axis=[1, 2])[:, None])
    model.compile(tf_keras.optimizers.SGD(stream.LR), loss=lambda _y, pred: pred)
    return model, layer


def assert_rows_follow_the_data(keys, values, clocks, batches, times=(1,)):
    """Every row held is its batch's step applied `times` times (a
    ParameterServerStrategy worker reads its own copy of the stream, so a
    batch trains once or twice, once on each worker)."""
    expected = stream.expected_rows(batches)
    assert set(keys.tolist()) <= set(expected)
    for key, row, clock in zip(keys.tolist(), values, clocks.tolist()):
        assert any(np.array_equal(row, np.full(stream.DIM, expected[key][0] * t, np.float32))
                   for t in times), (key, row, expected[key])
        # A key's clock only ever grows: a step trained it, on a row that
        # started at the clock of the rows evicted before it.
        assert clock >= expected[key][1]


@pytest.mark.parametrize("cache_capacity", [0, 24])
def test_a_stream_trains_in_one_process_within_the_limit(cache_capacity):
    # The rows a cache holds or let go since its last exchange, and the
    # step's own, stay: a limit well above a cache and a batch leaves room.
    limit = 150
    model, layer = stream_model(cache_capacity=cache_capacity, staleness=2, max_rows=limit,
                                on_full="evict")
    batches = [stream.batch(b) for b in range(30)]  # about 1,100 distinct ids
    held = []
    for ids in batches:
        model.train_on_batch(ids, np.zeros((stream.BATCH, 1), np.float32))
        held.append(layer.table.stats()["rows"])
    layer.flush()
    assert max(held) <= limit
    keys, values, _, clocks, _ = (t.numpy() for t in layer.table.export_all())
    assert len(keys) <= limit
    assert_rows_follow_the_data(keys, values, clocks, batches)
    # The least recently used rows went: the last batch's are all held.
    assert set(np.unique(batches[-1]).tolist()) <= set(keys.tolist())
    stats = layer.het_stats()
    distinct = len(np.unique(np.concatenate(batches)))
    assert stats["table_rows_evicted"] == distinct - len(keys)


def test_a_stream_trains_on_a_cluster_within_the_limit(tmp_path):
    result_path, log = tmp_path / "result.json", Log()
    with LocalCluster(2, 2, out=log) as cluster:
        chief = cluster.start_chief([sys.executable, STREAM, str(result_path)])
        code = chief.wait(timeout=300)
    assert_all_gone(cluster)
    assert code == 0, log.text()[-5000:]
    result = json.loads(result_path.read_text())
    shares = [151, 150]
    assert result["shards"] == 2
    for rows in result["held"]:
        assert all(r <= s for r, s in zip(sorted(rows, reverse=True), shares)), result["held"]
    keys = np.array(result["keys"])
    batches = [stream.batch(b) for b in range(stream.EPOCHS * stream.STEPS)]
    assert_rows_follow_the_data(keys, np.array(result["values"], np.float32).reshape(-1, 2),
                                np.array(result["clocks"]), batches, times=(1, 2))
    assert result["rows_created"] > 3 * stream.MAX_ROWS  # the stream went far past the limit
    assert result["rows_evicted"] == result["rows_created"] - len(keys)


def test_an_evicting_table_saves_and_restores_onto_another_number_of_shards(tmp_path,
                                                                            unique_name):
    """A 3-shard evicting table, past its limit many times over, saves the
    rows it holds; they restore exactly onto 2 shards (of a limit with room
    for the rows each gets: ids hash unevenly), where training goes on
    evicting. A checkpoint of more rows than a shard's share is refused,
    rather than evicting restored rows."""
    config = het_tf.TableConfig(unique_name(), 2, max_rows=90, on_full="evict", seed=3)
    source = het_tf.ShardedTable(config, [None, None, None])
    for b in range(20):  # 20 batches of 40 ids never seen again
        source.gather(tf.constant(np.arange(40) + 1000 * b, tf.int64))
    assert source.stats()["rows_evicted"] > 600
    path = tf.train.Checkpoint(table=TableCheckpoint(source, lambda: [], lambda: [])).save(
        str(tmp_path / "table"))
    saved = sorted(zip(*(t.numpy().tolist() for t in source.export_all())))
    assert 0 < len(saved) <= 90
    target = het_tf.ShardedTable(dataclasses.replace(config, max_rows=120), [None, None],
                                 instance="two")
    tf.train.Checkpoint(table=TableCheckpoint(target, lambda: [], lambda: [])).restore(path)
    assert sorted(zip(*(t.numpy().tolist() for t in target.export_all()))) == saved
    for b in range(20, 30):
        target.gather(tf.constant(np.arange(40) + 1000 * b, tf.int64))
        assert target.stats()["rows"] <= 120
    small = het_tf.ShardedTable(dataclasses.replace(config, max_rows=20), [None, None],
                                instance="small")
    with pytest.raises(tf.errors.ResourceExhaustedError, match="a restore evicts nothing"):
        tf.train.Checkpoint(table=TableCheckpoint(small, lambda: [], lambda: [])).restore(path)


def test_rows_unused_for_longer_than_the_ttl_expire():
    """ttl=2: the rows of a batch no step used for more than 2 seconds go
    at the next step's sweep; the step's own rows stay."""
    model, layer = stream_model(cache_capacity=0, ttl=2)
    first, second = stream.batch(0), stream.batch(1)
    model.train_on_batch(first, np.zeros((stream.BATCH, 1), np.float32))
    time.sleep(4.1)
    model.train_on_batch(second, np.zeros((stream.BATCH, 1), np.float32))
    keys, values, _, clocks, _ = (t.numpy() for t in layer.table.export_all())
    assert sorted(keys.tolist()) == np.unique(second).tolist()
    assert_rows_follow_the_data(keys, values, clocks, [second])
    stats = layer.het_stats()
    assert stats["table_rows_expired"] == len(np.unique(first))
    assert stats["table_rows_evicted"] == 0


@pytest.mark.parametrize("kwargs, message", [
    (dict(on_full="evict"), "on_full='evict' needs max_rows"),
    (dict(on_full="drop", max_rows=10), "on_full must be one of"),
    (dict(on_full="evict", max_rows=10, eviction="fifo"), "eviction must be one of"),
    (dict(input_dim=50, on_full="evict", max_rows=10), "dynamic tables"),
    (dict(on_full="evict", max_rows=100, sync="check"), "sync='check'"),
    (dict(ttl=60, sync="check"), "or a ttl.*sync='check'"),
    (dict(on_full="evict", max_rows=100, scheduler="herald", staleness="auto"),
     "scheduler='herald'"),
    (dict(ttl=-1), "ttl must be a positive whole number"),
    (dict(ttl=1.5), "ttl must be a positive whole number"),
    (dict(input_dim=50, ttl=60), "ttl is for dynamic tables"),
])
def test_bad_eviction_settings_name_the_layer(kwargs, message):
    kwargs = dict(dict(input_dim=None, cache_capacity=10), **kwargs)
    with pytest.raises(ValueError, match=f"HetEmbedding 'bad'.*{message}"):
        HetEmbedding(output_dim=4, name="bad", **kwargs)


def test_evaluation_reads_zeros_for_ids_not_held_and_evicts_nothing():
    """On a table that evicts, evaluation and prediction of ids no step
    trained read zeros, as the export serves them, and make no row: they
    never evict a trained one."""
    model, layer = stream_model(cache_capacity=8, staleness=2, max_rows=60, on_full="evict")
    trained = stream.batch(0)
    model.train_on_batch(trained, np.zeros((stream.BATCH, 1), np.float32))
    layer.flush()
    before = sorted(layer.table.export_all()[0].numpy().tolist())
    unseen = stream.batch(7)
    np.testing.assert_array_equal(model.predict(unseen, verbose=0), np.zeros((stream.BATCH, 1)))
    model.evaluate(unseen, np.zeros((stream.BATCH, 1), np.float32), verbose=0)
    assert sorted(layer.table.export_all()[0].numpy().tolist()) == before
    assert layer.het_stats()["table_rows_evicted"] == 0


def test_a_cache_that_syncs_by_check_is_refused_over_a_table_that_drops_rows(unique_name):
    """The runtime's own cache asks the same table as the layer: a shard
    that drops rows keeps only those it records a cache holding."""
    for lifetime in (dict(max_rows=50, on_full="evict"), dict(ttl=60)):
        table = het_tf.ShardedTable(het_tf.TableConfig(unique_name(), 4, **lifetime), [None])
        with pytest.raises(ValueError, match="or a ttl.*sync='check'"):
            het_tf.WorkerCache(table, het_tf.CacheConfig(8, "lru", 2, 2, sync="check"))


def test_caches_that_could_hold_the_whole_limit_are_refused():
    model, layer = None, HetEmbedding(None, 4, cache_capacity=50, max_rows=50, on_full="evict",
                                      name="tight")
    with pytest.raises(ValueError, match="HetEmbedding 'tight'.*could hold all of max_rows=50"):
        layer(tf.constant([[1, 2]], tf.int64))
    assert model is None


def test_the_settings_round_trip_through_the_config():
    layer = HetEmbedding(None, 4, cache_capacity=10, max_rows=100, on_full="evict",
                         eviction="lfu", ttl=3600)
    again = HetEmbedding.from_config(layer.get_config())
    assert (again.max_rows, again.on_full, again.eviction, again.ttl) == (100, "evict", "lfu",
                                                                          3600)
