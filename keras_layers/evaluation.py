"""Evaluation and prediction read every update training made. A cache in
this process merges its own pending updates into the rows an evaluation
reads (WorkerCache.lookup), moving nothing. Under ParameterServerStrategy
each worker's cache holds updates that only that worker reads until they
are pushed, so `Model.evaluate` and `Model.predict` (and fit's validation,
which runs `evaluate`) first push every worker's pending updates of the
model's HetEmbedding layers (layer_state.settle)."""
import functools

import tf_keras

from het_tf.keras_layers import every_rank, layer_state
from het_tf.keras_layers.het_embedding import het_embedding_layers
from het_tf.runtime.cache import evaluating_as_cached, evaluation_as_cached


def settle_model(model, what="reading"):
    """Pushes what the reads of every built HetEmbedding of `model` could
    not merge themselves (eager); in hybrid mode refuses `what` on one rank
    while the other ranks' updates are pending (every_rank.py)."""
    for layer in het_embedding_layers(model):
        every_rank.check_flushed(layer, what, f"het_tf.hybrid.{what}(model, ...)",
                                 through_cache=True)
    for layer in het_embedding_layers(model):
        if layer.built:
            layer_state.settle(layer)


def as_the_caches_stand():
    """Within the block, `evaluate` and `predict` (fit's validation too)
    read the model as the workers' caches hold it: their pending updates
    unpushed, their copies read up to the read bound. An experiment (het-tf
    train's --eval-before-flush, and its timeline, which must not change
    the traffic it measures)."""
    return evaluation_as_cached()


def _flushing_first(method):
    @functools.wraps(method)
    def flushed_then(model, *args, **kwargs):
        standing = evaluating_as_cached()
        # The read bound is fixed when Keras traces its functions: trace
        # again when the way of reading changed.
        if getattr(model, "_het_evaluated_standing", standing) != standing:
            model.test_function = model.predict_function = None
        model._het_evaluated_standing = standing
        if not standing:
            settle_model(model, method.__name__)
        return method(model, *args, **kwargs)

    flushed_then.het_flushes_first = True
    return flushed_then


def install():
    """Makes tf_keras' Model.evaluate and Model.predict flush first (once)."""
    for name in ("evaluate", "predict"):
        method = getattr(tf_keras.Model, name)
        if not getattr(method, "het_flushes_first", False):
            setattr(tf_keras.Model, name, _flushing_first(method))
