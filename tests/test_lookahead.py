"""het_tf.lookahead in one process: the steps find their misses prefetched,
training is the same as without it, the data comes out unchanged, and
what it cannot follow is refused by name. (Clusters: test_cluster.py and
test_train_command.py.)"""
import numpy as np
import pytest
import tensorflow as tf
import tf_keras

import het_tf
from het_tf.keras_layers import HetEmbedding

VOCAB, DIM, FIELDS, BATCH = 400, 4, 3, 32


def data(n=640, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.integers(0, VOCAB, size=(n, FIELDS)).astype(np.int64)
    return x, (x[:, 0] % 2).astype(np.float32)


def model_with(layer):
    inp = tf_keras.Input(shape=(FIELDS,), dtype="int64")
    out = tf_keras.layers.Dense(1, activation="sigmoid", kernel_initializer="ones")(
        tf_keras.layers.Flatten()(layer(inp)))
    return tf_keras.Model(inp, out)


def train(lookahead, steps_per_execution, batches=1):
    tf_keras.utils.set_random_seed(0)
    layer = HetEmbedding(VOCAB, DIM, optimizer=tf_keras.optimizers.SGD(0.5), cache_capacity=250,
                         staleness=10, name="emb")
    model = model_with(layer)
    model.compile(tf_keras.optimizers.SGD(0.1), "binary_crossentropy",
                  steps_per_execution=steps_per_execution)
    x, y = data()
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH)
    if lookahead:
        dataset = het_tf.lookahead(dataset, model, batches)
    losses = model.fit(dataset, epochs=2, verbose=0).history["loss"]
    layer.flush()
    keys, values, _, clocks, _ = (t.numpy() for t in layer.table.export_all())
    order = np.argsort(keys)
    return dict(losses=losses, stats=layer.het_stats(), keys=keys[order], values=values[order],
                clocks=clocks[order], weights=model.get_weights())


@pytest.mark.parametrize("steps_per_execution,batches", [(1, 1), (4, 1), (1, 8)])
def test_steps_find_their_misses_prefetched_and_train_as_without(steps_per_execution, batches):
    """With 8 batches staged ahead, the rows they read stay while others
    can go: fewer rows are fetched still, and training is the same."""
    plain = train(False, steps_per_execution)
    ahead = train(True, steps_per_execution, batches)
    before, after = plain["stats"], ahead["stats"]
    assert before["cache_prefetch_hits"] == 0
    # Only each epoch's first batch is not fetched ahead.
    first_batches = 2 * len(np.unique(data()[0][:BATCH]))
    assert after["cache_misses"] <= first_batches < before["cache_misses"] / 5
    # Fewer rows fetched in all: the rows of the batch staged next stay
    # while others can go (here 971 against 1,241).
    assert 0 < after["cache_misses"] + after["cache_prefetch_hits"] < before["cache_misses"]
    assert after["cache_hits"] + after["cache_misses"] + after["cache_prefetch_hits"] == \
        after["cache_unique_keys"] == before["cache_unique_keys"]
    # One worker: the same reads and the same updates, up to the order in
    # which pending deltas were merged.
    np.testing.assert_allclose(ahead["losses"], plain["losses"], rtol=1e-5)
    np.testing.assert_array_equal(ahead["keys"], plain["keys"])
    np.testing.assert_array_equal(ahead["clocks"], plain["clocks"])
    np.testing.assert_allclose(ahead["values"], plain["values"], atol=1e-6)
    for a, b in zip(ahead["weights"], plain["weights"]):
        np.testing.assert_allclose(a, b, atol=1e-5)


@pytest.mark.parametrize("settings", [dict(staleness=10), dict(staleness=10, batches=5),
                                      dict(scheduler="herald", window=5)],
                         ids=["prefetch", "prefetch, 5 staged", "herald window"])
@pytest.mark.parametrize("shape", ["pairs", "triples", "dict", "x only"])
def test_the_data_comes_out_unchanged_and_in_order(shape, settings):
    """A prefetch holds one batch back (and buffers up to `batches`), a
    Herald window of 5 four (more than the 3 here): the elements come out
    as they went in."""
    settings = dict(settings)
    batches = settings.pop("batches", 1)
    layer = HetEmbedding(VOCAB, DIM, cache_capacity=100, **settings)
    inp = tf_keras.Input(shape=(FIELDS,), dtype="int64", name="ids")
    model = tf_keras.Model(inp, tf_keras.layers.Flatten()(layer(inp)))
    x, y = data(n=70)  # a last batch of 6
    w = np.linspace(0, 1, 70).astype(np.float32)
    element = {"pairs": (x, y), "triples": (x, y, w), "dict": ({"ids": x}, y),
               "x only": x}[shape]
    source = tf.data.Dataset.from_tensor_slices(element).batch(BATCH)
    expected = list(source.as_numpy_iterator())
    got = list(het_tf.lookahead(source, model, batches).as_numpy_iterator())
    assert len(got) == len(expected) == 3
    assert het_tf.lookahead(source, model, batches).cardinality() == 3
    assert het_tf.lookahead(source.repeat(), model).cardinality() == tf.data.INFINITE_CARDINALITY
    for a, b in zip(got, expected):
        tf.nest.map_structure(np.testing.assert_array_equal, a, b)
    assert list(het_tf.lookahead(source.take(0), model).as_numpy_iterator()) == []
    if "window" in settings:  # every batch was staged, in order
        batches = [x[i:i + BATCH] for i in range(0, 70, BATCH)]
        ahead = layer.cache.staged(tf.constant(batches[0].ravel()), 4)
        assert ahead.numpy().tolist() == np.unique(np.concatenate(batches[1:])).tolist()


def test_the_first_batch_waits_for_the_next_one_not_for_every_batch_staged():
    """With 64 batches to stage, the pipeline hands batch 0 over once batch
    1 is staged and stages the rest as it runs ahead: a source that fails
    from its fourth batch on still yields its first, and then the error."""
    layer = HetEmbedding(VOCAB, DIM, cache_capacity=100, staleness=10)
    model = model_with(layer)
    x, y = data(n=BATCH * 70)

    def fail_from_the_fourth(number, element):
        check = tf.debugging.assert_less(number, tf.constant(3, tf.int64),
                                         message="the source fails here")
        with tf.control_dependencies([check]):
            return tf.nest.map_structure(tf.identity, element)

    source = tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH).enumerate().map(
        fail_from_the_fourth)
    handed = iter(het_tf.lookahead(source, model, 64))
    first = next(handed)
    np.testing.assert_array_equal(first[0].numpy(), x[:BATCH])
    with pytest.raises(tf.errors.InvalidArgumentError, match="the source fails here"):
        for _ in range(69):
            next(handed)


class Subclassed(tf_keras.Model):
    def __init__(self):
        super().__init__()
        self.embedding = HetEmbedding(VOCAB, DIM, cache_capacity=100)

    def call(self, x):
        return self.embedding(x)


def test_what_it_cannot_follow_is_refused_by_name():
    x, y = data(n=64)
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH)
    layer = HetEmbedding(VOCAB, DIM, cache_capacity=100, name="twice")
    a = tf_keras.Input(shape=(FIELDS,), dtype="int64")
    b = tf_keras.Input(shape=(FIELDS,), dtype="int64")
    twice = tf_keras.Model([a, b], tf_keras.layers.Concatenate()([layer(a), layer(b)]))
    with pytest.raises(ValueError, match="'twice' is called 2 times"):
        het_tf.lookahead(dataset, twice)
    subclassed = Subclassed()
    subclassed(x[:2])
    with pytest.raises(ValueError, match="functional or Sequential"):
        het_tf.lookahead(dataset, subclassed)
    # (A Sequential model that starts with HetEmbedding is built, as with
    # Keras' Embedding: its input shape is known.)
    unbuilt = tf_keras.Sequential([tf_keras.layers.Lambda(lambda ids: ids),
                                   HetEmbedding(VOCAB, DIM, cache_capacity=100)])
    with pytest.raises(ValueError, match="no built HetEmbedding"):
        het_tf.lookahead(dataset, unbuilt)
    model = model_with(HetEmbedding(VOCAB, DIM, cache_capacity=100))
    with pytest.raises(ValueError, match="takes a tf.data.Dataset"):
        het_tf.lookahead((x, y), model)
    for batches in (0, 65, 2.0, True):
        with pytest.raises(ValueError, match=r"batches must be an int from 1 to 64.*got "):
            het_tf.lookahead(dataset, model, batches)
    ragged = tf.data.Dataset.from_tensor_slices(
        (tf.ragged.constant([[1, 2], [3]], tf.int64), [0.0, 1.0])).batch(2)
    with pytest.raises(ValueError, match="dense tensors"):
        het_tf.lookahead(ragged, model)


@pytest.mark.parametrize("kwargs", [dict(cache_capacity=0), dict(sync="check")])
def test_a_layer_that_cannot_prefetch_looks_up_as_before(kwargs):
    layer = HetEmbedding(VOCAB, DIM, staleness=10, **kwargs)
    model = model_with(layer)
    dataset = tf.data.Dataset.from_tensor_slices(data(n=64)).batch(BATCH)
    assert het_tf.lookahead(dataset, model) is dataset
    assert not layer.lookahead_active


def test_bad_staged_ids_fail_in_the_pipeline_naming_the_layer():
    layer = HetEmbedding(VOCAB, DIM, cache_capacity=100, staleness=10, name="staged")
    model = model_with(layer)
    x, y = data(n=64)
    x[40, 1] = VOCAB  # out of range, in the second batch
    dataset = het_tf.lookahead(tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH), model)
    with pytest.raises(tf.errors.InvalidArgumentError, match="'staged'.*400"):
        list(dataset)
    with pytest.raises(ValueError, match="'staged'.*int32 or int64"):
        layer.cache.stage(tf.constant([1.5]))
