"""het_tf.profile_hot_rows, FAE's profiling pass: exact counts against
NumPy's, the hot set a budget in rows or bytes picks, a deterministic
sample, and bad settings refused naming the layer."""
import numpy as np
import pytest
import tensorflow as tf
import tf_keras

import het_tf
from het_tf.keras_layers import HetEmbedding

VOCAB, DIM, FIELDS, BATCH = 1000, 4, 3, 32


def zipf_ids(n, seed=0, exponent=1.2):
    rng = np.random.default_rng(seed)
    return ((rng.zipf(exponent, size=(n, FIELDS)) - 1) % VOCAB).astype(np.int64)


def model_with(*layers, fields=FIELDS):
    inputs = [tf_keras.Input(shape=(fields,), dtype="int64", name=f"ids{i}")
              for i in range(len(layers))]
    vectors = [tf_keras.layers.Flatten()(layer(i)) for layer, i in zip(layers, inputs)]
    joined = vectors[0] if len(vectors) == 1 else tf_keras.layers.Concatenate()(vectors)
    out = tf_keras.layers.Dense(1, activation="sigmoid")(joined)
    return tf_keras.Model(inputs if len(inputs) > 1 else inputs[0], out)


def dataset_of(x, batch=BATCH):
    return tf.data.Dataset.from_tensor_slices((x, (x[:, 0] % 2).astype(np.float32))).batch(batch)


def numpy_hottest(ids, k):
    keys, counts = np.unique(ids, return_counts=True)
    order = np.lexsort((keys, -counts))  # most first, ties by ascending id
    return keys[order][:k], counts[order][:k]


def test_counts_match_numpy_and_the_budget_picks_the_hottest():
    x = zipf_ids(4000)
    layer = HetEmbedding(VOCAB, DIM, name="emb")
    model = model_with(layer)
    profile = het_tf.profile_hot_rows(model, dataset_of(x), hot_rows=50, share=1.0)
    hot = profile["emb"]
    keys, counts = numpy_hottest(x.ravel(), 50)
    np.testing.assert_array_equal(hot.keys, keys)
    np.testing.assert_array_equal(hot.counts, counts)
    assert hot.accesses == x.size and hot.distinct_ids == len(np.unique(x))
    assert hot.sampled_batches == -(-len(x) // BATCH)
    assert hot.coverage == pytest.approx(counts.sum() / x.size)
    assert 0.5 < hot.coverage < 1  # Zipf: 5% of the ids take most accesses
    # A sample is hot when every id it looks up is.
    all_hot = np.isin(x, keys).all(axis=1)
    assert profile.samples == len(x) and profile.hot_samples == all_hot.sum() > 0
    assert profile.hot_sample_share == pytest.approx(all_hot.mean())
    # Any data can be classified by a profile: here the first half, alone.
    from het_tf.pipeline.hot_rows import count_hot_samples
    assert count_hot_samples(model, dataset_of(x[:2000]), profile) == \
        (all_hot[:2000].sum(), 2000)


def test_a_byte_budget_is_rows_of_the_whole_state_and_padding_is_not_counted():
    x = zipf_ids(2000, seed=1)
    layer = HetEmbedding(VOCAB, DIM, optimizer=tf_keras.optimizers.Adagrad(0.1), mask_zero=True,
                         name="emb")
    model = model_with(layer)
    state_bytes = 4 * DIM * 2 + 8  # values, Adagrad's accumulator, a clock
    assert layer.table.config.state_bytes == state_bytes
    hot = het_tf.profile_hot_rows(model, dataset_of(x), hot_bytes=10 * state_bytes + 7,
                                  share=1.0)["emb"]
    kept = x[x != 0]
    keys, counts = numpy_hottest(kept, 10)
    np.testing.assert_array_equal(hot.keys, keys)
    np.testing.assert_array_equal(hot.counts, counts)
    assert hot.accesses == kept.size and 0 not in hot.keys
    profile = het_tf.profile_hot_rows(model, dataset_of(x), hot_rows=10, share=1.0)
    assert profile.hot_samples == (np.isin(x, keys) | (x == 0)).all(axis=1).sum()


def test_the_sample_is_the_same_for_a_seed_and_about_its_share():
    x = zipf_ids(32 * 400, seed=2)
    model = model_with(HetEmbedding(VOCAB, DIM, name="emb"))

    def run(seed):
        return het_tf.profile_hot_rows(model, dataset_of(x), hot_rows=30, share=0.25,
                                       seed=seed)["emb"]

    first, again, other = run(7), run(7), run(8)
    np.testing.assert_array_equal(first.keys, again.keys)
    np.testing.assert_array_equal(first.counts, again.counts)
    assert first.accesses == again.accesses != other.accesses
    assert 60 < first.sampled_batches < 140  # a quarter of 400 batches
    assert first.accesses == first.sampled_batches * BATCH * FIELDS
    # An endless dataset is profiled over its first `batches` batches.
    endless = het_tf.profile_hot_rows(
        model, dataset_of(x).repeat(), hot_rows=30, share=0.25, seed=7, batches=400)["emb"]
    np.testing.assert_array_equal(endless.keys, first.keys)
    assert endless.accesses == first.accesses


def test_each_layer_has_its_own_budget_and_counts():
    x0, x1 = zipf_ids(1000, seed=3), zipf_ids(1000, seed=4)
    a, b = HetEmbedding(VOCAB, DIM, name="a"), HetEmbedding(VOCAB, DIM, name="b")
    model = model_with(a, b)
    dataset = tf.data.Dataset.from_tensor_slices(((x0, x1), np.zeros(1000, np.float32)))
    profile = het_tf.profile_hot_rows(model, dataset.batch(BATCH), hot_rows={"a": 5, "b": 8},
                                      share=1.0)
    np.testing.assert_array_equal(profile["a"].keys, numpy_hottest(x0.ravel(), 5)[0])
    np.testing.assert_array_equal(profile["b"].keys, numpy_hottest(x1.ravel(), 8)[0])
    hot_a = np.isin(x0, profile["a"].keys).all(axis=1)
    hot_b = np.isin(x1, profile["b"].keys).all(axis=1)
    assert profile.hot_samples == (hot_a & hot_b).sum()
    only_a = het_tf.profile_hot_rows(model, dataset.batch(BATCH), hot_rows={"a": 5}, share=1.0)
    assert sorted(only_a) == ["a"] and only_a.hot_samples == hot_a.sum()


def test_without_a_budget_each_layer_takes_its_own_hot_rows():
    x = zipf_ids(1000, seed=5)
    a = HetEmbedding(VOCAB, DIM, name="a", hot_rows=6)
    b = HetEmbedding(VOCAB, DIM, name="b")
    model = model_with(a, b)
    dataset = tf.data.Dataset.from_tensor_slices(((x, x), np.zeros(1000, np.float32)))
    profile = het_tf.profile_hot_rows(model, dataset.batch(BATCH), share=1.0)
    assert sorted(profile) == ["a"]
    np.testing.assert_array_equal(profile["a"].keys, numpy_hottest(x.ravel(), 6)[0])


def test_ragged_and_sparse_samples_are_hot_when_every_id_is():
    rng = np.random.default_rng(6)
    rows = [list((rng.zipf(1.3, size=rng.integers(0, 5)) - 1) % VOCAB) for _ in range(640)]
    ragged = tf.ragged.constant(rows, dtype=tf.int64)
    layer = HetEmbedding(VOCAB, DIM, combiner="sum", name="emb")
    inp = tf_keras.Input(shape=(None,), dtype="int64", ragged=True)
    model = tf_keras.Model(inp, tf_keras.layers.Dense(1)(layer(inp)))
    dataset = tf.data.Dataset.from_tensor_slices((ragged, np.zeros(640, np.float32))).batch(64)
    profile = het_tf.profile_hot_rows(model, dataset, hot_rows=20, share=1.0)
    hot = set(profile["emb"].keys.tolist())
    assert profile.hot_samples == sum(all(i in hot for i in row) for row in rows)
    sparse = [tf.sparse.from_dense(tf.constant([[3, 0, 7]], tf.int64)),
              tf.sparse.from_dense(tf.constant([[0, 0, 0]], tf.int64))]
    from het_tf.pipeline.hot_rows import samples_all_hot
    is_hot = lambda ids: tf.equal(ids, 3)  # noqa: E731
    assert samples_all_hot(tf.sparse.concat(0, sparse), is_hot).numpy().tolist() == [False, True]


@pytest.mark.parametrize("kwargs, message", [
    (dict(), "give a budget, hot_rows or hot_bytes; no HetEmbedding layer of the model has "
             "hot_rows of its own"),
    (dict(hot_rows=5, hot_bytes=100), "give one budget, hot_rows or hot_bytes, not both"),
    (dict(hot_rows=VOCAB + 1), "HetEmbedding 'emb'.*more than the table's 1000"),
    (dict(hot_bytes=10**9), "HetEmbedding 'emb'.*more than the table"),
    (dict(hot_rows=-1), "HetEmbedding 'emb': hot_rows must be an int >= 0"),
    (dict(hot_rows=2.5), "HetEmbedding 'emb': hot_rows must be an int"),
    (dict(hot_rows={"nope": 3}), r"names \['nope'\], which are not HetEmbedding layers"),
    (dict(hot_rows=5, share=-0.1), "share must be in"),
    (dict(hot_rows=5, share=1.5), "share must be in"),
    (dict(hot_rows=5, share=0), "share must be in"),
    (dict(hot_rows=5, batches=0), "batches must be a positive int"),
])
def test_bad_settings_are_refused_by_name(kwargs, message):
    model = model_with(HetEmbedding(VOCAB, DIM, name="emb"))
    with pytest.raises(ValueError, match=message):
        het_tf.profile_hot_rows(model, dataset_of(zipf_ids(64)), **kwargs)


def test_bad_inputs_are_refused():
    model = model_with(HetEmbedding(VOCAB, DIM, name="emb"))
    with pytest.raises(ValueError, match="the dataset is endless; pass batches"):
        het_tf.profile_hot_rows(model, dataset_of(zipf_ids(64)).repeat(), hot_rows=5)
    with pytest.raises(ValueError, match="takes a tf.data.Dataset"):
        het_tf.profile_hot_rows(model, zipf_ids(64), hot_rows=5)
    with pytest.raises(ValueError, match="the sample holds no batch"):
        het_tf.profile_hot_rows(model, dataset_of(zipf_ids(32)), hot_rows=5, share=1e-9)
    bad = zipf_ids(64)
    bad[3, 1] = VOCAB  # past the vocabulary
    with pytest.raises(tf.errors.InvalidArgumentError, match="emb"):
        het_tf.profile_hot_rows(model, dataset_of(bad), hot_rows=5, share=1.0)
    dense_only = tf_keras.Sequential([tf_keras.Input(shape=(FIELDS,)), tf_keras.layers.Dense(1)])
    with pytest.raises(ValueError, match="no built HetEmbedding layer"):
        het_tf.profile_hot_rows(dense_only, dataset_of(zipf_ids(64)), hot_rows=5)
