"""Between a lookup's ids and its distinct rows: HetUnique, HetExpandRows
and HetSumSlices must answer as tf.unique, tf.gather and
UnsortedSegmentSum do, to the bit; a layer's table takes each id's slices
as one sum by its lookup's deduplication, and the optimizer's own sum is
left out of the step. The oracles are those TensorFlow ops and tf_keras'
Embedding trained beside the layer."""
import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from het_tf.runtime import slices
from tests.test_keras_contract import LABELS, OPTIMIZERS, ROUTES, train

LABEL = "HetEmbedding 'e'"


def test_a_lookups_ids_rows_and_sums_are_tensorflows_to_the_bit():
    rng = np.random.default_rng(3)
    ids = (rng.zipf(1.1, (1000, 20)) - 1) % 50000
    unique, at = slices.unique(tf.constant(ids, tf.int64), LABEL)
    expected_unique, expected_at = tf.unique(ids.reshape(-1), out_idx=tf.int32)
    assert np.array_equal(unique, expected_unique)
    assert np.array_equal(at, tf.reshape(expected_at, ids.shape))
    rows = rng.standard_normal((len(unique), 16)).astype(np.float32)
    assert np.array_equal(slices.expand_rows(rows, at, LABEL), tf.gather(rows, at))
    values = rng.standard_normal((ids.size, 16)).astype(np.float32) * 1e3
    flat = tf.reshape(at, [-1])
    sums, finite = slices.sum_slices(values, flat, tf.size(unique), LABEL)
    expected = tf.math.unsorted_segment_sum(values, flat, tf.size(unique)).numpy()
    assert sums.numpy().tobytes() == expected.tobytes() and bool(finite)
    values[123, 4] = np.inf
    assert not bool(slices.sum_slices(values, flat, tf.size(unique), LABEL)[1])
    empty = slices.unique(tf.zeros([0, 3], tf.int64), LABEL)
    assert empty[0].shape == [0] and empty[1].shape == [0, 3]


@pytest.mark.parametrize("at, count, shape, message", [
    ([0, 2], 2, (2, 3), "place 1 is row 2, outside the 2 rows"),
    ([0, -1], 2, (2, 3), "place 1 is row -1"),
    ([0, 1, 1], 2, (2, 3), r"slices \[2,3\] with places \[3\]"),
    ([0, 1], 2, (2,), r"slices \[2\] with places \[2\]"),
    ([], -1, (0, 3), "a count of -1 rows"),
])
def test_bad_places_or_shapes_are_refused_naming_the_layer(at, count, shape, message):
    with pytest.raises(tf.errors.InvalidArgumentError, match=LABEL + ": " + message):
        slices.sum_slices(np.ones(shape, np.float32), np.array(at, np.int32), count, LABEL)
    if len(shape) == 2 and len(at) == shape[0] and count >= 0:
        with pytest.raises(tf.errors.InvalidArgumentError, match=LABEL + ": " + message):
            slices.expand_rows(np.ones((count, 3), np.float32), np.array(at, np.int32), LABEL)


def test_places_of_too_many_dimensions_are_refused_not_fatal():
    """The rows' width is one more dimension, past TensorShape's limit."""
    at = tf.zeros([1] * 254, tf.int32)
    with pytest.raises(tf.errors.InvalidArgumentError, match=LABEL + ": places of 254"):
        slices.expand_rows(np.ones((1, 3), np.float32), at, LABEL)


@pytest.mark.parametrize("route", ["off", "refresh-s100", "check-s100", "small-cache",
                                   "hot-rows"])
@pytest.mark.parametrize("optimizer", sorted(OPTIMIZERS))
def test_a_layer_called_once_trains_as_keras_embedding(route, optimizer):
    expected = train("keras", optimizer, calls=1)
    np.testing.assert_allclose(train("het", optimizer, calls=1, **ROUTES[route]), expected,
                               atol=1e-6)


@pytest.mark.parametrize("clip", [dict(clipnorm=0.05), dict(global_clipnorm=0.1)])
@pytest.mark.parametrize("legacy", [False, True], ids=["optimizer", "legacy"])
def test_one_lookups_slices_are_clipped_before_they_are_summed(clip, legacy):
    """Keras clips each id's slices, then sums them: a norm of the sums
    would clip otherwise."""
    family = tf_keras.optimizers.legacy if legacy else tf_keras.optimizers

    def compiled():
        return family.SGD(0.1, **clip)

    big = LABELS * 10
    expected = train("keras", calls=1, labels=big, epochs=1, compiled=compiled)
    for route in ("off", "refresh-s100"):
        got = train("het", calls=1, labels=big, epochs=1, compiled=compiled, **ROUTES[route])
        np.testing.assert_allclose(got, expected, atol=1e-6, err_msg=route)


@pytest.mark.parametrize("route", ["off", "refresh-s100"])
def test_the_optimizers_own_sum_of_a_lookups_slices_feeds_nothing(route):
    """TensorFlow prunes an op whose output nothing takes: the step then
    sums the slices once (HetSumSlices), not twice."""
    from tests.test_keras_contract import embedding, shared_model
    tf_keras.utils.set_random_seed(0)
    model = shared_model(embedding("het", **ROUTES[route]), calls=1)
    model.compile(OPTIMIZERS["adagrad"](), "mse")
    model.fit([np.zeros((8, 3), np.int64), np.zeros((8, 1), np.int64)],
              np.zeros((8, 1), np.float32), batch_size=8, verbose=0)
    graph = model.train_function._list_all_concrete_functions()[-1].graph
    ops = graph.get_operations()
    sums = [op for op in ops if op.type == "UnsortedSegmentSum"]
    assert sums and [op.type for op in ops].count("HetSumSlices") == 1
    assert all(not op.outputs[0].consumers() for op in sums)
