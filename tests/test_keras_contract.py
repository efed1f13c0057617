"""The Keras contract: a HetEmbedding's table trains where tf_keras applies
gradients, so the optimizer treats its gradient as it treats any
embedding's. Every case trains tf_keras' own Embedding beside it on the
same data, from the same rows (one weights=[matrix]), as the oracle."""
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from het_tf.keras_layers import HetEmbedding
from het_tf.runtime import routes
from het_tf.runtime.routes import DirectRoute

VOCAB, DIM = 50, 4
MATRIX = np.random.default_rng(5).uniform(-0.1, 0.1, (VOCAB, DIM)).astype(np.float32)
_DATA = np.random.default_rng(0)
HISTORY = _DATA.integers(0, VOCAB, (64, 3))
TARGET = _DATA.integers(0, VOCAB, (64, 1))
LABELS = _DATA.normal(size=(64, 1)).astype(np.float32)

# The routes one process takes: the cache off, synchronous (both bounds 0),
# by refresh and by check at two bounds (a cache that holds a step's rows),
# FAE's hot rows; and a cache smaller than a step's rows, where rows pass
# through and a second call evicts the first's (which then pass through).
ROUTES = {
    "off": dict(cache_capacity=0),
    "s0": dict(cache_capacity=0.8, staleness=0),
    "refresh-s1": dict(cache_capacity=0.8, staleness=1),
    "refresh-s100": dict(cache_capacity=0.8, staleness=100),
    "check-s100": dict(cache_capacity=0.8, staleness=100, sync="check"),
    "small-cache": dict(cache_capacity=5, staleness=100),
    "hot-rows": dict(cache_capacity=0.8, staleness=100, hot_rows=10),
}
OPTIMIZERS = {"sgd": lambda: tf_keras.optimizers.SGD(0.1),
              "adagrad": lambda: tf_keras.optimizers.Adagrad(0.1)}


class DoubledRoute(DirectRoute):
    """A route of one's own, registered without editing the layer: every row
    read doubled, so every row's gradient doubles too."""

    def lookup(self, ids, training):
        rows, unique, inverse = super().lookup(ids, training)
        return 2.0 * rows, unique, inverse

    def apply(self, unique, grads, learning_rate):
        return super().apply(unique, 2.0 * grads, learning_rate)


routes.register("doubled", lambda table, cache: DoubledRoute(table))


class DoubledEmbedding(tf_keras.layers.Embedding):
    """Its oracle: Keras' own layer, its vectors doubled."""

    def call(self, inputs):
        return 2.0 * super().call(inputs)


def embedding(kind, optimizer="sgd", name=None, **settings):
    if kind == "keras":
        return tf_keras.layers.Embedding(VOCAB, DIM, weights=[MATRIX], name=name)
    if kind == "keras-doubled":
        return DoubledEmbedding(VOCAB, DIM, weights=[MATRIX], name=name)
    return HetEmbedding(VOCAB, DIM, weights=[MATRIX], optimizer=OPTIMIZERS[optimizer](),
                        name=name, **settings)


def shared_model(layer, calls):
    """History and target ids through one layer (the target `calls` - 1
    times), then a linear readout of every vector."""
    history = tf_keras.Input((3,), dtype="int64")
    target = tf_keras.Input((1,), dtype="int64")
    vectors = [layer(history)] + [layer(target) for _ in range(calls - 1)]
    flat = tf_keras.layers.Concatenate()([tf_keras.layers.Flatten()(v) for v in vectors])
    out = tf_keras.layers.Dense(1, kernel_initializer="ones", use_bias=False)(flat)
    return tf_keras.Model([history, target], out)


def rows_of(layer):
    if isinstance(layer, HetEmbedding):
        layer.flush()
    return layer.get_weights()[0]


def train(kind, optimizer="sgd", calls=2, labels=LABELS, epochs=2, fit=None, compiled=None,
          **settings):
    """The rows after model.fit (2 epochs of 8 batches, in order)."""
    tf_keras.utils.set_random_seed(0)
    layer = embedding(kind, optimizer, **settings)
    model = shared_model(layer, calls)
    if settings.get("hot_rows"):
        layer.set_hot_keys(np.arange(10))
    model.compile(compiled() if compiled else OPTIMIZERS[optimizer](), "mse",
                  **(fit or {}))
    model.fit([HISTORY, TARGET], labels, batch_size=8, epochs=epochs, verbose=0, shuffle=False)
    return rows_of(layer)


@pytest.mark.parametrize("route, optimizer", [
    (route, optimizer) for route in sorted(ROUTES) for optimizer in sorted(OPTIMIZERS)])
def test_a_layer_called_twice_trains_as_keras_shared_embedding(route, optimizer):
    expected = train("keras", optimizer)
    np.testing.assert_allclose(train("het", optimizer, **ROUTES[route]), expected, atol=1e-6)


class UnsummedAdagrad(tf_keras.optimizers.Adagrad):
    """Adagrad that hands each id's slices on unsummed, as a user's subclass
    may: the table must still take one update of their sum."""

    def _deduplicate_sparse_grad(self, grads):
        return grads


@pytest.mark.parametrize("route", ["off", "refresh-s100"])
def test_a_table_sums_the_slices_an_optimizer_left_unsummed(route):
    expected = train("keras", "adagrad")
    np.testing.assert_allclose(
        train("het", "adagrad", compiled=lambda: UnsummedAdagrad(0.1), **ROUTES[route]),
        expected, atol=1e-6)


@pytest.mark.parametrize("optimizer", sorted(OPTIMIZERS))
def test_a_route_of_ones_own_trains_as_its_keras_oracle(optimizer):
    expected = train("keras-doubled", optimizer)
    np.testing.assert_allclose(train("het", optimizer, cache_capacity=0, route="doubled"),
                               expected, atol=1e-6)
    assert not np.allclose(train("het", optimizer, cache_capacity=0), expected, atol=1e-3)


def test_a_route_is_chosen_once_and_by_a_registered_name():
    with pytest.raises(ValueError, match=r"HetEmbedding 'items': no route is registered as "
                                         r"'tripled' \(registered: .*doubled"):
        HetEmbedding(VOCAB, DIM, route="tripled", name="items")
    with pytest.raises(ValueError, match=r"HetEmbedding 'items': route= with hot_rows: a "
                                         r"route of one's own takes the place"):
        HetEmbedding(VOCAB, DIM, route="doubled", hot_rows=10, name="items")
    layer = HetEmbedding(VOCAB, DIM, route="doubled", name="items")
    assert HetEmbedding.from_config(layer.get_config()).route == "doubled"


@pytest.mark.parametrize("route", ["off", "refresh-s1", "check-s100"])
def test_a_layer_called_three_times_trains_as_keras_shared_embedding(route):
    expected = train("keras", "adagrad", calls=3)
    np.testing.assert_allclose(train("het", "adagrad", calls=3, **ROUTES[route]), expected,
                               atol=1e-6)


@pytest.mark.parametrize("clip", [dict(clipvalue=0.01), dict(clipnorm=0.05),
                                  dict(global_clipnorm=0.1)])
@pytest.mark.parametrize("legacy", [False, True], ids=["optimizer", "legacy"])
def test_clipping_reaches_the_table_as_it_reaches_keras_embedding(clip, legacy):
    """Large errors, so that every clip bites; the table's own optimizer
    has the compiled one's learning rate."""
    family = tf_keras.optimizers.legacy if legacy else tf_keras.optimizers

    def compiled():
        return family.SGD(0.1, **clip)

    big = LABELS * 10
    expected = train("keras", labels=big, epochs=1, compiled=compiled)
    for route in ("off", "refresh-s100"):
        got = train("het", labels=big, epochs=1, compiled=compiled, **ROUTES[route])
        np.testing.assert_allclose(got, expected, atol=1e-6, err_msg=route)
    unclipped = train("keras", labels=big, epochs=1)
    assert np.abs(unclipped - expected).max() > 0.1  # the clip changed the rows


@pytest.mark.parametrize("fit", [dict(steps_per_execution=4), dict(run_eagerly=True)],
                         ids=["steps_per_execution", "eager"])
def test_steps_in_a_loop_or_eagerly_train_every_step(fit):
    expected = train("keras", "adagrad")
    got = train("het", "adagrad", fit=fit, **ROUTES["refresh-s1"])
    np.testing.assert_allclose(got, expected, atol=1e-6)


@pytest.fixture
def mixed_float16():
    tf_keras.mixed_precision.set_global_policy("mixed_float16")
    yield
    tf_keras.mixed_precision.set_global_policy("float32")


def updates_of(layer):
    """Each row's update count, as the table keeps it (its clock)."""
    layer.flush()
    _, _, clocks, _ = layer.table.read_rows(tf.range(VOCAB, dtype=tf.int64))
    return clocks.numpy()


@pytest.mark.parametrize("optimizer", sorted(OPTIMIZERS))
def test_mixed_float16_trains_the_table_as_float32_does(optimizer, mixed_float16):
    """The loss scale (2^15 at first) is taken off before the table's
    update: 20 steps move the rows as float32's do."""
    settings = dict(ROUTES["refresh-s100"], epochs=3)
    got = train("het", optimizer, **settings)
    tf_keras.mixed_precision.set_global_policy("float32")
    expected = train("het", optimizer, **settings)
    assert np.abs(expected - MATRIX).max() > 0.01
    np.testing.assert_allclose(got, expected, atol=1e-3)


def test_reads_right_after_fit_under_mixed_float16_see_every_update(mixed_float16):
    """A shared table whose cache is smaller than a step, read right after
    fit with no flush: predict and layer(ids) give what the same model with
    Keras' Embedding gives (float16's precision apart)."""
    def fit(kind):
        tf_keras.utils.set_random_seed(0)
        layer = embedding(kind, "adagrad", **({} if kind == "keras" else ROUTES["small-cache"]))
        model = shared_model(layer, 2)
        model.compile(OPTIMIZERS["adagrad"](), "mse")
        model.fit([HISTORY, TARGET], LABELS, batch_size=8, epochs=2, verbose=0, shuffle=False)
        rows = layer(np.arange(VOCAB)).numpy().astype(np.float32)
        return model.predict([HISTORY, TARGET], verbose=0).astype(np.float32), rows

    (expected_scores, expected_rows), (scores, rows) = fit("keras"), fit("het")
    assert np.abs(expected_rows - MATRIX).max() > 0.05
    np.testing.assert_allclose(rows, expected_rows, atol=2e-3)
    np.testing.assert_allclose(scores, expected_scores, atol=1e-2)


def test_a_step_the_loss_scale_skips_changes_no_row_and_no_clock(mixed_float16):
    tf_keras.utils.set_random_seed(0)
    layer = embedding("het", "adagrad", **ROUTES["refresh-s100"])
    model = shared_model(layer, 2)
    model.compile(OPTIMIZERS["adagrad"](), "mse")
    assert isinstance(model.optimizer, tf_keras.mixed_precision.LossScaleOptimizer)
    x = [HISTORY[:8], TARGET[:8]]
    model.train_on_batch(x, LABELS[:8])
    before, clocks = rows_of(layer), updates_of(layer)
    scale = float(model.optimizer.loss_scale.numpy())
    # Float16 outputs with errors of 1e6: the scaled gradients overflow.
    model.train_on_batch(x, np.full((8, 1), 1e6, np.float32))
    assert float(model.optimizer.loss_scale.numpy()) == scale / 2  # the step was skipped
    np.testing.assert_array_equal(rows_of(layer), before)
    np.testing.assert_array_equal(updates_of(layer), clocks)
    model.train_on_batch(x, LABELS[:8])  # and the next step trains
    assert (updates_of(layer) > clocks).any()


def test_a_custom_loop_updates_the_table_where_it_applies_gradients():
    """tape.gradient alone changes nothing; apply_gradients updates the
    table, with the rows' gradients summed over the layer's calls."""
    layer = embedding("het", **ROUTES["refresh-s1"])
    ids = tf.constant([[1, 2, 1]], tf.int64)
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(layer(ids, training=True)) + tf.reduce_sum(layer(ids[:, :1],
                                                                             training=True))
    grads = tape.gradient(loss, layer.trainable_weights)
    assert isinstance(grads[0], tf.IndexedSlices)
    np.testing.assert_array_equal(rows_of(layer), MATRIX)
    tf_keras.optimizers.SGD().apply_gradients(zip(grads, layer.trainable_weights))
    expected = MATRIX.copy()
    expected[1] -= 0.1 * 3
    expected[2] -= 0.1
    np.testing.assert_allclose(rows_of(layer), expected, atol=1e-6)
    with pytest.raises(ValueError, match="HetEmbedding '.*': the table's gradient reached the "
                                         "optimizer as a dense"):
        tf_keras.optimizers.SGD().apply_gradients([(tf.zeros([]), layer.trainable_weights[0])])
    # A bad id among good ones: refused before any row, cached or not, moves.
    before = rows_of(layer)
    bad = tf.IndexedSlices(tf.ones([3, DIM]), tf.constant([1, 40, VOCAB], tf.int64), [VOCAB, DIM])
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=rf"HetEmbedding '{layer.name}': the gradient's ids must lie in"):
        tf_keras.optimizers.SGD().apply_gradients([(bad, layer.trainable_weights[0])])
    np.testing.assert_array_equal(rows_of(layer), before)


# Run apart: a process makes its logical devices before TensorFlow starts.
_MIRRORED = """
import os
import subprocess
import sys

import numpy as np
import tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
import tf_keras
from het_tf.keras_layers import HetEmbedding
from het_tf.runtime import routes
from het_tf.runtime.routes import DirectRoute
with tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"]).scope():
    model = tf_keras.Sequential([tf_keras.Input((1,), dtype="int64"), HetEmbedding(10, 2, name="items"),
                                 tf_keras.layers.Flatten(), tf_keras.layers.Dense(1)])
    model.compile("sgd", "mse")
try:
    model.fit(np.zeros((8, 1), np.int64), np.zeros((8, 1)), batch_size=4, verbose=0)
except ValueError as e:
    print("refused:", e)
"""


def test_an_optimizer_on_several_replicas_in_sync_is_refused():
    """Each replica would apply the table's summed gradient again."""
    run = subprocess.run([sys.executable, "-c", _MIRRORED], capture_output=True, text=True,
                         timeout=300, env=dict(os.environ, TF_USE_LEGACY_KERAS="1"))
    assert run.returncode == 0, run.stderr[-3000:]
    assert "refused:" in run.stdout
    assert "HetEmbedding 'items': the optimizer runs on 2 replicas in sync" in run.stdout


def test_hybrid_mode_refuses_a_loss_scale_optimizer():
    """Each rank's skip decision would read its own table gradients."""
    from het_tf.training.hybrid_training import _hybrid_train_step

    model = tf_keras.Sequential([tf_keras.Input((1,), dtype="int64"),
                                 embedding("het", name="lso_items"), tf_keras.layers.Flatten(),
                                 tf_keras.layers.Dense(1)])
    model.compile(tf_keras.mixed_precision.LossScaleOptimizer(tf_keras.optimizers.SGD(0.1)),
                  "mse")
    with pytest.raises(ValueError, match="hybrid mode does not take a LossScaleOptimizer"):
        _hybrid_train_step(model, (np.zeros((4, 1), np.int64), np.zeros((4, 1), np.float32)),
                           allreduce=None)


@pytest.mark.parametrize("route", ["off", "refresh-s100", "check-s100", "small-cache"])
def test_a_non_finite_step_goes_on_as_with_keras_embedding_and_the_table_stays_finite(route):
    """A NaN label makes step 3's gradients NaN: with Keras' Embedding the
    loss shows it and TerminateOnNaN stops the fit there; HetEmbedding
    does the same, its dense weights moving as Keras' do, but the table
    skips the rows whose gradient is not finite and counts them."""
    labels = LABELS.copy()
    labels[20] = np.nan  # in the third batch of 8

    def fit(kind, callbacks):
        tf_keras.utils.set_random_seed(0)
        layer = embedding(kind, **({} if kind == "keras" else ROUTES[route]))
        model = shared_model(layer, calls=2)
        model.compile(OPTIMIZERS["sgd"](), "mse")
        history = model.fit([HISTORY, TARGET], labels, batch_size=8, epochs=1, verbose=0,
                            shuffle=False, callbacks=callbacks)
        return model, layer, history.history["loss"]

    for callbacks in ([tf_keras.callbacks.TerminateOnNaN()], []):
        keras_model, keras_layer, keras_loss = fit("keras", callbacks)
        model, layer, loss = fit("het", callbacks)
        assert np.isnan(loss[-1]) and np.isnan(keras_loss[-1])
        assert int(model.optimizer.iterations) == int(keras_model.optimizer.iterations)
        rows, expected = rows_of(layer), keras_layer.get_weights()[0]
        assert np.isfinite(rows).all()
        finite = np.isfinite(expected).all(axis=1)
        np.testing.assert_allclose(rows[finite], expected[finite], atol=1e-6)
        assert layer.het_stats()["rows_skipped_non_finite"] > 0
        np.testing.assert_allclose(model.get_layer(index=-1).get_weights()[0],
                                   keras_model.get_layer(index=-1).get_weights()[0],
                                   atol=1e-6, equal_nan=True)
    assert int(model.optimizer.iterations) == len(LABELS) // 8  # no stop: every step ran
