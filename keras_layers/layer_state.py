"""What a HetEmbedding does to its rows outside a step: push or drop what
its caches hold (after ParameterServerStrategy's scheduled steps), take new
hot rows, and count its traffic. Each goes through the layer's route."""
import numpy as np
import tensorflow as tf

from het_tf.keras_layers import every_rank
from het_tf.keras_layers.table_lookup import learning_rate
from het_tf.runtime.cache import evaluating_as_cached


def wait_for_scheduled_steps(layer):
    """Under ParameterServerStrategy, from the chief (eagerly): waits for
    the steps scheduled so far. A worker's cache serves one caller at a
    time: a flush, save or clear beside a running step could answer that
    step's push for it, or drop the updates it makes in between. Keras
    saves, validates and calls callbacks from the thread that schedules
    the steps, so none is scheduled while this one runs."""
    coordinator = getattr(layer._strategy, "_cluster_coordinator", None)
    if coordinator is not None and tf.executing_eagerly():
        coordinator.join()


def flush(layer):
    """Pushes every pending update to the table; returns the ops."""
    wait_for_scheduled_steps(layer)
    return layer._route.flush(learning_rate(layer))


def settle(layer):
    """Before a read outside the steps (eager): pushes the pending updates
    that read could not merge (the workers' caches under
    ParameterServerStrategy), so that it sees every write; returns the ops."""
    wait_for_scheduled_steps(layer)
    return layer._route.settle(learning_rate(layer))


def before_lookup(layer, inputs, training):
    """A training call counts its samples; a read outside Keras' loops
    (layer(ids), eagerly) sees what predict sees: it settles first, unless
    the model is read as the caches stand."""
    if layer._serving_lookup is not None:
        return
    if training:
        batch = (inputs.nrows() if isinstance(inputs, tf.RaggedTensor)
                 else tf.shape(inputs, out_type=tf.int64)[0])
        layer._samples.assign_add(tf.cast(batch, tf.int64))
        every_rank.count_training_call(layer)
    elif tf.executing_eagerly() and not evaluating_as_cached():
        every_rank.check_flushed(layer, "an eager call of the layer",
                                 "het_tf.hybrid.flush_and_clear(model)", through_cache=True)
        settle(layer)


def clear(layer):
    """Drops the caches' rows and pending updates; returns the ops."""
    wait_for_scheduled_steps(layer)
    return layer._route.clear()


def set_hot_keys(layer, keys):
    """Checks `keys` against the layer's budget and table and hands them to
    its route, which pushes and drops what the caches hold first."""
    owner = layer._owner
    budget = layer._choice.hot_rows
    if not budget:
        raise ValueError(f"{owner} has no hot rows: give it hot_rows=N (the most rows it "
                         "replicates)")
    if not layer.built:
        raise ValueError(f"{owner} is not built yet: build the model first")
    keys = np.unique(np.asarray(keys, np.int64))
    if len(keys) > budget:
        raise ValueError(f"{owner}: {len(keys)} hot rows given, more than its "
                         f"hot_rows={budget}")
    with tf.init_scope():
        ids = layer.table.check_ids(keys, "hot ids")
        if layer.input_dim is not None and len(keys) and (
                keys[0] < 0 or keys[-1] >= layer.input_dim):
            raise ValueError(f"{owner}: hot ids must lie in [0, {layer.input_dim}); got ids "
                             f"from {keys[0]} to {keys[-1]}")
        layer._route.set_hot_keys(ids, keys, lambda: (flush(layer), clear(layer)))


def stats(layer):
    """Counters of the route's caches, hot rows and table, with the hit
    rate and traffic per id looked up."""
    with tf.init_scope():
        counters, traffic, lookups = layer._route.stats()
    eager = tf.executing_eagerly()
    counters["samples"] = int(layer._samples.numpy()) if eager else 0
    counters["rows_skipped_non_finite"] = int(layer._skipped_rows.numpy()) if eager else 0
    counters["embedding_bytes"] = traffic
    counters["bytes_per_id"] = traffic / max(lookups, 1)
    return counters
