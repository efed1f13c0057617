"""Hybrid mode's reads that answer for the whole model, called on every
rank together (collective): each first has every rank push its pending
updates, so that every rank answers alike. Called on one rank alone, a
collective call waits for the others; the same reads through Keras' own
calls on one rank are refused while other ranks' updates are pending
(het_tf/keras_layers/every_rank.py). Fit's validation is collective too:
every rank pushes before it validates, so every rank must validate alike,
which fit checks when it starts."""
import functools
import inspect

import tf_keras

from het_tf.distribute.horovod import initialized, on_every_rank, on_rank_zero
from het_tf.keras_layers import every_rank
from het_tf.keras_layers.export import export_saved_model as _export
from het_tf.keras_layers.het_embedding import het_embedding_layers
from het_tf.runtime.cache import evaluating_as_cached


def flush_every_rank(model):
    """Every rank pushes its pending updates, and none goes on until all
    have (if one fails, every rank raises): the shards then hold every
    rank's updates. The caches keep their copies."""
    layers = [layer for layer in het_embedding_layers(model) if layer.built]
    on_every_rank(lambda: [layer.flush() for layer in layers], "pushing the pending updates")
    every_rank.flushed(layers)
    return layers


def flush_and_clear(model):
    """Collective: every rank pushes its pending updates and empties its
    caches, so that every read on any rank sees every rank's updates until
    the next training step (and every rank's next lookups fetch again)."""
    for layer in flush_every_rank(model):
        layer.clear_cache()
    every_rank.flushed(het_embedding_layers(model), cleared=True)


def _read_together(model, read):
    """read() once every rank's pending updates are pushed, and no rank
    trains on until every rank has read: a rank's next step would push
    updates (with the cache off, before its allreduce waits) that a slower
    rank's read would meet. If it fails on one rank, every rank raises."""
    flush_and_clear(model)
    return on_every_rank(read, "the collective read")


def evaluate(model, *args, **kwargs):
    """Collective `model.evaluate(*args, **kwargs)`: every rank's pending
    updates pushed first (flush_and_clear). Every rank evaluates what it is
    given; the same data gives the same answer on every rank."""
    return _read_together(model, lambda: model.evaluate(*args, **kwargs))


def predict(model, *args, **kwargs):
    """Collective `model.predict(*args, **kwargs)`, as evaluate."""
    return _read_together(model, lambda: model.predict(*args, **kwargs))


def export_saved_model(model, path):
    """Collective het_tf.export_saved_model: every rank pushes its pending
    updates, then rank 0 writes the export while no rank trains on (if it
    fails, every rank raises). Returns the path on rank 0, None elsewhere."""
    flush_every_rank(model)
    return on_rank_zero(lambda: _export(model, path), "het_tf.hybrid.export_saved_model")


def _validates(model, args, kwargs):
    arguments = inspect.signature(tf_keras.Model.fit).bind(model, *args, **kwargs).arguments
    return (arguments.get("validation_data") is not None
            or bool(arguments.get("validation_split")), repr(arguments.get("validation_freq", 1)))


def validate_together(model):
    """Makes fit's validation collective: every rank pushes its pending
    updates before it validates. Each rank must then validate at the same
    epochs, or one would wait in a push the others never make: fit refuses,
    on every rank, if the ranks' validation differs."""
    fit, evaluate = model.fit, model.evaluate

    @functools.wraps(fit)
    def fit_together(*args, **kwargs):
        plans = initialized().allgather_object(_validates(model, args, kwargs))
        if len(set(plans)) > 1:
            raise ValueError("hybrid mode: every rank must validate alike in fit, as each "
                             "rank pushes its pending updates before it validates; the ranks' "
                             f"(validates, validation_freq) are {plans}. Give every rank "
                             "validation data (its own part), or none")
        return fit(*args, **kwargs)

    @functools.wraps(evaluate)
    def evaluate_in_fit(*args, **kwargs):
        if kwargs.get("_use_cached_eval_dataset") and not evaluating_as_cached():
            return _read_together(model, lambda: evaluate(*args, **kwargs))
        return evaluate(*args, **kwargs)

    model.fit, model.evaluate = fit_together, evaluate_in_fit
