"""A first touch moves no row: a shard that makes a row for a cache's miss
sends its clock alone, and the cache makes the row from the same
initializer. The oracles: tf_keras' own Embedding started from rows the
NumPy model computes (tests/reference.py initial_row), and, for rows a
worker cannot make (written by weights or a restore), the rows written."""
import numpy as np
import tensorflow as tf
import tf_keras

from het_tf.keras_layers import HetEmbedding
from tests.reference import initial_row
from tests.test_keras_layer import functional_model, parity_data

VOCAB, DIM, SEED = 200, 4, 7


def test_first_touches_are_made_by_the_cache_and_train_as_keras():
    """One worker with a cache trains as tf_keras' Embedding does (its reads see
    its own writes, and rows it evicts go back whole): the rows it made for
    first touches were the shards' own."""
    rows = np.stack([initial_row(k, DIM, SEED) for k in range(VOCAB)])
    keras_model = functional_model(tf_keras.layers.Embedding(
        VOCAB, DIM, embeddings_initializer=tf_keras.initializers.Constant(rows)))
    het_model = functional_model(HetEmbedding(
        VOCAB, DIM, embeddings_initializer="uniform", seed=SEED,
        optimizer=tf_keras.optimizers.SGD(0.3), cache_capacity=100, staleness=10))
    het_model.layers[-1].set_weights(keras_model.layers[-1].get_weights())
    for model in (keras_model, het_model):
        model.compile(tf_keras.optimizers.SGD(0.3), "binary_crossentropy")
    x, y = parity_data(384, seed=3)
    h_keras = keras_model.fit(x, y, batch_size=32, epochs=2, shuffle=False, verbose=0)
    h_het = het_model.fit(x, y, batch_size=32, epochs=2, shuffle=False, verbose=0)
    np.testing.assert_allclose(h_het.history["loss"], h_keras.history["loss"], atol=1e-5)
    layer = het_model.layers[1]
    stats = layer.het_stats()
    # Every row the shards made went out as its clock alone.
    assert stats["cache_rows_rebuilt"] == stats["table_rows_created"] == len(np.unique(x)) > 0
    layer.flush()
    trained = layer.table.gather(tf.range(VOCAB, dtype=tf.int64)).numpy()
    np.testing.assert_allclose(trained, keras_model.layers[1].get_weights()[0], atol=1e-5)


def test_rows_a_worker_cannot_make_come_whole():
    """Rows written by `weights` are no initializer's: every miss of one
    brings the row, and the rows read are the weights."""
    weights = np.random.default_rng(0).uniform(-1, 1, (VOCAB, DIM)).astype(np.float32)
    layer = HetEmbedding(VOCAB, DIM, weights=[weights], cache_capacity=50, staleness=10)
    model = functional_model(layer)
    model.compile(tf_keras.optimizers.SGD(0.1), "binary_crossentropy")
    x, y = parity_data(64, seed=1)
    first = model.layers[1](tf.constant(x[:8]), training=True).numpy()
    np.testing.assert_array_equal(first, weights[x[:8]])
    model.fit(x, y, batch_size=16, epochs=1, verbose=0)
    stats = layer.het_stats()
    assert stats["cache_misses"] > 0 and stats["cache_rows_rebuilt"] == 0


def test_a_restored_table_sends_its_rows_whole_and_new_ones_as_clocks(tmp_path):
    def model_with_layer():
        layer = HetEmbedding(None, DIM, seed=SEED, optimizer=tf_keras.optimizers.SGD(0.2),
                             cache_capacity=64, staleness=10)
        return functional_model(layer), layer

    model, layer = model_with_layer()
    model.compile(tf_keras.optimizers.SGD(0.2), "binary_crossentropy")
    x, y = parity_data(128, seed=2)
    model.fit(x, y, batch_size=32, epochs=1, verbose=0)
    layer.flush()
    trained = set(np.unique(x).tolist())
    saved = layer.table.gather(tf.constant(sorted(trained), tf.int64)).numpy()
    path = tf.train.Checkpoint(model=model).save(str(tmp_path / "ckpt"))

    restored, fresh = model_with_layer()
    restored(tf.constant(x[:1]))  # built
    tf.train.Checkpoint(model=restored).restore(path).expect_partial()
    new_keys = [k for k in range(10_000, 10_005)]
    ids = np.array([sorted(trained)[:5] + new_keys], np.int64).reshape(2, 5)
    rows = fresh(tf.constant(ids), training=True).numpy().reshape(10, DIM)
    np.testing.assert_array_equal(rows[:5], saved[:5])  # restored: whole
    np.testing.assert_array_equal(rows[5:], np.stack([initial_row(k, DIM, SEED)
                                                      for k in new_keys]))
    assert fresh.het_stats()["cache_rows_rebuilt"] == len(new_keys)
