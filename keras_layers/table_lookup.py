"""What HetEmbedding.call does with ids, and what the optimizer's apply step
hands back: integer ids from whatever Keras feeds, the rows from the
layer's route with the gradient Keras' own Embedding gives (the rows'
IndexedSlices, here on the anchor that stands for the table), and the
table's update from those slices once the optimizer has clipped, unscaled
and summed them."""
import sys

import numpy as np
import tensorflow as tf
import tf_keras

from het_tf.keras_layers.table_gradients import UNSUMMED
from het_tf.runtime.config import UNBOUNDED
from het_tf.runtime.counters import counter
from het_tf.runtime.slices import expand_rows, sum_slices
from het_tf.runtime.slices import unique as unique_ids

# The whole numbers each float dtype holds exactly: 2 ** (its precision).
_EXACT_WHOLE_NUMBERS = {tf.float16: 2**11, tf.bfloat16: 2**8, tf.float32: 2**24,
                        tf.float64: 2**53}

_KERAS3_HINT = ("HetEmbedding is a tf_keras (Keras 2) layer: Keras 3 has no "
                "ParameterServerStrategy support. Build the model with `import tf_keras` "
                "or set TF_USE_LEGACY_KERAS=1 before importing TensorFlow.")


def _is_keras3(value):
    module = type(value).__module__
    return module.startswith("keras.") or module == "keras"


def refuse_keras3(inputs, owner):
    """A Keras 3 tensor would fail deep inside tf_keras: name the cause."""
    if _is_keras3(inputs) or any(_is_keras3(x) for x in tf.nest.flatten(inputs)):
        raise TypeError(f"{owner}: got a Keras 3 {type(inputs).__name__}. {_KERAS3_HINT}")


def integer_ids(inputs, input_dim, owner):
    """Ids as integers. Float ids (a Sequential model started without an
    Input layer gets them, as Keras' Embedding does) are taken where every
    id of the vocabulary is exact in their dtype, and must be whole."""
    values = (inputs.flat_values if isinstance(inputs, tf.RaggedTensor)
              else inputs.values if isinstance(inputs, tf.SparseTensor)
              else tf.convert_to_tensor(inputs))
    if not values.dtype.is_floating:
        return inputs
    exact = _EXACT_WHOLE_NUMBERS[values.dtype]
    if input_dim is None or input_dim > exact:
        vocabulary = "int64 keys" if input_dim is None else input_dim
        raise ValueError(f"{owner}: got {values.dtype.name} ids, which cannot hold every id "
                         f"of {vocabulary} exactly (whole numbers up to {exact}); declare the "
                         "model's input with an integer dtype: "
                         "tf_keras.Input(shape, dtype='int64')")
    # Checked as floats: a cast of one outside int64 would be undefined.
    valid = tf.debugging.assert_equal(
        tf.reduce_all((tf.floor(values) == values) & (values >= 0) & (values < input_dim)),
        True, message=f"{owner}: {values.dtype.name} ids must be whole numbers in "
                      f"[0, {input_dim})")
    with tf.control_dependencies([valid]):
        ids = tf.cast(values, tf.int64)
    if isinstance(inputs, tf.RaggedTensor):
        return inputs.with_flat_values(ids)
    if isinstance(inputs, tf.SparseTensor):
        return tf.SparseTensor(inputs.indices, ids, inputs.dense_shape)
    return ids


def learning_rate(layer):
    """The table optimizer's learning rate now: a schedule steps once per
    embedding update."""
    lr = layer._settings.learning_rate
    if isinstance(lr, tf_keras.optimizers.schedules.LearningRateSchedule):
        return lr(layer._updates)
    return tf.constant(lr, tf.float32)


def embed(layer, ids, training, penalties):
    """Rows of `ids` (any shape); in training their gradient reaches the
    anchor as the table's (see apply_gradient). Appends the embeddings
    regularizer's penalty on the batch's rows to `penalties`."""
    if layer._serving_lookup is not None:
        ids = layer.table.check_ids(ids)
        # The saved lookup takes ids of any shape: give its rows theirs.
        return tf.ensure_shape(layer._serving_lookup(ids),
                               ids.shape.concatenate([layer.output_dim]))
    table, route, dim, owner = layer.table, layer._route, layer.output_dim, layer._owner
    regularizer, mask_zero = layer.embeddings_regularizer, layer.mask_zero
    vocabulary = table.config.vocabulary_size
    dense_shape = [np.iinfo(np.int64).max if vocabulary == UNBOUNDED else vocabulary, dim]

    @tf.custom_gradient
    def lookup(anchor):
        rows, unique, inverse = route.lookup(ids, training)
        out = expand_rows(rows, inverse, owner)
        kept = tf.not_equal(unique, 0) if mask_zero else None

        def grad(dy, d_penalized=None):
            if not training:
                raise ValueError(f"{owner}: a gradient was asked of a lookup made with "
                                 "training=False; call the model with training=True inside "
                                 "GradientTape")
            if not layer.trainable:  # frozen, as a Keras layer is
                return None
            # As tf_keras' Embedding: one slice per id looked up, so the
            # optimizer clips, unscales and sums them as it does its.
            keys = tf.reshape(table.check_ids(ids), [-1])
            values = tf.reshape(tf.cast(dy, tf.float32), [-1, dim])
            if kept is None and d_penalized is None:
                # These ids are the lookup's own: apply_gradient sums their
                # slices by its deduplication rather than deduplicating again.
                keys._het_lookup = (unique, inverse)
            if kept is not None:  # padding: no gradient, no update, no clock tick
                real = keys != 0
                keys, values = tf.boolean_mask(keys, real), tf.boolean_mask(values, real)
            if d_penalized is not None:  # the regularizer's penalty on these rows
                penalized = unique if kept is None else tf.boolean_mask(unique, kept)
                keys = tf.concat([keys, penalized], 0)
                values = tf.concat([values, tf.cast(d_penalized, tf.float32)], 0)
            return tf.IndexedSlices(values, keys, tf.constant(dense_shape, tf.int64))

        if regularizer is None:
            return out, grad
        # The rows the regularizer's penalty is on: the batch's, padding
        # aside; a second output, so its gradient reaches them in grad.
        return (out, rows if kept is None else tf.boolean_mask(rows, kept)), grad

    if regularizer is None:
        return lookup(layer.gradient_anchor)
    out, penalized = lookup(layer.gradient_anchor)
    penalties.append(regularizer(penalized))
    return out


def apply_gradient(layer, gradient, summed=False):
    """The table's update from the gradient the optimizer applies to the
    anchor: the rows' IndexedSlices, clipped and unscaled as the optimizer
    treats any variable's. Each row takes one update with its gradients'
    sum, and the table's optimizer and learning rate step once. Where
    tf_keras' optimizer summed each id's slices, table_gradients.py kept
    them as they were before its sum: they are summed here instead, faster,
    and its sum goes unused. summed: a gradient without them has one slice
    an id already, and is not summed again."""
    owner = layer._owner
    if not isinstance(gradient, tf.IndexedSlices):
        raise ValueError(
            f"{owner}: the table's gradient reached the optimizer as a dense "
            f"{type(gradient).__name__}; pass the gradient tape's IndexedSlices to "
            "apply_gradients unchanged")
    slices = getattr(gradient, UNSUMMED, None if summed else gradient)
    lookup = getattr(getattr(slices, "indices", None), "_het_lookup", None)
    if lookup is not None:
        # One slice per id of one lookup, which deduplicated (and checked)
        # them: summed by its places, in the order of its distinct ids.
        unique, at = lookup
    else:
        keys = _checked_keys(layer, (gradient if slices is None else slices).indices)
        if slices is None:  # summed by an optimizer that kept nothing else
            return _update(layer, keys, tf.cast(gradient.values, tf.float32))
        unique, at = unique_ids(keys, owner)
    grads, finite = sum_slices(tf.cast(slices.values, tf.float32), tf.reshape(at, [-1]),
                               tf.size(unique), owner)
    return _update(layer, unique, grads, finite)


def _checked_keys(layer, indices):
    """The gradient's ids, checked before any part of the update: a cached
    part and a pushed part must not be applied without the other."""
    keys = layer.table.check_ids(indices, "the gradient's ids")
    if layer.input_dim is None:
        return keys
    valid = tf.debugging.assert_equal(
        tf.reduce_all((keys >= 0) & (keys < layer.input_dim)), True,
        message=f"{layer._owner}: the gradient's ids must lie in [0, {layer.input_dim}); "
                "nothing was applied")
    with tf.control_dependencies([valid]):
        return tf.identity(keys)


def _update(layer, unique, grads, finite=None):
    """One update of each checked, distinct id by its gradient sum; finite:
    whether every sum is, if known."""
    unique, grads = finite_rows(layer, unique, grads, finite)
    update = layer._route.apply(unique, grads, learning_rate(layer))
    with tf.control_dependencies(tf.nest.flatten(update)):
        return layer._updates.assign_add(1)


def add_skip_counter(layer):
    """The rows whose gradient was not finite, which finite_rows skips: a
    counter het_stats reports, kept out of Keras' weights and files."""
    with tf.init_scope():
        object.__setattr__(layer, "_skipped_rows", counter("het_rows_skipped_non_finite"))


def finite_rows(layer, unique, grads, all_finite=None):
    """A step whose gradient is not finite goes on, as with Keras' own
    Embedding (the loss shows it, and TerminateOnNaN stops the fit), but the
    table skips the rows whose gradient sum is not finite, so that it never
    holds a non-finite value; they are counted (het_stats'
    rows_skipped_non_finite) and the first skip is logged. A finite step
    (every step but these) only checks, or takes `all_finite` if known."""
    def skip():
        finite = tf.reduce_all(tf.math.is_finite(grads), axis=1)
        skipped = tf.reduce_sum(tf.cast(~finite, tf.int64))
        before = layer._skipped_rows.read_value()
        with tf.control_dependencies([before]):
            counted = layer._skipped_rows.assign_add(skipped)

        def warn():
            printed = tf.print(f"{layer._owner}: a gradient was not finite; its rows were not "
                               "updated (counted as rows_skipped_non_finite). This is logged "
                               "once.", output_stream=sys.stderr)
            with tf.control_dependencies([printed]):
                return tf.constant(True)

        warned = tf.cond(before == 0, warn, lambda: tf.constant(False))
        with tf.control_dependencies([counted, warned]):
            return tf.boolean_mask(unique, finite), tf.boolean_mask(grads, finite)

    if all_finite is None:
        all_finite = tf.reduce_all(tf.math.is_finite(grads))
    return tf.cond(all_finite, lambda: (unique, grads), skip)
