"""Admission (admit_after=K): an id becomes a row at the K-th training step
that looks it up. Rows and clocks after training follow a NumPy model of
the data (each step's sightings counted, the steps before admission
dropping their gradients); evaluation and prediction neither count nor
create rows; served equals trained for ids the table does not hold."""
import numpy as np
import pytest
import tensorflow as tf
import tf_keras

import het_tf
from het_tf.keras_layers import HetEmbedding
from het_tf.runtime.checkpoint import TableCheckpoint

IDS, BATCH, LR, DIM, POOL = 4, 32, 0.25, 2, 60


def batches(count, seed=0):
    rng = np.random.default_rng(seed)
    # Skewed: some ids come back every step, most now and then.
    return [np.minimum(rng.zipf(1.3, size=(BATCH, IDS)), POOL).astype(np.int64)
            for _ in range(count)]


def admitted_rows(steps, k):
    """{id: (value in each dimension, clock)} after training `steps` at
    admit_after k: an id's row starts (zeros) at the step that looks it up
    for the k-th time and takes every step's gradient from there on, each
    occurrence moving it by -LR/BATCH (the loss is the batch's mean of the
    sum of its rows)."""
    seen, rows = {}, {}
    for ids in steps:
        keys, counts = np.unique(ids, return_counts=True)
        for key, count in zip(keys.tolist(), counts.tolist()):
            seen[key] = seen.get(key, 0) + 1
            if seen[key] >= k:
                value, clock = rows.get(key, (0.0, 0))
                rows[key] = (value - LR / BATCH * count, clock + 1)
    return rows


def sum_model(**kwargs):
    layer = HetEmbedding(None, DIM, embeddings_initializer="zeros",
                         optimizer=tf_keras.optimizers.SGD(LR), staleness=2, name="items", **kwargs)
    ids = tf_keras.Input((IDS,), dtype="int64", name="ids")
    model = tf_keras.Model(ids, tf.reduce_sum(layer(ids), axis=[1, 2])[:, None])
    model.compile(tf_keras.optimizers.SGD(LR), loss=lambda _y, pred: pred)
    return model, layer


@pytest.mark.parametrize("k", [1, 2, 3])
@pytest.mark.parametrize("cache_capacity", [0, 16])
def test_rows_follow_a_numpy_model_of_admission(k, cache_capacity):
    model, layer = sum_model(cache_capacity=cache_capacity, admit_after=k)
    steps = batches(24, seed=k)
    unseen = np.arange(1000, 1000 + BATCH * IDS, dtype=np.int64).reshape(BATCH, IDS)
    for i, ids in enumerate(steps):
        model.train_on_batch(ids, np.zeros((BATCH, 1), np.float32))
        if i % 4 == 0:  # evaluation and prediction between steps count nothing
            model.evaluate(ids, np.zeros((BATCH, 1), np.float32), verbose=0)
            model.predict(unseen, verbose=0)
    layer.flush()
    keys, values, _, clocks, _ = (t.numpy() for t in layer.table.export_all())
    expected = admitted_rows(steps, k)
    assert sorted(keys.tolist()) == sorted(expected)
    for key, row, clock in zip(keys.tolist(), values, clocks.tolist()):
        np.testing.assert_array_equal(row, np.full(DIM, expected[key][0], np.float32))
        assert clock == expected[key][1]
    stats = layer.het_stats()
    # Every training sighting of an id before its k-th was refused once.
    sightings = sum(min(k - 1, n) for n in _steps_per_id(steps).values())
    assert stats["table_ids_not_admitted"] == sightings


def _steps_per_id(steps):
    counts = {}
    for ids in steps:
        for key in np.unique(ids).tolist():
            counts[key] = counts.get(key, 0) + 1
    return counts


def test_served_equals_trained_for_ids_the_table_does_not_hold(tmp_path):
    """An id seen once at admit_after 2 reads zeros in training (the step's
    loss, the sum of its rows, is 0), in evaluation and in the exported
    SavedModel, which also serves the admitted ids' trained rows."""
    model, layer = sum_model(cache_capacity=16, admit_after=2)
    held = np.full((BATCH, IDS), 7, np.int64)
    for _ in range(3):
        model.train_on_batch(held, np.zeros((BATCH, 1), np.float32))
    once = np.arange(500, 500 + BATCH * IDS, dtype=np.int64).reshape(BATCH, IDS)
    trained = model.train_on_batch(once, np.zeros((BATCH, 1), np.float32))
    assert trained == 0.0
    layer.flush()
    assert 500 not in layer.table.export_all()[0].numpy().tolist()
    evaluated = model.predict(once, verbose=0)
    path = het_tf.export_saved_model(model, str(tmp_path / "export"))
    served = tf.saved_model.load(path).signatures["serving_default"](ids=tf.constant(once))
    (score,) = served.values()
    np.testing.assert_array_equal(score.numpy().ravel(), np.zeros(BATCH))
    np.testing.assert_array_equal(evaluated.ravel(), np.zeros(BATCH))
    # The admitted id: trained twice (its first step dropped), served as held.
    row = admitted_rows([held] * 3, 2)[7][0]
    both = tf.saved_model.load(path).signatures["serving_default"](ids=tf.constant(held[:1]))
    np.testing.assert_allclose(list(both.values())[0].numpy().ravel(), [row * DIM * IDS])


@pytest.mark.parametrize("kwargs, message", [
    (dict(admit_after=0), "admit_after must be a whole number of steps from 1 to 255"),
    (dict(admit_after=256), "admit_after must be a whole number"),
    (dict(admit_after=2.0), "admit_after must be a whole number"),
    (dict(input_dim=50, admit_after=2), "admit_after is for dynamic tables"),
    (dict(admit_after=2, scheduler="herald"), "admit_after with scheduler='herald'"),
])
def test_bad_admission_settings_name_the_layer(kwargs, message):
    kwargs = dict(dict(input_dim=None, cache_capacity=10), **kwargs)
    with pytest.raises(ValueError, match=f"HetEmbedding 'bad'.*{message}"):
        HetEmbedding(output_dim=4, name="bad", **kwargs)


@pytest.mark.parametrize("shards_after", [2, 3])
def test_a_checkpoint_keeps_the_sightings_of_ids_not_admitted_yet(tmp_path, unique_name,
                                                                   shards_after):
    """admit_after=3 on 2 shards: ids read twice, saved, restored into a
    fresh table (on 2 or 3 shards): each is admitted at its third read
    overall. Before, sightings were not kept and each took three more. A
    checkpoint with no sightings (one written before they were kept, as a
    table that admits every id writes it still) restores with none."""
    ids = tf.constant([3, 4, 7, 10], tf.int64)

    def table(name, shards, admit_after=3):
        config = het_tf.TableConfig(name, DIM, admit_after=admit_after)
        t = het_tf.ShardedTable(config, [None] * shards)
        return t, TableCheckpoint(t, flush=lambda: [], clear_caches=lambda: [])

    def held(t):
        return sorted(int(k) for s in range(t.num_shards)
                      for k in t.export_shard(s, 0, 1 << 30)[0].numpy())

    saved, saver = table(unique_name("saved"), 2)
    for _ in range(2):
        saved.gather(ids, training=True)
    assert held(saved) == []
    path = tf.train.Checkpoint(table=saver).write(str(tmp_path / "ckpt"))
    restored, restorer = table(unique_name("restored"), shards_after)
    tf.train.Checkpoint(table=restorer).read(path).assert_existing_objects_matched()
    restored.gather(ids, training=True)
    assert held(restored) == [3, 4, 7, 10]

    plain, plain_saver = table(unique_name("plain"), 2, admit_after=None)
    plain.gather(ids, training=True)
    path = tf.train.Checkpoint(table=plain_saver).write(str(tmp_path / "plain"))
    fresh, fresh_restorer = table(unique_name("fresh"), 2)
    tf.train.Checkpoint(table=fresh_restorer).read(path).assert_existing_objects_matched()
    assert held(fresh) == [3, 4, 7, 10]  # the checkpoint's rows
    fresh.gather(tf.constant([11], tf.int64), training=True)
    assert 11 not in held(fresh)
