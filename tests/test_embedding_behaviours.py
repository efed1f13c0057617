"""tf_keras.layers.Embedding's behaviours, walked with HetEmbedding in its
place: each is checked against Keras' own layer on the same rows (both made
from one weights=[matrix]), with the cache off and on. The differences that
remain are listed in docs/keras_layer.md."""
import dataclasses

import numpy as np
import pytest
import tensorflow as tf
import tf_keras
from tf_keras.src.testing_infra import test_utils

from het_tf.keras_layers import HetEmbedding, route_choice
from tests.keras_steps import apply_gradients

VOCAB, DIM = 30, 4
MATRIX = np.random.default_rng(0).normal(size=(VOCAB, DIM)).astype(np.float32)
# The cache off, and a cache whose rows are flushed before they are read back.
CACHES = {"off": dict(cache_capacity=0), "on": dict(cache_capacity=0.5, staleness=3)}


def het(name, cache="off", **kwargs):
    return HetEmbedding(VOCAB, DIM, weights=[MATRIX], optimizer=tf_keras.optimizers.SGD(0.1),
                        name=name, **CACHES[cache], **kwargs)


def keras(**kwargs):
    return tf_keras.layers.Embedding(VOCAB, DIM, weights=[MATRIX], **kwargs)


def three_ids_model(embedding):
    """Rows of 3 ids each into one output, compiled with SGD."""
    inputs = tf_keras.Input((3,), dtype=tf.int64)
    out = tf_keras.layers.Flatten()(embedding(inputs))
    m = tf_keras.Model(inputs, tf_keras.layers.Dense(1, kernel_initializer="ones")(out))
    m.compile(tf_keras.optimizers.SGD(0.1), "mse")
    return m


def table_rows(layer):
    layer.flush()
    return layer.table.gather(tf.range(VOCAB, dtype=tf.int64)).numpy()


@pytest.mark.parametrize("cache", sorted(CACHES))
@pytest.mark.parametrize("kwargs, input_shape", [
    (dict(input_length=2), (3, 2)),
    (dict(mask_zero=True), (3, 2)),
    (dict(mask_zero=True), (3, 4, 2)),
    (dict(mask_zero=True, input_length=(None, 2)), (3, 4, 2)),
])
def test_keras_own_layer_test_passes(kwargs, input_shape, cache):
    """tf_keras' own layer harness, with the cases its Embedding test gives
    it: config round trip, get/set_weights before build, functional and
    Sequential models, predict, train_on_batch, and the output's shape and
    dtype from int32 ids."""
    test_utils.layer_test(HetEmbedding, kwargs=dict(output_dim=4, input_dim=10, **kwargs,
                                                    **CACHES[cache]),
                          input_shape=input_shape, input_dtype="int32",
                          expected_output_dtype="float32",
                          custom_objects={"HetEmbedding": HetEmbedding})


def test_dimensions_below_one_are_refused_by_both():
    for dims in ((0, DIM), (VOCAB, 0)):
        with pytest.raises(ValueError):
            tf_keras.layers.Embedding(*dims)
        with pytest.raises(ValueError, match="HetEmbedding 'zero'"):
            HetEmbedding(*dims, name="zero")


@pytest.mark.parametrize("cache", sorted(CACHES))
def test_a_sequential_model_without_an_input_layer_trains_as_keras_does(cache):
    """Like Keras' Embedding, the layer gives a Sequential model its input
    (float32, as Keras makes it: the layer takes whole float ids where its
    vocabulary is exact in float32)."""
    ids = np.array([[1, 2, 0], [4, 1, 6]], np.int64)
    labels = np.array([[1.0], [0.0]], np.float32)

    def model(embedding):
        m = tf_keras.Sequential([embedding, tf_keras.layers.Flatten(),
                                 tf_keras.layers.Dense(1, kernel_initializer="ones")])
        m.compile(tf_keras.optimizers.SGD(0.1), "mse")
        return m

    ours = model(het(f"sequential_{cache}", cache, input_length=3))
    theirs = model(keras(input_length=3))
    assert ours.built and ours.output_shape == theirs.output_shape == (None, 1)
    assert ours.inputs[0].dtype == theirs.inputs[0].dtype == tf.float32
    for _ in range(3):
        assert ours.train_on_batch(ids, labels) == pytest.approx(
            theirs.train_on_batch(ids, labels), rel=1e-5)
    np.testing.assert_allclose(ours.predict(ids, verbose=0), theirs.predict(ids, verbose=0),
                               rtol=1e-5)
    clone = tf_keras.Sequential.from_config(ours.get_config(),
                                            custom_objects={"HetEmbedding": HetEmbedding})
    assert clone.inputs[0].shape.as_list() == [None, 3]


def test_float_ids_must_be_whole_and_exact():
    layer = het("floats")
    np.testing.assert_array_equal(layer(tf.constant([[3.0, 29.0]])).numpy(),
                                  MATRIX[[[3, 29]]])
    for bad in (3.5, 30.0, -1.0, 1e19, float("nan")):
        with pytest.raises(tf.errors.InvalidArgumentError,
                           match=r"HetEmbedding 'floats': float32 ids must be whole numbers in "
                                 r"\[0, 30\)"):
            layer(tf.constant([[bad]]))
    for name, input_dim in (("huge", (1 << 24) + 1), ("keys", None)):
        with pytest.raises(ValueError, match=f"HetEmbedding '{name}': got float32 ids, which "
                                             "cannot hold every id .* dtype='int64'"):
            HetEmbedding(input_dim, DIM, cache_capacity=0, name=name)(tf.constant([[3.0]]))
    # bfloat16 holds whole numbers up to 2^8 exactly: this vocabulary of 30
    np.testing.assert_array_equal(layer(tf.constant([[3.0]], tf.bfloat16)).numpy(), MATRIX[[[3]]])
    with pytest.raises(ValueError, match="got bfloat16 ids, which cannot hold every id of 300 "):
        HetEmbedding(300, DIM, cache_capacity=0, name="narrow")(tf.constant([[3.0]], tf.bfloat16))
    # float64 holds ids up to 2^53 exactly
    big = HetEmbedding((1 << 24) + 8, DIM, cache_capacity=0, name="wide")
    assert big(tf.constant([[float((1 << 24) + 3)]], tf.float64)).shape == (1, 1, DIM)


def test_weights_at_construction_are_the_table():
    layer = het("weighted")
    ids = tf.constant([[0, 5], [29, 5]], tf.int64)
    np.testing.assert_array_equal(layer(ids).numpy(), keras()(ids).numpy())
    # Keras' lookup by one-hot matmul gives the same rows
    one_hot = het("one_hot", use_one_hot_matmul=True)
    np.testing.assert_allclose(one_hot(ids).numpy(), keras(use_one_hot_matmul=True)(ids).numpy())
    with pytest.raises(ValueError, match="HetEmbedding 'bad': weights\\[0\\] has shape"):
        HetEmbedding(VOCAB, DIM, weights=[MATRIX[:3]], name="bad")


@pytest.mark.parametrize("cache", sorted(CACHES))
def test_mask_zero_masks_padding_and_padding_gets_no_update(cache):
    layer, reference = het(f"masked_{cache}", cache, mask_zero=True), keras(mask_zero=True)
    assert layer.supports_masking and reference.supports_masking
    ids = tf.constant([[3, 7, 0, 0], [9, 0, 0, 0]], tf.int64)
    np.testing.assert_array_equal(layer.compute_mask(ids).numpy(),
                                  reference.compute_mask(ids).numpy())
    assert layer(ids)._keras_mask is not None

    def sequence_model(embedding):
        inputs = tf_keras.Input((4,), dtype=tf.int64)
        pooled = tf_keras.layers.GlobalAveragePooling1D()(embedding(inputs))
        dense = tf_keras.layers.Dense(1, kernel_initializer="ones", bias_initializer="zeros")
        model = tf_keras.Model(inputs, dense(pooled))
        model.compile(tf_keras.optimizers.SGD(0.1), "mse")
        return model

    labels = np.array([[1.0], [0.0]], np.float32)
    ours, theirs = sequence_model(layer), sequence_model(reference)
    for _ in range(3):
        loss = ours.train_on_batch(ids, labels)
        assert loss == pytest.approx(theirs.train_on_batch(ids, labels), rel=1e-5)
    rows = table_rows(layer)
    np.testing.assert_allclose(rows, reference.embeddings.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(rows[0], MATRIX[0])  # padding: untouched
    # Not even a zero update: the padding row's clock never moved.
    keys, _, _, clocks, _ = (t.numpy() for t in layer.table.export_all())
    assert clocks[keys == 0].tolist() == [0] and clocks[keys == 3].tolist() == [3]


@pytest.mark.parametrize("cache", sorted(CACHES))
def test_a_frozen_layer_keeps_its_rows_while_the_rest_trains_as_keras(cache):
    """trainable=False: fit leaves the rows as Keras' frozen Embedding does,
    and the layers after it train the same."""
    rng = np.random.default_rng(1)
    ids, y = rng.integers(0, VOCAB, (16, 3)), rng.normal(size=(16, 1)).astype(np.float32)

    def fit(layer):
        layer.trainable = False
        dense = tf_keras.layers.Dense(1, kernel_initializer="ones")
        model = tf_keras.Sequential([tf_keras.Input((3,), dtype="int64"), layer,
                                     tf_keras.layers.Flatten(), dense])
        model.compile(tf_keras.optimizers.SGD(0.1), "mse")
        model.fit(ids, y, batch_size=4, epochs=1, verbose=0, shuffle=False)
        return dense.get_weights()

    theirs = fit(keras())
    layer = het("frozen", cache)
    ours = fit(layer)
    np.testing.assert_array_equal(table_rows(layer), MATRIX)
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_mask_zero_refuses_a_combiner_and_sparse_output():
    with pytest.raises(ValueError, match="HetEmbedding 'both': mask_zero masks a sequence"):
        HetEmbedding(VOCAB, DIM, mask_zero=True, combiner="mean", name="both")
    with pytest.raises(ValueError, match="mask_zero cannot be enabled with sparse=True"):
        HetEmbedding(VOCAB, DIM, mask_zero=True, sparse=True, name="sparse_mask")


def test_input_length_fills_the_output_shape_as_keras_does():
    for length in (5, None):
        ours, theirs = het(f"length_{length}", input_length=length), keras(input_length=length)
        assert ours.compute_output_shape((None, None)) == tuple(
            theirs.compute_output_shape((None, None)))
    with pytest.raises(ValueError, match="input_length is 5"):
        het("mismatch", input_length=5).compute_output_shape((None, 6))
    config = het("configured", input_length=5).get_config()
    assert HetEmbedding.from_config(config).input_length == 5


@pytest.mark.parametrize("cache", sorted(CACHES))
def test_embeddings_regularizer_penalizes_the_batchs_rows(cache):
    """The same penalty as on the rows a tf_keras Embedding looks up in the
    batch, and its gradient reaches the table through the same update."""
    ids = np.array([[1, 2, 2], [4, 1, 6]], np.int64)
    labels = np.array([[1.0], [0.0]], np.float32)
    l2 = tf_keras.regularizers.L2(0.05)
    layer = het(f"regularized_{cache}", cache, embeddings_regularizer=l2)
    reference = keras()

    def model(embedding, penalty):
        inputs = tf_keras.Input((3,), dtype=tf.int64)
        out = tf_keras.layers.Flatten()(embedding(inputs))
        m = tf_keras.Model(inputs, tf_keras.layers.Dense(1, kernel_initializer="ones")(out))
        if penalty:
            m.add_loss(lambda: l2(tf.gather(reference.embeddings, np.unique(ids))))
        m.compile(tf_keras.optimizers.SGD(0.1), "mse")
        return m

    ours, theirs = model(layer, False), model(reference, True)
    for _ in range(3):
        assert ours.train_on_batch(ids, labels) == pytest.approx(
            theirs.train_on_batch(ids, labels), rel=1e-5)
    np.testing.assert_allclose(table_rows(layer), reference.embeddings.numpy(), rtol=1e-5,
                               atol=1e-6)
    config = layer.get_config()
    assert HetEmbedding.from_config(config).embeddings_regularizer.get_config()["l2"] == \
        pytest.approx(0.05)


def test_activity_regularizer_adds_keras_penalty():
    ids = tf.constant([[1, 2], [3, 3]], tf.int64)
    ours = het("active", activity_regularizer="l2")
    theirs = keras(activity_regularizer="l2")
    ours(ids), theirs(ids)
    assert float(tf.add_n(ours.losses)) == pytest.approx(float(tf.add_n(theirs.losses)),
                                                         rel=1e-6)


ROW_CONSTRAINTS = {
    "non_neg": lambda: tf_keras.constraints.NonNeg(),
    "max_norm": lambda: tf_keras.constraints.MaxNorm(1.0, axis=1),
    "unit_norm": lambda: tf_keras.constraints.UnitNorm(axis=-1),
    "min_max_norm": lambda: tf_keras.constraints.MinMaxNorm(0.5, 1.5, rate=0.8, axis=1),
}


@pytest.mark.parametrize("cache", sorted(CACHES))
@pytest.mark.parametrize("kind", sorted(ROW_CONSTRAINTS))
def test_row_constraints_project_the_rows_an_update_changes(kind, cache):
    """The same losses as tf_keras.layers.Embedding with the same
    constraint, and the same rows for every id the batches train: Keras
    projects the whole matrix after each step, the shards (and caches)
    each row a step changes."""
    ids = np.array([[1, 2, 2], [4, 1, 6]], np.int64)
    labels = np.array([[1.0], [0.0]], np.float32)
    layer = het(f"constrained_{kind}_{cache}", cache, embeddings_constraint=ROW_CONSTRAINTS[kind]())
    reference = keras(embeddings_constraint=ROW_CONSTRAINTS[kind]())

    ours, theirs = three_ids_model(layer), three_ids_model(reference)
    for _ in range(4):
        assert ours.train_on_batch(ids, labels) == pytest.approx(
            theirs.train_on_batch(ids, labels), rel=1e-5)
    trained = np.unique(ids)
    rows = table_rows(layer)
    np.testing.assert_allclose(rows[trained], reference.embeddings.numpy()[trained], rtol=1e-5,
                               atol=1e-6)
    untouched = np.setdiff1d(np.arange(VOCAB), trained)
    np.testing.assert_array_equal(rows[untouched], MATRIX[untouched])
    if kind == "non_neg":
        assert (rows[trained] >= 0).all() and (MATRIX[trained] < 0).any()
    else:
        norms = np.linalg.norm(rows[trained], axis=1)
        assert {"max_norm": norms <= 1 + 1e-6, "unit_norm": abs(norms - 1) < 1e-5,
                "min_max_norm": norms <= 1.5 + 1e-6}[kind].all()
    clone = HetEmbedding.from_config(layer.get_config())
    assert clone.embeddings_constraint.get_config() == layer.embeddings_constraint.get_config()


def test_constraints_over_the_whole_matrix_are_refused_with_a_reason():
    with pytest.raises(ValueError, match=r"HetEmbedding 'column': MaxNorm\(axis=0\) takes its "
                                         "norms over the vocabulary axis"):
        HetEmbedding(VOCAB, DIM, embeddings_constraint=tf_keras.constraints.MaxNorm(2.0),
                     name="column")
    with pytest.raises(ValueError, match="HetEmbedding 'named': UnitNorm"):
        HetEmbedding(VOCAB, DIM, embeddings_constraint="unit_norm", name="named")
    with pytest.raises(ValueError, match="HetEmbedding 'unknown': unknown "
                                         "embeddings_constraint 'nope'"):
        HetEmbedding(VOCAB, DIM, embeddings_constraint="nope", name="unknown")
    for constraint in (tf_keras.constraints.RadialConstraint(), lambda w: w):
        with pytest.raises(ValueError, match="HetEmbedding 'other': embeddings_constraint .* is "
                                             "not supported"):
            HetEmbedding(VOCAB, DIM, embeddings_constraint=constraint, name="other")
    with pytest.raises(ValueError, match="HetEmbedding 'loose': a min_max_norm constraint "
                                         "needs 0 <= min_value <= max_value"):
        HetEmbedding(VOCAB, DIM, name="loose", embeddings_constraint=tf_keras.constraints
                     .MinMaxNorm(2.0, 1.0, axis=1))


@pytest.mark.parametrize("cache", sorted(CACHES))
def test_ragged_ids_without_a_combiner_give_ragged_vectors(cache):
    ids = tf.ragged.constant([[1, 2, 3], [], [4]], dtype=tf.int64)
    layer = het(f"ragged_{cache}", cache)
    out, expected = layer(ids), keras()(ids)
    assert isinstance(out, tf.RaggedTensor)
    np.testing.assert_array_equal(out.row_lengths().numpy(), [3, 0, 1])
    np.testing.assert_allclose(out.flat_values.numpy(), expected.flat_values.numpy())
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(layer(ids, training=True).flat_values)
    apply_gradients(tape, loss, layer)
    np.testing.assert_allclose(table_rows(layer)[[1, 2, 3, 4]], MATRIX[[1, 2, 3, 4]] - 0.1,
                               rtol=1e-6)


def test_sparse_ids_give_what_keras_gives():
    ids = tf.SparseTensor([[0, 0], [0, 2], [1, 1]], tf.constant([5, 6, 7], tf.int64), [2, 3])
    dense = het("sparse_in")(ids)  # missing ids read as id 0, as in Keras
    np.testing.assert_allclose(dense.numpy(), keras()(ids).numpy())
    out = het("sparse_out", sparse=True)(ids)
    expected = keras(sparse=True)(ids)
    assert isinstance(out, tf.SparseTensor)
    np.testing.assert_array_equal(out.indices.numpy(), expected.indices.numpy())
    np.testing.assert_allclose(out.values.numpy(), expected.values.numpy())
    np.testing.assert_array_equal(out.dense_shape.numpy(), expected.dense_shape.numpy())


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_mixed_precision_output_follows_the_compute_dtype(policy):
    ids = tf.constant([[1, 2]], tf.int64)
    ours = het(f"mixed_{policy}", dtype=policy)
    theirs = keras(dtype=policy)
    out = ours(ids)
    assert out.dtype == theirs(ids).dtype == tf.as_dtype(policy.split("_")[1])
    with tf.GradientTape() as tape:  # the table and its update stay float32
        loss = tf.reduce_sum(tf.cast(ours(ids, training=True), tf.float32))
    apply_gradients(tape, loss, ours)
    rows = table_rows(ours)
    assert rows.dtype == np.float32
    np.testing.assert_allclose(rows[[1, 2]], MATRIX[[1, 2]] - 0.1, rtol=1e-6)


@pytest.mark.parametrize("cache", sorted(CACHES))
def test_get_and_set_weights_are_the_table_for_layer_and_model(cache):
    layer = het(f"weights_{cache}", cache)
    inputs = tf_keras.Input((2,), dtype=tf.int64)
    model = tf_keras.Model(inputs, tf_keras.layers.Dense(1)(tf_keras.layers.Flatten()(
        layer(inputs))))
    model.compile(tf_keras.optimizers.SGD(0.1), "mse")
    ids, labels = np.array([[1, 2], [2, 3]], np.int64), np.array([[1.0], [0.0]], np.float32)
    model.train_on_batch(ids, labels)
    (matrix,) = layer.get_weights()  # pending cached updates included
    assert matrix.shape == (VOCAB, DIM) and not np.allclose(matrix[[1, 2, 3]], MATRIX[[1, 2, 3]])
    np.testing.assert_array_equal(matrix, table_rows(layer))

    saved, scores = model.get_weights(), model.predict_on_batch(ids)
    assert any(w.shape == (VOCAB, DIM) for w in saved)
    for _ in range(3):
        model.train_on_batch(ids, labels)
    model.set_weights(saved)  # the table too, and no cached copy survives it
    np.testing.assert_allclose(model.predict_on_batch(ids), scores, rtol=1e-6)
    for a, b in zip(model.get_weights(), saved):
        np.testing.assert_allclose(a, b, rtol=1e-6)

    layer.set_weights([MATRIX * 2])
    np.testing.assert_allclose(layer(tf.constant([[1, 29]], tf.int64))[0].numpy(),
                               MATRIX[[1, 29]] * 2)
    with pytest.raises(ValueError, match=f"HetEmbedding 'weights_{cache}': the table is "
                                         r"\[30, 4\], got a matrix of shape \(3, 4\)"):
        layer.set_weights([MATRIX[:3]])


def test_a_dynamic_table_has_no_matrix_to_get():
    layer = HetEmbedding(None, DIM, cache_capacity=8, name="dynamic")
    assert layer.get_weights() == []  # as Keras: no weights before the build
    with pytest.raises(ValueError, match="expecting 0 weights"):
        layer.set_weights([MATRIX])
    layer(tf.constant([[5]], tf.int64))
    with pytest.raises(ValueError, match="HetEmbedding 'dynamic': a dynamic table"):
        layer.get_weights()


def test_a_dynamic_table_with_the_defaults_trains_in_one_process(monkeypatch):
    layer = HetEmbedding(None, DIM, optimizer=tf_keras.optimizers.SGD(0.1), name="dynamic")
    ids = tf.constant([[2**40, 7], [7, -3]], tf.int64)
    before = layer(ids, training=True).numpy()
    assert layer.cache is None
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(layer(ids, training=True))
    grads = tape.gradient(loss, layer.trainable_weights)
    tf_keras.optimizers.SGD(0.1).apply_gradients(zip(grads, layer.trainable_weights))
    counts = {2**40: 1, 7: 2, -3: 1}  # every id's gradient is ones, once a time looked up
    expected = before - 0.1 * np.vectorize(counts.get)(ids.numpy())[..., None]
    np.testing.assert_allclose(layer(ids).numpy(), expected, atol=1e-6)
    # Where the cache would be on, "auto" has no vocabulary to take a tenth of.
    monkeypatch.setattr(route_choice, "mode_of", lambda devices: "hybrid")
    with pytest.raises(ValueError, match="HetEmbedding 'elsewhere': cache_capacity='auto' "
                                         "caches a tenth of input_dim, but input_dim is None"):
        HetEmbedding(None, DIM, name="elsewhere")(ids)
    # Both staleness bounds 0 keep no cache in any mode: nothing to size.
    synchronous = HetEmbedding(None, DIM, staleness=0, name="synchronous")
    assert synchronous(ids).shape == (2, 2, DIM) and synchronous.cache is None


@pytest.mark.parametrize("options", [
    dict(mask_zero=True, input_length=4, embeddings_regularizer=tf_keras.regularizers.L2(0.01),
         activity_regularizer=tf_keras.regularizers.L1(0.02)),
    dict(sparse=True, dtype="mixed_float16"),
])
def test_the_arguments_survive_get_config_and_from_config(options):
    layer = HetEmbedding(VOCAB, DIM, name="configured", **options)
    config = layer.get_config()
    clone = HetEmbedding.from_config(config)
    assert clone.get_config() == config
    for name in ("mask_zero", "input_length", "sparse", "compute_dtype"):
        assert getattr(clone, name) == getattr(layer, name)
    for name in ("embeddings_regularizer", "activity_regularizer"):
        ours, theirs = getattr(layer, name), getattr(clone, name)
        assert (ours is None) == (theirs is None)
        if ours is not None:
            assert type(ours) is type(theirs) and ours.get_config() == theirs.get_config()


def test_the_defaults_in_one_process_train_as_keras_with_no_cache():
    """cache_capacity="auto" (the default) keeps no cache where the table is
    in the same process, and fit's rows and losses are Keras' own."""
    rng = np.random.default_rng(1)
    ids = rng.integers(0, VOCAB, size=(64, 3)).astype(np.int64)
    labels = rng.random((64, 1)).astype(np.float32)
    layer = HetEmbedding(VOCAB, DIM, weights=[MATRIX], optimizer=tf_keras.optimizers.SGD(0.1),
                         name="defaults")
    reference = keras()

    ours, theirs = three_ids_model(layer), three_ids_model(reference)
    fits = [m.fit(ids, labels, batch_size=16, epochs=2, shuffle=False, verbose=0)
            for m in (ours, theirs)]
    assert layer.cache is None
    np.testing.assert_allclose(fits[0].history["loss"], fits[1].history["loss"], rtol=1e-5)
    np.testing.assert_allclose(table_rows(layer), reference.embeddings.numpy(), rtol=1e-5,
                               atol=1e-6)
    # Every read after fit, as a user makes it.
    assert ours.evaluate(ids, labels, verbose=0) == pytest.approx(
        theirs.evaluate(ids, labels, verbose=0), rel=1e-5)
    np.testing.assert_allclose(ours.predict(ids, verbose=0), theirs.predict(ids, verbose=0),
                               rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(layer(ids).numpy(), reference(ids).numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kwargs", [dict(cache_capacity=0.1), dict(sync="check"),
                                    dict(staleness=10), dict(hot_rows=3)],
                         ids=["explicit", "check", "bounded", "hot_rows"])
def test_a_setting_that_asks_for_the_cache_keeps_it_in_one_process(kwargs):
    layer = HetEmbedding(VOCAB, DIM, name=f"asks_{'_'.join(kwargs)}", **kwargs)
    layer(tf.constant([[1, 2]], tf.int64))
    assert layer.cache is not None and layer.cache.config.capacity >= 3


def test_auto_caches_a_tenth_where_the_shards_are_other_tasks():
    choice = route_choice.choose(
        "HetEmbedding 'auto'", 1000, cache_capacity="auto", cache_policy="lfu",
        staleness="auto", read_staleness=None, write_staleness=None, pin_threshold=100,
        sync="refresh", scheduler=None, window=1, hot_rows=None, route=None)
    assert choice.cache_config.capacity == 100
    for mode, saves in (("local", True), ("ps", False), ("hybrid", False)):
        combination = dataclasses.replace(choice.combination, mode=mode)
        assert route_choice._cache_saves_nothing(choice, combination) is saves
    with pytest.raises(ValueError, match="HetEmbedding 'dynamic': cache_capacity=0.1 is a "
                                         "fraction of input_dim, but input_dim is None"):
        HetEmbedding(None, DIM, cache_capacity=0.1, name="dynamic")
    with pytest.raises(ValueError, match="HetEmbedding 'dynamic': cache_capacity='auto' caches "
                                         "a tenth of input_dim, but input_dim is None"):
        HetEmbedding(None, DIM, staleness=5, name="dynamic")
    # A setting refused with the cache on or off is named for itself.
    with pytest.raises(ValueError) as refused:
        HetEmbedding(None, DIM, window=4, name="dynamic")
    assert "window" in str(refused.value) and "'auto'" not in str(refused.value)
