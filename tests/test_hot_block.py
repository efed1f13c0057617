"""FAE's hot block in one process (hybrid mode's two ranks are in
test_hybrid.py): hot rows train with the shards' optimizer code, to the bit;
a batch all hot never meets the cache or the shards; flushes, checkpoints,
set_weights and exports see one table; bad settings are refused naming the
layer."""
import numpy as np
import pytest
import tensorflow as tf
import tf_keras

import het_tf
from het_tf.keras_layers import HetEmbedding

VOCAB, DIM, FIELDS, BATCH = 200, 4, 3, 16
OPTIMIZERS = {"sgd": lambda: tf_keras.optimizers.SGD(0.5),
              "adagrad": lambda: tf_keras.optimizers.Adagrad(0.3),
              "adam": lambda: tf_keras.optimizers.Adam(0.05),
              "ftrl": lambda: tf_keras.optimizers.Ftrl(0.3)}


def build(name, optimizer="adagrad", **kwargs):
    layer = HetEmbedding(VOCAB, DIM, optimizer=OPTIMIZERS[optimizer](), name=name, seed=7,
                         **kwargs)
    inputs = tf_keras.Input(shape=(FIELDS,), dtype="int64")
    out = tf_keras.layers.Dense(1, activation="sigmoid", kernel_initializer="ones")(
        tf_keras.layers.Flatten()(layer(inputs)))
    model = tf_keras.Model(inputs, out)
    model.compile(tf_keras.optimizers.SGD(0.1), "binary_crossentropy")
    return model, layer


def data(n=320, seed=0, high=VOCAB):
    rng = np.random.default_rng(seed)
    x = rng.integers(0, high, size=(n, FIELDS)).astype(np.int64)
    return x, (x[:, 0] % 2).astype(np.float32)


def dataset_of(x, y):
    return tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH)


def table_rows(layer):
    keys, values, slots, clocks, steps = (t.numpy() for t in layer.table.export_all())
    order = np.argsort(keys)
    return [a[order] for a in (keys, values, slots, clocks, steps)]


def make_hot(model, layer, keys):
    het_tf.use_hot_rows(model, {layer.name: het_tf.pipeline.hot_rows.HotRows(
        layer.name, np.asarray(keys, np.int64), np.ones(len(keys), np.int64), 0, 0, 1)})


@pytest.mark.parametrize("optimizer", sorted(OPTIMIZERS))
def test_hot_rows_train_as_the_shards_train_them(optimizer):
    """Every id hot: the model trains to the bit as one with no cache, whose
    every update the shard applies, for every optimizer's state."""
    x, y = data()
    hot_model, hot_layer = build(f"hot_{optimizer}", optimizer, hot_rows=VOCAB)
    direct_model, direct_layer = build(f"direct_{optimizer}", optimizer, cache_capacity=0)
    make_hot(hot_model, hot_layer, np.arange(VOCAB))
    for model in (hot_model, direct_model):
        model.fit(dataset_of(x, y), epochs=2, verbose=0)
    stats = hot_layer.het_stats()
    # No batch met the cache or the shards while training.
    assert stats["cache_steps"] == 0 and stats["table_updates_applied"] == 0
    assert stats["hot_rows"] == VOCAB and stats["hot_bytes_exchanged"] == 0  # one rank
    np.testing.assert_array_equal(hot_model.predict(x, verbose=0),
                                  direct_model.predict(x, verbose=0))
    hot_layer.flush()
    # The hot block made every hot row when it took them; the others, once
    # touched.
    hot_rows, direct_rows = table_rows(hot_layer), table_rows(direct_layer)
    touched = np.isin(hot_rows[0], direct_rows[0])
    assert hot_rows[3][~touched].sum() == 0
    for a, b in zip(hot_rows, direct_rows):
        np.testing.assert_array_equal(a[touched], b)


def test_cold_batches_meet_the_cache_and_hot_batches_do_not():
    hot_ids = np.arange(20)
    x, y = data()
    x[: len(x) // 2] %= 20  # the first half of the batches all hot
    model, layer = build("mixed", hot_rows=20, cache_capacity=100)
    make_hot(model, layer, hot_ids)
    model.fit(dataset_of(x, y), epochs=1, verbose=0, shuffle=False)
    batches = [x[i:i + BATCH] for i in range(0, len(x), BATCH)]
    cold_batches = sum(not np.isin(b, hot_ids).all() for b in batches)
    stats = layer.het_stats()
    assert 0 < cold_batches < len(batches) and stats["cache_steps"] == cold_batches
    # The cache saw only the cold ids.
    cold_ids = sum(len(np.setdiff1d(np.unique(b), hot_ids)) for b in batches)
    assert stats["cache_unique_keys"] == cold_ids
    clocks_before_flush = layer.table.read_rows(tf.constant(hot_ids))[2].numpy()
    assert clocks_before_flush.sum() == 0  # the shards' copies: untouched
    layer.flush()
    keys, values, slots, clocks, steps = layer.hot_block.state()
    on_shards = [t.numpy() for t in layer.table.read_rows(tf.constant(keys))]
    for a, b in zip((values, slots, clocks, steps), on_shards):
        np.testing.assert_array_equal(a, b)
    # A hot row's clock: the batches that updated it.
    assert clocks.sum() == sum(len(np.intersect1d(b, hot_ids)) for b in batches)


def test_the_pipeline_forms_hot_and_cold_batches_as_they_fill():
    hot_ids = np.arange(20)
    x, y = data(n=400, seed=2)
    rng = np.random.default_rng(3)
    x[rng.random(len(x)) < 0.4] %= 20  # about 40% of the samples all hot
    model, layer = build("batches", hot_rows=20, cache_capacity=100)
    make_hot(model, layer, hot_ids)
    batches = list(het_tf.hot_and_cold_batches(dataset_of(x, y), model, BATCH))
    is_hot = np.isin(x, hot_ids).all(axis=1)
    kinds = []
    for features, _ in batches:
        verdict = np.isin(features.numpy(), hot_ids).all(axis=1)
        assert verdict.all() or not verdict.any()
        kinds.append(bool(verdict[0]))
    # Every sample once, each kind in the data's order.
    for kind in (True, False):
        got = np.concatenate([f.numpy() for (f, _), k in zip(batches, kinds) if k == kind])
        np.testing.assert_array_equal(got, x[is_hot == kind])
    # A batch goes out when it fills: in the order of the samples that
    # filled them.
    positions = {kind: np.nonzero(is_hot == kind)[0] for kind in (True, False)}
    taken = {True: 0, False: 0}
    ends = []
    for (_, labels), kind in zip(batches, kinds):
        taken[kind] += len(labels)
        if len(labels) == BATCH:
            ends.append(positions[kind][taken[kind] - 1])
    assert ends == sorted(ends) and len(ends) >= len(batches) - 2
    model.fit(het_tf.hot_and_cold_batches(dataset_of(x, y), model, BATCH), epochs=1, verbose=0)
    assert layer.het_stats()["cache_steps"] == kinds.count(False)
    with pytest.raises(ValueError, match="no HetEmbedding layer with hot rows"):
        het_tf.hot_and_cold_batches(dataset_of(x, y), build("none")[0], BATCH)


def test_a_new_hot_set_writes_the_old_one_back_first():
    """The hot set recomputed between epochs: rows that leave it keep what
    they learned (on the shards), rows that join it start from the shards'."""
    x, y = data()
    model, layer = build("drift", optimizer="adagrad", hot_rows=20)
    make_hot(model, layer, np.arange(20))
    model.fit(dataset_of(x, y), epochs=1, verbose=0)
    before = layer.hot_block.state()
    make_hot(model, layer, np.arange(10, 30))
    np.testing.assert_array_equal(layer.hot_keys, np.arange(10, 30))
    left = [t.numpy() for t in layer.table.read_rows(tf.constant(np.arange(10)))]
    for a, b in zip(left, before[1:]):  # values, slots, clocks, steps of ids 0..9
        np.testing.assert_array_equal(a, b[:10])
    after = layer.hot_block.state()
    for a, b in zip(after[1:], before[1:]):  # ids 10..19 stayed hot, unchanged
        np.testing.assert_array_equal(a[:10], b[10:])
    joined = [t.numpy() for t in layer.table.read_rows(tf.constant(np.arange(20, 30)))]
    for a, b in zip(after[1:], joined):
        np.testing.assert_array_equal(a[10:], b)
    model.fit(dataset_of(x, y), epochs=1, verbose=0)  # and trains on
    assert layer.hot_block.state()[3].sum() > after[3].sum()


def test_checkpoints_set_weights_and_exports_see_one_table(tmp_path):
    x, y = data()
    model, layer = build("saved", optimizer="adam", hot_rows=30)
    make_hot(model, layer, np.arange(30))
    model.fit(dataset_of(x, y), epochs=1, verbose=0)
    layer.flush()  # the last steps' pushes wait in the cache until then
    expected = model.predict(x, verbose=0)
    path = tf.train.Checkpoint(model=model).save(str(tmp_path / "ckpt"))
    block = layer.hot_block.state()

    # Restored into a model with the same hot rows: its block is the saved one.
    again, again_layer = build("saved", optimizer="adam", hot_rows=30)
    make_hot(again, again_layer, np.arange(30))
    tf.train.Checkpoint(model=again).restore(path).expect_partial()
    for a, b in zip(block, again_layer.hot_block.state()):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(again.predict(x, verbose=0), expected, rtol=0, atol=0)
    # ... and into one with no hot rows: the same table.
    plain, plain_layer = build("saved", optimizer="adam")
    tf.train.Checkpoint(model=plain).restore(path).expect_partial()
    np.testing.assert_array_equal(plain_layer.get_weights()[0], layer.get_weights()[0])

    # set_weights writes the hot rows too.
    matrix = np.full((VOCAB, DIM), 0.25, np.float32)
    again_layer.set_weights([matrix])
    np.testing.assert_array_equal(again_layer.hot_block.state()[1], matrix[:30])

    het_tf.export_saved_model(model, str(tmp_path / "export"))
    served = tf.saved_model.load(str(tmp_path / "export")).signatures["serving_default"]
    out = list(served(**{model.input_names[0]: tf.constant(x)}).values())[0].numpy()
    np.testing.assert_allclose(out, expected, rtol=1e-6)


@pytest.mark.parametrize("kwargs, message", [
    (dict(hot_rows=VOCAB + 1), "hot_rows=201 is more rows than the table's 200"),
    (dict(hot_rows=5, cache_capacity=0), "hot_rows with the cache off"),
    (dict(hot_rows=5, staleness=0), "hot_rows with the cache off"),
    (dict(hot_rows=-1), "hot_rows must be an int >= 0"),
    (dict(hot_rows=2.5), "hot_rows must be an int >= 0"),
])
def test_bad_hot_settings_are_refused_naming_the_layer(kwargs, message):
    with pytest.raises(ValueError, match=f"HetEmbedding 'bad': {message}"):
        HetEmbedding(VOCAB, DIM, name="bad", **kwargs)


def test_bad_hot_sets_are_refused_naming_the_layer():
    model, layer = build("budget", hot_rows=10)
    with pytest.raises(ValueError, match="HetEmbedding 'budget': 11 hot rows given, more than "
                                         "its hot_rows=10"):
        make_hot(model, layer, np.arange(11))
    with pytest.raises(ValueError, match=r"HetEmbedding 'budget': hot ids must lie in \[0, 200\)"):
        make_hot(model, layer, [3, 200])
    plain_model, plain = build("plain")
    with pytest.raises(ValueError, match="HetEmbedding 'plain' has no hot rows: give it hot_rows"):
        make_hot(plain_model, plain, [1])
    with pytest.raises(ValueError, match=r"names \['other'\], which are not HetEmbedding"):
        het_tf.use_hot_rows(model, {"other": het_tf.pipeline.hot_rows.HotRows(
            "other", np.arange(2), np.ones(2, np.int64), 0, 0, 1)})
    with pytest.raises(ValueError, match="takes the HotProfile"):
        het_tf.use_hot_rows(model, [1, 2])
    assert layer.hot_keys.size == 0  # nothing was installed
