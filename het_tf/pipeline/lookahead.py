"""het_tf.lookahead: the input pipeline hands each HetEmbedding cache the
next batch's ids, so that a training step's exchange with the shards
fetches the rows of the step after it while this step computes; and a
cache that Herald's plan drives over a window of W batches the next W - 1
(docs/herald.md).

    dataset = het_tf.lookahead(dataset, model)   # model built, before fit
    model.fit(dataset, ...)

With `batches=K` the pipeline stages up to K batches ahead of the one it
hands over (at most LOOKAHEAD_BATCHES, also the default): the next one
always, the others as it runs ahead of the steps, so that the first step
does not wait for K. A row that a staged batch reads is evicted only when
no other row can be, the one read furthest ahead first, so that rows
wanted soon are not fetched again (docs/consistency.md, "The lookahead").

The dataset's elements come out unchanged and in order. Before it hands
over batch t, the pipeline runs the model's inputs of batch t + 1 up to each
HetEmbedding layer and stages those ids in the layer's cache (on the worker
that reads the dataset). Training step t then looks up batch t, whose rows
the step before brought in, and beside its dense compute sends one
prefetch request per shard: its pushes, its evictions and the rows batch
t + 1 lacks. docs/consistency.md states what a read sees.

A step whose batch was not staged (another dataset, or the first step)
fetches its missing rows itself, as without the lookahead. With a window
the pipeline holds W - 1 batches back, and a Herald step takes its
window's ids from the cache (a batch whose samples allocation moved is
matched by its place in the order).
"""
import logging

import tensorflow as tf

from het_tf.keras_layers.het_embedding import het_embedding_layers
from het_tf.pipeline.layer_inputs import batch_ids, ids_model, with_end_marker
from het_tf.runtime import combinations
from het_tf.runtime.config import LOOKAHEAD_BATCHES

_log = logging.getLogger("het_tf")


def _layers_to_stage(model):
    """(the layers whose training steps prefetch the next batch, the layers
    whose Herald plan looks ahead over a window)."""
    layers = [layer for layer in het_embedding_layers(model) if layer.built]
    if not layers:
        raise ValueError("het_tf.lookahead: the model has no built HetEmbedding layer; build "
                         "the model (call it once, or give its Input shapes) first")
    staging = [layer for layer in layers if combinations.stages(layer.combination)]
    prefetching = [layer for layer in staging if layer.combination.scheduler is None]
    windowed = [layer for layer in staging if layer.combination.scheduler == "herald"]
    for layer in layers:
        if layer not in prefetching and layer not in windowed:
            _log.info("het_tf.lookahead: HetEmbedding '%s' has no cache that syncs by refresh "
                      "or by Herald's plan over a window, or has a hot block; it looks up as "
                      "before", layer.name)
    return prefetching, windowed


def lookahead(dataset, model, batches=LOOKAHEAD_BATCHES):
    """`dataset` (a tf.data.Dataset of model.fit's elements) with each
    batch's HetEmbedding ids staged up to `batches` batches before it is
    handed over (one at least); see the module docstring. Also switches
    the model's HetEmbedding layers that cache with sync "refresh" to
    prefetching training steps (traced from here on)."""
    if not isinstance(dataset, tf.data.Dataset):
        raise ValueError(f"het_tf.lookahead takes a tf.data.Dataset, got "
                         f"{type(dataset).__name__}")
    if isinstance(batches, bool) or not isinstance(batches, int) or not (
            1 <= batches <= LOOKAHEAD_BATCHES):
        raise ValueError(f"het_tf.lookahead: batches must be an int from 1 to {LOOKAHEAD_BATCHES} "
                         f"(the batches staged ahead), got {batches!r}")
    prefetching, windowed = _layers_to_stage(model)
    layers = prefetching + windowed
    if not layers:
        return dataset
    # Batches that must be staged before the one handed over: the next for
    # a prefetch, the window's others for a Herald plan. The rest of
    # `batches` the prefetch buffer below stages as the pipeline runs
    # ahead of the steps, so that the first step waits for one batch, not K.
    depth = max([1] * bool(prefetching) +
                [layer.cache.config.window - 1 for layer in windowed])
    ids_of = ids_model(model, layers, "het_tf.lookahead")
    # End markers after the last element, so that the last ones come out.
    tagged, placeholder, _ = with_end_marker(dataset, "het_tf.lookahead", markers=depth)

    def stage(element):
        return [layer.cache.stage(ids)
                for layer, ids in zip(layers, batch_ids(ids_of, layers, element))]

    def hand_over(held, current):
        # The oldest element held goes out once `current`'s ids are staged.
        is_element, element = current
        staged = tf.cond(is_element, lambda: tf.group(stage(element)), tf.no_op)
        with tf.control_dependencies([staged]):
            out = tf.nest.map_structure(tf.identity, held[0])
        return held[1:] + ((is_element, element),), out

    empty = ((tf.constant(False), placeholder),) * depth
    staged = tagged.scan(empty, hand_over)
    out = staged.filter(lambda had_element, _: had_element).map(lambda _, element: element)
    # The filter hides the number of batches, which model.fit needs to know
    # with steps_per_execution > 1: it is the dataset's own.
    cardinality = tf.get_static_value(dataset.cardinality())
    if cardinality is not None and cardinality != tf.data.UNKNOWN_CARDINALITY:
        out = out.apply(tf.data.experimental.assert_cardinality(cardinality))
    for layer in prefetching:
        layer.enable_lookahead()
    # A train function traced before would not prefetch.
    model.train_function = None
    return out.prefetch(max(1, batches - depth) if prefetching else 1)
