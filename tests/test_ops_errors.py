"""Bad input gives a clear error naming the table, and changes nothing."""
import numpy as np
import pytest
import tensorflow as tf

import het_tf


def snapshot(table, cache=None):
    rows = []
    for s in range(table.num_shards):
        rows.append([t.numpy().tolist() for t in table.export_shard(s, 0, 1 << 20)])
    return rows, (cache.stats() if cache else None)


@pytest.fixture
def trained(unique_name):
    """A fixed-vocabulary table with a small cache that already holds rows."""
    config = het_tf.TableConfig(unique_name("vocab"), 4, vocabulary_size=100)
    table = het_tf.ShardedTable(config, [None, None])
    cache = het_tf.WorkerCache(table, het_tf.CacheConfig(8, "lfu", 2, 2))
    rows, unique, _ = cache.lookup(tf.constant([1, 2, 3], tf.int64), True)
    cache.apply_gradients(unique, tf.ones_like(rows), 0.1)
    return table, cache


@pytest.mark.parametrize("ids", [[5, 100], [-1, 3], [2**62]])
def test_ids_outside_the_vocabulary(trained, ids):
    table, cache = trained
    before = snapshot(table, cache)
    name = table.config.name
    with pytest.raises(tf.errors.InvalidArgumentError, match=f"table '{name}': id .* outside the vocabulary"):
        cache.lookup(tf.constant(ids, tf.int64), True)
    with pytest.raises(tf.errors.InvalidArgumentError, match=f"table '{name}'"):
        het_tf.lookup_without_cache(table, tf.constant(ids, tf.int64))
    with pytest.raises(tf.errors.InvalidArgumentError, match=f"table '{name}': id"):
        table.push(tf.constant(ids, tf.int64), tf.ones([len(ids), 4]),
                   tf.ones([len(ids)], tf.int64), 0.1)
    assert snapshot(table, cache) == before


@pytest.mark.parametrize("dtype", [tf.float32, tf.string, tf.bool])
def test_ids_of_the_wrong_dtype(trained, dtype):
    table, cache = trained
    ids = tf.constant(["a"]) if dtype == tf.string else tf.cast([1, 0], dtype)
    with pytest.raises(ValueError, match=f"table '{table.config.name}': ids must be int32 or int64"):
        cache.lookup(ids, True)


def test_int32_ids_are_accepted(trained):
    _, cache = trained
    rows, _, _ = cache.lookup(tf.constant([[1, 2]], tf.int32), False)
    assert rows.shape == (2, 4)


def test_gradients_of_the_wrong_shape(trained):
    table, cache = trained
    before = snapshot(table, cache)
    rows, unique, _ = cache.lookup(tf.constant([1, 2], tf.int64), True)
    after_lookup = snapshot(table, cache)
    for bad in (tf.ones([2, 5]), tf.ones([3, 4]), tf.ones([8])):
        with pytest.raises(tf.errors.InvalidArgumentError,
                           match=f"table '{table.config.name}': gradients must have shape \\[2, 4\\]"):
            cache.apply_gradients(unique, bad, 0.1)
    with pytest.raises(tf.errors.InvalidArgumentError, match="gradients must have shape"):
        table.push(unique, tf.ones([2, 3]), tf.ones([2], tf.int64), 0.1)
    assert snapshot(table, cache) == after_lookup
    assert before != after_lookup  # the lookup itself counted


def test_non_finite_gradients(trained):
    table, cache = trained
    rows, unique, _ = cache.lookup(tf.constant([1, 2], tf.int64), True)
    before = snapshot(table, cache)
    bad = np.ones([2, 4], np.float32)
    bad[1, 2] = np.nan
    with pytest.raises(tf.errors.InvalidArgumentError, match="non-finite gradient for id 2"):
        cache.apply_gradients(unique, tf.constant(bad), 0.1)
    with pytest.raises(tf.errors.InvalidArgumentError, match=f"table '{table.config.name}': non-finite gradient"):
        het_tf.push_without_cache(table, unique, tf.constant(bad), 0.1)
    assert snapshot(table, cache) == before


def test_batch_larger_than_the_cache_trains(trained):
    """Rows that do not fit pass through: read, updated and pushed with the
    next exchange, and counted; the cache keeps at most its capacity."""
    table, cache = trained
    rows, unique, _ = cache.lookup(tf.range(9, dtype=tf.int64), True)
    assert rows.shape == (9, 4)
    stats = cache.stats()
    assert stats["passed_through"] == 1 and stats["rows"] == 8
    before = table.stats()["updates_applied"]
    cache.apply_gradients(unique, tf.ones([9, 4]), 0.1)
    cache.lookup(tf.constant([0], tf.int64), True)  # the next exchange
    assert table.stats()["updates_applied"] >= before + 1  # the passed row's update arrived
    cache.flush(0.1)
    assert cache.stats()["updates_pushed"] == table.stats()["updates_applied"]


@pytest.mark.parametrize("field,value,message", [
    ("optimizer", het_tf.OptimizerConfig("rmsprop"), "unknown optimizer 'rmsprop'"),
    ("initializer", "glorot", "unknown initializer 'glorot'"),
    ("dim", 0, "output dimension must be a positive int"),
    ("vocabulary_size", 0, "vocabulary size must be a positive int"),
])
def test_bad_table_settings(field, value, message):
    with pytest.raises(ValueError, match=f"table 'bad': {message}"):
        het_tf.TableConfig("bad", **{"dim": 4, field: value})


@pytest.mark.parametrize("kwargs,message", [
    (dict(policy="fifo"), "unknown cache policy 'fifo'"),
    (dict(capacity=0), "cache capacity must be a positive number of rows"),
    (dict(read_staleness=-5), "read_staleness must be an int >= 0"),
    (dict(write_staleness=1.5), "write_staleness must be an int >= 0"),
])
def test_bad_cache_settings(unique_name, kwargs, message):
    table = het_tf.ShardedTable(het_tf.TableConfig("named", 4))
    settings = dict(capacity=10) | kwargs
    with pytest.raises(ValueError, match=f"table 'named': {message}"):
        het_tf.WorkerCache(table, het_tf.CacheConfig(**settings))


def test_sizes_that_cannot_fit_are_refused_not_allocated():
    # About 100 TiB of cache: refused before a byte is allocated.
    with pytest.raises(tf.errors.ResourceExhaustedError,
                       match="table 'huge': a cache of 2147483647 rows would take"):
        het_tf.ops.het_cache(table_name="huge", dim=4096, capacity=(1 << 31) - 1,
                             shared_name="huge0")
    # 2^32 + 3 must not wrap to a dim of 3.
    with pytest.raises(tf.errors.InvalidArgumentError, match="table 'huge': dim must be between"):
        het_tf.ops.het_table_shard(table_name="huge", dim=(1 << 32) + 3, shared_name="huge1")
    # 2^32 shards would wrap to 0, a division by zero.
    with pytest.raises(tf.errors.InvalidArgumentError, match="num_shards must be at most"):
        het_tf.ops.het_shard_index(tf.constant([1], tf.int64), num_shards=1 << 32,
                                   table_name="huge")


def test_raw_ops_reject_unknown_names_naming_the_table():
    with pytest.raises(tf.errors.InvalidArgumentError, match="table 'raw': unknown optimizer 'nadam'"):
        het_tf.ops.het_table_shard(table_name="raw", dim=2, optimizer="nadam", shared_name="raw0")
    with pytest.raises(tf.errors.InvalidArgumentError, match="table 'raw': unknown cache policy 'mru'"):
        het_tf.ops.het_cache(table_name="raw", dim=2, capacity=4, policy="mru", shared_name="raw1")


def test_same_name_with_another_shape_is_refused(unique_name):
    name = unique_name()
    het_tf.ShardedTable(het_tf.TableConfig(name, 4)).gather(tf.constant([1], tf.int64))
    with pytest.raises(tf.errors.InvalidArgumentError, match=f"table '{name}' already exists .* dim 4"):
        het_tf.ShardedTable(het_tf.TableConfig(name, 8)).gather(tf.constant([1], tf.int64))


def test_import_of_mismatched_chunks(unique_name):
    table = het_tf.ShardedTable(het_tf.TableConfig(unique_name(), 2))
    with pytest.raises(tf.errors.InvalidArgumentError, match="imported values must have shape"):
        table.import_rows(tf.constant([1], tf.int64), tf.ones([1, 3]), tf.ones([1, 1, 2]),
                          tf.constant([0], tf.int64), tf.constant([0], tf.int64))
    assert table.stats()["rows"] == 0


@pytest.mark.parametrize("bad", ["base_clock", "squared_gradient"])
def test_bad_delta_pushes_change_no_shard(unique_name, bad):
    # Ids 1..8 land on both shards; one bad row must stop every shard's part.
    config = het_tf.TableConfig(unique_name(), 2, optimizer=het_tf.OptimizerConfig("adagrad"))
    table = het_tf.ShardedTable(config, [None, None])
    keys = tf.range(1, 9, dtype=tf.int64)
    table.gather(keys)
    before = snapshot(table)
    deltas = np.full([8, 4], 0.5, np.float32)  # values then the accumulator
    bases = np.zeros([8], np.int64)
    if bad == "base_clock":
        bases[5] = -1
    else:
        deltas[5, 3] = -0.5
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=f"table '{config.name}': negative {bad.replace('_', '.')}"):
        table.push_deltas(keys, tf.constant(deltas), tf.ones([8], tf.int64), tf.constant(bases),
                          0.1)
    assert snapshot(table) == before
