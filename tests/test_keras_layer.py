"""HetEmbedding in tf_keras models: fit, evaluate, predict, equivalence with
tf_keras.layers.Embedding, multi-hot inputs, config, bad input, metrics."""
import math

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from het_tf.keras_layers import HetEmbedding, HetMetricsCallback

VOCAB, DIM, FIELDS = 200, 4, 3


def parity_data(n=512, seed=0):
    """Labels depend on the ids alone, so only the embeddings can learn them."""
    rng = np.random.default_rng(seed)
    x = rng.integers(0, VOCAB, size=(n, FIELDS)).astype(np.int64)
    return x, (x[:, 0] % 2).astype(np.float32)


def functional_model(layer, fields=FIELDS):
    inp = tf_keras.Input(shape=(fields,), dtype="int64")
    hidden = tf_keras.layers.Flatten()(layer(inp))
    out = tf_keras.layers.Dense(1, activation="sigmoid", kernel_initializer="ones")(hidden)
    return tf_keras.Model(inp, out)


@pytest.mark.parametrize("build", ["functional", "sequential"])
def test_fit_learns_and_evaluation_never_pushes(build):
    layer = HetEmbedding(VOCAB, DIM, optimizer=tf_keras.optimizers.Adagrad(0.5),
                         cache_capacity=120, staleness=10)
    if build == "functional":
        model = functional_model(layer)
    else:
        model = tf_keras.Sequential([tf_keras.Input(shape=(FIELDS,), dtype="int64"), layer,
                                     tf_keras.layers.Flatten(),
                                     tf_keras.layers.Dense(1, activation="sigmoid")])
    model.compile(tf_keras.optimizers.Adam(0.05), "binary_crossentropy")
    x, y = parity_data()
    history = model.fit(x, y, batch_size=32, epochs=4, verbose=0)
    assert history.history["loss"][-1] < 0.8 * history.history["loss"][0]
    trained = layer.het_stats()
    assert trained["cache_hits"] > 0 and trained["table_updates_applied"] > 0
    assert trained["samples"] == 4 * 512

    model.evaluate(x, y, batch_size=32, verbose=0)
    predictions = model.predict(x, batch_size=64, verbose=0)
    after = layer.het_stats()
    assert after["cache_lookups"] > trained["cache_lookups"]  # it did look up
    for counter in ("table_updates_applied", "table_push_requests", "cache_rows_pushed",
                    "cache_evictions", "samples"):
        assert after[counter] == trained[counter], counter
    accuracy = np.mean((predictions.ravel() > 0.5) == y)
    assert accuracy > 0.9


@pytest.mark.parametrize("sync", ["refresh", "check"])
def test_batches_larger_than_the_cache_train_and_lose_nothing(sync):
    """A 50% cache of a 50-row table with batches of 16 x 3 ids: the rows
    that do not fit pass through, and every update reaches the table."""
    layer = HetEmbedding(50, 4, cache_capacity=0.5, staleness=100, sync=sync,
                         optimizer=tf_keras.optimizers.Adagrad(0.3))
    model = functional_model(layer)
    model.compile("adam", "binary_crossentropy")
    rng = np.random.default_rng(0)
    x = rng.integers(0, 50, size=(256, FIELDS)).astype(np.int64)
    history = model.fit(x, (x[:, 0] % 2).astype(np.float32), batch_size=16, epochs=3,
                        shuffle=False, verbose=0)
    assert history.history["loss"][-1] < history.history["loss"][0]
    layer.flush()
    stats = layer.het_stats()
    assert stats["cache_passed_through"] > 0 and stats["cache_rows"] <= 25
    assert stats["table_updates_applied"] == stats["cache_updates_pushed"]
    # One update per unique id of each of the 3 * 16 steps reached the table.
    unique_per_step = sum(len(np.unique(x[i:i + 16])) for i in range(0, 256, 16))
    assert stats["table_updates_applied"] == 3 * unique_per_step


def embedding_pair(cache_capacity, staleness, seed=1):
    """The same model twice: with tf_keras Embedding and with HetEmbedding,
    both starting from the same rows and dense weights, both with SGD."""
    rows = np.random.default_rng(seed).uniform(-0.5, 0.5, (VOCAB, DIM)).astype(np.float32)
    keras_model = functional_model(tf_keras.layers.Embedding(
        VOCAB, DIM, embeddings_initializer=tf_keras.initializers.Constant(rows)))
    het_model = functional_model(HetEmbedding(
        VOCAB, DIM, embeddings_initializer=tf_keras.initializers.Constant(rows),
        optimizer=tf_keras.optimizers.SGD(0.3), cache_capacity=cache_capacity,
        staleness=staleness))
    het_model.layers[-1].set_weights(keras_model.layers[-1].get_weights())
    keras_model.compile(tf_keras.optimizers.SGD(0.3), "binary_crossentropy")
    het_model.compile(tf_keras.optimizers.SGD(0.3), "binary_crossentropy")
    return keras_model, het_model


@pytest.mark.parametrize("cache_capacity,staleness", [(0, 100), (100, 0)],
                         ids=["cache-off", "staleness-0"])
def test_same_numbers_as_keras_embedding_with_sgd(cache_capacity, staleness):
    keras_model, het_model = embedding_pair(cache_capacity, staleness)
    x, y = parity_data(384, seed=3)
    h_keras = keras_model.fit(x, y, batch_size=32, epochs=2, shuffle=False, verbose=0)
    h_het = het_model.fit(x, y, batch_size=32, epochs=2, shuffle=False, verbose=0)
    np.testing.assert_allclose(h_het.history["loss"], h_keras.history["loss"], atol=1e-5)
    for a, b in zip(het_model.layers[-1].get_weights(), keras_model.layers[-1].get_weights()):
        np.testing.assert_allclose(a, b, atol=1e-5)
    het_layer, keras_layer = het_model.layers[1], keras_model.layers[1]
    het_layer.flush()
    rows = het_layer.table.gather(tf.range(VOCAB, dtype=tf.int64)).numpy()
    np.testing.assert_allclose(rows, keras_layer.get_weights()[0], atol=1e-5)
    assert not np.allclose(rows, embedding_pair(0, 0)[0].layers[1].get_weights()[0])


def test_multi_hot_inputs_with_combiners():
    rows = np.random.default_rng(2).normal(size=(VOCAB, DIM)).astype(np.float32)
    init = tf_keras.initializers.Constant(rows)
    ragged = tf.ragged.constant([[1, 2, 3], [], [7], [4, 4]], dtype=tf.int64)
    expected = {
        "sum": [rows[[1, 2, 3]].sum(0), np.zeros(DIM), rows[7], 2 * rows[4]],
        "mean": [rows[[1, 2, 3]].mean(0), np.zeros(DIM), rows[7], rows[4]],
        "sqrtn": [rows[[1, 2, 3]].sum(0) / math.sqrt(3), np.zeros(DIM), rows[7],
                  2 * rows[4] / math.sqrt(2)],
    }
    for combiner, want in expected.items():
        layer = HetEmbedding(VOCAB, DIM, embeddings_initializer=init, combiner=combiner,
                             cache_capacity=50)
        np.testing.assert_allclose(layer(ragged).numpy(), np.stack(want), rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(layer(ragged.to_sparse()).numpy(), np.stack(want),
                                   rtol=1e-6, atol=1e-6)
    dense = HetEmbedding(VOCAB, DIM, embeddings_initializer=init, combiner="mean",
                         cache_capacity=0)(tf.constant([[1, 2, 3]], tf.int64))
    np.testing.assert_allclose(dense.numpy()[0], rows[[1, 2, 3]].mean(0), rtol=1e-6)
    plain = HetEmbedding(VOCAB, DIM, embeddings_initializer=init)(tf.constant([[[5, 6]]]))
    assert plain.shape == (1, 1, 2, DIM)
    np.testing.assert_allclose(plain.numpy()[0, 0], rows[[5, 6]])


def test_ragged_model_trains_with_fit():
    inp = tf_keras.Input(shape=(None,), dtype="int64", ragged=True)
    out = tf_keras.layers.Dense(1, activation="sigmoid")(
        HetEmbedding(VOCAB, DIM, combiner="mean", cache_capacity=150,
                     optimizer=tf_keras.optimizers.Adagrad(0.5))(inp))
    model = tf_keras.Model(inp, out)
    model.compile("adam", "binary_crossentropy")
    rng = np.random.default_rng(4)
    lengths = rng.integers(1, 4, size=256)
    ids = tf.RaggedTensor.from_row_lengths(rng.integers(0, VOCAB, lengths.sum()), lengths)
    y = (ids.values.numpy()[ids.row_starts().numpy()] % 2).astype(np.float32)
    history = model.fit(ids, y, batch_size=32, epochs=3, verbose=0)
    assert history.history["loss"][-1] < history.history["loss"][0]


def test_dynamic_keys_take_any_int64():
    layer = HetEmbedding(None, DIM, cache_capacity=64)
    ids = tf.constant([[-2**63, 2**63 - 1, 0, 2**40]], tf.int64)
    out = layer(ids, training=True)
    assert out.shape == (1, 4, DIM)
    assert len({tuple(r) for r in out.numpy()[0]}) == 4  # four keys, four rows
    assert layer.het_stats()["table_rows"] == 4


def test_config_round_trip_and_summary(capsys):
    layer = HetEmbedding(1000, 8, embeddings_initializer="truncated_normal", combiner="sqrtn",
                         optimizer=tf_keras.optimizers.Adam(0.01, beta_1=0.8),
                         cache_capacity=0.25, cache_policy="lfu_opt", staleness=10,
                         read_staleness=math.inf, write_staleness=3, seed=7, name="items")
    config = layer.get_config()
    clone = HetEmbedding.from_config(config)
    assert clone.get_config() == config
    assert clone._choice.cache_config.capacity == 250
    assert clone._choice.cache_config.read_staleness == -1 and clone._choice.cache_config.write_staleness == 3
    assert clone._settings.config.optimizer.name == "adam" and clone._settings.config.optimizer.beta_1 == 0.8
    model = functional_model(HetEmbedding(VOCAB, DIM, name="summarized"))
    model.summary()
    assert "summarized (HetEmbedding)" in capsys.readouterr().out
    restored = tf_keras.Model.from_config(model.get_config(),
                                          custom_objects={"HetEmbedding": HetEmbedding})
    assert isinstance(restored.layers[1], HetEmbedding)


def test_a_keras3_tensor_is_refused_with_a_hint():
    import keras  # Keras 3, the default tf.keras of TensorFlow 2.16

    with pytest.raises(TypeError, match="TF_USE_LEGACY_KERAS=1"):
        HetEmbedding(VOCAB, DIM)(keras.Input(shape=(3,), dtype="int64"))


@pytest.mark.parametrize("kwargs,message", [
    (dict(input_dim=0), "input_dim must be a positive int"),
    (dict(output_dim=-1), "output_dim must be a positive int"),
    (dict(combiner="max"), "combiner must be None or one of"),
    (dict(optimizer="rmsprop"), "Adagrad, Adam, Ftrl; RMSprop is not supported"),
    (dict(optimizer=42), "optimizer must be a tf_keras optimizer"),
    (dict(cache_policy="fifo"), "unknown cache policy 'fifo'"),
    (dict(cache_capacity=-3), "cache_capacity must be"),
    (dict(cache_capacity=1.0), "an int row count, or 0 for no cache; got 1.0"),
    (dict(input_dim=None, cache_capacity=0.1), "is a fraction of input_dim, but input_dim is None"),
    (dict(staleness=-2), "staleness must be 'auto', an int >= 0"),
    (dict(staleness=10, read_staleness="soon"), "read_staleness must be an int >= 0"),
    (dict(staleness="soon"), "or None / math.inf / 'inf' for unbounded; got 'soon'"),
    (dict(max_rows=0), "max_rows must be a positive int"),
    (dict(embeddings_initializer="no_such_init"), "unknown embeddings_initializer"),
    (dict(input_dim=None, cache_capacity=10,
          embeddings_initializer=tf_keras.initializers.Orthogonal()), "cannot run row by row"),
])
def test_bad_settings_name_the_layer(kwargs, message):
    settings = dict(input_dim=VOCAB, output_dim=DIM, name="bad_layer") | kwargs
    with pytest.raises(ValueError, match="HetEmbedding 'bad_layer'") as info:
        HetEmbedding(**settings)
    assert message in str(info.value)


@pytest.mark.parametrize("staleness", ["auto", 100])
def test_the_auto_bound_keeps_a_short_run_synchronised(staleness):
    """Under "auto" the bounds in force are a tenth of the worker's steps so
    far: the first 10 steps push every update, as s=0 would; a fixed bound
    of 100 pushes nothing in 10 steps."""
    layer = HetEmbedding(VOCAB, DIM, cache_capacity=VOCAB, staleness=staleness)  # no evictions
    model = functional_model(layer)
    model.compile("adagrad", "binary_crossentropy")
    x, y = parity_data(320)
    model.fit(x, y, batch_size=32, epochs=1, verbose=0)
    stats = layer.cache.stats()
    assert stats["steps"] == 10
    # The last step's pushes go with the next exchange.
    layer(x[:1], training=True)
    pushed = layer.cache.stats()["updates_pushed"]
    if staleness == "auto":
        assert layer.cache.config.staleness_ramp == 10
        assert pushed == stats["unique_keys"]  # every update went out
    else:
        assert pushed == 0
    assert HetEmbedding.from_config(layer.get_config()).staleness == staleness


def test_bad_inputs_name_the_layer_and_change_nothing():
    layer = HetEmbedding(VOCAB, DIM, cache_capacity=40, name="guarded")
    layer(tf.constant([[1, 2]], tf.int64), training=True)
    before = layer.het_stats()
    with pytest.raises(tf.errors.InvalidArgumentError, match="'guarded': id 200 is outside"):
        layer(tf.constant([[1, 200]], tf.int64), training=True)
    with pytest.raises(tf.errors.InvalidArgumentError, match="'guarded': id -1 is outside"):
        layer(tf.constant([[-1]], tf.int64), training=True)
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match="HetEmbedding 'guarded': float32 ids must be whole numbers in"):
        layer(tf.constant([[1.0, 2.5]]), training=True)
    with pytest.raises(ValueError, match="HetEmbedding 'guarded': ids must be int32 or int64, "
                                         "got string"):
        layer(tf.constant([["a"]]))
    assert layer(tf.zeros([0, 2], tf.int64), training=True).shape == (0, 2, DIM)
    after = layer.het_stats()
    for counter in ("table_rows", "table_updates_applied", "cache_rows", "cache_unique_keys"):
        assert after[counter] == before[counter], counter


def test_metrics_callback_logs_and_writes_tensorboard(tmp_path, capsys):
    layer = HetEmbedding(VOCAB, DIM, cache_capacity=120, staleness=5, name="tracked")
    model = functional_model(layer)
    model.compile("adam", "binary_crossentropy")
    x, y = parity_data(256)
    history = model.fit(x, y, batch_size=32, epochs=2, verbose=0,
                        callbacks=[HetMetricsCallback(log_dir=str(tmp_path))])
    hit_rates = history.history["tracked/hit_rate"]
    assert len(hit_rates) == 2 and 0 < hit_rates[0] < hit_rates[1] <= 1
    per_sample = history.history["tracked/rows_pulled_per_sample"]
    assert 0 < per_sample[1] < per_sample[0] <= FIELDS
    assert history.history["tracked/bytes_per_sample"][0] > 0
    assert "tracked: hit_rate" in capsys.readouterr().out
    events = list(tmp_path.glob("events.out.tfevents.*"))
    assert events
    tags = {v.tag for e in tf.compat.v1.train.summary_iterator(str(events[0]))
            for v in e.summary.value}
    assert "tracked/hit_rate" in tags and "tracked/bytes_per_sample" in tags


def test_metrics_callback_gives_no_hit_rate_for_a_layer_without_a_cache():
    layer = HetEmbedding(VOCAB, DIM, cache_capacity=0, name="direct")
    model = functional_model(layer)
    model.compile("adam", "binary_crossentropy")
    x, y = parity_data(64)
    history = model.fit(x, y, batch_size=32, epochs=1, verbose=0,
                        callbacks=[HetMetricsCallback(verbose=0)])
    assert "direct/hit_rate" not in history.history
    assert "direct/evictions" not in history.history
    assert history.history["direct/rows_pulled_per_sample"][0] > 0


def test_metrics_callback_logs_the_tables_evictions_expiries_and_ids_not_admitted():
    """The shards' own counters, per epoch, apart from the cache's
    `evictions`: each id is refused once (admit_after=2) in the first epoch
    and made a row in the second, where the 40-row limit evicts."""
    layer = HetEmbedding(None, DIM, cache_capacity=0, max_rows=40, on_full="evict",
                         admit_after=2, ttl=3600, name="stream")
    model = functional_model(layer)
    model.compile("adam", "binary_crossentropy")
    x = np.arange(300, dtype=np.int64).reshape(100, FIELDS)
    history = model.fit(x, (x[:, 0] % 2).astype(np.float32), batch_size=5, epochs=2,
                        verbose=0, callbacks=[HetMetricsCallback(verbose=0)]).history
    stats = layer.het_stats()
    assert history["stream/ids_not_admitted"] == [300, 0] == [stats["table_ids_not_admitted"], 0]
    assert history["stream/rows_evicted"] == [0, 300 - 40] == [0, stats["table_rows_evicted"]]
    assert history["stream/rows_expired"] == [0, 0]
    assert "stream/evictions" not in history  # the cache's: there is none


def test_tensorboard_histograms_summary_and_count_params_see_the_table(tmp_path):
    """Keras' walkers of model.weights see the table as Embedding's matrix:
    a weight with a name, shape and dtype that reads whole as a tensor."""
    layer = HetEmbedding(VOCAB, DIM, cache_capacity=120, staleness=5, name="walked")
    model = functional_model(layer)
    model.compile("adam", "binary_crossentropy")
    x, y = parity_data(64)
    board = tf_keras.callbacks.TensorBoard(log_dir=str(tmp_path), histogram_freq=1)
    model.fit(x, y, batch_size=32, epochs=1, verbose=0, callbacks=[board])
    (events,) = (tmp_path / "train").glob("events.out.tfevents.*")
    histograms = {v.tag: tf.make_ndarray(v.tensor)
                  for e in tf.compat.v1.train.summary_iterator(str(events))
                  for v in e.summary.value if v.tag.endswith("/histogram")}
    assert histograms["walked/embeddings_0/histogram"][:, 2].sum() == VOCAB * DIM
    (matrix,) = [w for w in layer.weights if w.name == "walked/embeddings:0"]
    assert matrix.shape == (VOCAB, DIM) and matrix.dtype == tf.float32
    np.testing.assert_array_equal(tf.convert_to_tensor(matrix).numpy(), layer.get_weights()[0])
    # The matrix, the anchor and two counters; the Dense kernel and bias.
    assert layer.count_params() == VOCAB * DIM + 3
    assert model.count_params() == VOCAB * DIM + 3 + FIELDS * DIM + 1


def test_layers_of_the_same_name_do_not_share_rows():
    ids = tf.constant([[1, 2]], tf.int64)
    a = HetEmbedding(VOCAB, DIM, name="twin", optimizer="sgd")
    b = HetEmbedding(VOCAB, DIM, name="twin", optimizer="sgd")
    first = a(ids, training=True)
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(a(ids, training=True))
    grads = tape.gradient(loss, a.trainable_variables)
    tf_keras.optimizers.SGD().apply_gradients(zip(grads, a.trainable_variables))
    np.testing.assert_array_equal(b(ids).numpy(), first.numpy())  # same seed, untouched rows
    assert not np.array_equal(a(ids).numpy(), first.numpy())


@pytest.mark.parametrize("cache_capacity", [0, 100])
def test_every_step_updates_the_table_with_steps_per_execution(cache_capacity):
    """With steps_per_execution > 1, Keras runs the steps in a loop, where
    Grappler once pruned the update of a constant-zero anchor gradient."""
    layer = HetEmbedding(VOCAB, DIM, cache_capacity=cache_capacity, read_staleness=1,
                         write_staleness=0, optimizer=tf_keras.optimizers.SGD(0.1))
    assert (layer._choice.cache_config is None) == (cache_capacity == 0)
    model = functional_model(layer)
    model.compile(tf_keras.optimizers.SGD(0.1), "binary_crossentropy", steps_per_execution=4)
    x, y = parity_data(n=640)
    model.fit(x, y, batch_size=32, epochs=1, verbose=0, shuffle=False)
    layer.flush()
    assert int(layer._updates.numpy()) == 20
    _, _, _, clocks, _ = (t.numpy() for t in layer.table.export_all())
    # Every step's unique ids each got one update.
    expected = sum(len(np.unique(x[i:i + 32])) for i in range(0, 640, 32))
    assert int(clocks.sum()) == expected


def test_row_limit_stops_growth_with_a_clear_error_and_no_partial_update():
    layer = HetEmbedding(None, DIM, cache_capacity=0, max_rows=40, name="capped",
                         optimizer=tf_keras.optimizers.SGD(0.1))
    model = functional_model(layer)
    model.compile(tf_keras.optimizers.SGD(0.1), "binary_crossentropy")
    held = np.arange(30, dtype=np.int64).reshape(10, 3)
    model.fit(held, np.ones(10), batch_size=10, verbose=0)
    before = [t.numpy() for t in layer.table.export_all()]
    assert len(before[0]) == 30
    fresh = np.arange(30, 60, dtype=np.int64).reshape(10, 3)  # 30 new rows: past 40
    with pytest.raises(tf.errors.ResourceExhaustedError, match="table 'capped'.*limit is 40"):
        model.fit(fresh, np.ones(10), batch_size=10, verbose=0)
    after = [t.numpy() for t in layer.table.export_all()]
    for a, b in zip(before, after):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(ValueError, match="max_rows must be a positive int"):
        HetEmbedding(None, DIM, cache_capacity=0, max_rows=0)
    assert HetEmbedding.from_config(layer.get_config()).max_rows == 40
